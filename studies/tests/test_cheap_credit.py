"""studies/scripts/cheap_credit.py: the committed table has the required fields for every (module, model, task,
truth), every registered module the tasks can run is in it, its intervals hold their point values, the exact rows
come from a truth exact to the bound the probe recorded, and the docs page is what the script renders."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

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
    assert DATA["rows"]
    for row in DATA["rows"]:
        assert tuple(row) == (*cheap.FIELDS, *cheap.EXTRA)
        assert row["truth"] in ("mc", "exact") and row["model"] in cheap.MODELS and row["task"] in cheap.TASKS
        if row["spearman"] is not None and row["ci_low"] is not None:
            assert -1 <= row["ci_low"] <= row["spearman"] <= row["ci_high"] <= 1
        ratio = row["step_time_vs_grpo"]
        assert ratio is None or ratio > 0
    for row in DATA["rows"]:
        if row["module"] == "grpo":
            timed = f"{cheap.MODELS[row['model']]}/{row['task']}" in DATA["step_times"]
            assert row["spearman"] == 0.0  # flat within a response
            assert row["step_time_vs_grpo"] == (1.0 if timed else None)


def test_every_registered_module_is_in_every_table_it_can_run() -> None:
    for model in cheap.MODELS:
        for task in cheap.TASKS:
            for truth in ("mc", "exact") if task == "planted" else ("mc",):
                names = {
                    r["module"] if r["module"].startswith("null:") else r["module"].split(":")[0]
                    for r in DATA["rows"]
                    if (r["model"], r["task"], r["truth"]) == (model, task, truth)
                }
                runnable = set(available()) - ({"cort"} if task == "planted" else set())
                assert runnable <= names, (model, task, truth, runnable - names)
                assert {"null:position", "null:last", "null:uniform"} <= names


def test_the_exact_rows_hold_the_sampled_astar_and_a_tight_truth() -> None:
    for model, short in cheap.MODELS.items():
        assert DATA["batches"][f"{short}/planted"]["error_bound"] < 1e-3
        astar = [r for r in DATA["rows"] if r["model"] == model and r["module"] == "A* (sampled)"]
        assert [r["truth"] for r in astar] == ["exact"]


def test_the_page_is_what_the_script_renders() -> None:
    assert cheap.PAGE.read_text() == cheap.render(DATA)


def test_step_times_time_each_module_on_one_batch_beside_grpo() -> None:
    """A module on a small Planted batch of the bundled model, two timed steps: every timed step of the module (and
    grpo's) saw the same batch, and the ratio is a ratio of positive times."""
    small = {"prompts_per_step": 2, "group_size": 2}
    times = cheap.step_times("creditgym/tiny", "planted", repeats=2, labels=["grpo", "forking"], sizes=small)
    assert set(times) == {"grpo", "forking"}
    for name in ("forking",):
        t = times[name]
        assert t["same_batch"] and t["repeats"] == 2
        assert t["step_s"] > 0 and t["grpo_step_s"] > 0 and t["ratio"] == t["step_s"] / t["grpo_step_s"]
    assert times["grpo"]["same_batch"]
