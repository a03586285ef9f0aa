"""Sandboxes: run an agent's shell commands in a throw-away Docker container, with limits.

``Sandbox`` is the contract the SWE env and the swebench grader code against; ``DockerSandbox`` implements it on
the docker SDK. Every container is started detached with no network, memory (no swap), CPU and pids limits, under
an init process (``--init``) that reaps orphans, and carries ``LABEL`` and ``OWNER_LABEL``. It is removed on
``close()``, when its ``with`` block exits (also on an exception), when the object is garbage-collected, at
interpreter exit and on SIGINT/SIGTERM of this process; ``cleanup()`` removes what a killed process left behind.

Each command runs as ``bash -lc <cmd>`` in the work directory under a small bash wrapper whose watchdog kills it
at the deadline inside the container (so the deadline holds even if this process dies, and the kill needs no new
process: a fork bomb that fills the pids limit cannot block it). The output is streamed from the engine's socket
into a head + tail buffer of ``output_limit`` bytes; nothing else is kept. The image needs ``bash``, ``sleep``
and ``/proc``; ``diff()`` needs ``git``.

The docker SDK (the ``[swe]`` extra) is imported lazily, so importing this module never needs it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import math
import os
import posixpath
import re
import select
import signal
import socket
import struct
import tarfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import docker

LABEL = "org.creditgym.managed"
OWNER_LABEL = "org.creditgym.owner"
SANDBOX_KINDS: tuple[str, ...] = ("engine", "image_missing", "start", "container_died", "build")
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

_EXEC_ENV = "CREDITGYM_EXEC"  # marks every process of one exec, so a stuck one can be found and killed
_KILL_GRACE_S = 3.0  # how long past its deadline a command may hold its output open before we kill it
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmg]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


class SandboxError(RuntimeError):
    """An infrastructure fault (engine, image, container), never the agent's fault.

    Attributes:
        kind: ``"engine"`` (no engine answers), ``"image_missing"`` (the image is not present locally),
            ``"start"`` (the container would not start), ``"container_died"`` (it stopped, was removed or the
            sandbox was closed) or ``"build"`` (an image build failed).
    """

    def __init__(self, message: str, kind: str = "engine") -> None:
        if kind not in SANDBOX_KINDS:
            raise ValueError(f"SandboxError kind must be one of {SANDBOX_KINDS}, got {kind!r}")
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.kind))


def parse_memory(value: str) -> int:
    """Bytes in a Docker-style size (``"256m"``, ``"1g"``, ``"1.5g"``, ``"4096"``); ValueError if malformed."""
    match = _MEMORY_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"memory must look like '256m', '1g' or a byte count, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandbox.

    Attributes:
        memory: Memory limit, Docker syntax (``"1g"``); swap is disabled (memswap = memory). At least 6m.
        cpus: CPU quota in cores (``nano_cpus``); at most the engine's CPU count.
        pids: Most processes/threads the container may hold at once (stops fork bombs).
        command_timeout: Default per-command deadline in seconds; the command's process group is killed then.
        output_limit: Bytes of output kept per command: the first and last halves; the cut is marked.
        workdir: Absolute path of the repository; commands start there, file paths are relative to it.
        start_timeout: Seconds the container may take to be running.
    """

    memory: str = "1g"
    cpus: float = 1.0
    pids: int = 256
    command_timeout: float = 60.0
    output_limit: int = 16_384
    workdir: str = "/testbed"
    start_timeout: float = 60.0

    def __post_init__(self) -> None:
        if parse_memory(self.memory) < 6 * 1024**2:
            raise ValueError(f"memory must be at least 6m (Docker's minimum), got {self.memory!r}")
        if not (isinstance(self.cpus, (int, float)) and math.isfinite(self.cpus) and self.cpus >= 0.01):
            raise ValueError(f"cpus must be a number of cores >= 0.01, got {self.cpus!r}")
        if not (isinstance(self.pids, int) and self.pids >= 8):
            raise ValueError(
                f"pids must be an int >= 8 (init, shell and timeout need a few), got {self.pids!r}"
            )
        for name in ("command_timeout", "start_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
        if not (isinstance(self.output_limit, int) and self.output_limit >= 64):
            raise ValueError(f"output_limit must be an int >= 64 bytes, got {self.output_limit!r}")
        if not (isinstance(self.workdir, str) and self.workdir.startswith("/")):
            raise ValueError(f"workdir must be an absolute path, got {self.workdir!r}")
        if posixpath.normpath(self.workdir) != self.workdir and self.workdir != "/":
            raise ValueError(
                f"workdir must be a normalised path, got {self.workdir!r} "
                f"(use {posixpath.normpath(self.workdir)!r})"
            )

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory)


@dataclass(frozen=True)
class ExecResult:
    """What one command did.

    Attributes:
        exit_code: The command's exit status (137 when the kernel killed it, e.g. for memory), or ``None`` when
            it ran past its timeout and was killed.
        output: stdout and stderr interleaved as they arrived, decoded as UTF-8 (``errors="replace"``), at most
            ``output_limit`` bytes of it: the head and the tail, with a ``[... N bytes cut ...]`` line between.
        timed_out: True when the deadline killed it.
        truncated: True when part of the output was cut.
        seconds: Wall-clock time of the call.
    """

    exit_code: int | None
    output: str
    timed_out: bool
    truncated: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@runtime_checkable
class Sandbox(Protocol):
    """An isolated shell over one repository, for an agent's commands and the grader's tests.

    Commands never see the network; memory, CPU and process count are capped; every command has a deadline and
    a cap on the output kept. Faults of the infrastructure raise :class:`SandboxError`; whatever the command
    does (fail, hang, exhaust memory or pids) comes back as an :class:`ExecResult` and leaves the sandbox usable.

    Attributes:
        workdir: Absolute path of the repository inside the sandbox; commands start there and relative paths
            resolve against it.
    """

    workdir: str

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run ``cmd`` like ``bash -lc cmd`` in ``workdir``.

        Each command gets a fresh shell (``cd`` and variables do not carry over; files do). Background jobs
        (``cmd &``) are killed when the command returns; only a new session (``setsid cmd >log 2>&1 &``)
        outlives it, unless the deadline is reached first.

        Args:
            cmd: A shell command line.
            timeout: Seconds before the command and everything it started is killed; ``None`` takes the
                sandbox's default.

        Returns:
            The exit code (``None`` if killed by the deadline), the capped output and timing.

        Raises:
            SandboxError: The engine does not answer (``"engine"``) or the container is gone
                (``"container_died"``).
        """
        ...

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` (str as UTF-8) to ``path``, creating parent directories.

        Raises:
            ValueError: ``path`` resolves outside ``workdir``.
        """
        ...

    def read_file(self, path: str) -> bytes:
        """The bytes of the file at ``path``.

        Raises:
            ValueError: ``path`` resolves outside ``workdir``.
            FileNotFoundError: No such file.
            IsADirectoryError: ``path`` is a directory.
        """
        ...

    def diff(self) -> str:
        """The repository's changes against ``HEAD`` as a patch that ``git apply`` accepts.

        New (untracked, not ignored) files are included, binary files as git binary patches; the repository's
        index is left as it was.
        """
        ...

    def close(self) -> None:
        """Remove the sandbox. Idempotent; any later call raises ``SandboxError("container_died")``."""
        ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def resolve_path(workdir: str, path: str) -> str:
    """The absolute, normalised form of ``path`` (relative to ``workdir``); ValueError if it leaves ``workdir``.

    The check is lexical: symlinks inside the container are not followed.
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ValueError(f"path must be a non-empty string without NUL bytes, got {path!r}")
    full = posixpath.normpath(posixpath.join(workdir, path))
    if full.startswith("//"):  # normpath keeps a leading '//'
        full = "/" + full.lstrip("/")
    root = posixpath.normpath(workdir)
    if root != "/" and full != root and not full.startswith(root + "/"):
        raise ValueError(f"path {path!r} is outside the repository {root}")
    return full


# --------------------------------------------------------------------------- engine access


def _import_docker() -> Any:
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - the [swe] extra is installed in tests
        raise ImportError(
            f"the docker SDK is needed for sandboxes: pip install 'creditgym[swe]' ({exc})"
        ) from exc
    return docker


def _docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def _engine_error(exc: BaseException, host: str | None = None) -> SandboxError:
    host = host or _docker_host()
    return SandboxError(
        f"Docker engine not reachable at {host}: start it with `make engine` or set DOCKER_HOST "
        f"({type(exc).__name__}: {exc})",
        kind="engine",
    )


def docker_client(timeout: float = 60, *, max_pool_size: int = 64) -> docker.DockerClient:
    """A ``docker.DockerClient`` from the environment (``DOCKER_HOST``...) whose engine answered a ping.

    ``max_pool_size`` connections are kept for reuse, so many sandboxes can share one client.

    Raises:
        SandboxError: ``kind="engine"`` when no engine answers, with what to do about it.
    """
    docker = _import_docker()
    client = None
    try:
        client = docker.from_env(timeout=timeout, max_pool_size=max_pool_size)
        client.ping()
    except Exception as exc:
        if client is not None:
            client.close()
        raise _engine_error(exc) from exc
    return client


_DEFAULT_CLIENTS: dict[tuple[int, str], Any] = {}
_DEFAULT_CLIENTS_LOCK = threading.Lock()


def _default_client() -> Any:
    """One shared client per process and ``DOCKER_HOST`` (its connection pool serves many sandboxes)."""
    key = (os.getpid(), _docker_host())
    with _DEFAULT_CLIENTS_LOCK:
        client = _DEFAULT_CLIENTS.get(key)
        if client is None:
            client = _DEFAULT_CLIENTS[key] = docker_client()
        return client


def _client_host(api: Any) -> str:
    """Where ``api`` connects, for messages (docker-py shows unix sockets as http+docker://localhost)."""
    socket_path = getattr(getattr(api, "_custom_adapter", None), "socket_path", None)
    return f"unix://{socket_path}" if socket_path else str(getattr(api, "base_url", "the given client"))


def _is_engine_fault(exc: BaseException) -> bool:
    """Connection-level failures (as opposed to an HTTP error answered by the engine)."""
    docker = _import_docker()
    if isinstance(exc, docker.errors.APIError):
        return False
    return isinstance(exc, (OSError, docker.errors.DockerException)) or type(exc).__module__.startswith(
        ("requests", "urllib3")
    )


def _process_dead(pid: int) -> bool:
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


def _owner_dead(owner: str | None) -> bool:
    """True only when ``owner`` (``host:pid``) names a process on this host that is gone."""
    if not owner or ":" not in owner:
        return False
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return _process_dead(int(pid))


def cleanup(client: Any = None, *, only_dead_owners: bool = True) -> list[str]:
    """Remove containers carrying ``LABEL``.

    Args:
        client: A ``docker.DockerClient`` (or ``APIClient``); default: :func:`docker_client`.
        only_dead_owners: Remove only containers whose ``OWNER_LABEL`` names a process of this host that is
            gone (what a SIGKILLed run leaves). False removes every labelled container, live sandboxes included.

    Returns:
        The ids of the removed containers.
    """
    docker = _import_docker()
    api = getattr(client or docker_client(), "api", client)
    try:
        found = api.containers(all=True, filters={"label": LABEL})
    except Exception as exc:
        if _is_engine_fault(exc):
            raise _engine_error(exc) from exc
        raise
    removed = []
    for info in found:
        if only_dead_owners and not _owner_dead((info.get("Labels") or {}).get(OWNER_LABEL)):
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


# --------------------------------------------------------------------------- output handling


class _FrameReader:
    """Splits Docker's multiplexed stream (8-byte header: stream id, 3 zero bytes, big-endian length)."""

    def __init__(self) -> None:
        self._header = bytearray()
        self._left = 0
        self._stream = 1

    def feed(self, data: bytes) -> Iterator[tuple[int, memoryview]]:
        view, i, n = memoryview(data), 0, len(data)
        while i < n:
            if self._left == 0:
                need = 8 - len(self._header)
                self._header += view[i : i + need]
                i += min(need, n - i)
                if len(self._header) == 8:
                    self._stream, self._left = struct.unpack(">BxxxL", self._header)
                    self._header.clear()
                continue
            take = min(self._left, n - i)
            yield self._stream, view[i : i + take]
            i += take
            self._left -= take


class _HeadTail:
    """Keeps the first ``limit // 2`` and the last ``limit - limit // 2`` bytes written, and the total."""

    def __init__(self, limit: int) -> None:
        self.head_cap = limit // 2
        self.tail_cap = limit - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes | memoryview) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap + 65_536:  # trim rarely: amortised O(1) per byte
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_cap + self.tail_cap

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        tail = self.tail[-self.tail_cap :]
        cut = self.total - len(self.head) - len(tail)
        return (
            self.head.decode("utf-8", errors="replace")
            + f"\n[... {cut} bytes cut ...]\n"
            + tail.decode("utf-8", errors="replace")
        )


# --------------------------------------------------------------------------- removal on exit / signals

_LIVE: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()
_SIGNALS_INSTALLED = False
_SIGNALS_LOCK = threading.Lock()
# Set by a SIGINT/SIGTERM handler: no new sandbox may start, and the handler waits for those being created
# (in other threads) so it can remove them too before the process dies.
_SHUTTING_DOWN = threading.Event()
_CREATING = 0
_CREATING_CV = threading.Condition(threading.RLock())  # re-entrant: the handler may interrupt the main thread


def _remove_container(api: Any, container_id: str, owner_pid: int) -> str | None:
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


def _close_live(deadline_s: float = 10.0) -> None:
    """Remove every live sandbox, each from its own thread (a signal may have interrupted a holder of a lock)."""
    threads = []
    for sandbox in list(_LIVE):
        sandbox._closed = True
        thread = threading.Thread(target=sandbox._finalizer, name="creditgym-sandbox-close", daemon=True)
        thread.start()
        threads.append(thread)
    end = time.monotonic() + deadline_s
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))


def _on_signal(signum: int, frame: FrameType | None, *, previous: Callable[..., Any] | int) -> None:
    with (
        _CREATING_CV
    ):  # sandboxes being created in other threads register first, then are removed with the rest
        _SHUTTING_DOWN.set()
        _CREATING_CV.wait_for(lambda: _CREATING == 0, timeout=5.0)
    _close_live()
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


@atexit.register
def _close_all_at_exit() -> None:
    # weakref.finalize already runs at exit; this is belt and braces.
    for sandbox in list(_LIVE):
        sandbox._finalizer()


# --------------------------------------------------------------------------- the Docker sandbox

# Every process of one exec carries CREDITGYM_EXEC=<token> in its environment; killmarked kills them all (but
# the shell running it and the wrapper), using builtins only.
_KILL_MARKED = r"""
killmarked() {
  local d p v
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
    while IFS= read -r -d '' v; do
      if [ "$v" = "CREDITGYM_EXEC=$CREDITGYM_EXEC" ]; then kill -KILL "$p"; break; fi
    done < "$d/environ"
  done 2>/dev/null
}
"""

# bash -c _RUN_SCRIPT <timeout> <cmd>. The command runs as its own process group J (set -m). A watchdog, started
# before it, kills J and every marked process at the deadline with builtins, so it needs no new process (a fork
# bomb that fills the pids table cannot stop it); once it has started killing it ignores TERM, so the wrapper,
# woken by J's death, lets it finish. When the command returns first, what is left of J (background jobs) is
# killed and the watchdog is stopped; only processes started in a new session (setsid) outlive the command. The
# wrapper's own stdout/stderr go to /dev/null (job notices) and it drops its copies of the stream, so the stream
# ends with the command's last writer.
_RUN_SCRIPT = (
    _KILL_MARKED
    + r"""
exec 3>&1 4>&2 >/dev/null 2>&1
set -m
bash -lc "$1" >&3 2>&4 3>&- 4>&- &
job=$!
{ trap 'exit 0' TERM; CREDITGYM_EXEC= sleep "$0"; trap '' TERM; kill -KILL -- -"$job"; killmarked; } 3>&- 4>&- &
dog=$!
exec 3>&- 4>&-
wait "$job"
rc=$?
kill -KILL -- -"$job"
kill -TERM -- -"$dog"
kill -CONT -- -"$dog"
wait "$dog"
exit $rc
"""
)

_DIFF_SCRIPT = r"""
set -e
git() { command git -c safe.directory='*' "$@"; }
idx=$(mktemp)
trap 'rm -f "$idx"' EXIT
cp "$(git rev-parse --git-path index)" "$idx" 2>/dev/null || rm -f "$idx"
export GIT_INDEX_FILE="$idx"
base=$(git rev-parse -q --verify HEAD^{tree} || git hash-object -t tree /dev/null)
git add -A
git diff --cached --binary --no-color --no-ext-diff --no-renames "$base"
"""


class DockerSandbox:
    """A :class:`Sandbox` in a Docker container, started at construction.

    The container runs ``sleep infinity`` under Docker's init with ``network_mode="none"``, ``mem_limit`` =
    ``memswap_limit`` = ``config.memory``, ``nano_cpus``, ``pids_limit``, ``no-new-privileges`` and the labels
    ``LABEL=1``, ``OWNER_LABEL=<host>:<pid>`` plus ``labels``. The image is never pulled.

    A command runs as ``bash -lc <cmd>`` in its own process group, every process of it marked by an environment
    variable (``CREDITGYM_EXEC=<token>``). A watchdog started with it in the container SIGKILLs the group and
    every marked process at the deadline; if the engine still streams output 3 s after the deadline, this
    process kills the marked processes through a second exec. Streams are read with ``poll`` and frames
    decoded as they come, straight into the head + tail buffer.

    Removal: ``close()``, ``with`` exit, garbage collection, interpreter exit, and SIGINT/SIGTERM (handlers
    installed once, from the main thread, chaining the previous ones). A SIGKILLed process leaves its containers
    to :func:`cleanup`.

    Args:
        image: A local image with ``bash`` and coreutils (``git`` for ``diff``).
        config: Limits and timeouts; default :class:`SandboxConfig()`.
        client: A ``docker.DockerClient`` (or ``APIClient``); default: one shared client from the environment.
        labels: Extra container labels.
        name: Container name; default ``creditgym-<12 hex>``.

    Raises:
        SandboxError: ``"engine"`` (no engine answers), ``"image_missing"`` (the image is not local),
            ``"start"`` (the container did not start within ``start_timeout``).

    Example:
        >>> with DockerSandbox("creditgym-base:bookworm", SandboxConfig(memory="512m")) as box:  # doctest: +SKIP
        ...     box.write_file("hello.py", "print('hi')")
        ...     box.exec("python3 hello.py").output
        'hi\\n'
    """

    def __init__(
        self,
        image: str,
        config: SandboxConfig | None = None,
        *,
        client: Any = None,
        labels: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        docker = _import_docker()
        self.image = image
        self.config = config or SandboxConfig()
        self.workdir = self.config.workdir
        self._closed = False
        self._api = getattr(client or _default_client(), "api", client)
        self._host = _docker_host() if client is None else _client_host(self._api)
        all_labels = {**(labels or {}), LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"}
        host_config = self._api.create_host_config(
            network_mode="none",
            mem_limit=self.config.memory_bytes,
            memswap_limit=self.config.memory_bytes,
            nano_cpus=round(self.config.cpus * 1e9),
            pids_limit=self.config.pids,
            init=True,
            security_opt=["no-new-privileges"],
        )
        global _CREATING
        with _CREATING_CV:
            if _SHUTTING_DOWN.is_set():
                raise SandboxError(
                    "the process is shutting down (SIGINT/SIGTERM): no new sandbox", kind="start"
                )
            _CREATING += 1
        try:
            created = self._api.create_container(
                image,
                command=["sleep", "infinity"],
                host_config=host_config,
                working_dir=self.workdir,
                labels=all_labels,
                name=name or f"creditgym-{uuid.uuid4().hex[:12]}",
                network_disabled=True,
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(
                f"image {image!r} is not present locally (sandboxes never pull): build it, e.g. "
                f"`creditgym images build`, or `docker load` it ({exc.explanation})",
                kind="image_missing",
            ) from exc
        except Exception as exc:
            if _is_engine_fault(exc):
                raise _engine_error(exc, self._host) from exc
            raise SandboxError(f"could not create a container from {image!r}: {exc}", kind="start") from exc
        else:
            self.container_id: str = created["Id"]
            self._finalizer = weakref.finalize(
                self, _remove_container, self._api, self.container_id, os.getpid()
            )
            _LIVE.add(self)
        finally:
            with _CREATING_CV:
                _CREATING -= 1
                _CREATING_CV.notify_all()
        install_signal_handlers()
        try:
            self._start()
        except BaseException:
            self._finalizer()
            _LIVE.discard(self)
            raise

    def _start(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout
        try:
            self._api.start(self.container_id)
            while True:
                state = self._api.inspect_container(self.container_id)["State"]
                if state.get("Running"):
                    return
                if state.get("Status") in ("exited", "dead") or time.monotonic() > deadline:
                    raise SandboxError(
                        f"container {self.container_id[:12]} from {self.image!r} is not running "
                        f"(status {state.get('Status')!r}, exit code {state.get('ExitCode')}, "
                        f"error {state.get('Error')!r})",
                        kind="start",
                    )
                time.sleep(0.02)
        except SandboxError:
            raise
        except Exception as exc:
            if _is_engine_fault(exc):
                raise _engine_error(exc, self._host) from exc
            raise SandboxError(
                f"could not start a container from {self.image!r}: {exc}", kind="start"
            ) from exc

    def __repr__(self) -> str:
        state = "closed" if self._closed else "live"
        return f"DockerSandbox(image={self.image!r}, container={self.container_id[:12]}, {state})"

    # ----------------------------------------------------------------- errors

    def _died(self, why: str) -> SandboxError:
        return SandboxError(
            f"sandbox container {self.container_id[:12]} ({self.image}) {why}", "container_died"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise self._died("is closed")

    def _translate(self, exc: BaseException) -> BaseException:
        """The SandboxError an SDK exception stands for (or the exception itself)."""
        docker = _import_docker()
        if isinstance(exc, SandboxError):
            return exc
        if _is_engine_fault(exc):
            return _engine_error(exc, self._host)
        if isinstance(exc, docker.errors.NotFound) and "no such container" in str(exc).lower():
            return self._died("was removed")
        if isinstance(exc, docker.errors.APIError) and exc.status_code == 409:
            return self._died(f"is not running ({exc.explanation})")
        return exc

    def _container_running(self) -> bool:
        try:
            return bool(self._api.inspect_container(self.container_id)["State"].get("Running"))
        except Exception as exc:
            err = self._translate(exc)
            if isinstance(err, SandboxError) and err.kind == "container_died":
                return False
            raise err from exc

    # ----------------------------------------------------------------- exec

    def _run(
        self,
        argv: list[str],
        deadline_s: float | None,
        sink: Callable[[int, memoryview], None],
        env: dict[str, str] | None = None,
        on_deadline: Callable[[], None] | None = None,
    ) -> int | None:
        """Run ``argv``, feeding each output chunk to ``sink``; the exit code (None if unknown).

        The engine's socket is read with ``select`` so a deadline can interrupt the wait; at the deadline
        ``on_deadline`` runs (it must make the command end) and reading goes on until the engine closes the
        stream, at most 10 s more.
        """
        try:
            exec_id = self._api.exec_create(
                self.container_id, argv, stdout=True, stderr=True, workdir=self.workdir, environment=env
            )["Id"]
            # docker-py's exec_start(socket=True) hands back the bare socket and loses the response's read buffer;
            # reading through that buffer (fp) is what keeps the first bytes of a fast command.
            response = self._api._post_json(
                self._api._url("/exec/{0}/start", exec_id),
                headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                data={"Tty": False, "Detach": False},
                stream=True,
            )
            self._api._raise_for_status(response)
        except Exception as exc:
            raise self._translate(exc) from exc
        fp = response.raw._fp.fp
        frames = _FrameReader()
        end = None if deadline_s is None else time.monotonic() + deadline_s
        poller = select.poll()  # not select(): that fails on descriptors above 1023
        poller.register(fp.fileno(), select.POLLIN | select.POLLPRI)
        try:
            while True:
                wait = None if end is None else end - time.monotonic()
                if wait is not None and wait <= 0:
                    if on_deadline is not None:
                        on_deadline()
                        on_deadline = None
                        end = time.monotonic() + 10.0
                        continue
                    break  # the command still holds its output open: give up on it
                if not poller.poll(None if wait is None else max(1, math.ceil(wait * 1000))):
                    continue
                chunk = fp.read1(65_536)
                if not chunk:
                    break
                for stream, payload in frames.feed(chunk):
                    sink(stream, payload)
        except OSError as exc:
            raise _engine_error(exc, self._host) from exc
        finally:
            raw_socket = getattr(fp.raw, "_sock", None)
            if raw_socket is not None:  # never let the upgraded connection go back to the pool
                with contextlib.suppress(OSError):
                    raw_socket.shutdown(socket.SHUT_RDWR)
            response.close()
        try:
            for _ in range(200):
                info = self._api.exec_inspect(exec_id)
                if not info.get("Running"):
                    return info.get("ExitCode")
                time.sleep(0.005)
        except Exception as exc:
            raise self._translate(exc) from exc
        return None

    def _kill_marked(self, token: str) -> None:
        """Kill every process in the container whose environment carries ``token`` (a stuck command)."""
        for _ in range(5):  # a full pids table makes the exec itself fail: retry a few times
            try:
                code = self._run(
                    ["bash", "-c", _KILL_MARKED + "killmarked"],
                    10.0,
                    lambda stream, data: None,
                    {_EXEC_ENV: token},
                )
            except Exception:  # the caller finds out what is wrong from the command's own stream
                code = None
            if code == 0:
                return
            time.sleep(0.2)

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run ``cmd`` with ``bash -lc`` in ``workdir``; see :meth:`Sandbox.exec`."""
        self._check_open()
        if not isinstance(cmd, str):
            raise TypeError(f"cmd must be a shell command line (str), got {type(cmd).__name__}")
        timeout = self.config.command_timeout if timeout is None else timeout
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        token = uuid.uuid4().hex
        out = _HeadTail(self.config.output_limit)
        argv = ["bash", "-c", _RUN_SCRIPT, f"{max(timeout, 0.001):.3f}", cmd]
        killed = False

        def kill() -> None:
            nonlocal killed
            killed = True
            self._kill_marked(token)

        t0 = time.monotonic()
        code = self._run(
            argv, timeout + _KILL_GRACE_S, lambda _, data: out.write(data), {_EXEC_ENV: token}, kill
        )
        seconds = time.monotonic() - t0
        # The watchdog's SIGKILL makes the wrapper exit 137; only it can make that happen past the deadline.
        timed_out = killed or (code == 137 and seconds >= timeout)
        if (code is None or code >= 126) and not self._container_running():
            raise self._died(f"stopped while running {cmd[:80]!r}")
        return ExecResult(
            exit_code=None if timed_out else code,
            output=out.text(),
            timed_out=timed_out,
            truncated=out.truncated,
            seconds=seconds,
        )

    # ----------------------------------------------------------------- files

    def _put_tar(self, path: str, data: bytes | io.IOBase) -> None:
        try:
            self._api.put_archive(self.container_id, path, data)
        except Exception as exc:
            raise self._translate(exc) from exc

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` to ``path`` (mode 0644, parents created); see :meth:`Sandbox.write_file`."""
        self._check_open()
        full = resolve_path(self.workdir, path)
        if full == posixpath.normpath(self.workdir):
            raise IsADirectoryError(f"{full} is the repository's directory")
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(full.lstrip("/"))
            info.size, info.mode, info.mtime = len(payload), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(payload))
        self._put_tar("/", buffer.getvalue())  # the engine creates missing parent directories

    def read_file(self, path: str) -> bytes:
        """The bytes of ``path``; see :meth:`Sandbox.read_file`."""
        self._check_open()
        return self._get_file(resolve_path(self.workdir, path))

    def _get_file(self, full: str, hops: int = 0) -> bytes:
        docker = _import_docker()
        try:
            stream, stat = self._api.get_archive(self.container_id, full)
            archive = b"".join(stream)
        except docker.errors.NotFound as exc:
            if not self._container_running():
                raise self._died("is gone") from exc
            raise FileNotFoundError(f"no such file in the sandbox: {full}") from exc
        except Exception as exc:
            raise self._translate(exc) from exc
        if stat.get("mode", 0) & (1 << 31):  # Go's os.ModeDir
            raise IsADirectoryError(f"{full} is a directory")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            member = tar.next()
            if member is not None and member.issym() and hops < 8:
                return self._get_file(posixpath.join(posixpath.dirname(full), member.linkname), hops + 1)
            extracted = tar.extractfile(member) if member is not None and member.isfile() else None
            if extracted is None:
                raise FileNotFoundError(f"{full} is not a regular file")
            return extracted.read()

    def copy_in(self, src: str | os.PathLike[str] | bytes, dest: str | None = None) -> None:
        """Copy a host file or directory (its contents), or a tar archive given as bytes, into the sandbox.

        A harness helper, not for the agent: ``dest`` may be any absolute path; relative ones resolve against
        ``workdir`` (the default). Missing directories are created.
        """
        self._check_open()
        target = (
            dest if dest is not None and dest.startswith("/") else resolve_path(self.workdir, dest or ".")
        )
        target = posixpath.normpath(target)
        if isinstance(src, bytes):
            code = self._run(["mkdir", "-p", target], 30.0, lambda stream, data: None)
            if code != 0:
                raise (
                    self._died(f"could not create {target}")
                    if code is None
                    else ValueError(
                        f"cannot create directory {target} in the sandbox (mkdir exit code {code})"
                    )
                )
            self._put_tar(target, src)
            return
        source = Path(src)
        if not source.exists():
            raise FileNotFoundError(f"no such file or directory to copy in: {source}")
        prefix = target.lstrip("/")
        with io.BytesIO() as buffer:
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                if source.is_dir():
                    for child in sorted(source.iterdir()):
                        tar.add(child, arcname=posixpath.join(prefix, child.name) if prefix else child.name)
                else:
                    tar.add(source, arcname=prefix or source.name)
            self._put_tar("/", buffer.getvalue())

    # ----------------------------------------------------------------- repository

    def diff(self) -> str:
        """``git diff --binary`` of the work tree, new files included, against HEAD; see :meth:`Sandbox.diff`.

        Raises:
            RuntimeError: git failed (no repository at ``workdir``...); the message has git's stderr.
        """
        self._check_open()
        stdout, stderr = bytearray(), _HeadTail(4096)

        def sink(stream: int, data: memoryview) -> None:
            if stream == 1:
                stdout.extend(data)
            else:
                stderr.write(data)

        code = self._run(["bash", "-c", _DIFF_SCRIPT], self.config.command_timeout, sink)
        if code != 0:
            if code is None and not self._container_running():
                raise self._died("stopped while computing the diff")
            raise RuntimeError(
                f"git diff failed in {self.workdir} (exit code {code}): {stderr.text().strip()}"
            )
        return stdout.decode("utf-8", errors="surrogateescape")

    # ----------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Remove the container (forcefully). Idempotent.

        Raises:
            SandboxError: ``"engine"`` when the engine could not be told; :func:`cleanup` removes it later.
        """
        self._closed = True
        _LIVE.discard(self)
        error = self._finalizer()
        if error:
            raise SandboxError(
                f"could not remove container {self.container_id[:12]} at {self._host}: {error}", "engine"
            )

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.close()
        except SandboxError:
            if exc is None:
                raise
