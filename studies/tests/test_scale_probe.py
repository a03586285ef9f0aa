"""studies/scripts/scale_probe.py: the probe across model scale is recomputed from the committed probe.json files,
and each figure it quotes is recomputed from the per-response A* and advantages those files keep."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from creditgym.agents.probe.report import bootstrap_figures, response_ingredients

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "studies" / "scripts" / "scale_probe.py"

spec = importlib.util.spec_from_file_location("scale_probe", SCRIPT)
assert spec and spec.loader
scale = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = scale
spec.loader.exec_module(scale)

PROBES = sorted(p.parent.name for p in scale.SCALE.glob("*/probe.json"))


def _same(saved: object, now: object, path: str = "") -> None:
    """Equal structures; floats to 1e-12 relative: the figures are float64 means and percentiles whose last digit
    moves with the summation order a CPU's vector kernels pick (about 1e-16 relative per term)."""
    if isinstance(saved, dict):
        assert isinstance(now, dict) and set(saved) == set(now), path
        for k in saved:
            _same(saved[k], now[k], f"{path}/{k}")
    elif isinstance(saved, list):
        assert isinstance(now, list) and len(saved) == len(now), path
        for i, (a, b) in enumerate(zip(saved, now, strict=True)):
            _same(a, b, f"{path}[{i}]")
    elif isinstance(saved, float) and isinstance(now, float):
        assert now == pytest.approx(saved, rel=1e-12, abs=1e-15), path
    else:
        assert saved == now, path


def test_the_committed_table_is_what_the_script_renders() -> None:
    data = scale.table()
    assert (scale.SCALE / "table.md").read_text() == scale.render(data)
    _same(json.loads((scale.SCALE / "table.json").read_text()), json.loads(json.dumps(data)))
    for key, col in data.items():  # every model on every task was probed: figures, or the K a refusal needs
        assert col["status"] in ("complete", "refused"), key
        if col["status"] == "refused" and col["needed_k"] is not None:
            assert col["needed_k"] > col["k"], key


@pytest.mark.parametrize("folder", PROBES)
def test_each_probe_figure_is_recomputed_from_its_responses(folder: str) -> None:
    probe = json.loads((scale.SCALE / folder / "probe.json").read_text())
    if not probe["complete"]:
        assert "refused" in probe and probe["rounds"], "an incomplete probe is a refusal that says why"
        return
    cfg, rows = probe["config"], probe["responses"]
    astar = [np.asarray(r["astar"]) for r in rows]
    for name, saved in probe["modules"].items():
        table = response_ingredients([np.asarray(r["advantages"][name]) for r in rows], astar)
        (again,) = bootstrap_figures([table], n_boot=cfg["bootstrap"], seed=cfg["seed"])
        for key in ("spearman", "pearson"):
            assert again[key]["value"] == pytest.approx(saved[key]["value"], abs=1e-12), (name, key)
            assert again[key]["ci"] == pytest.approx(saved[key]["ci"], abs=1e-12), (name, key)


def test_a_warm_rescoring_scored_the_same_batch_and_a_star() -> None:
    pairs = [(f, f.removesuffix("-warm")) for f in PROBES if f.endswith("-warm")]
    assert pairs, "the critic modules are scored with warmed critics"
    for warm_name, base_name in pairs:
        warm = json.loads((scale.SCALE / warm_name / "probe.json").read_text())
        base = json.loads((scale.SCALE / base_name / "probe.json").read_text())
        assert warm["config"]["warm"] and set(warm["config"]["warm"]) == scale.WARMED
        assert [r["tokens"] for r in warm["responses"]] == [r["tokens"] for r in base["responses"]]
        assert [r["astar"] for r in warm["responses"]] == [r["astar"] for r in base["responses"]]


@pytest.mark.parametrize("folder", [f for f in PROBES if "refused" not in f])
def test_the_rebuilt_estimate_gives_each_probe_its_saved_a_star(folder: str) -> None:
    """The table rescores from the responses' continuation rewards: the estimate rebuilt from them is the probe's."""
    probe = json.loads((scale.SCALE / folder / "probe.json").read_text())
    if not probe["complete"]:
        return
    rebuilt = scale.estimate(probe["responses"]).token_advantages()
    for got, row in zip(rebuilt, probe["responses"], strict=True):
        assert got == pytest.approx(np.asarray(row["astar"]), abs=1e-12)


def test_the_table_judges_modules_against_the_null_baselines() -> None:
    """On the tiny model's level 2 A* sits in the first segment: the position rule outscores `cort`, whose interval
    clears 0 but not that null; the rubric batches have 4 prompts, too few at the table's alpha to call anything."""
    data = scale.table()
    sums = data["sums/tiny"]
    position = sums["nulls"]["null:position"]["spearman"]["value"]
    assert position > sums["modules"]["cort"]["spearman"]["value"]
    assert sums["modules"]["cort"]["clear"] and not sums["modules"]["cort"]["beats_nulls"]
    for model in scale.MODELS:
        rubric = data[f"rubric/{model}"]
        assert rubric["prompts"] < scale.min_prompts(scale.ALPHA)
        assert not any(m["clear"] or m["beats_nulls"] for m in rubric["modules"].values())
    assert not any(m["beats_nulls"] for col in data.values() for m in col.get("modules", {}).values())
