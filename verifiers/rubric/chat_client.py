"""A minimal client for OpenAI-compatible ``POST {base_url}/chat/completions`` (standard library only).

Used by the rubric's LLM-judge criterion and by the ``openai:MODEL`` evaluation agent. A failed call (connection
refused, HTTP error, no complete answer within ``timeout`` seconds, a reply over ``max_reply_bytes``, a body that
is not a chat completion, or a reply that ``parse`` rejects with ``ValueError``) is retried ``retries`` times, then
raises :class:`EndpointError`.

``timeout`` is a **total** deadline per attempt (connect, send, status line, headers and body together), not a
per-socket-operation timeout: a server that drips one byte a second cannot hold a call open. At the deadline a
timer shuts the socket down, which ends any blocking read at once. The body is read in chunks and the call gives up
as soon as it passes ``max_reply_bytes``, so a runaway reply is never held in memory whole.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
BACKOFF_S = 0.1
#: Default cap on a reply body: a chat completion of a few thousand tokens is tens of kilobytes.
MAX_REPLY_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024


class EndpointError(RuntimeError):
    """The endpoint gave no usable answer after all retries."""


class _Deadline:
    """Shuts down every socket connected under it once ``seconds`` have passed."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                self._shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._shutdown(sock)

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        # urllib closes the connection's socket object once the headers are in, but the reply's file still holds
        # the descriptor, so shutdown() still reaches it and ends a blocking read of the body.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """A urllib opener (proxies and redirects as usual) whose sockets the deadline can shut down."""

    def tracked(cls: type[http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
        class Tracked(cls):  # type: ignore[valid-type,misc]
            def connect(self) -> None:
                super().connect()
                deadline.track(self.sock)

        return Tracked

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(tracked(http.client.HTTPConnection), req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(tracked(http.client.HTTPSConnection), req, context=self._context)

    return urllib.request.build_opener(HTTPHandler, HTTPSHandler)


def _read_capped(reply: http.client.HTTPResponse, limit: int) -> bytes:
    length = reply.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ValueError(f"reply of {int(length)} bytes is larger than the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    while chunk := reply.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise ValueError(f"reply is larger than the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def post_json(url: str, data: bytes, headers: Mapping[str, str], *, timeout: float, max_bytes: int) -> bytes:
    """POST ``data`` and return the reply body, all within ``timeout`` seconds and ``max_bytes`` bytes.

    Raises:
        urllib.error.HTTPError: the server answered with an error status.
        TimeoutError: no complete reply within ``timeout`` seconds.
        ValueError: the reply is larger than ``max_bytes``.
        OSError: the connection failed.
    """
    request = urllib.request.Request(url, data=data, headers=dict(headers), method="POST")
    start = time.monotonic()
    with _Deadline(timeout) as deadline:
        try:
            with _opener(deadline).open(request, timeout=timeout) as reply:
                body = _read_capped(reply, max_bytes)
        except (OSError, http.client.HTTPException) as exc:
            if deadline.expired or isinstance(exc, TimeoutError):
                raise TimeoutError(f"no complete reply within the {timeout:g} s deadline") from exc
            if isinstance(exc, OSError):
                raise
            raise OSError(f"{type(exc).__name__}: {exc}") from exc
    if deadline.expired or time.monotonic() - start > timeout:
        raise TimeoutError(f"no complete reply within the {timeout:g} s deadline")
    return body


def _content(body: bytes) -> str:
    try:
        return str(json.loads(body)["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ValueError(f"not a chat completion: {body[:200]!r}") from e


def chat_completion(
    base_url: str,
    payload: Mapping[str, Any],
    *,
    api_key: str | None = None,
    timeout: float = 30.0,
    retries: int = 2,
    max_reply_bytes: int = MAX_REPLY_BYTES,
    parse: Callable[[str], T] = str,  # type: ignore[assignment]
) -> T:
    """``parse`` applied to the first choice's message content of a chat completion of ``payload``.

    Args:
        base_url: The endpoint's base, e.g. ``http://127.0.0.1:8000/v1``.
        payload: The request body (see :func:`messages_payload`).
        api_key: Sent as ``Authorization: Bearer ...`` when given.
        timeout: Total seconds per attempt (connect to last byte).
        retries: Attempts after the first one; the worst case is about ``(1 + retries) * timeout`` seconds.
        max_reply_bytes: Largest reply body accepted.
        parse: Turns the message content into the result; a ``ValueError`` counts as a failed attempt.

    Raises:
        EndpointError: no usable answer after ``1 + retries`` attempts (the message holds the last error).
    """
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(payload).encode("utf-8", "surrogatepass")
    url = base_url.rstrip("/") + "/chat/completions"
    last = "no attempt"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(BACKOFF_S * attempt)
        try:
            return parse(_content(post_json(url, data, headers, timeout=timeout, max_bytes=max_reply_bytes)))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} from {url}"
        except TimeoutError as e:
            last = f"{e} calling {url}"
        except (urllib.error.URLError, OSError) as e:
            last = f"{type(e).__name__} calling {url}: {getattr(e, 'reason', e)}"
        except ValueError as e:
            last = str(e)
    raise EndpointError(f"failed after {retries + 1} attempt(s): {last}")


def messages_payload(
    model: str, messages: Sequence[Mapping[str, str]], *, max_tokens: int, temperature: float = 0.0
) -> dict[str, Any]:
    """The request body of a chat completion."""
    return {
        "model": model,
        "messages": [dict(m) for m in messages],
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
