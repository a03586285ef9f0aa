"""The math-verifier benchmark runs as a script with a tiny budget, beside math-verify, and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "benchmarks"))

from verify_math import build_mix  # noqa: E402


def test_the_mix_has_the_requested_parts_and_every_kind() -> None:
    pairs = build_mix(350, 150, seed=0)
    assert len(pairs) == 500 and pairs == build_mix(350, 150, seed=0)
    kinds = {p.kind for p in pairs}
    assert {"trig_surd", "euler", "interval_inequality", "hedge", "fraction"} <= kinds
    assert {"tower", "huge_power", "huge_factorial", "nested_fraction", "boxes_300", "junk", "unbalanced",
            "digits_2000", "radical_tower"} <= kinds  # fmt: skip
    assert 0.3 < sum(p.label for p in pairs) / len(pairs) < 0.8


def test_verify_math_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "verify_math.json"
    script = ROOT / "examples" / "benchmarks" / "verify_math.py"
    cmd = [sys.executable, str(script), "--ordinary", "30", "--adversarial", "10", "--workers", "2",
           "--timeout", "2.0", "--json", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "answers/s" in done.stdout and "agreement with the intended label" in done.stdout
    result = json.loads(out.read_text())
    assert result["n"] == 40 and result["workers"] == 2
    for side in ("math_verify", "creditgym"):
        assert result[side]["answers_per_s"] > 0 and result[side]["p99_ms"] >= result[side]["p50_ms"] > 0
        assert 0 <= result[side]["agreement"] <= 40
    assert result["statuses"].get("infra_error", 0) == 0
    assert result["at_our_deadline_but_decided_by_math_verify"] == []
