"""Size the budgeted training study on SmolLM2 (docs/study/smollm2.md) from its pilot, by the rule of
``studies/results/smollm2-study/budget.md``: the seed count the budget pays for, and the MDE at that count; after
the study, the budget it spent.

    python studies/scripts/smollm2_study.py --pilot studies/results/smollm2-study/pilot \\
        --out studies/results/smollm2-study/design.md
    python studies/scripts/smollm2_study.py --spent studies/results/smollm2-study \\
        --out studies/results/smollm2-study/spent.md

A ``grpo`` run costs the pilot's mean wall time; a ``vine`` run that times the ``vine``/``grpo`` wall-time ratio of
the twenty-step runs on SmolLM2 (``every-module-20-steps/wall-times.txt``). The pilot's runs are the study's
``grpo`` seeds 0 and 1, so ``n`` seeds cost ``n`` vine runs and ``n - 2`` more grpo runs beyond the pilot. The MDE
is `Pilot.mde` with the evaluation variance bounded by p(1 - p) (no per-task variance measured).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path

from design import PilotRuns, emit, read_pilot  # studies/scripts/design.py, beside this script

from creditgym.agents.study.results import upgrade_results
from creditgym.agents.study.stats import Pilot

ROOT = Path(__file__).resolve().parents[2]

BUDGET_S = 9000.0  # budget.md: 2.5 run-hours, the pilot included
EVAL_EPISODES = 64
WALL_TIMES = ROOT / "studies/results/real-model/every-module-20-steps/wall-times.txt"


def wall_ratio(path: Path = WALL_TIMES, entry: str = "vine", baseline: str = "grpo") -> float:
    """``entry``'s run wall time over ``baseline``'s in a ``wall-times.txt`` (lines ``name rc=0 1230s``)."""
    times = {m[1]: float(m[2]) for m in re.finditer(r"^(\S+) rc=0 (\d+)s$", path.read_text(), re.M)}
    return times[entry] / times[baseline]


def study_cost(n: int, grpo_s: float, vine_s: float, pilot_seeds: int = 2) -> float:
    """Run-seconds of ``n`` seeds: the pilot's ``grpo`` runs (seeds 0 .. pilot_seeds-1, reused by the study), then
    ``n`` ``vine`` runs and ``n - pilot_seeds`` more ``grpo`` runs."""
    return pilot_seeds * grpo_s + n * vine_s + (n - pilot_seeds) * grpo_s


def planned_seeds(grpo_s: float, ratio: float, budget_s: float = BUDGET_S, pilot_seeds: int = 2) -> int:
    """The largest ``n`` whose `study_cost` (a ``vine`` run ``ratio`` times a ``grpo`` run) is within ``budget_s``
    (at least ``pilot_seeds``: the pilot's seeds always get their ``vine`` runs)."""
    n = pilot_seeds
    while study_cost(n + 1, grpo_s, ratio * grpo_s, pilot_seeds) <= budget_s:
        n += 1
    return n


def _power_rows(p: Pilot, n: int) -> list[tuple[str, str]]:
    """The table rows of what ``n`` seeds on 64 held-out episodes resolve: the expected half-width and the MDE."""
    return [
        (f"expected 95% half-width at {n} seeds", f"{p.half_width(n, EVAL_EPISODES):.3f}"),
        (f"**MDE at {n} seeds** (80% power, 5% two-sided)", f"**{p.mde(n, EVAL_EPISODES):.3f}**"),
    ]


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| | |", "|---|---:|", *(f"| {a} | {b} |" for a, b in rows)]


def design_markdown(runs: PilotRuns, ratio: float, budget_s: float = BUDGET_S) -> str:
    """The design table: the pilot, the seeds the budget pays for, the projected cost and the MDE."""
    p, n = runs.pilot, planned_seeds(runs.wall_s, ratio, budget_s)
    cost = study_cost(n, runs.wall_s, ratio * runs.wall_s)
    rows = [
        ("pilot finals (`grpo`, seeds 0, 1)", ", ".join(f"{x:.3f}" for x in p.finals)),
        ("pilot mean run wall time (s)", f"{runs.wall_s:.0f}"),
        ("`vine` / `grpo` run wall time (20-step runs)", f"{ratio:.2f}"),
        ("budget (run-s)", f"{budget_s:.0f}"),
        ("seeds `n` (0 .. n-1)", f"{n}"),
        ("projected cost (run-s)", f"{cost:.0f}"),
        ("seed sd (pilot)", f"{p.seed_sd:.4f}"),
        ("evaluation sd bound, 64 episodes: sqrt(p(1 - p) / 64)", f"{p.eval_sd:.4f}"),
        ("training sd (seed sd less evaluation)", f"{p.train_sd:.4f}"),
        ("sd of one paired difference", f"{p.diff_sd(EVAL_EPISODES):.4f}"),
        *_power_rows(p, n),
    ]
    lines = [
        "The design from the pilot, before any `vine` run. Rendered by `python studies/scripts/smollm2_study.py --pilot studies/results/smollm2-study/pilot "
        "--out studies/results/smollm2-study/design.md` by the rule in `budget.md`.",
        "",
        *_table(rows),
        "",
    ]
    return "\n".join(lines)


def spent_markdown(folder: Path, budget_s: float = BUDGET_S) -> str:
    """The budget spent: each run's wall time (the study's results.json, whose ``grpo`` seeds 0 and 1 are the
    pilot's runs, reused), summed against the budget."""
    runs = upgrade_results(json.loads((folder / "results.json").read_text()))["runs"]
    lines = [
        "Rendered by `python studies/scripts/smollm2_study.py --spent studies/results/smollm2-study "
        "--out studies/results/smollm2-study/spent.md` from the study's results.json.",
        "",
        "| entry | seed | status | wall (s) |",
        "|---|---:|---|---:|",
        *(f"| `{r['entry']}` | {r['seed']} | {r['status']} | {r['wall_s']:.0f} |" for r in runs),
    ]
    total = sum(r["wall_s"] for r in runs)
    lines += [
        "",
        f"Spent **{total:.0f} run-s** ({total / 3600:.2f} run-hours) of {budget_s:.0f} set "
        f"({budget_s / 3600:.2f} run-hours): {100 * total / budget_s:.0f}%.",
        "",
    ]
    return "\n".join(lines)


def first_step_s(folder: Path, steps: int = 2) -> float:
    """The mean training step (s) of the first ``steps`` steps of ``vine`` seeds 0 and 1 (``folder/vine/seed<k>/
    metrics.jsonl``, e.g. a compare study's ``runs/``): what the revision of the design knew when it was made."""
    times = []
    for metrics in sorted((folder / "vine").glob("seed[01]/metrics.jsonl")):
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        times += [r["time/step_s"] for r in rows if 1 <= r["step"] <= steps and "time/step_s" in r]
    return sum(times) / len(times)


def revised_markdown(runs: PilotRuns, vine_step_s: float, budget_s: float = BUDGET_S) -> str:
    """The design revised once `vine`'s own step time was measured: a run costs its steps at that time plus the
    pilot's held-out evaluations (`PilotRuns.eval_s`), and the seed count is again the largest the budget pays
    for."""
    vine_run = runs.steps * vine_step_s + runs.evals * runs.eval_s
    n = planned_seeds(runs.wall_s, vine_run / runs.wall_s, budget_s)
    cost = study_cost(n, runs.wall_s, vine_run)
    p = runs.pilot
    rows = [
        ("`vine` training step, steps 1-2 of seeds 0 and 1 (s)", f"{vine_step_s:.0f}"),
        ("`grpo` training step, pilot (s)", f"{runs.step_s:.1f}"),
        ("one held-out evaluation, pilot (s)", f"{runs.eval_s:.0f}"),
        ("projected `vine` run (s)", f"{vine_run:.0f}"),
        ("seeds `n` (0 .. n-1)", f"{n}"),
        ("projected cost (run-s)", f"{cost:.0f}"),
        *_power_rows(p, n),
    ]
    return "\n".join(
        [
            "**Revised after `vine`'s first two steps** (before any of its held-out scores after step 0).",
            "",
            "On the hard rubric a `vine` step cost far more than the twenty-step runs' ratio projected, so by "
            "budget.md's rule (the budget binds) the seed count was recomputed with `vine`'s measured step time: "
            "`--revise studies/results/smollm2-study/vine-first-steps`, the metrics of steps 0-2 of seeds 0 and 1 "
            "as they stood when the study was stopped.",
            "",
            *_table(rows),
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pilot", type=Path, default=ROOT / "studies/results/smollm2-study/pilot")
    ap.add_argument(
        "--spent", type=Path, default=None, help="a study folder: the budget it spent, not the design"
    )
    ap.add_argument(
        "--revise", type=Path, default=None, help="a study folder: add the design its vine runs revise"
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the table here (design.md)")
    args = ap.parse_args(argv)
    if args.spent is not None:
        text = spent_markdown(args.spent)
    else:
        pilot = read_pilot(args.pilot)
        text = design_markdown(pilot, wall_ratio())
        if args.revise is not None:
            text += "\n" + revised_markdown(pilot, first_step_s(args.revise))
    return emit(text, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
