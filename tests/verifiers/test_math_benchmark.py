"""The math-verifier benchmark runs as a script with a tiny budget and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_verify_math_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "verify_math.json"
    script = ROOT / "examples" / "benchmarks" / "verify_math.py"
    cmd = [sys.executable, str(script), "--n", "40", "--workers", "2", "--timeout", "2.0", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "throughput ratio" in done.stdout
    result = json.loads(out.read_text())
    assert result["n"] == 40 and result["workers"] == 2
    for side in ("math_verify_serial", "verify_many"):
        assert result[side]["items_per_s"] > 0 and result[side]["p99_ms"] >= result[side]["p50_ms"] > 0
    assert result["verify_many"]["statuses"]["infra_error"] == 0
    assert result["p99_within_deadline"] is True
