"""The Docker engine as sandboxes and image builds use it: the client, engine faults, and exec streams.

One copy of each: the default socket (:data:`DEFAULT_DOCKER_HOST`), the message for an engine that does not answer
(:func:`engine_error`), the check that an exception is a connection fault rather than an answer of the engine
(:func:`is_engine_fault`), one shared client per process (:func:`default_client`), and reading an exec's
multiplexed output with a deadline and a cap (:func:`stream_exec`). The docker SDK is imported lazily.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from creditgym.verifiers.swe.sandbox import SandboxError

if TYPE_CHECKING:
    import docker

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
_DRAIN_S = 10.0  # how long reading goes on after on_deadline ran


def import_docker() -> Any:
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - the [swe] extra is installed in tests
        raise ImportError(
            f"the docker SDK is needed for sandboxes: pip install 'creditgym[swe]' ({exc})"
        ) from exc
    return docker


def docker_host() -> str:
    """Where the engine is: ``DOCKER_HOST``, or the default socket."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST


def engine_error(exc: BaseException, host: str | None = None) -> SandboxError:
    """The :class:`SandboxError` for an engine that does not answer, saying what to do."""
    return SandboxError(
        f"Docker engine not reachable at {host or docker_host()}: start it with `make engine` or set "
        f"DOCKER_HOST ({type(exc).__name__}: {exc})",
        kind="engine",
    )


def is_engine_fault(exc: BaseException) -> bool:
    """Connection-level failures (as opposed to an HTTP error answered by the engine)."""
    docker = import_docker()
    if isinstance(exc, docker.errors.APIError):
        return False
    return isinstance(exc, (OSError, docker.errors.DockerException)) or type(exc).__module__.startswith(
        ("requests", "urllib3")
    )


def docker_client(timeout: float = 60, *, max_pool_size: int = 64) -> docker.DockerClient:
    """A ``docker.DockerClient`` from the environment (``DOCKER_HOST``...) whose engine answered a ping.

    ``max_pool_size`` connections are kept for reuse, so many sandboxes can share one client.

    Raises:
        SandboxError: ``kind="engine"`` when no engine answers, with what to do about it.
    """
    docker = import_docker()
    client = None
    try:
        client = docker.from_env(timeout=timeout, max_pool_size=max_pool_size)
        client.ping()
    except Exception as exc:
        if client is not None:
            client.close()
        raise engine_error(exc) from exc
    return client


_DEFAULT_CLIENTS: dict[tuple[int, str], Any] = {}
_DEFAULT_CLIENTS_LOCK = threading.Lock()


def default_client() -> Any:
    """One shared client per process and ``DOCKER_HOST`` (its connection pool serves many sandboxes)."""
    key = (os.getpid(), docker_host())
    with _DEFAULT_CLIENTS_LOCK:
        client = _DEFAULT_CLIENTS.get(key)
        if client is None:
            client = _DEFAULT_CLIENTS[key] = docker_client()
        return client


def low_level(client: Any) -> Any:
    """The ``APIClient`` of a ``DockerClient`` (or the ``APIClient`` itself)."""
    return getattr(client, "api", client)


def client_host(api: Any) -> str:
    """Where ``api`` connects, for messages (docker-py shows unix sockets as http+docker://localhost; the socket
    path is only on its private ``_custom_adapter``)."""
    socket_path = getattr(getattr(api, "_custom_adapter", None), "socket_path", None)
    return f"unix://{socket_path}" if socket_path else str(getattr(api, "base_url", "the given client"))


def engine_status(timeout: float = 5.0) -> tuple[bool, str]:
    """Whether an engine answers (``DOCKER_HOST`` or the default socket), and a line saying which."""
    try:
        import_docker()
    except ImportError:
        return False, "docker SDK not installed (pip install 'creditgym[swe]')"
    try:
        client = docker_client(timeout, max_pool_size=1)
    except SandboxError as exc:
        return False, str(exc)
    try:
        version = client.version().get("Version", "?")
    except Exception as exc:
        return False, str(engine_error(exc))
    finally:
        client.close()
    return True, f"engine {version} at {docker_host()}"


def writable_layer_bytes(api: Any, container_id: str) -> int:
    """Bytes the container wrote (its writable layer, ``SizeRw``); 0 if the engine does not say."""
    found = api.containers(all=True, filters={"id": container_id}, size=True)
    return int((found[0].get("SizeRw") or 0) if found else 0)


# --------------------------------------------------------------------------- streams


class FrameReader:
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


def cut_marker(n: int) -> str:
    """The line that stands for ``n`` bytes left out of a stream."""
    return f"\n[... {n} bytes cut ...]\n"


class HeadTail:
    """Keeps the first ``limit // 2`` and the last ``limit - limit // 2`` bytes written, and the total."""

    def __init__(self, limit: int) -> None:
        self.head_cap = limit // 2
        self.tail_cap = limit - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def write(self, data: bytes | memoryview) -> bool:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap + 65_536:  # trim rarely: amortised O(1) per byte
                del self.tail[: len(self.tail) - self.tail_cap]
        return True

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
            + cut_marker(cut)
            + tail.decode("utf-8", errors="replace")
        )


class Prefix:
    """Keeps the first ``limit`` bytes written and counts them all; ``write`` says whether to go on."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def write(self, data: bytes | memoryview) -> bool:
        self.total += len(data)
        room = self.limit - len(self.data)
        if room > 0:
            self.data += data[:room]
        return self.total <= self.limit

    @property
    def overflowed(self) -> bool:
        return self.total > self.limit


Sink = Callable[[int, memoryview], bool]


def stream_exec(
    api: Any,
    exec_id: str,
    *,
    deadline_s: float | None,
    sink: Sink,
    on_deadline: Callable[[], None] | None = None,
    stdin: bytes | None = None,
    every: tuple[float, Callable[[], None]] | None = None,
) -> None:
    """Start exec ``exec_id`` and feed each output frame to ``sink(stream, data)`` until the stream ends.

    ``sink`` returns False to stop early (a cap was reached): the connection is then shut, so the command's next
    write fails. ``stdin`` is sent first, then the writing half is closed (the command reads EOF). At
    ``deadline_s``, ``on_deadline()`` runs once (it must make the command end) and reading goes on for at most
    10 s more. ``every = (seconds, fn)`` calls ``fn()`` each ``seconds`` of running (a watchdog).

    Raises:
        Whatever the SDK raises while starting the exec; ``OSError`` while reading.
    """
    # Private docker-py API, because no public call gives both the upgraded socket and the bytes the response
    # already buffered (exec_start(socket=True) drops them, losing a fast command's first output): the upgrade is
    # posted with _post_json/_url/_raise_for_status, read through the buffered file raw._fp.fp, and its socket
    # (fp.raw._sock) takes stdin and is shut so the connection never returns to the pool.
    response = api._post_json(
        api._url("/exec/{0}/start", exec_id),
        headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        data={"Tty": False, "Detach": False},
        stream=True,
    )
    api._raise_for_status(response)
    fp = response.raw._fp.fp
    raw_socket = getattr(fp.raw, "_sock", None)
    try:
        if stdin is not None and raw_socket is not None:
            raw_socket.settimeout(deadline_s)
            try:
                raw_socket.sendall(stdin)
                raw_socket.shutdown(socket.SHUT_WR)
            finally:
                raw_socket.settimeout(None)
        _pump(fp, deadline_s, sink, on_deadline, every)
    finally:
        if raw_socket is not None:  # never let the upgraded connection go back to the pool
            with contextlib.suppress(OSError):
                raw_socket.shutdown(socket.SHUT_RDWR)
        response.close()


def _pump(
    fp: Any,
    deadline_s: float | None,
    sink: Sink,
    on_deadline: Callable[[], None] | None,
    every: tuple[float, Callable[[], None]] | None,
) -> None:
    frames = FrameReader()
    now = time.monotonic()
    end = None if deadline_s is None else now + deadline_s
    period, tick = every if every is not None else (math.inf, None)
    next_tick = now + period
    poller = select.poll()  # not select(): that fails on descriptors above 1023
    poller.register(fp.fileno(), select.POLLIN | select.POLLPRI)
    while True:
        now = time.monotonic()
        if end is not None and now >= end:
            if on_deadline is None:
                return  # the command still holds its output open: give up on it
            on_deadline()
            on_deadline, end, next_tick = None, time.monotonic() + _DRAIN_S, math.inf
            continue
        if tick is not None and now >= next_tick:
            tick()
            next_tick = time.monotonic() + period
        wake = min(end if end is not None else math.inf, next_tick)
        wait = None if math.isinf(wake) else max(1, math.ceil((wake - now) * 1000))
        if not poller.poll(wait):
            continue
        chunk = fp.read1(65_536)
        if not chunk:
            return
        for stream, payload in frames.feed(chunk):
            if not sink(stream, payload):
                return
