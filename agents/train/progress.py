"""What a training run shows and records as it goes: a rich progress bar (step, reward, accuracy, tokens/s, ETA)
and the metrics log (``metrics.jsonl`` and TensorBoard)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class RunProgress:
    """``with RunProgress(total, start) as p: p.update(step, metrics)``; plain lines when not on a terminal."""

    def __init__(self, total: int, start: int = 0) -> None:
        self.total, self.start = total, start
        self.live = sys.stdout.isatty()
        self._progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            disable=not self.live,
        )
        self._task: Any = None

    def __enter__(self) -> RunProgress:
        self._progress.__enter__()
        self._task = self._progress.add_task("train", total=self.total, completed=self.start, stats="")
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, step: int, metrics: dict[str, float]) -> None:
        parts = [
            f"reward {metrics.get('rollout/reward', float('nan')):.3f}",
            f"acc {metrics.get('rollout/accuracy', float('nan')):.3f}",
            f"{metrics.get('rollout/tokens_per_s', 0.0):.0f} tok/s",
        ]
        if metrics.get("rollout/truncated", 0.0) > 0:  # the share that ran out of budget
            parts.append(f"cut {metrics['rollout/truncated']:.0%}")
        if "eval/accuracy" in metrics:
            parts.append(f"held-out {metrics['eval/accuracy']:.3f}")
        stats = " | ".join(parts)
        self._progress.update(self._task, completed=step, stats=stats)
        if not self.live:
            print(
                f"step {step}/{self.total} | {stats} | {metrics.get('time/step_s', 0.0):.2f}s/step",
                flush=True,
            )


def budget_note(metrics: dict[str, float], max_new_tokens: int | None, share: float = 0.5) -> str | None:
    """What to tell the user when more than ``share`` of a step's episodes ended at a budget (``truncated``: the
    response budget in a one-turn env, turns, tokens or time in an agentic one) rather than by finishing: their
    rewards score unfinished answers. ``None`` when fewer did."""
    cut = metrics.get("rollout/truncated", float("nan"))
    if not cut > share:  # NaN (no episode kept) says nothing
        return None
    budget = "the env's own limits" if max_new_tokens is None else f"--max-new-tokens {max_new_tokens}"
    return (
        f"{cut:.0%} of the responses ended at their budget ({budget}), not by finishing, so their rewards score "
        "unfinished answers (rollout/truncated in metrics.jsonl); raise the budget if the task needs longer answers"
    )


def equal_rewards_note(metrics: dict[str, float]) -> str | None:
    """What to tell the user when every response of a step got the same reward: nothing in the outcome prefers
    one response to another, so advantages centred on the group are 0 (``None`` when the rewards differ)."""
    if metrics.get("rollout/reward_spread", float("nan")) != 0.0:  # NaN (no episode kept) says nothing
        return None
    return (
        f"every response got the same reward ({metrics.get('rollout/reward', float('nan')):.3f}), so there is "
        "nothing to prefer and group-relative advantages are 0 (rollout/reward_spread in metrics.jsonl); a task "
        "the policy sometimes solves, or a larger --group-size, gives a signal"
    )


class StepSink(Protocol):
    """Somewhere else each step's metrics go (`creditgym.agents.train.wandb_log.WandbLog` is one)."""

    def log(self, metrics: Mapping[str, float | None], step: int) -> None: ...

    def close(self) -> None: ...


class MetricsLog:
    """Appends each step's metrics to ``history``, ``folder/metrics.jsonl``, TensorBoard (``folder/tensorboard``)
    and ``sink`` when given (Weights & Biases).

    Non-finite values are recorded as ``null`` (JSON) and left out of TensorBoard and the sink.
    """

    def __init__(
        self, folder: Path, history: list[dict[str, float | None]] | None = None, sink: StepSink | None = None
    ) -> None:
        self.path = folder / "metrics.jsonl"
        self.history: list[dict[str, float | None]] = list(history or [])
        # a resumed run may have logged steps after its last checkpoint: keep only what the checkpoint knows
        self.path.write_text("".join(json.dumps(m) + "\n" for m in self.history))
        self.folder, self._writer, self.sink = folder, None, sink

    def log(self, metrics: dict[str, float]) -> None:
        clean = {k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()}
        self.history.append(clean)
        with self.path.open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if self.sink is not None:
            self.sink.log(clean, int(metrics.get("step", len(self.history))))
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except (
                ImportError
            ):  # tensorboard is a core dependency; a broken install only loses the event files
                return
            self._writer = SummaryWriter(str(self.folder / "tensorboard"))
        step = int(metrics.get("step", len(self.history)))
        for k, v in clean.items():
            if k != "step" and v is not None:
                self._writer.add_scalar(k, v, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.sink is not None:
            self.sink.close()
            self.sink = None
