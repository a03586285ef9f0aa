"""studies/scripts/real_model_bands.py: a model's step-0 score per task family, measured through the envs, and the
committed table is what its JSON says and what the docs quote."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "studies" / "scripts" / "real_model_bands.py"
TINY = ROOT / "creditgym" / "assets" / "tiny"
COMMITTED = ROOT / "studies" / "results" / "real-model" / "bands"

spec = importlib.util.spec_from_file_location("real_model_bands", SCRIPT)
assert spec and spec.loader
bands = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bands  # dataclasses look their module up there
spec.loader.exec_module(bands)


def _run(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--model", str(TINY), "--out", str(out), "--threads", "1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_measures_each_family_and_merges_runs(tmp_path: Path) -> None:
    out = tmp_path / "bands"
    common = ("--prompts", "3", "--samples", "2", "--max-new-tokens", "12")
    assert _run(out, "--families", "math-7", *common).returncode == 0
    done = _run(out, "--families", "math-1", "--temperature", "0", *common)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.with_suffix(".json").read_text())
    rows = {(r["family"], r["temperature"]): r for r in result["rows"]}
    assert list(rows) == [("math-1", 0.0), ("math-7", 1.0)]  # the first run's row kept, in family order
    greedy, sampled = rows[("math-1", 0.0)], rows[("math-7", 1.0)]
    assert greedy["samples"] == 1 and sampled["samples"] == 2 and sampled["env_kwargs"] == {"difficulty": 7}
    for row in rows.values():
        assert 0 <= row["mean"] <= 1 and row["prompts"] == 3 and row["max_new_tokens"] == 12
        assert row["mean_response_tokens"] <= 12 and "--families" in row["command"]
    assert greedy["mixed_share"] is None and 0 <= sampled["mixed_share"] <= 1
    table = out.with_suffix(".md").read_text()
    assert "| math-1 |" in table and "groups with mixed rewards" in table


def test_rows_measured_before_the_mixed_column_leave_it_blank() -> None:
    committed = json.loads(COMMITTED.with_suffix(".json").read_text())["rows"][:2]
    rows = [{**row, "mixed_share": share} for row, share in zip(committed, (None, 0.25), strict=True)]
    lines = bands.table(rows, (0.2, 0.7)).splitlines()
    assert "groups with mixed rewards" in lines[0] and "| 25% |" in lines[3] and "|  |" in lines[2]


def test_bad_input_is_named(tmp_path: Path) -> None:
    done = _run(tmp_path / "x", "--prompts", "1")
    assert done.returncode != 0 and "--prompts must be >= 2" in done.stderr


def test_committed_table_is_its_json_and_is_in_the_docs() -> None:
    result = json.loads(COMMITTED.with_suffix(".json").read_text())
    rendered = bands.table(result["rows"], tuple(result["band"]))
    assert rendered in COMMITTED.with_suffix(".md").read_text()
    assert rendered in (ROOT / "docs" / "envs" / "math.md").read_text()
