"""``DockerSandbox``: the :class:`~creditgym.verifiers.swe.sandbox.Sandbox` contract in a throw-away Docker container.

Isolation: no network; memory (no swap), CPU, pids, disk and inode limits; every capability dropped
(``cap_drop=ALL``, ``cap_add`` gives some back) and ``no-new-privileges``; commands run as the image's user (the
bundled task images run as an unprivileged ``agent``; SWE-bench images run as root, a root without
capabilities); Docker's init as PID 1, as ``nobody``, so no command can signal it or write to its output (the
container's log: one json-file of 1 MB at most), running ``sleep <max_lifetime>`` so the container stops on its
own and the engine removes it (``--rm``).

Each command runs as ``bash -lc <cmd>`` in the work directory, under its own copy of Docker's init (tini,
``-s``: a child subreaper, so nothing the command starts can leave its tree) and a small bash wrapper whose
watchdog kills the whole exec at the deadline from inside the container (so the deadline holds even if this
process dies, and the kill needs no new process). Output is streamed from the engine's socket into a head + tail
buffer of ``output_limit`` bytes; files and diffs are streamed into buffers of ``file_limit`` / ``diff_limit``.
The image needs ``bash`` and coreutils; ``diff()`` needs ``git``.
"""

from __future__ import annotations

import io
import math
import os
import posixpath
import tarfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from creditgym.verifiers.swe import lifecycle as _lifecycle
from creditgym.verifiers.swe import scripts
from creditgym.verifiers.swe.engine import (
    HeadTail,
    Prefix,
    client_host,
    default_client,
    docker_host,
    engine_error,
    import_docker,
    is_engine_fault,
    low_level,
    stream_exec,
    writable_layer_bytes,
)
from creditgym.verifiers.swe.lifecycle import cleanup, install_signal_handlers
from creditgym.verifiers.swe.sandbox import (
    LABEL,
    OWNER_LABEL,
    DiffError,
    ExecResult,
    FileTooLargeError,
    SandboxConfig,
    SandboxError,
    resolve_path,
)

__all__ = ["DockerSandbox", "cleanup", "install_signal_handlers"]

_KILL_GRACE_S = 3.0  # how long past its deadline a command may hold its output open before we kill it
DISK_CHECK_S = 1.0  # how often a running command's writes are measured against `disk`
PROBE_SHARE = 10.0  # the in-container probe runs at most every PROBE_SHARE times its own duration
# PID 1 (docker-init, sleep) runs as nobody: the agent's user can neither signal nor read it. Not with cap_add: the
# engine gives capabilities to the container's user only, so then PID 1 runs as the commands' user.
INIT_USER = "65534:65534"
LOG_SIZE = "1m"  # the container's log (PID 1's output): one json-file of at most this size


class DockerSandbox:
    """A :class:`~creditgym.verifiers.swe.sandbox.Sandbox` in a Docker container, started at construction.

    The container carries the labels ``LABEL=1``, ``OWNER_LABEL=<host>:<pid>`` plus ``labels``. The image is
    never pulled. The first sandbox of a process removes what dead processes left (``cleanup``).

    A command and everything it starts belong to one exec: its own init (a subreaper), a process group, and the
    environment variable ``CREDITGYM_EXEC=<token>``. At the deadline the in-container watchdog SIGKILLs every
    process of the exec (descendants of its init; processes born since it started that escaped to PID 1 because
    the command killed its init; marked processes); if the engine still streams output 3 s later, this process
    does the same through a second exec. While a command runs, and after it, what the container holds is measured
    (the writable layer from the engine; deleted files still open and new files from inside, at most once a
    second): over ``disk`` or ``inodes`` the command is killed the same way, and so is every process holding a
    deleted file.

    Removal: ``close()``, ``with`` exit, garbage collection, interpreter exit, SIGINT/SIGTERM (handlers installed
    once, from the main thread, chaining the previous ones), ``max_lifetime``; a SIGKILLed process leaves its
    containers to the next process's first sandbox, or to :func:`cleanup`.

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
        docker = import_docker()
        self.image = image
        self.config = config or SandboxConfig()
        self.workdir = self.config.workdir
        self._closed = False
        self._api = low_level(client if client is not None else default_client())
        self._host = docker_host() if client is None else client_host(self._api)
        _lifecycle.reap_dead_owners_once(self._api, self._host)
        cfg = self.config
        host_config = self._api.create_host_config(
            network_mode="none",
            mem_limit=cfg.memory_bytes,
            memswap_limit=cfg.memory_bytes,
            nano_cpus=round(cfg.cpus * 1e9),
            pids_limit=cfg.pids,
            init=True,
            auto_remove=True,
            cap_drop=["ALL"],
            cap_add=list(cfg.cap_add) or None,
            security_opt=["no-new-privileges"],
            ulimits=[docker.types.Ulimit(name="fsize", soft=cfg.disk_bytes, hard=cfg.disk_bytes)],
            log_config=docker.types.LogConfig(
                type="json-file", config={"max-size": LOG_SIZE, "max-file": "1"}
            ),
        )
        with _lifecycle.creating():
            try:
                created = self._api.create_container(
                    image,
                    command=["sleep", f"{math.ceil(cfg.max_lifetime)}"],
                    host_config=host_config,
                    working_dir=self.workdir,
                    user=INIT_USER if not cfg.cap_add else cfg.user or "",
                    labels={**(labels or {}), LABEL: "1", OWNER_LABEL: _lifecycle.owner_label()},
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
                raise self._start_failure(exc, "create") from exc
            self.container_id: str = created["Id"]
            self._finalizer = _lifecycle.track(self, self._api, self.container_id)
        install_signal_handlers()
        try:
            self.user = cfg.user or self._api.inspect_image(image)["Config"].get("User") or "root"
            self._start()
            self._start_probe()
        except BaseException:
            self._finalizer()
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
            raise self._start_failure(exc, "start") from exc

    def _start_probe(self) -> None:
        """Find the folders the user can write (where new files can appear) and count the files already there."""
        _, out, _ = self._script(scripts.ROOTS)  # find exits 1 on the folders it may not read
        roots = out.data.decode("utf-8", errors="replace").split("\n")
        self._roots = [r for r in roots if r.startswith("/")] or ["/"]
        self._held, self._files = 0, 0
        self._probe()
        self._start_files = self._files

    def _start_failure(self, exc: Exception, doing: str) -> SandboxError:
        if is_engine_fault(exc):
            return engine_error(exc, self._host)
        return SandboxError(f"could not {doing} a container from {self.image!r}: {exc}", kind="start")

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
        docker = import_docker()
        if isinstance(exc, SandboxError):
            return exc
        if is_engine_fault(exc):
            return engine_error(exc, self._host)
        if isinstance(exc, docker.errors.NotFound) and "no such container" in str(exc).lower():
            return self._died(
                f"was removed (closed, killed, or past its max_lifetime of {self.config.max_lifetime:g} s)"
            )
        if isinstance(exc, docker.errors.APIError) and exc.status_code == 409:
            return self._died(f"is not running ({exc.explanation})")
        if isinstance(exc, docker.errors.APIError):  # any other refusal is the engine's, never the command's
            return SandboxError(
                f"the engine refused a call on container {self.container_id[:12]} ({self.image}): "
                f"{exc.explanation or exc}",
                "engine",
            )
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
        sink: Callable[[int, memoryview], bool],
        *,
        env: dict[str, str] | None = None,
        on_deadline: Callable[[], None] | None = None,
        stdin: bytes | None = None,
        every: tuple[float, Callable[[], None]] | None = None,
    ) -> int | None:
        """Run ``argv``, feeding each output chunk to ``sink`` (see ``stream_exec``); the exit code or None."""
        try:
            exec_id = self._api.exec_create(
                self.container_id,
                argv,
                stdout=True,
                stderr=True,
                stdin=stdin is not None,
                workdir=self.workdir,
                user=self.user,
                environment=env,
            )["Id"]
            stream_exec(
                self._api,
                exec_id,
                deadline_s=deadline_s,
                sink=sink,
                on_deadline=on_deadline,
                stdin=stdin,
                every=every,
            )
        except Exception as exc:  # read errors are OSErrors: engine faults, like failed connections
            raise self._translate(exc) from exc
        try:
            for _ in range(200):
                info = self._api.exec_inspect(exec_id)
                if not info.get("Running"):
                    return info.get("ExitCode")
                time.sleep(0.005)
        except Exception as exc:
            raise self._translate(exc) from exc
        return None

    def _script(
        self, script: str, *args: str, limit: int = 65_536, stdin: bytes | None = None
    ) -> tuple[int | None, Prefix, Prefix]:
        """Run one of the sandbox's own scripts; (exit code, capped stdout, capped stderr)."""
        out, err = Prefix(limit), Prefix(4096)
        code = self._run(
            ["bash", "-c", script, "creditgym", *args],
            self.config.command_timeout,
            lambda stream, data: (out if stream == 1 else err).write(data),
            stdin=stdin,
        )
        return code, out, err

    def _kill_exec(self, token: str) -> None:
        """Kill every process of the exec ``token`` from outside (its watchdog did not)."""
        for _ in range(5):  # a full pids table makes the exec itself fail: retry a few times
            try:
                code = self._run(
                    ["bash", "-c", scripts.KILL_FROM_OUTSIDE, "creditgym-kill", token], 10.0, lambda *_: True
                )
            except Exception:  # the caller finds out what is wrong from the command's own stream
                code = None
            if code == 0:
                return
            time.sleep(0.2)

    def _probe(self, kill: bool = False) -> None:
        """Measure in the container: the bytes of deleted files still held open, and the files and folders under
        the writable roots (kept when the probe cannot run: a full pids table, a dead container). ``kill``: first
        kill every process holding a deleted file."""
        t0 = time.monotonic()
        try:
            code, out, _ = self._script(scripts.PROBE, "1" if kill else "0", *self._roots, limit=256)
            if code == 0:
                self._held, self._files = (int(n) for n in out.data.decode().split())
        except Exception:  # the caller finds out what is wrong from the command itself
            pass
        self._next_probe = time.monotonic() + max(DISK_CHECK_S, PROBE_SHARE * (time.monotonic() - t0))

    def _over_disk(self) -> bool:
        """Whether the container holds more than ``disk`` bytes (its writable layer and the deleted files still
        open) or ``inodes`` new files. The layer is asked of the engine each time; the container is probed at
        most once a second and at most a ``1 / PROBE_SHARE`` of the time, the last count standing in between."""
        try:
            layer = writable_layer_bytes(self._api, self.container_id)
        except Exception:  # measuring is best effort; the kernel's per-file limit still holds
            layer = 0
        if time.monotonic() >= self._next_probe or self._over(
            layer
        ):  # a count from before says over: only if it still is
            self._probe()
        if self._over(layer) and self._held:
            self._probe(kill=True)
            return True
        return self._over(layer)

    def _over(self, layer: int) -> bool:
        over_files = self._files - self._start_files > self.config.inodes
        return layer + self._held > self.config.disk_bytes or over_files

    def exec(self, cmd: str, timeout: float | None = None, *, stdin: bytes | None = None) -> ExecResult:
        """Run ``cmd`` with ``bash -lc`` in ``workdir``; see :meth:`Sandbox.exec`. ``stdin``: bytes the command
        reads on its standard input, then end of file (a harness option: the grader hands the eval a key)."""
        self._check_open()
        if not isinstance(cmd, str):
            raise TypeError(f"cmd must be a shell command line (str), got {type(cmd).__name__}")
        if "\x00" in cmd:
            raise ValueError("the command holds a NUL byte, which no shell can receive: remove it")
        timeout = self.config.command_timeout if timeout is None else timeout
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        token = uuid.uuid4().hex
        out = HeadTail(self.config.output_limit)
        argv = [scripts.INIT, "-s", "--", "bash", "-c", scripts.RUN, scripts.EXEC_NAME + token]
        argv += [f"{max(timeout, 0.001):.3f}", cmd]
        killed, disk = False, False

        def kill() -> None:
            nonlocal killed
            killed = True
            self._kill_exec(token)

        def watch_disk() -> None:
            nonlocal disk
            if not disk and self._over_disk():
                disk = True
                self._kill_exec(token)

        t0 = time.monotonic()
        code = self._run(
            argv,
            timeout + _KILL_GRACE_S,
            lambda _, data: out.write(data),
            env={scripts.EXEC_ENV: token},
            on_deadline=kill,
            stdin=stdin,
            every=(DISK_CHECK_S, watch_disk),
        )
        seconds = time.monotonic() - t0
        disk = disk or self._over_disk()
        # The watchdog's SIGKILL makes the wrapper exit 137; only it can make that happen past the deadline.
        timed_out = killed or (code == 137 and seconds >= timeout and not disk)
        if (code is None or code >= 126) and not self._container_running():
            raise self._died(f"stopped while running {cmd[:80]!r}")
        return ExecResult(
            exit_code=None if timed_out or (disk and code == 137) else code,
            output=out.text(),
            timed_out=timed_out,
            truncated=out.truncated,
            seconds=seconds,
            disk_exceeded=disk,
        )

    # ----------------------------------------------------------------- files

    def _file_error(self, code: int | None, full: str, err: Prefix) -> BaseException:
        said = err.data.decode("utf-8", errors="replace").strip()
        if code == scripts.OUTSIDE:
            return ValueError(f"path {full!r} resolves to {said!r}, outside the repository {self.workdir}")
        if code == scripts.IS_DIR:
            return IsADirectoryError(f"{full} is a directory")
        if code in (scripts.NO_FILE, scripts.NOT_REGULAR):
            what = "no such file" if code == scripts.NO_FILE else "not a regular file"
            return FileNotFoundError(f"{what} in the sandbox: {full}")
        if code == scripts.TOO_LARGE:
            return FileTooLargeError(full, int(said) if said.isdigit() else -1, self.config.file_limit)
        if code == scripts.DENIED:
            return PermissionError(f"the sandbox's user may not open {full}")
        if code is None and not self._container_running():
            return self._died(f"stopped while accessing {full}")
        return OSError(f"file access to {full} failed in the sandbox (exit code {code}): {said}")

    def write_file(self, path: str, data: str | bytes) -> None:
        """Write ``data`` to ``path`` as the container's user; see :meth:`Sandbox.write_file`."""
        self._check_open()
        full = resolve_path(self.workdir, path)
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        code, _, err = self._script(scripts.WRITE, self.workdir, full, stdin=payload)
        if code != 0:
            raise self._file_error(code, full, err)

    def read_file(self, path: str) -> bytes:
        """The bytes of ``path``, at most ``file_limit``; see :meth:`Sandbox.read_file`."""
        self._check_open()
        full = resolve_path(self.workdir, path)
        limit = self.config.file_limit
        code, out, err = self._script(scripts.READ, self.workdir, full, str(limit), limit=limit)
        if code != 0:
            raise self._file_error(code, full, err)
        if out.overflowed:  # it grew between the size check and the read
            raise FileTooLargeError(full, out.total, limit)
        return bytes(out.data)

    def _put_tar(self, path: str, data: bytes | io.IOBase) -> None:
        try:
            self._api.put_archive(self.container_id, path, data)
        except Exception as exc:
            raise self._translate(exc) from exc

    def copy_in(self, src: str | os.PathLike[str] | bytes, dest: str | None = None) -> None:
        """Copy a host file or directory (its contents), or a tar archive given as bytes, into the sandbox.

        A harness helper, not for the agent: the engine writes as root, and ``dest`` may be any absolute path;
        relative ones resolve against ``workdir`` (the default). Missing directories are created.
        """
        self._check_open()
        target = (
            dest if dest is not None and dest.startswith("/") else resolve_path(self.workdir, dest or ".")
        )
        target = posixpath.normpath(target)
        if isinstance(src, bytes):
            code = self._run(["mkdir", "-p", target], 30.0, lambda *_: True)
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
            DiffError: git failed (no repository at ``workdir``...; the message has git's stderr), or the diff
                is bigger than ``diff_limit`` (``reason="too_large"``).
        """
        self._check_open()
        limit = self.config.diff_limit
        code, out, err = self._script(scripts.DIFF, limit=limit)
        if out.overflowed:
            raise DiffError(
                f"the diff has more than {limit} bytes (diff_limit); remove large or generated files",
                reason="too_large",
            )
        if code != 0:
            if code is None and not self._container_running():
                raise self._died("stopped while computing the diff")
            said = err.data.decode("utf-8", errors="replace").strip()
            raise DiffError(f"git diff failed in {self.workdir} (exit code {code}): {said}")
        return bytes(out.data).decode("utf-8", errors="surrogateescape")

    # ----------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Remove the container (forcefully). Idempotent.

        Raises:
            SandboxError: ``"engine"`` when the engine could not be told; :func:`cleanup` removes it later.
        """
        self._closed = True
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
