"""Process helpers shared by creditgym's worker pools and subprocess runners (standard library only)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


# Loaded once at import, so that calling die_with_parent() in a freshly forked child (as a ``preexec_fn``) does
# not have to dlopen anything there.
_LIBC = _libc()


def die_with_parent(sig: int = signal.SIGKILL, *, parent_pid: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to the calling process when its parent exits (Linux ``PR_SET_PDEATHSIG``).

    Call it in the child: first thing in a worker's main function, or as ``subprocess.Popen(...,
    preexec_fn=die_with_parent)`` (``functools.partial(die_with_parent, signal.SIGTERM, parent_pid=os.getpid())``
    for a gentler signal and no race at start). It works even when the parent is SIGKILLed and runs no cleanup,
    and when the child is stuck in C code, which no watchdog thread could interrupt.

    Caveat: the signal fires when the parent *thread* that started the child exits, so start such children from
    a thread that lives as long as the parent (the main thread, or a long-lived server thread).

    Args:
        sig: The signal to receive (default ``SIGKILL``).
        parent_pid: The pid the parent had when it started this process. If the parent is already gone (this
            process was re-parented), ``sig`` is sent to this process at once, as the kernel would have done.
            Without it, only an exit of the parent during this call is caught.

    Returns:
        ``True`` if the request took effect, ``False`` where it is not available (not Linux, no libc).
    """
    if _LIBC is None:
        return False
    parent = os.getppid() if parent_pid is None else parent_pid
    if _LIBC.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent exited before the request took effect
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), sig)
    return True
