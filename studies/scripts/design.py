"""Design the powered credit study (docs/study/part1.md to part5.md) from a pilot: seeds x steps x held-out size
for a 95% half-width of a paired difference to ``grpo``, the wall time of the whole study, and the minimum
detectable effect (MDE) an 8-hour budget reaches.

    python studies/scripts/design.py --collect runs/pilot-eval/seed*/report.json --per-task studies/results/pilot/per_task.json
    python studies/scripts/design.py --pilot studies/results/pilot --out studies/results/pilot/design.md

The pilot is a ``creditgym compare --pilot`` of ``grpo`` (its results.json: per-seed finals, held-out size, step
and wall times). The statistics are `creditgym.agents.study.stats.Pilot` (tested by hand in tests/agents/test_stats.py);
this script adds the cost model and prints the tables (Markdown), which it also writes to ``--out``.

The cost model counts a run in grpo steps of its task: ``steps x ratio`` (the entry's step time relative to grpo)
plus its evaluations, ``evals x held-out x e`` (``e``: one held-out episode in grpo steps, measured by the pilot:
both measured in the same runs, under the same load, so their ratio holds on a quiet machine too). Hours then
take the task's grpo step time on a quiet machine and ``--workers`` runs in parallel (one thread each).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from creditgym.agents.study.results import FINISHED, upgrade_results
from creditgym.agents.study.stats import Pilot, mean, within_task_variance

ROOT = Path(__file__).resolve().parents[2]

#: The powered study's entries and their step time relative to grpo: the published study's (studies/results/math,
#: 60 steps, quiet machine) where it ran the entry or its nearest variant; vine's from README's probe section
#: (a K = 8 vine step, 7.1x grpo's); a variant without a published time takes its module's.
ENTRIES: dict[str, tuple[float, str]] = {
    "grpo": (1.0, "baseline"),
    "rloo": (1.032, "published study"),
    "gae": (1.182, "published study"),
    "vine": (7.1, "README probe section (K=8)"),
    "cort": (1.26, "published study"),
    "cast": (1.315, "published study (cast)"),
    "cast:teacher=snapshot": (1.315, "as cast"),
    "compo": (1.338, "published study"),
    "compo:critic=standard": (1.182, "as gae"),
    "compo:gate=shuffled": (1.231, "published study"),
    "gae:lam=<gate mean>": (1.182, "as gae"),
    "pact": (1.511, "published study"),
    "pact:without_is=true": (1.327, "published study"),
    "pact:critic=probe": (1.511, "as pact"),
}
#: Each task's home entries (their pairs to grpo get the power) and its quiet grpo step time in seconds.
TASKS: dict[str, dict[str, Any]] = {
    "chains": {
        "flags": "--env creditgym/Math-v0 --env-kw difficulty=6 --max-new-tokens 160",
        "home": ("grpo", "vine", "cast", "compo", "pact"),
        # steps 1-10 of the lead's 20-step gae run on this task at load 1-2 (mean 5.41 s), / gae's 1.182
        "grpo_step_s": 5.41 / 1.182,
    },
    "hard rubric": {
        "flags": "--env creditgym/Rubric-v0 --env-kw preset=hard --max-new-tokens 192",
        "home": ("grpo", "cort"),
        "grpo_step_s": 5.0,  # the published rubric study's grpo step (preset default); hard: not measured
    },
    "easy (Math-v0 level 2)": {
        "flags": "--env creditgym/Math-v0",
        "home": (),  # a control: every entry at the control seeds
        "grpo_step_s": 1.35,  # the published math study's grpo step
    },
}


@dataclass(frozen=True)
class PilotRuns:
    """What a pilot's results.json says: the variance (`Pilot`) and the costs of its finished runs."""

    pilot: Pilot
    steps: int
    evals: int  # held-out evaluations per run (step 0, every eval_every, the end)
    step_s: float  # mean training step (s)
    wall_s: float  # mean run wall time (s)

    @property
    def eval_s(self) -> float:
        """Seconds of one held-out evaluation: what a run's wall time has beyond its steps, per evaluation."""
        return (self.wall_s - self.steps * self.step_s) / self.evals

    @property
    def episode_in_steps(self) -> float:
        """One held-out episode in training steps (``e`` of the cost model)."""
        return self.eval_s / self.pilot.eval_episodes / self.step_s


def evals_per_run(steps: int, eval_every: int) -> int:
    """Held-out evaluations of a run: step 0, each multiple of ``eval_every``, and the last step."""
    return 1 + len({s for s in range(eval_every, steps + 1, eval_every)} | {steps})


def collect_per_task(reports: Sequence[Path]) -> dict[str, Any]:
    """``per_task.json`` from ``creditgym eval`` reports of each pilot seed's final model on the held-out tasks:
    the task ids and each report's rewards in episode order (a report's folder is named ``seed<k>``).

    Raises:
        ValueError: reports on different tasks, or fewer than two.
    """
    rewards, tasks = {}, None
    for path in reports:
        report = json.loads(Path(path).read_text())
        ids = [r["task_id"] for r in report["records"]]
        if tasks is not None and ids != tasks:
            raise ValueError(f"{path}: other held-out tasks than {reports[0]}")
        tasks = ids
        rewards[Path(path).parent.name.removeprefix("seed")] = [r["reward"] for r in report["records"]]
    if len(rewards) < 2 or tasks is None:
        raise ValueError(f"need reports of at least two seeds, got {len(rewards)}")
    return {"task_ids": tasks, "rewards": rewards}


def read_pilot(folder: Path, entry: str = "grpo") -> PilotRuns:
    """The pilot's finished runs of ``entry`` (results.json in either form), with the per-task variance across
    seeds when the folder has a ``per_task.json`` (`collect_per_task`).

    Raises:
        ValueError: fewer than two finished runs of ``entry``.
    """
    results = upgrade_results(json.loads((folder / "results.json").read_text()))
    train = results["config"]["train"]
    runs = [r for r in results["runs"] if r["entry"] == entry and r["status"] == FINISHED]
    if len(runs) < 2:
        raise ValueError(f"{folder}: {len(runs)} finished runs of {entry!r}; a pilot needs at least two")
    steps, every = int(train["steps"]), int(train.get("eval_every", 20))
    per_task = folder / "per_task.json"
    within = None
    if per_task.is_file():
        within = within_task_variance(list(json.loads(per_task.read_text())["rewards"].values()))
    return PilotRuns(
        pilot=Pilot(tuple(r["final"] for r in runs), int(train.get("eval_episodes", 200)), within),
        steps=steps,
        evals=evals_per_run(steps, every),
        step_s=mean([r["step_s"] for r in runs]),
        wall_s=mean([r["wall_s"] for r in runs]),
    )


#: One in-training probe (``--probe-every``; 2 prompts x 8 responses, K = 8 at every token) in grpo steps of the
#: chains: ~16 x 70 tokens x 8 = ~9,000 rollouts at 49 rollouts/s (README's probe benchmark, load 9) = ~180 s,
#: against a ~20 s grpo step at that load (this pilot). An estimate: no quiet probe run was timed.
PROBE_STEPS = 9.0


def run_cost(
    steps: int, ratio: float, evals: int, held_out: int, episode_in_steps: float, probes: int = 0
) -> float:
    """One run in grpo steps of its task: its steps, its held-out evaluations, its probes (`PROBE_STEPS` each)."""
    return steps * ratio + evals * held_out * episode_in_steps + probes * PROBE_STEPS


def study_hours(
    *,
    home_seeds: int,
    control_seeds: int,
    steps: int,
    held_out: int,
    eval_every: int,
    episode_in_steps: float,
    workers: int,
    probes: int = 0,
    entries: Mapping[str, tuple[float, str]] = ENTRIES,
    tasks: Mapping[str, Mapping[str, Any]] = TASKS,
) -> float:
    """Wall hours of the powered study: every entry on every task, home entries with ``home_seeds``, the rest with
    ``control_seeds``, ``workers`` runs at a time, ``probes`` probes a run."""
    evals = evals_per_run(steps, eval_every)
    seconds = 0.0
    for task in tasks.values():
        for name, (ratio, _) in entries.items():
            seeds = home_seeds if name in task["home"] else control_seeds
            cost = run_cost(steps, ratio, evals, held_out, episode_in_steps, probes)
            seconds += seeds * cost * task["grpo_step_s"]
    return seconds / workers / 3600


def _f(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def design_markdown(
    runs: PilotRuns,
    *,
    target: float,
    budget_h: float,
    steps: int,
    eval_every: int,
    workers: int,
    control_seeds: int,
    probes: int = 3,
    held_outs: Sequence[int] = (500, 1000, 2000),
    seed_grid: Sequence[int] = (3, 5, 8, 10, 15, 20),
    reference: PilotRuns | None = None,
) -> str:
    """The design tables (Markdown) from a pilot; with a longer ``reference`` study, every figure also in
    parentheses under its bound: the pilot's score and per-task variance, and the reference's whole seed-to-seed
    sd taken as training noise (its spread after more steps, none of it credited to evaluation)."""
    p = runs.pilot
    design = p
    bound = None if reference is None else _with_train_sd(p, reference.pilot.seed_sd)

    def hw(n: int, m: int) -> str:
        return f"±{_f(p.half_width(n, m))}" + (f" (±{_f(bound.half_width(n, m))})" if bound else "")

    def mde(n: int, m: int) -> str:
        return _f(p.mde(n, m)) + (f" ({_f(bound.mde(n, m))})" if bound else "")

    def seeds(m: int) -> str:
        a = p.seeds_for(target, m) or "> 1000"
        return f"{a}" + (f" ({bound.seeds_for(target, m) or '> 1000'})" if bound else "")

    e = runs.episode_in_steps
    load = runs.step_s / TASKS["chains"]["grpo_step_s"]
    lines = [
        "## Pilot",
        "",
        "| | pilot (`grpo`, chains) |"
        + (" reference (published `grpo`, easy Math, 60 steps) |" if reference else ""),
        "|---|---:|" + ("---:|" if reference else ""),
    ]

    def row(name: str, f: Any) -> str:
        cells = [f(runs)] + ([f(reference)] if reference else [])
        return f"| {name} | " + " | ".join(cells) + " |"

    lines += [
        row("seeds (finished)", lambda r: str(len(r.pilot.finals))),
        row("steps", lambda r: str(r.steps)),
        row("held-out tasks (greedy)", lambda r: str(r.pilot.eval_episodes)),
        row("final scores", lambda r: ", ".join(_f(x) for x in r.pilot.finals)),
        row("mean", lambda r: _f(r.pilot.score)),
        row("seed-to-seed sd", lambda r: _f(r.pilot.seed_sd, 4)),
        row(
            "binomial sd of one evaluation",
            lambda r: _f(math.sqrt(r.pilot.score * (1 - r.pilot.score) / r.pilot.eval_episodes), 4),
        ),
        row(
            "per-task variance across seeds (w; binomial bound p(1-p))",
            lambda r: (
                "not measured"
                if r.pilot.within is None
                else f"{r.pilot.within:.4f} ({r.pilot.score * (1 - r.pilot.score):.4f})"
            ),
        ),
        row("evaluation sd of one run (w / N)", lambda r: _f(r.pilot.eval_sd, 4)),
        row("training sd (seed sd without the evaluation part)", lambda r: _f(r.pilot.train_sd, 4)),
        row("mean training step (s)", lambda r: _f(r.step_s, 2)),
        row("one held-out evaluation (s)", lambda r: _f(r.eval_s, 1)),
        row("one held-out episode, in training steps", lambda r: _f(r.episode_in_steps, 4)),
        row("mean run wall time (s)", lambda r: _f(r.wall_s, 1)),
        "",
        "The design: the pilot's training sd and per-task variance; in parentheses, its bound: the reference's "
        f"whole seed sd ({_f(reference.pilot.seed_sd, 4)}) as training sd."
        if reference
        else "The design: the pilot's training sd and per-task variance.",
        "",
        "## 95% half-width (and MDE, 80% power) of a paired difference to `grpo`",
        "",
        "| seeds | " + " | ".join(f"{n} held-out" for n in held_outs) + " |",
        "|---:|" + "---:|" * len(held_outs),
    ]
    for n in seed_grid:
        cells = [f"{hw(n, m)}; MDE {mde(n, m)}" for m in held_outs]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Seeds for ±{target}: " + ", ".join(f"{seeds(m)} on {m} held-out" for m in held_outs) + ".",
        "",
    ]
    lines += [
        f"## Wall time of the whole study ({len(ENTRIES)} entries x {len(TASKS)} tasks, {steps} steps, held-out "
        f"every {eval_every} steps, {workers} runs at a time on a quiet machine)",
        "",
        f"Home pairs (each module and `grpo` on its home task) get the home seeds; every other (entry, task) "
        f"{control_seeds} seeds.",
        "",
        f"The last column scales the hours by the pilot's own step time over the quiet one "
        f"({_f(runs.step_s, 1)} s / {_f(TASKS['chains']['grpo_step_s'], 2)} s = {_f(load, 1)}x): the machine as "
        "loaded as during the pilot.",
        "",
        "| home seeds | held-out | half-width | MDE | hours (quiet) | hours (pilot's load) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    fits: list[tuple[float, int, int]] = []
    for m in held_outs:
        for n in range(5, 41):
            hours = study_hours(
                home_seeds=n,
                control_seeds=control_seeds,
                steps=steps,
                held_out=m,
                eval_every=eval_every,
                episode_in_steps=e,
                workers=workers,
                probes=probes,
            )
            if n in (5, 8, 10) or design.seeds_for(target, m) == n:
                lines.append(f"| {n} | {m} | {hw(n, m)} | {mde(n, m)} | {hours:.1f} | {hours * load:.1f} |")
            if hours <= budget_h:
                fits.append((design.mde(n, m), n, m))
    lines.append("")
    if fits:
        _, n, m = min(fits)
        lines.append(
            f"**Within {budget_h:g} hours**: {n} home seeds on {m} held-out tasks, half-width "
            f"{hw(n, m)}, MDE {mde(n, m)} (80% power, 5% two-sided)."
        )
    else:
        lines.append(f"**Nothing with at least 5 home seeds fits in {budget_h:g} hours** at these settings.")
    lines += [
        "",
        f"Cut further to fit {budget_h:g} hours (home pairs keep 5 seeds or more, 500 held-out):",
        "",
    ]
    lines += ["| steps | control seeds | probes a run | home seeds | half-width | MDE | hours (quiet) |"]
    lines += ["|---:|---:|---:|---:|---:|---:|---:|"]
    for cut_steps, cut_controls, cut_probes in ((60, 2, 3), (60, 2, 0), (40, 2, 0), (30, 2, 0), (20, 2, 0)):
        best = None
        for n in range(5, 41):
            hours = study_hours(
                home_seeds=n,
                control_seeds=cut_controls,
                steps=cut_steps,
                held_out=500,
                eval_every=min(eval_every, cut_steps),
                episode_in_steps=e,
                workers=workers,
                probes=cut_probes,
            )
            if hours <= budget_h:
                best = (n, hours)
        cells = (
            f"{best[0]} | {hw(best[0], 500)} | {mde(best[0], 500)} | {best[1]:.1f}"
            if best
            else "does not fit | | |"
        )
        lines.append(f"| {cut_steps} | {cut_controls} | {cut_probes} | {cells} |")
    lines += [
        "",
        "Entry step times relative to `grpo` (sources): "
        + "; ".join(f"`{k}` {v[0]:g} ({v[1]})" for k, v in ENTRIES.items())
        + ".",
        "",
        "Quiet-machine `grpo` step per task: "
        + "; ".join(f"{k} {v['grpo_step_s']:.2f} s" for k, v in TASKS.items())
        + f" (sources in studies/scripts/design.py). A probe counts {PROBE_STEPS:g} `grpo` steps (an estimate, see "
        "`PROBE_STEPS`); not counted: the quiet step-time runs.",
        "",
    ]
    return "\n".join(lines)


def _with_train_sd(p: Pilot, train_sd: float) -> Pilot:
    """A pilot with ``p``'s score and held-out size whose training sd is ``train_sd`` (two finals placed so)."""
    seed_sd = math.sqrt(train_sd**2 + p.eval_sd**2)
    half = seed_sd / math.sqrt(2)  # two finals score -/+ half have sample sd half * sqrt(2)
    return Pilot((p.score - half, p.score + half), p.eval_episodes)


def emit(text: str, out: Path | None) -> int:
    """Print a rendered table and, where ``out`` is given, write it there too; the exit status (0)."""
    print(text)
    if out is not None:
        out.write_text(text)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pilot", type=Path, default=ROOT / "studies/results/pilot", help="the pilot study folder"
    )
    ap.add_argument(
        "--reference",
        type=Path,
        default=ROOT / "studies/results/math",
        help="a longer study whose grpo spread also bounds the design ('' for none)",
    )
    ap.add_argument("--target", type=float, default=0.03, help="95%% half-width to reach (default 0.03)")
    ap.add_argument("--budget-h", type=float, default=8.0, help="hours the whole study may take (default 8)")
    ap.add_argument("--steps", type=int, default=60, help="steps of each study run (default 60)")
    ap.add_argument(
        "--eval-every", type=int, default=20, help="held-out evaluation every N steps (default 20)"
    )
    ap.add_argument("--workers", type=int, default=2, help="runs at a time, one thread each (default 2)")
    ap.add_argument("--control-seeds", type=int, default=3, help="seeds of the non-home pairs (default 3)")
    ap.add_argument("--probes", type=int, default=3, help="probes a run: steps 0, middle, end (default 3)")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables here (design.md)")
    ap.add_argument(
        "--collect", type=Path, nargs="+", help="creditgym eval reports (seed<k>/report.json) to ..."
    )
    ap.add_argument("--per-task", type=Path, help="... write as this per_task.json, then stop")
    args = ap.parse_args(argv)
    if args.collect:
        if args.per_task is None:
            ap.error("--collect needs --per-task FILE")
        args.per_task.write_text(json.dumps(collect_per_task(args.collect)) + "\n")
        return 0
    runs = read_pilot(args.pilot)
    reference = read_pilot(args.reference) if str(args.reference) not in ("", ".") else None
    text = design_markdown(
        runs,
        target=args.target,
        budget_h=args.budget_h,
        steps=args.steps,
        eval_every=args.eval_every,
        workers=args.workers,
        control_seeds=args.control_seeds,
        probes=args.probes,
        reference=reference,
    )
    return emit(text, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
