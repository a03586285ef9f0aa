"""Multi-turn agentic evaluation: ``creditgym eval --env creditgym/SWEBench-v0`` with real sandboxes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from creditgym.agents.eval.evaluate import evaluate_tasks
from creditgym.agents.eval.remote import OpenAIAgent
from creditgym.envs.swe_tools import apply_patch_command, bash_action

pytestmark = pytest.mark.docker
ENV = "creditgym/SWEBench-v0"


@pytest.fixture(scope="module")
def tasks(docker_client, base_image):
    from creditgym.envs.swe_tasks import load_tasks
    from creditgym.verifiers.swe.images import ensure_image

    tasks = load_tasks("bundled")
    for task in tasks:
        ensure_image(task)
    return tasks


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "creditgym.cli", "eval", "--env", ENV, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_oracle_resolves_every_bundled_task_and_empty_none(tasks, tmp_path: Path) -> None:
    for agent, expected in (("oracle", len(tasks)), ("empty", 0)):
        out = tmp_path / agent
        proc = _cli("--agent", agent, "--workers", "2", "--out", str(out))
        log, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, log
        report = json.loads((out / "report.json").read_text())
        assert (report["total"], report["resolved"], report["infra_errors"]) == (len(tasks), expected, 0), log
        assert report["unresolved"] == len(tasks) - expected
        for inst in report["instances"]:
            assert (
                inst["turns"] == (2 if agent == "oracle" else 1)
                and inst["tokens"] > inst["policy_tokens"] > 0
            )
            steps = [
                json.loads(line) for line in (out / "trajectories" / f"{inst['instance_id']}.jsonl").open()
            ]
            assert steps[-1]["reward"] == (1.0 if agent == "oracle" else 0.0)
        assert "| total | resolved |" in (out / "report.md").read_text()


def test_sigterm_mid_run_leaves_no_container(tasks, docker_client, tmp_path: Path) -> None:
    from creditgym.verifiers.swe.sandbox import LABEL, OWNER_LABEL

    proc = _cli("--agent", "oracle", "--workers", "2", "--out", str(tmp_path / "r"))
    owner = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        mine = [
            c
            for c in docker_client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
            if c.labels.get(OWNER_LABEL, "").endswith(f":{proc.pid}")
        ]
        if mine:
            owner = mine[0].labels[OWNER_LABEL]
            break
        time.sleep(0.05)
    assert owner is not None, "the eval run never started a container"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    left = docker_client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={owner}"})
    assert left == [], [c.name for c in left]


class _ScriptedEndpoint(BaseHTTPRequestHandler):
    """Speaks OpenAI chat completions: applies the gold patch of the task named in the prompt, then submits."""

    gold: dict[str, str] = {}  # noqa: RUF012
    fail = False

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.fail:
            self.send_response(500)
            self.end_headers()
            return
        messages = body["messages"]
        if any(m["role"] == "assistant" for m in messages):
            text = "The patch applied.\nACTION: submit"
        else:
            problem = messages[1]["content"]
            patch = next(p for key, p in self.gold.items() if key in problem)
            text = "I will apply my fix.\n" + bash_action(apply_patch_command(patch))
        reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def endpoint(tasks):
    handler = type(
        "Handler", (_ScriptedEndpoint,), {"gold": {t.problem_statement.strip(): t.gold_patch for t in tasks}}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_openai_agent_over_a_loopback_endpoint(tasks, endpoint, tmp_path: Path) -> None:
    handler, url = endpoint
    report = evaluate_tasks(
        ENV, OpenAIAgent("scripted", base_url=url), tasks[:2], out_dir=tmp_path, workers=2
    )
    assert (report["total"], report["resolved"], report["infra_errors"]) == (2, 2, 0)

    handler.fail = True  # the endpoint breaks: counted apart, retried once, never "unresolved"
    agent = OpenAIAgent("scripted", base_url=url, retries=0, timeout=5)
    report = evaluate_tasks(ENV, agent, tasks[:1])
    (inst,) = report["instances"]
    assert (report["infra_errors"], report["unresolved"], report["resolve_rate"]) == (1, 0, None)
    assert inst["attempts"] == 2 and "HTTP 500" in inst["infra_error"] and inst["reward"] is None


def test_unknown_task_path_is_a_clear_error(tmp_path: Path) -> None:
    proc = _cli("--agent", "empty", "--tasks", str(tmp_path / "nope.jsonl"), env=dict(os.environ))
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "nope.jsonl" in log and "Traceback" not in log


# -- through Ray: `--ray local` starts a cluster in the eval process; its nodes get the `docker` resource -----------


def _ray_or_skip() -> None:
    try:
        import ray  # noqa: F401
    except ImportError as e:  # `make test` installs the extra; under CI=true its absence is a failure
        if os.environ.get("CI", "").lower() in ("true", "1"):
            raise
        pytest.skip(f"the ray extra is not installed ({e}): pip install 'creditgym[ray]'")


def _without_times(report: dict) -> dict:
    return {
        **{k: v for k, v in report.items() if k != "seconds"},
        "instances": [{k: v for k, v in inst.items() if k != "seconds"} for inst in report["instances"]],
    }


def test_eval_through_ray_gives_the_same_report(tasks, tmp_path: Path) -> None:
    _ray_or_skip()
    reports = {}
    for mode, extra in (("threads", ()), ("ray", ("--ray", "local"))):
        out = tmp_path / mode
        proc = _cli("--agent", "oracle", "--workers", "2", "--out", str(out), *extra)
        log, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, log
        reports[mode] = json.loads((out / "report.json").read_text())
    assert _without_times(reports["ray"]) == _without_times(reports["threads"])
    assert reports["ray"]["resolved"] == len(tasks) and reports["ray"]["infra_errors"] == 0
    for inst in reports["ray"]["instances"]:
        name = f"{inst['instance_id']}.jsonl"
        ray_steps, steps = (_steps(tmp_path / mode / "trajectories" / name) for mode in ("ray", "threads"))
        assert ray_steps == steps and len(steps) == 3  # apply the patch, submit, the verdict


def _steps(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.open()]


def test_eval_through_ray_without_a_docker_node_is_a_clear_error(tmp_path: Path) -> None:
    _ray_or_skip()
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}  # no engine here: no docker node
    proc = _cli("--agent", "oracle", "--ray", "local", "--out", str(tmp_path / "r"), env=env)
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "Traceback" not in log, log
    assert "no node of the Ray cluster declares the 'docker' resource" in log
    assert not (tmp_path / "r" / "report.json").exists()
