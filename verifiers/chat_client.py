"""A minimal client for OpenAI-compatible ``POST {base_url}/chat/completions`` (standard library only).

Used by the rubric's LLM-judge criterion and by the ``openai:MODEL`` evaluation agent. A failed call (connection
refused, HTTP error, no answer within ``timeout`` seconds, a body that is not a chat completion, or a reply that
``parse`` rejects with ``ValueError``) is retried ``retries`` times, then raises :class:`EndpointError`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
BACKOFF_S = 0.1


class EndpointError(RuntimeError):
    """The endpoint gave no usable answer after all retries."""


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
    parse: Callable[[str], T] = str,  # type: ignore[assignment]
) -> T:
    """``parse`` applied to the first choice's message content of a chat completion of ``payload``.

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
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return parse(_content(reply.read()))
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} from {url}"
        except (urllib.error.URLError, TimeoutError, OSError) as e:
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
