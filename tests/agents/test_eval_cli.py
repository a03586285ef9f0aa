"""`creditgym eval` with the scripted agents: the oracle is always right, random tokens never are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _eval(agent: str, out: Path, episodes: int = 8) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "creditgym.cli",
        "eval",
        "--env",
        "creditgym/Math-v0",
        "--agent",
        agent,
        "--episodes",
        str(episodes),
        "--out",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"{agent}" in res.stdout and "accuracy" in res.stdout
    return json.loads((out / "report.json").read_text())


def test_oracle_scores_one_and_random_scores_zero(tmp_path: Path) -> None:
    oracle = _eval("oracle", tmp_path / "oracle")
    assert oracle["accuracy"] == 1.0 and oracle["infra_errors"] == 0 and oracle["statuses"] == {"correct": 8}
    rand = _eval("random", tmp_path / "random")
    assert rand["accuracy"] == 0.0 and rand["episodes"] == 8
    assert all(r["truncated"] or r["terminated"] for r in rand["records"])
    assert (tmp_path / "random" / "report.md").read_text().startswith("# random on creditgym/Math-v0")


def test_unknown_env_and_agent_are_named() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "creditgym.cli", "eval", "--env", "creditgym/Nope-v0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "registered ids" in res.stderr and "creditgym/Math-v0" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "creditgym.cli", "eval", "--agent", "wizard"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "known agents" in res.stderr and "oracle" in res.stderr
