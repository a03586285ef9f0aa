"""A fork server for creditgym's worker pools, so that workers never import the user's ``__main__``.

``multiprocessing``'s ``spawn`` and ``forkserver`` start methods re-import the parent's main module in every worker
(from its file, or by module name). That breaks a script piped to Python (``python - <<EOF``: the path ``<stdin>``
does not exist, every worker dies), re-runs a script that has no ``if __name__ == "__main__":`` guard, and has
nothing sound to import from a notebook or an embedded interpreter. ``fork`` from the parent would copy a process
that may hold torch's threads in a broken state.

So each pool starts its own small server: a fresh interpreter (``python -c``, with the parent's ``sys.path``) that
imports only the modules it is told to preload, then forks workers on request. A worker is a copy of that clean,
warm process: it starts in milliseconds and has never seen the user's code.

Protocol: an ``AF_UNIX`` ``SOCK_SEQPACKET`` socket pair, one pickled tuple per message.

- server to client: ``("ready", pid)`` once the preloads are imported, or ``("fatal", traceback)``;
  ``("spawned", pid)`` or ``("spawn_failed", error)`` in answer to each spawn; ``("exit", pid, code)`` when a
  worker has exited (``code`` as :func:`os.waitstatus_to_exitcode`: negative means killed by that signal).
- client to server: ``("spawn", entry, args)`` carrying the worker's end of a socket pair as the one passed file
  descriptor (the worker runs ``entry(fd, *args)``, ``entry`` being ``"module:function"``); ``("kill", pid)``.

Lifetime: the server exits, killing and reaping its workers first, when the client's socket closes (the owner
closed it, exited or was SIGKILLed) or when the owner process is gone (checked every second, for when a forked
child of the owner still holds a copy of the socket). Workers ask the kernel to SIGKILL them when the server
exits (:func:`~creditgym.verifiers.workers.process.die_with_parent`). Kills go through the server, which signals only
children it has not reaped yet, so a recycled pid is never hit.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing.connection
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from creditgym.verifiers.workers.process import die_with_parent

__all__ = ["ForkServer", "WorkerStartError", "python_executable", "resolve"]

_MAX_MESSAGE = 1 << 20
_MAX_EXITS_KEPT = 1024
_OWNER_CHECK_S = 1.0
# The bootstrap run by ``python -c``: any failure before serve() (a wrong sys.path, a broken install) is sent back
# through the socket, so the owner's error names it.
# If creditgym is not importable from the owner's sys.path alone (an editable install is found through a finder
# that a .pth file installs, and an embedding host may have added its site directory by hand), the .pth files of
# those directories are processed as ``site`` would have.
_BOOT = """\
import os, pickle, site, socket, sys, traceback
sock = socket.socket(fileno=int(sys.argv[1]))
try:
    sys.path[:] = pickle.loads(bytes.fromhex(sys.argv[2]))
    try:
        import creditgym.verifiers
    except ImportError:
        for entry in list(sys.path):
            if os.path.isdir(entry) and any(n.endswith(".pth") for n in os.listdir(entry)):
                site.addsitedir(entry)
    from creditgym.verifiers.workers.forkserver import serve
except BaseException:
    sock.send(pickle.dumps(("fatal", traceback.format_exc())))
    raise SystemExit(1)
serve(sock, sys.argv[3:])
"""


class WorkerStartError(RuntimeError):
    """Worker processes could not be started at all; the message names the cause."""


def resolve(target: str) -> Callable[..., Any]:
    """The object named by ``"package.module:function"`` (the qualified name may be dotted)."""
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def python_executable() -> str:
    """A Python interpreter of this version to run the server with.

    ``sys.executable`` is not always one: in an interpreter embedded in another program it names that program.
    Then the installation's own ``bin/pythonX.Y`` is used (the server gets this process's ``sys.path``, so a
    virtual environment's packages are found either way).
    """
    tag = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [
        sys.executable,
        getattr(sys, "_base_executable", ""),
        os.path.join(sys.exec_prefix, "bin", tag),
        os.path.join(sys.base_exec_prefix, "bin", tag),
    ]
    usable = [c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)]
    for candidate in usable:
        if os.path.basename(os.path.realpath(candidate)).startswith(tag):
            return candidate
    if usable:
        return usable[0]
    raise WorkerStartError(
        f"no Python interpreter to start verifier workers with: sys.executable is {sys.executable!r} and there "
        f"is no {tag} under {sys.base_exec_prefix!r}; run from a regular Python installation"
    )


def _send(sock: socket.socket, message: tuple[Any, ...], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)], list(fds))


def _recv(sock: socket.socket) -> tuple[tuple[Any, ...] | None, list[int]]:
    """One message and the file descriptors that came with it; ``(None, [])`` at end of stream."""
    data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return pickle.loads(data), fds


# ---------------------------------------------------------------------------------------------- server side


def serve(sock: socket.socket, preload: Sequence[str]) -> NoReturn:
    """Run the fork server on ``sock`` (in the fresh interpreter started by :class:`ForkServer`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the owner's to handle; it then closes us
    owner = os.getppid()
    for name in preload:  # "module" is imported; "module:function" is imported, then function() is called
        try:
            if ":" in name:
                resolve(name)()
            else:
                importlib.import_module(name)
        except BaseException:
            with contextlib.suppress(OSError):
                _send(sock, ("fatal", f"preloading {name} failed:\n{traceback.format_exc()}"))
            os._exit(1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # the wakeup byte needs a Python-level handler
    children: set[int] = set()
    try:
        _send(sock, ("ready", os.getpid()))
        while os.getppid() == owner:
            readable, _, _ = select.select([sock, wake_r], [], [], _OWNER_CHECK_S)
            with contextlib.suppress(OSError):
                os.read(wake_r, 4096)
            _reap(sock, children)
            if sock not in readable:
                continue
            message, fds = _recv(sock)
            if message is None:
                break
            if message[0] == "spawn" and len(fds) == 1:
                _fork_worker(sock, message[1], message[2], fds[0], children, (sock.fileno(), wake_r, wake_w))
            elif message[0] == "kill" and message[1] in children:
                os.kill(message[1], signal.SIGKILL)
            else:
                for fd in fds:
                    os.close(fd)
    except OSError:
        pass  # the owner went away mid-message
    finally:
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        os._exit(0)


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, ("exit", pid, os.waitstatus_to_exitcode(status)))


def _fork_worker(
    sock: socket.socket,
    entry: str,
    args: tuple[Any, ...],
    fd: int,
    children: set[int],
    own_fds: tuple[int, ...],
) -> None:
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(fd)
        _send(sock, ("spawn_failed", f"fork() failed: {exc}"))
        return
    if pid == 0:  # the worker
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for own in own_fds:
                os.close(own)
            die_with_parent(signal.SIGKILL, parent_pid=server)
            resolve(entry)(fd, *args)
            code = 0
        except BaseException:
            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            os._exit(code)
    os.close(fd)
    children.add(pid)
    _send(sock, ("spawned", pid))


# ---------------------------------------------------------------------------------------------- client side


class ForkServer:
    """The owner's handle on one fork server (started lazily; not thread-safe: the pool serialises calls).

    Args:
        preload: What the server prepares once, before it forks any worker: ``"module"`` is imported,
            ``"module:function"`` is imported and then called without arguments (a warm-up).
        start_timeout: Seconds the server may take to import ``preload`` before :meth:`start` gives up.
    """

    def __init__(self, preload: Sequence[str], *, start_timeout: float = 120.0) -> None:
        self._preload = list(preload)
        self._start_timeout = float(start_timeout)
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._exits: dict[int, int] = {}

    @property
    def pid(self) -> int | None:
        """The server's process id, or ``None`` when it is not running."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the server if it is not running; raise :class:`WorkerStartError` naming the cause if it fails."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.close()
        exe = python_executable()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [exe, "-c", _BOOT, str(theirs.fileno()), pickle.dumps(list(sys.path)).hex(), *self._preload]
        try:
            proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            raise WorkerStartError(f"could not start the verifier fork server ({exe}): {exc}") from exc
        finally:
            theirs.close()
        self._proc, self._sock = proc, ours
        reply = self._wait_for(("ready", "fatal"), self._start_timeout)
        if reply is None or reply[0] != "ready":
            try:
                code: int | None = proc.wait(timeout=1.0)  # end of stream comes just before the exit
            except subprocess.TimeoutExpired:
                code = None
            self.close()
            if reply is not None:  # a traceback: its last line first, then the whole of it
                trace = str(reply[1]).rstrip()
                cause = f"{trace.splitlines()[-1]}\n{trace}"
            elif code is not None:
                cause = f"it exited with code {code} before it was ready"
            else:
                cause = f"it was not ready after {self._start_timeout:g} s"
            raise WorkerStartError(f"the verifier fork server ({exe}) could not start: {cause}")

    def spawn(self, entry: str, args: tuple[Any, ...]) -> tuple[int, multiprocessing.connection.Connection]:
        """Fork a worker running ``entry(fd, *args)``; returns its pid and the owner's end of its connection.

        Raises:
            WorkerStartError: the server could not be started, or could not fork (the message says why).
        """
        self.start()
        assert self._sock is not None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _send(self._sock, ("spawn", entry, args), [theirs.fileno()])
        except OSError as exc:
            ours.close()
            raise WorkerStartError(f"the verifier fork server is gone: {exc}") from exc
        finally:
            theirs.close()
        reply = self._wait_for(("spawned", "spawn_failed"), self._start_timeout)
        if reply is None or reply[0] != "spawned":
            ours.close()
            raise WorkerStartError(
                f"could not start a verifier worker: {reply[1] if reply else 'the fork server did not answer'}"
            )
        return int(reply[1]), multiprocessing.connection.Connection(ours.detach())

    def kill(self, pid: int) -> None:
        """SIGKILL worker ``pid`` if it has not exited yet."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                _send(self._sock, ("kill", pid))
            while self._wait_for((), 0.0) is not None:  # read the exits reported so far
                pass

    def exit_code(self, pid: int, timeout: float = 1.0) -> int | None:
        """Worker ``pid``'s exit code (negative: killed by that signal), waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while pid not in self._exits:
            left = deadline - time.monotonic()
            if left <= 0 or self._wait_for((), left) is None:
                break
        return self._exits.pop(pid, None)

    def close(self) -> None:
        """Stop the server: it kills and reaps every worker, then exits. Idempotent."""
        sock, proc = self._sock, self._proc
        self._sock = self._proc = None
        if sock is not None:
            sock.close()
        if proc is not None:
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                proc.kill()  # its workers then die by their parent-death signal
                proc.wait()
        self._exits.clear()

    def forget(self) -> None:
        """In a child made by ``os.fork``: drop the parent's server without touching it."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()  # our copy only; the parent keeps its own
        self._sock = self._proc = None
        self._exits.clear()

    def _wait_for(self, kinds: tuple[str, ...], timeout: float) -> tuple[Any, ...] | None:
        """Read messages (recording exits) until one of ``kinds`` arrives; ``None`` on timeout or end of stream.

        With ``kinds=()`` it returns after the first message (or the timeout).
        """
        deadline = time.monotonic() + timeout
        while self._sock is not None:
            ready, _, _ = select.select([self._sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            try:
                message, fds = _recv(self._sock)
            except OSError:
                return None
            for fd in fds:
                os.close(fd)
            if message is None:
                return None
            if message[0] == "exit":
                self._exits[int(message[1])] = int(message[2])
                if len(self._exits) > _MAX_EXITS_KEPT:  # nobody asked about the oldest ones
                    del self._exits[next(iter(self._exits))]
            if message[0] in kinds or not kinds:
                return message
        return None
