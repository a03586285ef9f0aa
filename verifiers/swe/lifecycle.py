"""When sandbox containers go away: on close, at interpreter exit, on SIGINT/SIGTERM, and after their owner died.

Every container carries ``OWNER_LABEL=<host>:<pid>``. Each one is tracked by a ``weakref.finalize`` that removes
it (on ``close()``, on garbage collection and at interpreter exit); SIGINT/SIGTERM handlers remove every tracked
one before the previous handler runs; :func:`cleanup` removes what a SIGKILLed process left, and the first
sandbox of each process runs it once (:func:`reap_dead_owners_once`), so ``train`` and ``eval`` start clean.
Containers also stop on their own at ``max_lifetime`` and the engine then removes them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from creditgym.verifiers.swe.engine import engine_error, import_docker, is_engine_fault, low_level
from creditgym.verifiers.swe.sandbox import LABEL, OWNER_LABEL, SandboxError

_SIGNALS_INSTALLED = False
_SIGNALS_LOCK = threading.Lock()
# Set by a SIGINT/SIGTERM handler: no new sandbox may start, and the handler waits for those being created
# (in other threads) so it can remove them too before the process dies.
_SHUTTING_DOWN = threading.Event()
_CREATING = 0
_CREATING_CV = threading.Condition(threading.RLock())  # re-entrant: the handler may interrupt the main thread
_FINALIZERS: set[weakref.finalize] = set()
_FINALIZERS_LOCK = threading.Lock()
_REAPED: set[tuple[int, str]] = set()


def owner_label() -> str:
    """This process, as containers name their owner: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    try:  # a killed process that nobody reaped yet still answers kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1][:1]
    except OSError:
        return False
    return state in ("Z", "X")


def owner_dead(owner: str | None) -> bool:
    """True only when ``owner`` (``host:pid``) names a process on this host that is gone."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return process_dead(int(pid))


def remove_container(api: Any, container_id: str, owner_pid: int) -> str | None:
    """Force-remove one container; the error text if the engine failed, None otherwise. Never raises."""
    if os.getpid() != owner_pid:  # a forked child exiting must not remove its parent's sandboxes
        return None
    try:
        api.remove_container(container_id, force=True, v=True)
    except Exception as exc:
        text = str(exc)
        if (
            getattr(getattr(exc, "response", None), "status_code", None) == 404
            or "already in progress" in text
        ):
            return None
        return f"{type(exc).__name__}: {text}"
    return None


def track(owner: object, api: Any, container_id: str) -> weakref.finalize:
    """A finalizer that removes ``container_id`` once: when called, when ``owner`` is collected, at exit, or
    when a SIGINT/SIGTERM handler of this module runs."""
    finalizer = weakref.finalize(owner, remove_container, api, container_id, os.getpid())
    with _FINALIZERS_LOCK:
        _FINALIZERS.difference_update([f for f in _FINALIZERS if not f.alive])
        _FINALIZERS.add(finalizer)
    return finalizer


@contextlib.contextmanager
def creating() -> Iterator[None]:
    """Brackets the creation of one container, so a signal handler waits for it and removes it too.

    Raises:
        SandboxError: ``"start"`` once a SIGINT/SIGTERM handler has run: the process is shutting down.
    """
    global _CREATING
    with _CREATING_CV:
        if _SHUTTING_DOWN.is_set():
            raise SandboxError("the process is shutting down (SIGINT/SIGTERM): no new sandbox", kind="start")
        _CREATING += 1
    try:
        yield
    finally:
        with _CREATING_CV:
            _CREATING -= 1
            _CREATING_CV.notify_all()


def _remove_all(deadline_s: float = 10.0) -> None:
    """Run every live finalizer, each in its own thread (a signal may have interrupted a holder of a lock)."""
    with _FINALIZERS_LOCK:
        pending = [f for f in _FINALIZERS if f.alive]
    threads = [threading.Thread(target=f, name="creditgym-sandbox-close", daemon=True) for f in pending]
    for thread in threads:
        thread.start()
    end = time.monotonic() + deadline_s
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))


def _on_signal(signum: int, frame: FrameType | None, *, previous: Callable[..., Any] | int) -> None:
    with _CREATING_CV:  # sandboxes being created in other threads register first, then go with the rest
        _SHUTTING_DOWN.set()
        _CREATING_CV.wait_for(lambda: _CREATING == 0, timeout=5.0)
    _remove_all()
    if callable(previous):
        previous(signum, frame)
        return
    # SIG_DFL: let the default action happen (terminate by this signal).
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_signal_handlers() -> None:
    """Once, from the main thread: on SIGINT/SIGTERM remove live sandboxes, then do what was done before.

    Sandboxes install it themselves when the first one starts in the main thread; a program that starts them
    only from worker threads (a thread pool of episodes) calls this from its main thread first.
    """
    global _SIGNALS_INSTALLED
    if _SIGNALS_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    with _SIGNALS_LOCK:
        if _SIGNALS_INSTALLED:
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(signum)
            if previous is None or previous == signal.SIG_IGN:  # set from C, or ignored: leave it alone
                continue
            try:
                signal.signal(signum, functools.partial(_on_signal, previous=previous))
            except ValueError:  # not the main interpreter
                return
        _SIGNALS_INSTALLED = True


def cleanup(client: Any = None, *, only_dead_owners: bool = True) -> list[str]:
    """Remove containers carrying ``LABEL``.

    Args:
        client: A ``docker.DockerClient`` (or ``APIClient``); default: the shared client of this process.
        only_dead_owners: Remove only containers whose ``OWNER_LABEL`` names a process of this host that is
            gone (what a SIGKILLed run leaves). False removes every labelled container, live sandboxes included.

    Returns:
        The ids of the removed containers.
    """
    from creditgym.verifiers.swe.engine import default_client

    docker = import_docker()
    api = low_level(client if client is not None else default_client())
    try:
        found = api.containers(all=True, filters={"label": LABEL})
    except Exception as exc:
        if is_engine_fault(exc):
            raise engine_error(exc) from exc
        raise
    removed = []
    for info in found:
        if only_dead_owners and not owner_dead((info.get("Labels") or {}).get(OWNER_LABEL)):
            continue
        try:
            api.remove_container(info["Id"], force=True, v=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                continue
            raise
        removed.append(info["Id"])
    return removed


def reap_dead_owners_once(api: Any, host: str) -> None:
    """:func:`cleanup` of dead owners' containers, the first time this process uses the engine at ``host``.

    Best effort: an engine fault here is left to the caller's next call to report.
    """
    key = (os.getpid(), host)
    with _FINALIZERS_LOCK:
        if key in _REAPED:
            return
        _REAPED.add(key)
    with contextlib.suppress(Exception):
        cleanup(api, only_dead_owners=True)
