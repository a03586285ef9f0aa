"""studies/scripts/smollm2_study.py: the SmolLM2 study's seed count is the largest its budget pays for, and the
committed design.md is what the script renders from the committed pilot."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "studies" / "results" / "smollm2-study"

if str(ROOT / "studies" / "scripts") not in sys.path:  # as when it runs as a script: design.py beside it
    sys.path.append(str(ROOT / "studies" / "scripts"))
spec = importlib.util.spec_from_file_location(
    "smollm2_study", ROOT / "studies" / "scripts" / "smollm2_study.py"
)
assert spec and spec.loader
study = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = study
spec.loader.exec_module(study)


def _cost(n: int, grpo_s: float, ratio: float) -> float:  # by hand: two pilot runs, n vine, n - 2 more grpo
    return 2 * grpo_s + n * ratio * grpo_s + (n - 2) * grpo_s


@pytest.mark.parametrize(("grpo_s", "ratio"), [(450.0, 2.75), (300.0, 1.0), (1000.0, 4.0), (5000.0, 3.0)])
def test_planned_seeds_is_the_largest_count_the_budget_pays_for(grpo_s: float, ratio: float) -> None:
    n = study.planned_seeds(grpo_s, ratio, budget_s=9000.0)
    assert n >= 2
    assert n == 2 or _cost(n, grpo_s, ratio) <= 9000.0
    assert _cost(n + 1, grpo_s, ratio) > 9000.0


def test_the_wall_time_ratio_is_read_from_the_twenty_step_runs(tmp_path: Path) -> None:
    path = tmp_path / "wall-times.txt"
    path.write_text("# a comment\nvine rc=0 1230s\ngrpo rc=0 448s\ncort rc=1 415s\n")
    assert study.wall_ratio(path) == pytest.approx(1230 / 448)
    assert study.wall_ratio() == pytest.approx(1230 / 448)  # the committed file


def test_the_committed_design_starts_with_the_pilots_rendering() -> None:
    pilot = study.read_pilot(FOLDER / "pilot")
    assert (FOLDER / "design.md").read_text().startswith(study.design_markdown(pilot, study.wall_ratio()))


def test_the_revised_design_is_the_vine_steps_rendering() -> None:
    """The second table of design.md: the seed count recomputed from vine's first two steps, as committed."""
    pilot = study.read_pilot(FOLDER / "pilot")
    revised = study.revised_markdown(pilot, study.first_step_s(FOLDER / "vine-first-steps"))
    text = (FOLDER / "design.md").read_text()
    assert text == study.design_markdown(pilot, study.wall_ratio()) + "\n" + revised
    assert "| seeds `n` (0 .. n-1) | 3 |" in revised  # what the study then ran: seeds 0, 1, 2


def test_the_budget_spent_is_the_studys_runs() -> None:
    """spent.md is the script's rendering of the study's results.json: the three seeds of both entries, every run
    finished, their wall times summed."""
    text = (FOLDER / "spent.md").read_text()
    assert text == study.spent_markdown(FOLDER)
    results = json.loads((FOLDER / "results.json").read_text())
    runs = {(r["entry"], r["seed"]): r for r in results["runs"]}
    assert set(runs) == {(e, s) for e in ("grpo", "vine") for s in (0, 1, 2)}
    assert all(r["status"] == "finished" for r in runs.values())
    assert f"Spent **{sum(r['wall_s'] for r in runs.values()):.0f} run-s**" in text
    pilot = json.loads((FOLDER / "pilot" / "results.json").read_text())["runs"]
    for run in pilot:  # the pilot's runs are the study's grpo seeds 0 and 1, reused, not run again
        assert runs["grpo", run["seed"]]["config_hash"] == run["config_hash"]
        assert runs["grpo", run["seed"]]["wall_s"] == run["wall_s"]


def test_each_runs_own_metrics_hold_its_final_score() -> None:
    """run-files/<entry>/seed<k>/metrics.jsonl (as each run wrote it) ends at the final the study reports."""
    for run in json.loads((FOLDER / "results.json").read_text())["runs"]:
        path = FOLDER / "run-files" / run["entry"] / f"seed{run['seed']}" / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        evals = [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r]
        assert evals == [tuple(point) for point in run["curve"]], path
        assert sorted({int(r["step"]) for r in rows}) == list(range(11))  # steps 0-10, a resumed run's too


def test_the_probed_rerun_trained_as_the_studys_seed_0() -> None:
    """probed/: seed 0 of both entries run again with the probe at steps 0, 5 and 10 (after the study, outside its
    budget): the study's settings but the probe's, the same held-out curve to the last digit (the probe draws seeds
    of its own), and the probe's figures at each of those steps."""

    def unprobed(config: dict) -> dict:
        return {k: v for k, v in config.items() if not k.startswith("probe_")}

    first = {(r["entry"], r["seed"]): r for r in json.loads((FOLDER / "results.json").read_text())["runs"]}
    probed = json.loads((FOLDER / "probed" / "results.json").read_text())["runs"]
    assert sorted((r["entry"], r["seed"]) for r in probed) == [("grpo", 0), ("vine", 0)]
    for run in probed:
        study_run = first[run["entry"], run["seed"]]
        assert run["status"] == "finished" and run["train_config"]["probe_every"] == 5
        assert unprobed(run["train_config"]) == unprobed(study_run["train_config"])
        assert run["curve"] == study_run["curve"]
        assert [p["step"] for p in run["probe"]] == [0, 5, 10]
        assert all(p["figures"]["reliability_spearman"] is not None for p in run["probe"])
