"""The ``llm_judge`` criterion against a real loopback HTTP server speaking OpenAI chat completions."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from creditgym.verifiers import _rubric_judge
from creditgym.verifiers.rubric import Criterion, grade


class _Judge(BaseHTTPRequestHandler):
    """Behaviour is chosen by the model name: yes, no, slow, error500, garbage, flaky (500 once, then yes)."""

    calls: list[dict] = []  # noqa: RUF012
    flaky_failures = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.calls.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        model = body["model"]
        if model == "slow":
            time.sleep(1.5)
        if model == "error500" or (model == "flaky" and _Judge.flaky_failures < 1):
            _Judge.flaky_failures += model == "flaky"
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"internal error")
            return
        if model == "garbage":
            payload = b"{not json"
        else:
            answer = {"yes": "Yes.", "no": "no", "slow": "yes", "flaky": "YES"}[model]
            payload = json.dumps(
                {"choices": [{"message": {"role": "assistant", "content": answer}}]}
            ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Judge.calls.clear()
    _Judge.flaky_failures = 0
    _rubric_judge.clear_cache()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _judge(base_url: str, model: str, **extra: object) -> Criterion:
    kwargs = {"question": "Is the response polite?", "model": model, "base_url": base_url, "timeout": 0.5}
    return Criterion("llm_judge", {**kwargs, "retries": 1, **extra})


def test_yes_and_no_answers(base_url: str) -> None:
    yes = grade("Thank you kindly.", [_judge(base_url, "yes")])
    no = grade("Go away.", [_judge(base_url, "no")])
    assert (yes.status, yes.score) == ("correct", 1.0)
    assert (no.status, no.score) == ("wrong", 0.0)
    call = _Judge.calls[0]
    assert call["path"] == "/v1/chat/completions"
    assert "Is the response polite?" in call["body"]["messages"][-1]["content"]
    assert "Thank you kindly." in call["body"]["messages"][-1]["content"]


def test_answers_are_cached_by_model_question_response(base_url: str) -> None:
    for _ in range(3):
        assert grade("Thanks.", [_judge(base_url, "yes")]).score == 1.0
    assert len(_Judge.calls) == 1
    grade("Thanks again.", [_judge(base_url, "yes")])
    assert len(_Judge.calls) == 2


def test_mixed_with_ifeval_criteria(base_url: str) -> None:
    v = grade("Thanks, friend.", [_judge(base_url, "yes"), Criterion("punctuation:no_comma")])
    assert v.score == 0.5 and [r["passed"] for r in v.details["criteria"]] == [True, False]


@pytest.mark.parametrize("model", ["slow", "error500", "garbage"])
def test_failures_after_retries_are_infra_errors_never_zero(base_url: str, model: str) -> None:
    t0 = time.perf_counter()
    v = grade("Hello.", [_judge(base_url, model), Criterion("punctuation:no_comma")])
    assert v.status == "infra_error" and v.score is None
    row = v.details["criteria"][0]
    assert row["score"] is None and "llm_judge" in v.details["error"] and "2 attempt(s)" in row["error"]
    assert v.details["criteria"][1]["score"] == 1.0
    assert sum(c["body"]["model"] == model for c in _Judge.calls) == 2  # 1 try + 1 retry
    assert time.perf_counter() - t0 < 5  # the 0.5 s timeout cut the slow answers short


def test_a_retry_recovers_from_one_error(base_url: str) -> None:
    v = grade("Hello.", [_judge(base_url, "flaky")])
    assert (v.status, v.score) == ("correct", 1.0)
    assert len(_Judge.calls) == 2


def test_api_key_is_read_from_the_named_variable(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-loopback")
    grade("Hi.", [_judge(base_url, "yes", api_key_env="TEST_JUDGE_KEY")])
    assert _Judge.calls[-1]["auth"] == "Bearer sk-loopback"
    monkeypatch.delenv("TEST_JUDGE_KEY")
    v = grade("Hi again.", [_judge(base_url, "yes", api_key_env="TEST_JUDGE_KEY")])
    assert v.status == "infra_error" and "TEST_JUDGE_KEY" in v.details["error"]


def test_unreachable_endpoint_is_an_infra_error() -> None:
    _rubric_judge.clear_cache()
    v = grade("Hi.", [_judge("http://127.0.0.1:9/v1", "yes")])  # discard port: nothing listens
    assert v.status == "infra_error" and v.score is None


def test_judge_kwargs_are_validated() -> None:
    with pytest.raises(ValueError, match=r"'llm_judge': kwarg 'timeout'"):
        Criterion("llm_judge", {"question": "q", "model": "m", "base_url": "http://x", "timeout": 0})
    with pytest.raises(ValueError, match=r"'llm_judge': unknown kwarg 'temperature'"):
        Criterion("llm_judge", {"question": "q", "model": "m", "base_url": "http://x", "temperature": 0})
