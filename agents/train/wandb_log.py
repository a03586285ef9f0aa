"""Weights & Biases logging beside TensorBoard, off unless asked (``creditgym train --wandb``; the ``wandb`` extra).

It reaches the network only with an API key: `wandb_mode` is ``online`` when ``WANDB_API_KEY`` is set and
``WANDB_MODE`` does not say ``offline`` or ``disabled``; otherwise wandb's offline mode, which writes the run into
``<out>/wandb/offline-run-*/`` for a later ``wandb sync``. No system metrics are sampled.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.run_folder import as_json

DEFAULT_PROJECT = "creditgym"
#: ``creditgym train --wandb [PROJECT]``: its argparse settings.
FLAG: dict[str, Any] = {
    "nargs": "?",
    "const": DEFAULT_PROJECT,
    "default": "",
    "metavar": "PROJECT",
    "help": f"also log the metrics to Weights & Biases, in PROJECT (default: {DEFAULT_PROJECT}; the wandb extra): "
    "offline, into --out/wandb/, unless WANDB_API_KEY is set and WANDB_MODE is not offline",
}


def wandb_mode(environ: Mapping[str, str] = os.environ) -> str:
    """``"disabled"``, ``"offline"`` or ``"online"``: online only with ``WANDB_API_KEY`` (module docstring)."""
    mode = environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("disabled", "offline", "dryrun"):
        return "offline" if mode == "dryrun" else mode
    return "online" if environ.get("WANDB_API_KEY") else "offline"


def require_wandb() -> None:
    """Raises ``ValueError`` naming the install command when the ``wandb`` package is not installed."""
    if importlib.util.find_spec("wandb") is None:
        raise ValueError(
            "--wandb needs the wandb package: pip install 'creditgym[wandb]' (or leave --wandb out)"
        )


class WandbLog:
    """One W&B run for a start of a training run: the run's settings as its config, each step's metrics logged at
    that step (a resumed run is a new W&B run from its resume step on, in the same group).

    Raises:
        ValueError: the ``wandb`` package is not installed (`require_wandb`).
    """

    def __init__(self, project: str, out: Path, cfg: TrainConfig, *, start_step: int = 0) -> None:
        require_wandb()
        import wandb

        self.mode = wandb_mode()
        settings = wandb.Settings(
            console="off",  # the terminal's output stays the terminal's
            silent=True,
            save_code=False,
            disable_git=True,
            x_disable_stats=True,
            x_disable_meta=True,
            x_disable_machine_info=True,
            x_save_requirements=False,
        )
        name = out.resolve().name
        try:
            self.run = wandb.init(
                project=project,
                dir=str(out),
                mode=self.mode,  # type: ignore[arg-type]
                name=name if start_step == 0 else f"{name}@{start_step}",
                group=name,
                config={**as_json(cfg), "start_step": start_step},
                settings=settings,
            )
        except Exception as e:  # wandb's own errors (a bad key, no network when online) have no common base
            raise ValueError(
                f"--wandb: wandb.init failed in {self.mode} mode: {type(e).__name__}: {e}"
            ) from e

    @property
    def folder(self) -> Path:
        """This W&B run's folder (``<out>/wandb/offline-run-*`` offline): its ``run-*.wandb`` file and logs."""
        return Path(self.run.dir).parent

    def log(self, metrics: Mapping[str, float | None], step: int) -> None:
        """Log ``metrics`` at ``step``, leaving out ``step`` itself and non-finite values (``None``)."""
        self.run.log({k: v for k, v in metrics.items() if k != "step" and v is not None}, step=step)

    def close(self) -> None:
        self.run.finish()
        if self.mode == "offline":
            print(f"[creditgym] W&B offline run in {self.folder}: upload it with `wandb sync {self.folder}`")


def attach_wandb(trainer: Any, project: str) -> Any:
    """``trainer`` with its metrics also logged to the W&B ``project`` from the step it starts at (a resumed
    run's included; process 0 only); unchanged when ``project`` is ""."""
    if project and trainer.is_main:
        trainer.log.sink = WandbLog(project, trainer.out, trainer.cfg, start_step=trainer.step)
    return trainer
