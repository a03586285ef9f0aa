"""studies/scripts/cheap_credit.py: the committed table has every required field for every registered module the
testbed can run, its intervals hold their point values, and the docs page is what the script renders from it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from creditgym.credit import available

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "studies" / "scripts" / "cheap_credit.py"

spec = importlib.util.spec_from_file_location("cheap_credit", SCRIPT)
assert spec and spec.loader
cheap = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = cheap
spec.loader.exec_module(cheap)

DATA = json.loads((cheap.OUT / "table.json").read_text())


def test_every_row_has_the_required_fields() -> None:
    for row in DATA["rows"]:
        assert tuple(row) == cheap.FIELDS
        assert row["truth"] == "exact" and row["task"] == cheap.ENV and row["model"] == cheap.MODEL
        assert -1 <= row["ci_low"] <= row["spearman"] <= row["ci_high"] <= 1
        assert row["step_time_vs_grpo"] > 0
    grpo = next(r for r in DATA["rows"] if r["module"] == "grpo")
    assert grpo["step_time_vs_grpo"] == 1.0


def test_every_registered_module_is_scored_or_says_why_not() -> None:
    scored = {r["module"] for r in DATA["rows"]}
    assert scored | set(DATA["skipped"]) == set(available())
    assert {"forking", "ktae", "prime", "vine"} <= scored


def test_the_page_is_what_the_script_renders() -> None:
    assert cheap.PAGE.read_text() == cheap.render(DATA)


def test_the_prompt_clustered_interval_widens_when_prompts_disagree() -> None:
    """Two prompts of two responses each: agreeing prompts give a point interval, disagreeing ones a wide one."""
    prompt_of = np.array([0, 0, 1, 1])
    same = cheap.clustered_interval(np.array([0.5, 0.5, 0.5, 0.5]), prompt_of, n_boot=200, seed=0)
    apart = cheap.clustered_interval(np.array([1.0, 1.0, -1.0, -1.0]), prompt_of, n_boot=200, seed=0)
    assert same == (0.5, 0.5)
    assert apart[0] == -1.0 and apart[1] == 1.0
