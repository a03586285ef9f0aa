"""A rich progress bar for training runs: step, reward, accuracy, tokens/s, ETA."""

from __future__ import annotations

import sys
from typing import Any

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
        if "eval/accuracy" in metrics:
            parts.append(f"held-out {metrics['eval/accuracy']:.3f}")
        stats = " | ".join(parts)
        self._progress.update(self._task, completed=step, stats=stats)
        if not self.live:
            print(
                f"step {step}/{self.total} | {stats} | {metrics.get('time/step_s', 0.0):.2f}s/step",
                flush=True,
            )
