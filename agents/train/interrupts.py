"""Graceful stops: the first Ctrl-C / SIGTERM asks a long job to finish its unit of work and save; a second one
interrupts at once. Used by the trainer (finish the step, checkpoint) and ``creditgym compare``. One-shot jobs that
keep a partial record instead (``creditgym probe``) turn both signals into ``KeyboardInterrupt``."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self


Handler = Callable[[int, FrameType | None], None]


class _OnSignals:
    """While active (a context manager), ``handler`` answers SIGINT and SIGTERM; the previous handlers come back on
    exit. Outside the main thread it installs nothing (signals reach only the main thread)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class GracefulStop(_OnSignals):
    """While active (a context manager), the first SIGINT/SIGTERM sets ``requested``; a second raises
    ``KeyboardInterrupt``. Outside the main thread it installs nothing (signals reach only the main thread).

    Args:
        message: Printed on the first signal (``{signum}`` is filled in); None prints nothing.
        on_request: Called once on the first signal (e.g. to forward it to child processes).
    """

    def __init__(self, message: str | None = None, on_request: Callable[[int], None] | None = None) -> None:
        super().__init__(self._handle)
        self.requested = False
        self.message, self.on_request = message, on_request

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.message is not None:
            print(self.message.format(signum=signum), flush=True)
        if self.on_request is not None:
            self.on_request(signum)


class RaiseOnSignals(_OnSignals):
    """While active (a context manager, main thread only), SIGINT and SIGTERM raise ``KeyboardInterrupt``.

    For one-shot jobs that write a partial record on ``KeyboardInterrupt`` (``creditgym probe``): Python raises it
    on SIGINT only where SIGINT was not ignored at start-up, and a background job of a non-interactive shell
    (``cmd &`` in a script, ``nohup``) starts with SIGINT ignored; SIGTERM (``kill``) would end it with nothing
    written. The previous handlers come back on exit.
    """

    def __init__(self) -> None:
        super().__init__(_raise_interrupt)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def evaluation_note(episodes: int) -> str:
    """The line printed when the step-0 held-out evaluation starts (after a Ctrl-C there stops the run cleanly)."""
    return f"[creditgym] step 0: held-out evaluation, {episodes} episodes"
