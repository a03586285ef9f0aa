"""studies/scripts/design.py: the study's cost model and design tables, by hand and against the committed pilot
(the statistics it uses, `Pilot`, are checked by hand in test_stats.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from creditgym.agents.study.stats import Pilot

ROOT = Path(__file__).resolve().parents[2]
PILOT = ROOT / "studies" / "results" / "pilot"


def _design() -> Any:
    spec = importlib.util.spec_from_file_location("study_design", ROOT / "studies" / "scripts" / "design.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["study_design"] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


design = _design()


def test_evaluations_per_run_count_step_zero_each_multiple_and_the_end() -> None:
    assert design.evals_per_run(60, 20) == 4  # 0, 20, 40, 60
    assert design.evals_per_run(4, 4) == 2  # 0, 4
    assert design.evals_per_run(10, 4) == 4  # 0, 4, 8, 10


def test_study_hours_by_hand() -> None:
    # grpo (home): 5 seeds x (10 steps + 2 evals x 100 episodes x 0.05) = 5 x 20 = 100 grpo steps
    # x (control, 2x a grpo step): 3 seeds x (20 + 10) = 90; 190 steps x 3.6 s / 2 workers = 342 s = 0.095 h
    assert design.run_cost(60, 1.5, 4, 500, 0.01) == pytest.approx(110.0)
    hours = design.study_hours(
        home_seeds=5,
        control_seeds=3,
        steps=10,
        held_out=100,
        eval_every=10,
        episode_in_steps=0.05,
        workers=2,
        entries={"grpo": (1.0, ""), "x": (2.0, "")},
        tasks={"t": {"home": ("grpo",), "grpo_step_s": 3.6}},
    )
    assert hours == pytest.approx(0.095)


def _pilot_results(folder: Path, finals: list[float], status: list[str]) -> None:
    runs = [
        {
            "entry": "grpo",
            "seed": s,
            "final": f,
            "status": st,
            "step_s": 10.0,
            "wall_s": 100.0,
            "curve": [[4, f]],
        }
        for s, (f, st) in enumerate(zip(finals, status, strict=True))
    ]
    train = {"env_id": "creditgym/Math-v0", "steps": 4, "eval_every": 4, "eval_episodes": 500}
    config = {"entries": ["grpo"], "seeds": list(range(len(finals))), "train": train, "pilot": True}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps({"config": config, "baseline": "grpo", "runs": runs}))


def test_read_pilot_takes_finished_runs_and_measures_an_evaluation(tmp_path: Path) -> None:
    # wall 100 s = 4 steps x 10 s + 2 evaluations -> 30 s each; / 500 episodes / 10 s a step = 0.006 steps
    _pilot_results(tmp_path, [0.40, 0.46, 0.43, 0.9], ["finished", "finished", "finished", "partial"])
    runs = design.read_pilot(tmp_path)
    assert runs.pilot == Pilot((0.40, 0.46, 0.43), 500)  # the partial run is not the pilot's
    assert (runs.steps, runs.evals, runs.eval_s) == (4, 2, pytest.approx(30.0))
    assert runs.episode_in_steps == pytest.approx(0.006)
    _pilot_results(tmp_path, [0.4, 0.5], ["finished", "failed"])
    with pytest.raises(ValueError, match="1 finished runs of 'grpo'; a pilot needs at least two"):
        design.read_pilot(tmp_path)


def test_a_reference_bounds_the_design_with_its_whole_seed_spread(tmp_path: Path) -> None:
    _pilot_results(tmp_path / "a", [0.40, 0.46, 0.43], ["finished"] * 3)
    _pilot_results(tmp_path / "b", [0.30, 0.50, 0.40], ["finished"] * 3)
    a, b = design.read_pilot(tmp_path / "a"), design.read_pilot(tmp_path / "b")
    bound = design._with_train_sd(a.pilot, b.pilot.seed_sd)  # all of b's spread counted as training noise
    assert bound.score == pytest.approx(a.pilot.score) and bound.train_sd == pytest.approx(b.pilot.seed_sd)
    kw = {"target": 0.03, "budget_h": 8.0, "steps": 60, "eval_every": 20, "workers": 2, "control_seeds": 3}
    alone, both = design.design_markdown(a, **kw), design.design_markdown(a, reference=b, **kw)
    pair = f"±{a.pilot.half_width(5, 500):.3f} (±{bound.half_width(5, 500):.3f})"
    assert f"| 5 | ±{a.pilot.half_width(5, 500):.3f}; MDE" in alone and f"| 5 | {pair}; MDE" in both


def test_the_committed_design_is_the_pilots() -> None:
    """design.md is what the script computes from the committed pilot (and the published math study)."""
    res = subprocess.run(
        [sys.executable, str(ROOT / "studies" / "scripts" / "design.py"), "--pilot", str(PILOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == (PILOT / "design.md").read_text() + "\n"


def test_per_task_rewards_of_each_seed_give_the_within_task_variance(tmp_path: Path) -> None:
    """``--collect`` turns `creditgym eval` reports into per_task.json; read_pilot then uses the measured
    per-task variance (here 1/6, as by hand in test_stats.py) instead of the binomial bound."""
    rewards = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0]]
    reports = []
    for seed, rs in enumerate(rewards):
        folder = tmp_path / "eval" / f"seed{seed}"
        folder.mkdir(parents=True)
        records = [{"task_id": f"t{i}", "reward": r} for i, r in enumerate(rs)]
        (folder / "report.json").write_text(json.dumps({"records": records}))
        reports.append(folder / "report.json")
    _pilot_results(tmp_path / "pilot", [0.40, 0.46, 0.43], ["finished"] * 3)
    assert (
        design.main(
            ["--collect", *map(str, reports), "--per-task", str(tmp_path / "pilot" / "per_task.json")]
        )
        == 0
    )
    per_task = json.loads((tmp_path / "pilot" / "per_task.json").read_text())
    assert per_task["task_ids"] == ["t0", "t1", "t2", "t3"] and per_task["rewards"]["2"] == rewards[2]
    assert design.read_pilot(tmp_path / "pilot").pilot.within == pytest.approx(1 / 6)
    (tmp_path / "eval" / "seed2" / "report.json").write_text(
        json.dumps({"records": [{"task_id": "x", "reward": 1}]})
    )
    with pytest.raises(ValueError, match="other held-out tasks"):
        design.collect_per_task(reports)
