"""The example and benchmark scripts run end to end with tiny budgets and write what they promise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
