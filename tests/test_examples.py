"""The example and benchmark scripts run end to end with tiny budgets and write what they promise."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from creditgym.envs.rubric_tasks import PRESETS

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    res = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def test_env_step_benchmark(tmp_path: Path) -> None:
    out = _run(
        "examples/benchmarks/env_step.py",
        "--tokens",
        "300",
        "--verify-n",
        "20",
        "--json",
        str(tmp_path / "e.json"),
    )
    assert "us/token" in out and "ms/chunk" in out and "verify_many" in out
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["step"]["300"]["us_per_token"] > 0 and data["chunks"]["ms_per_1000_token_chunk"] > 0


def test_train_step_benchmark(tmp_path: Path) -> None:
    out = _run("examples/benchmarks/train_step.py", "--steps", "1", "--json", str(tmp_path / "t.json"))
    data = json.loads((tmp_path / "t.json").read_text())
    phases = ("generate_s", "env_verify_s", "signals_s", "credit_s", "backward_s")
    assert "rollout tokens/s" in out and sum(data[p] for p in phases) <= data["step_s"] * 1.01
    assert data["tokens_per_s"] > 0


def test_real_model_benchmark_draws_the_same_tokens_as_generate(tmp_path: Path) -> None:
    """On the bundled model (the SmolLM2 run is the documented one): rollouts and the probe's continuations, each
    against plain ``generate``, with the same seeds drawing the same tokens on both sides."""
    out = _run(
        "examples/benchmarks/real_model.py",
        "--model",
        "creditgym/tiny",
        "--rounds",
        "1",
        "--probe-k",
        "2",
        "--skip-steps",
        "--json",
        str(tmp_path / "r.json"),
    )
    data = json.loads((tmp_path / "r.json").read_text())
    for part in ("rollouts", "continuations"):
        (row,) = data[part]["rounds"]
        assert row["same_tokens"] and row["creditgym"]["tokens"] == row["generate"]["tokens"] > 0
    assert (
        data["continuations"]["batch"] == 2 * 2 * data["rollouts"]["batch"]
    )  # two cuts x K = 2 per response
    ratio = data["ratios"]["continuation_speed_cpu"]["mean"]  # a ratio of two positive rates, on any machine
    assert "continuation tok/s (cpu) vs generate" in out and math.isfinite(ratio) and ratio > 0


def test_real_model_benchmark_steps_beside_trl_and_times_the_optimizer(tmp_path: Path) -> None:
    """On the bundled model: one creditgym step and one TRL step on the same tasks, each reply saying how many
    rows had no advantage, and AdamW's fused step against its for-loop one."""
    out = _run(
        "examples/benchmarks/real_model.py",
        *("--model", "creditgym/tiny", "--rounds", "1", "--skip-rollouts", "--skip-continuations"),
        *("--json", str(tmp_path / "s.json")),
    )
    data = json.loads((tmp_path / "s.json").read_text())
    (row,) = data["steps"]["rounds"]
    assert set(row) == {"creditgym", "trl"} and row["trl"]["prompt_tokens_identical"]
    assert 0 <= row["creditgym"]["zero_advantage_rows"] <= 1 and row["creditgym"]["response_tokens"] > 0
    assert set(data["steps"]["max_rss_mb"]) == {"creditgym", "trl"}
    (optim,) = data["optimizer"]["rounds"]
    assert set(optim) == {"fused", "for-loop"} and data["optimizer"]["parameters"] > 0
    ratio = data["ratios"]["step_time_cpu"]["mean"]  # a ratio of two positive times, on any machine
    assert "GRPO step s (cpu) vs TRL" in out and "AdamW step" in out and math.isfinite(ratio) and ratio > 0


def test_memory_benchmark_reads_every_phase_of_every_step_in_both_allocator_settings(tmp_path: Path) -> None:
    out = _run(
        "examples/benchmarks/memory.py",
        *("--model", "creditgym/tiny", "--prompts", "2", "--group", "2", "--steps", "2"),
        *("--json", str(tmp_path / "m.json")),
    )
    runs = json.loads((tmp_path / "m.json").read_text())["runs"]
    assert list(runs) == ["glibc as it comes", "MALLOC_MMAP_THRESHOLD_=131072"]
    for label, run in runs.items():
        assert f"{label}: after loading" in out and len(run["steps"]) == 2
        for phases in run["steps"]:
            assert phases.pop("cpu_s") > 0
            assert list(phases) == ["rollouts", "forward", "backward", "optimizer step"]
            # a phase's peak is at least what is resident at its end, and a step holds at least the loaded model
            assert all(p["peak_mb"] >= p["rss_mb"] >= run["init"]["rss_mb"] * 0.9 for p in phases.values())


def test_gpu_check_explains_itself_without_a_gpu() -> None:
    import torch

    res = subprocess.run(
        [sys.executable, "examples/gpu_check.py"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    if torch.cuda.is_available():
        assert res.returncode == 0, res.stderr[-3000:]
    else:
        assert res.returncode == 2 and "CUDA is not available" in res.stdout


def test_credit_overhead_benchmark_times_every_module_on_the_same_batches(tmp_path: Path) -> None:
    """Every module (variants too, each on its home task) trains on the recorded batches, identical to the token."""
    modules = "grpo,rloo,pact,cort,cort:normalize=false"
    out = _run(
        "examples/benchmarks/credit_overhead.py",
        *("--modules", modules, "--prompts", "1", "--group", "2", "--max-new-tokens", "12"),
        *("--steps", "2", "--warmup", "1", "--repeats", "2", "--json", str(tmp_path / "c.json")),
    )
    data = json.loads((tmp_path / "c.json").read_text())
    chains, hard = data["tasks"]["chains"], data["tasks"]["hard"]
    assert list(chains["modules"]) == ["grpo", "rloo", "pact"]
    assert list(hard["modules"]) == ["grpo", "cort", "cort:normalize=false"]
    for task in (chains, hard):
        assert len(task["batches"]) == 2 and task["batches"][0]["digest"] != task["batches"][1]["digest"]
        for result in task["modules"].values():
            assert result["batches"] == task["batches"] * 2  # the same token counts and digests, every step
            assert result["ms_per_token"] > 0 and len(result["steps_train_s"]) == 4
        assert task["modules"]["grpo"]["ratio_to_grpo"] == 1.0
    assert chains["modules"]["rloo"]["providers"] == [] and "values" in chains["modules"]["pact"]["providers"]
    for task in (chains, hard):
        for result in task["modules"].values():
            assert 0 <= result["signals_share"] < 1 and 0 <= result["credit_share"] < 1
    assert hard["modules"]["cort:normalize=false"]["kwargs"] == {"normalize": False}
    assert "cort:normalize=false" in out and "train / grpo" in out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--modules", "grpo,nosuch"), "unknown credit module 'nosuch'"),
        (("--modules", "cort:nosuch=1"), "has no field 'nosuch'"),
        (("--train-kw", "epochs=0"), "TrainConfig.epochs must be >= 1"),
    ],
)
def test_credit_overhead_benchmark_names_bad_input(flags: tuple[str, ...], message: str) -> None:
    res = subprocess.run(
        [sys.executable, "examples/benchmarks/credit_overhead.py", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 2 and message in res.stderr


def test_train_rubric_cort_trains_and_reads_cort_metrics(tmp_path: Path) -> None:
    out = tmp_path / "run"
    printed = _run("examples/train_rubric_cort.py", "--steps", "2", "--eval-episodes", "4", "--out", str(out))
    config = json.loads((out / "config.json").read_text())
    assert (config["env_id"], config["credit"], config["env_kwargs"]) == (
        "creditgym/Rubric-v0",
        "cort",
        {"preset": "default"},
    )
    assert (
        config["max_new_tokens"] == PRESETS["default"].max_new_tokens
    )  # the preset's budget, not the model's
    assert config["steps"] == 2 and config["eval_episodes"] == 4
    for name in ("metrics.jsonl", "summary.json", "credit.html", "credit.png", "curves.png", "final"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    assert 0 <= before <= 1 and 0 <= after <= 1
    assert f"held-out score: before {before:.3f} -> after {after:.3f}" in printed
    assert f"credit heatmap: {out / 'credit.html'}" in printed
    # the printed table is CoRT's logged metrics, one row per step, each within CoRT's bounds
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    header = printed.index("span tokens\n")
    rows = [line.split() for line in printed[header:].splitlines()[1:3]]
    for row, m in zip(rows, steps, strict=True):
        assert float(row[0]) == m["step"] and float(row[2]) == pytest.approx(m["credit/cort/alpha"], abs=5e-4)
        assert float(row[7]) == pytest.approx(m["credit/cort/span_mass"], abs=5e-4)
        assert 0.25 <= m["credit/cort/weight_q05"] <= 1 <= m["credit/cort/weight_q95"] <= 4
        assert m["credit/cort/weight_mean"] == pytest.approx(1.0, abs=1e-6)
        assert 0 <= m["credit/cort/span_mass"] <= 1 and 0 < m["credit/cort/span_tokens"] < 1
    assert [m["credit/cort/alpha"] for m in steps] == [0.0, 1.0]  # the ramp: off at step 1, on by step 2 of 2


def test_train_rubric_cort_names_bad_input(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "examples/train_rubric_cort.py", "--steps", "0", "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 2 and "TrainConfig.steps must be >= 1, got 0" in res.stderr


def test_single_turn_env_grades_its_rows_and_trains_on_them(tmp_path: Path) -> None:
    out = tmp_path / "run"
    printed = _run("examples/single_turn_env.py", "--steps", "1", "--out", str(out))
    assert "'The answer is \\\\boxed{42}.': reward 1.0 (correct)" in printed
    assert "'The answer is \\\\boxed{41}.': reward 0.0 (wrong)" in printed
    config = json.loads((out / "config.json").read_text())
    rows = [json.loads(line) for line in Path(config["env_kwargs"]["rows"]).read_text().splitlines()]
    assert config["env_id"] == "creditgym/SingleTurn-v0" and [r["id"] for r in rows] == [
        "sum",
        "twice",
        "less",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert f"held-out {summary['eval_before']:.3f} -> {summary['eval_after']:.3f}" in printed


def test_eval_openai_server_answers_as_the_local_model_would(tmp_path: Path) -> None:
    """Served over HTTP, the bundled model gives the same answers as evaluated in-process (greedy, same tasks)."""
    from creditgym.agents.eval.evaluate import evaluate, make_agent

    printed = _run("examples/eval_openai_server.py", "--serve", "--episodes", "6", "--out", str(tmp_path))
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["env_id"], report["agent"], report["episodes"]) == (
        "creditgym/Math-v0",
        "openai:creditgym/tiny",
        6,
    )
    assert report["infra_errors"] == 0 and (tmp_path / "report.md").exists()
    assert "the server answered 6 chat completions" in printed  # one per episode, no retry
    local = evaluate("creditgym/Math-v0", make_agent("hf:creditgym/tiny"), 6, env_kwargs={"split": "test"})
    assert [r["response"] for r in report["records"]] == [r.response for r in local.records]
    assert [r["reward"] for r in report["records"]] == [r.reward for r in local.records]
    assert f"accuracy {local.accuracy:.3f} over 6 episodes" in printed


def test_the_example_server_speaks_openai_chat_completions() -> None:
    """The reply fields an OpenAI client reads, the budget's finish_reason, and OpenAI's error bodies."""
    import importlib.util
    import urllib.error
    import urllib.request

    from creditgym.agents.train.policy import load_policy
    from creditgym.verifiers.rubric.chat_client import chat_completion

    spec = importlib.util.spec_from_file_location(
        "eval_openai_server", ROOT / "examples/eval_openai_server.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    def call(url: str, body: object = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    ask = {"model": "tiny", "messages": [{"role": "user", "content": "What is 2 + 3?"}], "temperature": 0}
    with example.serving(load_policy(), "tiny") as server:
        url = server.base_url
        assert url.startswith("http://127.0.0.1:")
        status, reply = call(f"{url}/chat/completions", {**ask, "max_tokens": 64})
        assert status == 200 and reply["object"] == "chat.completion" and reply["model"] == "tiny"
        (choice,) = reply["choices"]
        assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
        usage = reply["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
        text = chat_completion(url, {**ask, "max_tokens": 64})  # creditgym's own client reads the same answer
        assert text == choice["message"]["content"] and text.strip()
        status, reply = call(f"{url}/chat/completions", {**ask, "max_tokens": 1})
        assert reply["choices"][0]["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == 1
        model = {"id": "tiny", "object": "model", "created": 0, "owned_by": "creditgym"}
        assert call(f"{url}/models") == (200, {"object": "list", "data": [model]})
        status, err = call(f"{url}/chat/completions", {**ask, "max_tokens": 0})
        assert status == 400 and "'max_tokens' must be an integer >= 1, got 0" in err["error"]["message"]
        status, err = call(f"{url}/chat/completions", {**ask, "model": "gpt-4o"})
        assert status == 404 and "'gpt-4o' is not served" in err["error"]["message"]
        status, err = call(f"{url}/chat/completions", {"model": "tiny", "messages": []})
        assert status == 400 and "'messages' must be a non-empty list" in err["error"]["message"]
        assert server.served["requests"] == 3  # the refused requests are not counted


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("flags", "code", "message"),
    [
        (("--env", "creditgym/SWEBench-v0"), 2, "for the SWE tasks run `creditgym eval --env"),
        (("--serve", "--base-url", "http://127.0.0.1:8000/v1"), 2, "--serve starts its own endpoint"),
        (("--base-url", "http://127.0.0.1:{port}/v1"), 1, "the endpoint gave no answer"),
    ],
)
def test_eval_openai_server_names_bad_input(flags: tuple[str, ...], code: int, message: str) -> None:
    flags = tuple(f.format(port=_free_port()) for f in flags)  # nothing listens there: connection refused
    res = subprocess.run(
        [sys.executable, "examples/eval_openai_server.py", "--episodes", "1", *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == code and message in res.stderr and "Traceback" not in res.stderr


def test_a_credit_module_and_its_signal_provider_of_your_own_train_from_outside_the_package(
    tmp_path: Path,
) -> None:
    """`custom_credit_module.py` (a module needing a new signal) and `custom_signal_provider.py` (its provider),
    copied into a folder that is not the repository: run as a script, and named by the CLI's ``--credit
    module:name``, each trains a step through the public API."""
    for name in ("custom_credit_module.py", "custom_signal_provider.py"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    cli = ("-m", "creditgym.cli", "train", "--credit", "custom_credit_module:undecided", "--steps", "1")
    cli += ("--prompts-per-step", "2", "--group-size", "4", "--eval-episodes", "2", "--out", "cli")
    commands = {
        "script": [sys.executable, "custom_credit_module.py", "--steps", "1", "--out", "script"],
        "cli": [sys.executable, *cli],
    }
    for out, cmd in commands.items():
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        rows = [json.loads(line) for line in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]
        assert (
            0 < rows[1]["credit/undecided/kept_frac"] < 0.5
        )  # about the lowest 20% (ties at the threshold kept)
        assert rows[1]["actor/pg_loss"] is not None and rows[1]["time/signals_s"] > 0
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "creditgym.cli",
            "train",
            "--credit",
            "no_such_module:undecided",
            "--out",
            "x",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert bad.returncode != 0 and "importing module 'no_such_module' failed" in bad.stderr
