"""Evaluate a model behind an OpenAI-compatible chat endpoint (a vLLM server, a hosted API) on a creditgym env.

    python examples/eval_openai_server.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-0.5B-Instruct
    python examples/eval_openai_server.py --serve                 # no server at hand: serve creditgym/tiny here

Each episode's prompt goes to ``POST {base-url}/chat/completions`` as chat messages (greedy, ``max_tokens`` = the
env's response budget); the reply's text is tokenized into the env, which grades it. A failed request is retried
twice; an endpoint that keeps failing stops the run with the error. The report goes to ``--out`` (report.json,
report.md).
``$OPENAI_API_KEY`` is sent as the bearer token when set. The same from the shell:
``creditgym eval --agent openai:MODEL --base-url URL --episodes 20 --out DIR``; for the multi-turn SWE tasks add
``--env creditgym/SWEBench-v0`` (one episode per task instance, in Docker sandboxes).

``--serve`` starts a small OpenAI-compatible server on 127.0.0.1 (a free port), in a thread, for ``--model`` loaded
from a local folder or the bundled ``creditgym/tiny``: ``/v1/chat/completions`` (messages, model, max_tokens,
temperature; it answers choices[0].message.content, finish_reason and usage) and ``/v1/models``. It shows the
protocol and lets this run anywhere; to serve a real model, use ``vllm serve``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from creditgym.agents.eval.evaluate import evaluate, write_report
from creditgym.agents.eval.remote import AgentError, OpenAIAgent
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.envs import UnknownEnvError, resolve_env_id
from creditgym.envs.tokenizer import render_chat

DEFAULT_MAX_TOKENS = 256  # a request that names no max_tokens


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400 and OpenAI's error body."""


def parse_request(body: dict[str, Any]) -> tuple[list[dict[str, str]], int, float]:
    """The messages, max_tokens and temperature of a chat completion request; `BadRequest` names what is wrong."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"'messages' must be a non-empty list of {{role, content}}, got {messages!r:.80}")
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise BadRequest(f"each message needs a string 'role' and 'content', got {m!r:.80}")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens", DEFAULT_MAX_TOKENS))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"'max_tokens' must be an integer >= 1, got {max_tokens!r}")
    temperature = body.get("temperature", 1.0)  # OpenAI's default
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not 0 <= temperature <= 2
    ):
        raise BadRequest(f"'temperature' must be a number in [0, 2], got {temperature!r}")
    if body.get("stream") or body.get("n", 1) != 1:
        raise BadRequest(
            "this server answers one choice per request, without streaming ('n': 1, 'stream': false)"
        )
    return [{"role": m["role"], "content": m["content"]} for m in messages], max_tokens, float(temperature)


def complete(policy: Policy, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """A chat completion of the request ``body`` by ``policy`` (temperature 0 = greedy), OpenAI's reply format."""
    messages, max_tokens, temperature = parse_request(body)
    prompt = render_chat(policy.tokenizer, messages)  # the chat template, as the env renders its prompts
    out = policy.sample([prompt], max_new_tokens=max_tokens, temperature=temperature)
    tokens, stopped = out.tokens[0], out.stopped[0]
    text = policy.tokenizer.decode(tokens[:-1] if stopped else tokens, skip_special_tokens=True)
    return {
        "id": f"chatcmpl-{time.time_ns():x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop" if stopped else "length",
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(tokens),
            "total_tokens": len(prompt) + len(tokens),
        },
    }


class ChatServer(ThreadingHTTPServer):
    """An OpenAI-compatible server for one local policy; it counts what it answered (``served``)."""

    def __init__(self, policy: Policy, name: str, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)  # loopback only
        self.policy, self.name = policy, name
        self.lock = threading.Lock()  # one model: one generation at a time
        self.served: Counter[str] = Counter()  # requests, prompt/completion tokens, finish reasons

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._reply(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            return self._error(404, f"no route GET {self.path}; try GET /v1/models", "not_found_error")
        model = {"id": self.server.name, "object": "model", "created": 0, "owned_by": "creditgym"}
        self._reply(200, {"object": "list", "data": [model]})

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._error(404, f"no route POST {self.path}; try /v1/chat/completions", "not_found_error")
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if not isinstance(body, dict):
                raise BadRequest(f"the body must be a JSON object, got {type(body).__name__}")
            if body.get("model") != self.server.name:
                return self._error(
                    404, f"model {body.get('model')!r} is not served; this serves {self.server.name!r}"
                )
            with self.server.lock:
                reply = complete(self.server.policy, self.server.name, body)
        except (BadRequest, json.JSONDecodeError) as e:
            return self._error(400, str(e))
        usage, finish = reply["usage"], reply["choices"][0]["finish_reason"]
        self.server.served.update(
            requests=1, prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"]
        )
        self.server.served[f"finish_{finish}"] += 1
        self._reply(200, reply)


@contextmanager
def serving(policy: Policy, name: str) -> Iterator[ChatServer]:
    """A `ChatServer` answering as ``name`` with ``policy``, running in a thread until the block ends."""
    server = ChatServer(policy, name)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--base-url", default=None, help="the endpoint (default: $OPENAI_BASE_URL or :8000/v1)"
    )
    parser.add_argument("--model", default="creditgym/tiny", help="the model name the endpoint serves")
    parser.add_argument(
        "--serve", action="store_true", help="serve --model on 127.0.0.1 here, and evaluate it"
    )
    parser.add_argument("--env", default="creditgym/Math-v0", help="a one-turn env id (Math-v0, Rubric-v0)")
    parser.add_argument("--episodes", type=int, default=20, help="episodes of the env's test split")
    parser.add_argument("--out", default="runs/eval-openai", help="folder for report.json and report.md")
    args = parser.parse_args()
    if args.serve and args.base_url:
        parser.error("--serve starts its own endpoint: leave out --base-url")
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")
    try:
        env_id = resolve_env_id(args.env)
    except UnknownEnvError as e:
        parser.error(str(e))
    if env_id == "creditgym/SWEBench-v0":
        parser.error(
            "this example evaluates one-turn envs; for the SWE tasks run `creditgym eval --env "
            "creditgym/SWEBench-v0 --agent openai:MODEL --base-url URL --out DIR`"
        )

    def run(base_url: str | None) -> None:
        agent = OpenAIAgent(args.model, base_url=base_url)
        print(f"evaluating {agent.name} at {agent.base_url} on {env_id} ({args.episodes} episodes)")
        try:
            report = evaluate(env_id, agent, args.episodes, env_kwargs={"split": "test"})
        except AgentError as e:
            raise SystemExit(f"the endpoint gave no answer: {e}") from None
        print(
            f"{report.score_name} {report.accuracy:.3f} over {report.episodes} episodes (infra errors: {report.infra_errors};"
            f" statuses: {report.statuses}; {report.seconds:.1f} s)"
        )
        print(f"report: {write_report(report, args.out)} (and report.md)")

    if not args.serve:
        return run(args.base_url)
    try:
        policy = load_policy(args.model)  # a local folder or creditgym/tiny; nothing is downloaded
    except FileNotFoundError as e:
        parser.error(str(e))
    with serving(policy, args.model) as server:
        print(f"serving {args.model} at {server.base_url}")
        run(server.base_url)
        s = server.served
        print(
            f"the server answered {s['requests']} chat completions ({s['prompt_tokens']} prompt tokens, "
            f"{s['completion_tokens']} completion tokens; finish_reason stop {s['finish_stop']}, "
            f"length {s['finish_length']})"
        )


if __name__ == "__main__":
    main()
