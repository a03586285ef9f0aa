"""Size the budgeted training study on SmolLM2 (issue 41, item 2) from its pilot, by the rule of
``studies/results/smollm2-study/budget.md``: the seed count the budget pays for, and the MDE at that count.

    python studies/scripts/smollm2_study.py --pilot studies/results/smollm2-study/pilot \\
        --out studies/results/smollm2-study/design.md

A ``grpo`` run costs the pilot's mean wall time; a ``vine`` run that times the ``vine``/``grpo`` wall-time ratio of
the twenty-step runs on SmolLM2 (``every-module-20-steps/wall-times.txt``). The pilot's runs are the study's
``grpo`` seeds 0 and 1, so ``n`` seeds cost ``n`` vine runs and ``n - 2`` more grpo runs beyond the pilot. The MDE
is `Pilot.mde` with the evaluation variance bounded by p(1 - p) (no per-task variance measured).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "studies" / "scripts"))

from design import PilotRuns, read_pilot  # noqa: E402

BUDGET_S = 9000.0  # budget.md: 2.5 run-hours, the pilot included
EVAL_EPISODES = 64
WALL_TIMES = ROOT / "studies/results/real-model/every-module-20-steps/wall-times.txt"


def wall_ratio(path: Path = WALL_TIMES, entry: str = "vine", baseline: str = "grpo") -> float:
    """``entry``'s run wall time over ``baseline``'s in a ``wall-times.txt`` (lines ``name rc=0 1230s``)."""
    times = {m[1]: float(m[2]) for m in re.finditer(r"^(\S+) rc=0 (\d+)s$", path.read_text(), re.M)}
    return times[entry] / times[baseline]


def planned_seeds(grpo_s: float, ratio: float, budget_s: float = BUDGET_S, pilot_seeds: int = 2) -> int:
    """The largest ``n`` with ``pilot_seeds * grpo_s + n * ratio * grpo_s + (n - pilot_seeds) * grpo_s <= budget_s``
    (at least ``pilot_seeds``: the pilot's seeds always get their ``vine`` runs)."""
    n = pilot_seeds
    while pilot_seeds * grpo_s + (n + 1) * ratio * grpo_s + (n + 1 - pilot_seeds) * grpo_s <= budget_s:
        n += 1
    return n


def design_markdown(runs: PilotRuns, ratio: float, budget_s: float = BUDGET_S) -> str:
    """The design table: the pilot, the seeds the budget pays for, the projected cost and the MDE."""
    p, n = runs.pilot, planned_seeds(runs.wall_s, ratio, budget_s)
    cost = 2 * runs.wall_s + n * ratio * runs.wall_s + (n - 2) * runs.wall_s
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
        (f"expected 95% half-width at {n} seeds", f"{p.half_width(n, EVAL_EPISODES):.3f}"),
        (f"**MDE at {n} seeds** (80% power, 5% two-sided)", f"**{p.mde(n, EVAL_EPISODES):.3f}**"),
    ]
    lines = [
        "# The SmolLM2 study's design, from its pilot (before any `vine` run)",
        "",
        "Rendered by `python studies/scripts/smollm2_study.py --pilot studies/results/smollm2-study/pilot "
        "--out studies/results/smollm2-study/design.md` by the rule in `budget.md`.",
        "",
        "| | |",
        "|---|---:|",
        *(f"| {a} | {b} |" for a, b in rows),
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pilot", type=Path, default=ROOT / "studies/results/smollm2-study/pilot")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here (design.md)")
    args = ap.parse_args(argv)
    text = design_markdown(read_pilot(args.pilot), wall_ratio())
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
