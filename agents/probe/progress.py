"""Progress of a probe's rollouts: a rich bar on a terminal, else plain lines on stderr (logs, CI, nohup).

Off a terminal a line is written at every further 10% of a round's rollouts and whenever ``every_s`` seconds
passed since the last line (checked after each generation batch), so a long probe is never silent.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["RolloutProgress", "say"]


def say(message: str, stream: TextIO | None = None) -> None:
    """One line of the probe's own account (its rounds, its stages) on stderr."""
    print(f"creditgym probe: {message}", file=stream or sys.stderr, flush=True)


class RolloutProgress:
    """Counts a round's rollouts (``advance``), shown as a bar on a terminal, else as periodic lines.

    Args:
        what: The round, e.g. ``"K = 16"``.
        total: Rollouts of the round.
        every_s: Longest silence off a terminal, in seconds.
        tty: Whether to draw the bar (None: whether stdout is a terminal).
    """

    def __init__(self, what: str, total: int, *, every_s: float = 60.0, tty: bool | None = None) -> None:
        self.what, self.total, self.every_s, self.done = what, max(total, 1), every_s, 0
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.start = self.last = time.perf_counter()
        self.tenths = 0
        self.bar = None
        if self.tty:
            from rich.progress import MofNCompleteColumn, Progress, TextColumn

            columns = (
                *Progress.get_default_columns()[1:],
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
            )
            self.bar = Progress(TextColumn(f"[bold]rollouts, {what}"), *columns)
            self.task = self.bar.add_task("mc", total=total, rate="")

    def __enter__(self) -> RolloutProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.stop()

    def advance(self, n: int) -> None:
        """``n`` more rollouts finished."""
        self.done += n
        now = time.perf_counter()
        rate = self.done / max(now - self.start, 1e-9)
        if self.bar is not None:
            self.bar.update(self.task, advance=n, rate=f"{rate:.1f}/s")
            return
        tenths = 10 * self.done // self.total
        if tenths > self.tenths or now - self.last >= self.every_s:
            self.tenths, self.last = tenths, now
            left = (self.total - self.done) / rate if rate > 0 else float("nan")
            say(
                f"rollouts, {self.what}: {self.done}/{self.total} ({100 * self.done // self.total}%), "
                f"{rate:.1f}/s, {now - self.start:.0f} s, about {left:.0f} s left"
            )
