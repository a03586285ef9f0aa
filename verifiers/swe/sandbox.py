"""The sandbox contract: run an agent's shell commands over one repository, isolated and bounded.

``Sandbox`` is what the SWE env and the swebench grader code against; :class:`SandboxConfig` holds its limits,
:class:`ExecResult` what one command did, and the errors below tell the infrastructure's faults
(:class:`SandboxError`) from what a command or a file did (:class:`FileTooLargeError`, :class:`DiffError`).
The Docker implementation lives in three modules, one job each:

- ``creditgym.verifiers.swe.engine``: the engine client, the engine-error message and fault check, exec streams;
- ``creditgym.verifiers.swe.lifecycle``: removal at exit and on SIGINT/SIGTERM, cleanup of dead owners' containers;
- ``creditgym.verifiers.swe.docker_sandbox``: :class:`~creditgym.verifiers.swe.docker_sandbox.DockerSandbox`.

Its public names (``DockerSandbox``, ``cleanup``, ``docker_client``, ``install_signal_handlers``) are importable
from here too, lazily, so importing the contract never imports the docker SDK.
"""

from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

LABEL = "org.creditgym.managed"
OWNER_LABEL = "org.creditgym.owner"
SANDBOX_KINDS: tuple[str, ...] = ("engine", "image_missing", "start", "container_died", "build")

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmg]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_CAPABILITY = re.compile(r"^(CAP_)?[A-Z_]+$")


class SandboxError(RuntimeError):
    """An infrastructure fault (engine, image, container), never the agent's fault.

    Attributes:
        kind: ``"engine"`` (no engine answers), ``"image_missing"`` (the image is not present locally),
            ``"start"`` (the container would not start), ``"container_died"`` (it stopped, was removed, outlived
            its ``max_lifetime``, or the sandbox was closed) or ``"build"`` (an image build failed).
    """

    def __init__(self, message: str, kind: str = "engine") -> None:
        if kind not in SANDBOX_KINDS:
            raise ValueError(f"SandboxError kind must be one of {SANDBOX_KINDS}, got {kind!r}")
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.kind))


class FileTooLargeError(OSError):
    """A file bigger than the sandbox's ``file_limit``: it was not read into this process.

    Attributes:
        path: The file, as resolved in the sandbox.
        size: Its size in bytes.
        limit: The ``file_limit`` it exceeds.
    """

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(
            f"{path} has {size} bytes, more than the {limit} bytes a file tool may read; "
            "read parts of it with a shell command (sed -n '1,80p', head, grep)"
        )
        self.path, self.size, self.limit = path, size, limit


class DiffError(RuntimeError):
    """The repository's diff could not be taken: git failed (no repository, a broken index...) or the diff ran
    past ``diff_limit``. The agent's doing, so it is graded, never an infrastructure error.

    Attributes:
        reason: ``"git"`` or ``"too_large"``.
    """

    def __init__(self, message: str, reason: str = "git") -> None:
        super().__init__(message)
        self.reason = reason


def parse_memory(value: str, name: str = "memory") -> int:
    """Bytes in a Docker-style size (``"256m"``, ``"1g"``, ``"1.5g"``, ``"4096"``); ValueError naming ``name``."""
    match = _MEMORY_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{name} must look like '256m', '1g' or a byte count, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _positive_seconds(name: str, value: object) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandbox.

    Attributes:
        memory: Memory limit, Docker syntax (``"1g"``); swap is disabled (memswap = memory). At least 6m.
        cpus: CPU quota in cores (``nano_cpus``); at most the engine's CPU count.
        pids: Most processes/threads the container may hold at once (stops fork bombs).
        disk: Most bytes the container may hold, Docker syntax: its writable layer and the files deleted while a
            process still holds them open. Each file is capped by the kernel (``RLIMIT_FSIZE``: a write past it
            fails and sends ``SIGXFSZ``); the total is watched from this process during and after every command:
            a command running when it passes the limit is killed, so is every process holding a deleted file,
            and the result says so (``ExecResult.disk_exceeded``).
        inodes: Most files and folders the user may add to the folders it can write (they cost the host's inode
            table though they hold no byte); counted like ``disk``, and over it is the same fault.
        command_timeout: Default per-command deadline in seconds; everything the command started is killed then.
        max_lifetime: Seconds after which the container stops and the engine removes it, whatever this process
            does (so a killed owner's sandbox does not live on).
        output_limit: Bytes of output kept per command: the first and last halves; the cut is marked.
        file_limit: Most bytes ``read_file`` brings into this process; a bigger file raises
            :class:`FileTooLargeError`.
        diff_limit: Most bytes ``diff()`` brings into this process; a bigger diff raises :class:`DiffError`.
        workdir: Absolute path of the repository; commands start there, file paths are relative to it.
        start_timeout: Seconds the container may take to be running.
        user: User the container's processes run as (``"name"``, ``"uid:gid"``); ``None`` takes the image's
            ``USER`` (the bundled task images run as an unprivileged ``agent``; SWE-bench images run as root).
        cap_add: Linux capabilities given back; every other one is dropped (``cap_drop=ALL``).
    """

    memory: str = "1g"
    cpus: float = 1.0
    pids: int = 256
    disk: str = "2g"
    inodes: int = 50_000
    command_timeout: float = 60.0
    max_lifetime: float = 4 * 3600.0
    output_limit: int = 16_384
    file_limit: int = 1024**2
    diff_limit: int = 1024**2
    workdir: str = "/testbed"
    start_timeout: float = 60.0
    user: str | None = None
    cap_add: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if parse_memory(self.memory) < 6 * 1024**2:
            raise ValueError(f"memory must be at least 6m (Docker's minimum), got {self.memory!r}")
        if parse_memory(self.disk, "disk") < 1024**2:
            raise ValueError(f"disk must be at least 1m, got {self.disk!r}")
        if not (isinstance(self.cpus, (int, float)) and math.isfinite(self.cpus) and self.cpus >= 0.01):
            raise ValueError(f"cpus must be a number of cores >= 0.01, got {self.cpus!r}")
        if not (isinstance(self.inodes, int) and self.inodes >= 100):
            raise ValueError(
                f"inodes must be an int >= 100 (new files a sandbox may hold), got {self.inodes!r}"
            )
        if not (isinstance(self.pids, int) and self.pids >= 8):
            raise ValueError(
                f"pids must be an int >= 8 (init, shell and timeout need a few), got {self.pids!r}"
            )
        for name in ("command_timeout", "start_timeout", "max_lifetime"):
            _positive_seconds(name, getattr(self, name))
        for name in ("output_limit", "file_limit", "diff_limit"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 64):
                raise ValueError(f"{name} must be an int >= 64 bytes, got {getattr(self, name)!r}")
        if not (isinstance(self.workdir, str) and self.workdir.startswith("/")):
            raise ValueError(f"workdir must be an absolute path, got {self.workdir!r}")
        if posixpath.normpath(self.workdir) != self.workdir and self.workdir != "/":
            raise ValueError(
                f"workdir must be a normalised path, got {self.workdir!r} "
                f"(use {posixpath.normpath(self.workdir)!r})"
            )
        if self.user is not None and not (isinstance(self.user, str) and self.user.strip()):
            raise ValueError(f"user must be None (the image's) or a user name / 'uid:gid', got {self.user!r}")
        if not (isinstance(self.cap_add, tuple) and all(_CAPABILITY.match(c) for c in self.cap_add)):
            raise ValueError(
                f"cap_add must be a tuple of capability names such as ('CHOWN',), got {self.cap_add!r}"
            )

    @property
    def memory_bytes(self) -> int:
        return parse_memory(self.memory)

    @property
    def disk_bytes(self) -> int:
        return parse_memory(self.disk, "disk")


@dataclass(frozen=True)
class ExecResult:
    """What one command did.

    Attributes:
        exit_code: The command's exit status (137 when the kernel killed it, e.g. for memory; 153 when a write
            passed the file size limit), or ``None`` when it was killed at its deadline or for disk.
        output: stdout and stderr in the one stream Docker reads them into, decoded as UTF-8
            (``errors="replace"``), at most ``output_limit`` bytes of it: the head and the tail, with a
            ``[... N bytes cut ...]`` line between. The two are read from separate pipes, so lines written close
            together to stdout and to stderr may arrive in either order: match lines, not positions.
        timed_out: True when the deadline killed it.
        truncated: True when part of the output was cut.
        seconds: Wall-clock time of the call.
        disk_exceeded: True when the container's writes were over ``disk`` during or after the command (it was
            killed if still running); files must be deleted before commands can write again.
    """

    exit_code: int | None
    output: str
    timed_out: bool
    truncated: bool
    seconds: float
    disk_exceeded: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@runtime_checkable
class Sandbox(Protocol):
    """An isolated shell over one repository, for an agent's commands and the grader's tests.

    Commands never see the network; memory, CPU, processes and disk are capped; every command has a deadline and
    a cap on the output kept, and every byte stream that reaches this process (output, files, diffs) is capped.
    Faults of the infrastructure raise :class:`SandboxError`; whatever the command does (fail, hang, exhaust
    memory, pids or disk) comes back as an :class:`ExecResult` and leaves the sandbox usable.

    Attributes:
        workdir: Absolute path of the repository inside the sandbox; commands start there and relative paths
            resolve against it.
    """

    workdir: str

    def exec(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run ``cmd`` like ``bash -lc cmd`` in ``workdir``.

        Each command gets a fresh shell (``cd`` and variables do not carry over; files do). Background jobs
        (``cmd &``) are killed when the command returns; only a new session (``setsid cmd >log 2>&1 &``)
        outlives it, unless the deadline is reached first: then everything the command started is killed.

        Args:
            cmd: A shell command line (no NUL bytes).
            timeout: Seconds before the command and everything it started is killed; ``None`` takes the
                sandbox's default.

        Returns:
            The exit code (``None`` if killed by the deadline), the capped output and timing.

        Raises:
            ValueError: ``cmd`` holds a NUL byte (no shell can receive it).
            SandboxError: The engine does not answer (``"engine"``) or the container is gone
                (``"container_died"``).
        """
        ...

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` (str as UTF-8) to ``path``, creating parent directories. The path is resolved inside
        the sandbox, symlinks included: a link that leads out of ``workdir`` is refused.

        Raises:
            ValueError: ``path`` resolves outside ``workdir``.
            IsADirectoryError: ``path`` is a directory.
            PermissionError: The sandbox's user may not write it.
        """
        ...

    def read_file(self, path: str) -> bytes:
        """The bytes of the file at ``path``, resolved inside the sandbox like ``write_file``.

        Raises:
            ValueError: ``path`` resolves outside ``workdir``.
            FileNotFoundError: No such file (or not a regular file).
            IsADirectoryError: ``path`` is a directory.
            FileTooLargeError: The file is bigger than ``file_limit``.
        """
        ...

    def diff(self) -> str:
        """The repository's changes against ``HEAD`` as a patch that ``git apply`` accepts.

        New (untracked, not ignored) files are included, binary files as git binary patches; the repository's
        index is left as it was.

        Raises:
            DiffError: git failed, or the diff is bigger than ``diff_limit``.
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

    The check is lexical; sandboxes check again inside the container, where symlinks are resolved.
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


_LAZY = {
    "DockerSandbox": "creditgym.verifiers.swe.docker_sandbox",
    "cleanup": "creditgym.verifiers.swe.lifecycle",
    "install_signal_handlers": "creditgym.verifiers.swe.lifecycle",
    "docker_client": "creditgym.verifiers.swe.engine",
}


def __getattr__(name: str) -> Any:
    """The Docker implementation's public names, imported on first use (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
