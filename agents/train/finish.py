"""What a finished run leaves in its folder: the summary, the final model with its providers' state, the plots."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from creditgym.agents.train import run_folder
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.plots import credit_html, credit_png, curves_png
from creditgym.agents.train.policy import Policy


class SavesState(Protocol):
    """What ``final/`` needs of a signal provider (`creditgym.agents.providers.SignalProvider` is one)."""

    def save(self, folder: Path) -> None: ...


def run_summary(
    cfg: TrainConfig,
    history: Sequence[Mapping[str, Any]],
    step: int,
    out: Path,
    *,
    score_name: str = "accuracy",
) -> dict[str, Any]:
    """The run's ``summary.json``: the held-out score before and after, the curve of every evaluation, and what
    the score is called (the held-out env's ``score_name``: accuracy, mean score, ...)."""
    evals = [(m["step"], m["eval/accuracy"]) for m in history if m.get("eval/accuracy") is not None]
    return {
        "env_id": cfg.env_id,
        "credit": cfg.credit,
        "steps": step,
        "seed": cfg.seed,
        "eval_before": evals[0][1] if evals else None,
        "eval_after": evals[-1][1] if evals else None,
        "eval_curve": evals,
        "score_name": score_name,
        "out": str(out),
    }


def write_outputs(
    out: Path,
    cfg: TrainConfig,
    policy: Policy,
    providers: Mapping[str, SavesState],
    summary: Mapping[str, Any],
    history: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, Any]],
) -> None:
    """Write ``final/`` (the model and each provider's state), ``summary.json`` and the plots into ``out``."""
    with run_folder.writing(out):
        final = policy.save(out / "final")
        for provider in providers.values():
            provider.save(final)
        (out / "summary.json").write_text(json.dumps(dict(summary), indent=2) + "\n")
        curves_png(
            list(history),
            out / "curves.png",
            title=f"{cfg.credit} on {cfg.env_id}",
            score_name=str(summary.get("score_name", "accuracy")),
        )
        credit_html(list(samples), out / "credit.html", title=f"{cfg.credit}: per-token advantages")
        credit_png(list(samples), out / "credit.png", title=f"{cfg.credit}: per-token advantages")


def float_tensors(state: Any) -> list[torch.Tensor]:
    """Every floating-point tensor inside a (nested) state dict."""
    if isinstance(state, torch.Tensor):
        return [state.detach()] if state.is_floating_point() else []
    if isinstance(state, dict):
        return [t for v in state.values() for t in float_tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in float_tensors(v)]
    return []
