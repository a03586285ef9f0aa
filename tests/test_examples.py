"""The example and benchmark scripts run end to end with tiny budgets and write what they promise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_credit_overhead_benchmark(tmp_path: Path) -> None:
    out = _run(
        "examples/benchmarks/credit_overhead.py",
        "--steps",
        "1",
        "--modules",
        "grpo,pact",
        "--json",
        str(tmp_path / "c.json"),
    )
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["grpo"]["ratio_to_grpo"] == 1.0 and data["pact"]["signals_s"] > 0 and "pact" in out
