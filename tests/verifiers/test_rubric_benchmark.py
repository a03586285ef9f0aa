"""The rubric-grading benchmark runs as a script with a tiny budget and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rubric_grade_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "rubric_grade.json"
    script = ROOT / "examples" / "benchmarks" / "rubric_grade.py"
    cmd = [sys.executable, str(script), "--tasks", "20", "--repeats", "1", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "responses graded per second" in done.stdout and "| oracle |" in done.stdout
    result = json.loads(out.read_text())
    assert result["responses"] == 100 and result["responses_per_s"] > 0
    assert result["by_kind"]["oracle"]["mean_score"] == 1.0
    assert result["by_kind"]["empty"]["mean_score"] < 1.0
