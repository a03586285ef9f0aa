"""The verdict per module of a `creditgym compare` study (the powered study's): better or worse than the baseline (or
unresolved), from the study's own numbers, with what the probe measured on the same task beside it.

    python studies/scripts/verdict.py --study studies/results/study-chains \\
        --probe studies/results/probe/chains-tiny-after/probe.json --out studies/results/study-chains/verdict.md

With ``--out``, ``curve.md`` beside it holds the paired difference at every held-out step of the curves
(`curve_rows`); for a study run with ``--probe-every``, ``probes.md`` holds each module's probe figures at every
probed step (`probe_rows`); and ``verdict.json`` keeps the tables' rows and the probe file quoted (relative to the
repository). ``--study`` given more than once pools the studies' runs first (`pool`): a study and its follow-ups
at other seeds give one verdict over all their seeds, and ``verdict.json`` names the folders it pooled.
``--rerender`` renders every committed verdict again from the runs, probe and margin its ``verdict.json`` names.

Per entry, over the seeds where both it and the baseline finished: the paired difference of the final held-out
scores, its 95% t-interval (per pair, unadjusted), the two-sided paired t-test's p-value and the minimum detectable
effect (80% power, 5% two-sided) from the differences' own spread: post hoc, since no spread was fixed in advance.
The verdict is Holm's step-down correction over the table's family (every entry against the baseline) at 5%
familywise: ``better`` or ``worse`` when the Holm-adjusted p-value is below 0.05, else ``unresolved``. An entry is
called equal only with ``--margin``: when the Holm-adjusted two one-sided tests put the difference inside it.

The probe columns are the module's within-response Spearman and pooled Pearson correlation with the Monte-Carlo
advantage A*, measured by `creditgym probe` on a batch of the same task at step 0 (the same model the study starts
from), each with its bootstrap 95% interval; ``grpo``'s row is the bar a token-level module must beat.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from creditgym.agents.study.results import FINISHED, upgrade_results
from creditgym.agents.study.stats import (
    holm,
    mean,
    min_detectable_effect,
    paired_t_pvalue,
    sample_sd,
    t_interval,
    t_pvalue,
)

ROOT = Path(__file__).resolve().parents[2]
BETTER, WORSE, UNRESOLVED = "better", "worse", "unresolved"
#: The familywise error rate of the verdicts (Holm).
ALPHA = 0.05


def paired(
    results: Mapping[str, Any], value: Callable[[Mapping[str, Any]], Any]
) -> Iterator[tuple[str, list[int], dict[int, Any], dict[int, Any]]]:
    """Per non-baseline entry of a study's results (current form): the seeds where both it and the baseline
    finished with a ``value`` (not None), and that value of each run by seed, the entry's and the baseline's."""

    def by_seed(entry: str) -> dict[int, Any]:
        runs = (r for r in results["runs"] if r["entry"] == entry and r["status"] == FINISHED)
        return {r["seed"]: v for r in runs if (v := value(r)) is not None}

    base = by_seed(results["baseline"])
    for entry in results["config"]["entries"]:
        if entry != results["baseline"]:
            mine = by_seed(entry)
            yield entry, sorted(set(mine) & set(base)), mine, base


def pool(studies: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One study's results (current form) from several studies of the same task and settings, such as a study and
    its follow-ups at other seeds: every run once, the entries in first-seen order, the seeds sorted.

    A (entry, seed) run found in two studies (``grpo``, rerun as each follow-up's baseline) is kept once, and must
    be the same run: the same config hash and held-out curve.

    Raises:
        ValueError: no study, a study with another baseline or other shared settings (``config.train``), or an
            (entry, seed) whose runs differ between studies.
    """
    if not studies:
        raise ValueError("pool: no study given")
    upgraded = [upgrade_results(r) for r in studies]
    first = upgraded[0]
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    entries: dict[str, None] = {}
    for i, results in enumerate(upgraded):
        if results["baseline"] != first["baseline"]:
            raise ValueError(
                f"pool: study {i} has baseline {results['baseline']!r}, study 0 has {first['baseline']!r}"
            )
        if results["config"]["train"] != first["config"]["train"]:
            raise ValueError(
                f"pool: study {i} was run with other settings: {results['config']['train']} against study 0's "
                f"{first['config']['train']}"
            )
        entries.update(dict.fromkeys(results["config"]["entries"]))
        for run in results["runs"]:
            key = (run["entry"], run["seed"])
            seen = runs.setdefault(key, run)
            if (seen["config_hash"], seen["curve"]) != (run["config_hash"], run["curve"]):
                raise ValueError(
                    f"pool: {run['entry']} seed {run['seed']} differs between studies (config hash or curve)"
                )
    config = {**first["config"], "entries": list(entries), "seeds": sorted({seed for _, seed in runs})}
    partial = any(r["partial"] for r in upgraded)
    return {**first, "config": config, "runs": list(runs.values()), "partial": partial}


def _one_sided(t: float, df: int) -> float:
    """``P(T >= t)`` for Student's t with ``df``."""
    half = t_pvalue(t, df) / 2
    return half if t >= 0 else 1.0 - half


def equivalence_pvalue(diffs: Sequence[float], margin: float) -> float:
    """The p-value of the two one-sided tests (TOST) that the mean of ``diffs`` lies inside ``(-margin, margin)``:
    the larger of the two one-sided p-values (below ``a`` exactly when the ``1 - 2a`` interval is inside)."""
    m, n = mean(diffs), len(diffs)
    se = sample_sd(diffs) / n**0.5
    if se == 0.0:
        return 0.0 if abs(m) < margin else 1.0
    return max(_one_sided((m + margin) / se, n - 1), _one_sided((margin - m) / se, n - 1))


def verdict_rows(results: Mapping[str, Any], margin: float | None = None) -> list[dict[str, Any]]:
    """One row per non-baseline entry of a study's results (either form): its paired difference to the baseline
    over the seeds both finished, the 95% interval, the MDE (post hoc), the p-value, the Holm-adjusted p-value
    over the rows with 2 or more pairs, and the verdict (None for fewer than 2 pairs). With ``margin``, an entry
    whose Holm-adjusted equivalence p-value (`equivalence_pvalue`) is below `ALPHA` is ``equal within +-margin``.

    Raises:
        ValueError: a ``margin`` that is not positive.
    """
    if margin is not None and margin <= 0:
        raise ValueError(f"verdict_rows: the equivalence margin must be > 0, got {margin}")
    rows = []
    for entry, seeds, mine, base in paired(upgrade_results(results), lambda r: r["final"]):
        diffs = [mine[s] - base[s] for s in seeds]
        ci = t_interval(diffs)
        sd = sample_sd(diffs) if ci else None
        row = {
            "entry": entry,
            "seeds": seeds,
            "diff": mean(diffs) if diffs else None,
            "ci95": list(ci) if ci else None,
            "sd": sd,
            "mde": None if sd is None else min_detectable_effect(sd, len(diffs)),
            "p": paired_t_pvalue(diffs),
        }
        if margin is not None:
            row["p_equal"] = None if ci is None else equivalence_pvalue(diffs, margin)
        rows.append(row)
    family = [row for row in rows if row["p"] is not None]
    for row, p_holm in zip(family, holm([row["p"] for row in family]), strict=True):
        row["p_holm"] = p_holm
    if margin is not None:
        for row, p_holm in zip(family, holm([row["p_equal"] for row in family]), strict=True):
            row["p_equal_holm"] = p_holm
    for row in rows:
        row["verdict"] = verdict_of(row, margin)
    return rows


def verdict_of(row: Mapping[str, Any], margin: float | None = None) -> str | None:
    """The verdict of a row with its Holm-adjusted p-values (`verdict_rows`); None without one."""
    if row.get("p_holm") is None:
        return None
    if row["p_holm"] < ALPHA:
        return BETTER if row["diff"] > 0 else WORSE
    if margin is not None and row["p_equal_holm"] < ALPHA:
        return f"equal within ±{margin:g}"
    return UNRESOLVED


def curve_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per non-baseline entry and held-out step after 0: the paired difference to the baseline at that step of
    the curve, over the seeds where both finished, with its 95% t-interval (None for fewer than 2 pairs).

    Step 0 is left out: every run of a study starts from the same model, so its difference is 0 by construction.
    """

    def curve(run: Mapping[str, Any]) -> dict[int, float]:
        return {int(step): v for step, v in run["curve"]}

    rows = []
    for entry, seeds, mine, base in paired(upgrade_results(results), curve):
        steps = sorted(set.intersection(*(set(mine[s]) & set(base[s]) for s in seeds)) - {0}) if seeds else []
        for step in steps:
            diffs = [mine[s][step] - base[s][step] for s in seeds]
            ci = t_interval(diffs)
            rows.append(
                {
                    "entry": entry,
                    "step": step,
                    "seeds": seeds,
                    "diff": mean(diffs),
                    "ci95": list(ci) if ci else None,
                }
            )
    return rows


def estimate(value: float, ci: Sequence[float] | None) -> str:
    """A figure as the tables print it (here and in headline.py): ``+0.123``, with ``[lo, hi]`` after it when it has an interval."""
    return f"{value:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")


def curve_markdown(results: Mapping[str, Any]) -> str:
    """The table (Markdown) of `curve_rows`: one row per entry, one column per held-out step."""
    rows = curve_rows(results)
    baseline = upgrade_results(results)["baseline"]
    steps = sorted({row["step"] for row in rows})
    lines = [
        "| entry | seeds paired | " + " | ".join(f"Δ vs `{baseline}` at step {s}" for s in steps) + " |",
        "|---|---:|" + "---:|" * len(steps),
    ]
    head = "Per held-out step: the paired difference with its 95% interval, per cell and unadjusted; no verdict is read from it.\n\n"
    for entry in dict.fromkeys(row["entry"] for row in rows):
        mine = {row["step"]: row for row in rows if row["entry"] == entry}
        cells = []
        for step in steps:
            row = mine.get(step)
            cells.append("" if row is None else estimate(row["diff"], row["ci95"]))
        seeds = len(next(iter(mine.values()))["seeds"])
        lines.append(f"| `{entry}` | {seeds} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


#: The figures a run with ``probe_every`` logs (`creditgym.agents.probe.run.probe_metrics`), in the table's order:
#: the module's, then A*'s split-half reliability and the attainable correlation (its square root).
PROBED = (
    "spearman",
    "pearson",
    "decisive_share",
    "reliability_spearman",
    "reliability_pearson",
    "attainable_spearman",
    "attainable_pearson",
)
#: The module's own figures of `PROBED`, given with their 95% t-interval across seeds (``<name>_ci95``).
WITH_INTERVAL = ("spearman", "pearson")


def logged_figure(figures: Mapping[str, Any], name: str) -> float | None:
    """The figure ``name`` of `PROBED` in what one run logged at one step. Runs before the probe reported
    attainable correlations logged A*'s reliability as ``ceiling_<corr>``: it is read as the reliability, and
    the attainable correlation is its square root (0 below 0), as the probe computes it."""
    if name in figures:
        return figures[name]
    kind, _, corr = name.partition("_")
    old = figures.get(f"ceiling_{corr}")
    if kind == "reliability" or old is None:
        return old
    return max(old, 0.0) ** 0.5 if kind == "attainable" else None


def probe_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per entry and probed step of a study run with ``--probe-every``: each figure of `PROBED`, averaged over the
    entry's finished runs that logged it at that step (None where none did), and the seeds averaged; each figure
    of `WITH_INTERVAL` also with the 95% t-interval of that mean across the runs (None for fewer than 2).

    A probe scores a batch of the run's own policy at that step, so each run's reliability of A* (and its
    attainable correlation) is its own; the table keeps them beside the figures they bound.
    """
    results = upgrade_results(results)
    rows = []
    for entry in results["config"]["entries"]:
        runs = [r for r in results["runs"] if r["entry"] == entry and r["status"] == FINISHED]
        by_step: dict[int, list[tuple[int, Mapping[str, Any]]]] = {}
        for run in runs:
            for probed in run["probe"]:
                by_step.setdefault(int(probed["step"]), []).append((run["seed"], probed["figures"]))
        for step, logged in sorted(by_step.items()):
            row: dict[str, Any] = {"entry": entry, "step": step, "seeds": sorted(seed for seed, _ in logged)}
            for name in PROBED:
                values = [v for _, figures in logged if (v := logged_figure(figures, name)) is not None]
                row[name] = mean(values) if values else None
                if name in WITH_INTERVAL:
                    ci = t_interval(values)
                    row[f"{name}_ci95"] = list(ci) if ci else None
            rows.append(row)
    return rows


def probe_markdown(results: Mapping[str, Any]) -> str:
    """The table (Markdown) of `probe_rows`: one row per entry and probed step (empty where nothing was probed),
    each figure of `WITH_INTERVAL` with its interval across seeds where there is one."""
    rows = probe_rows(results)
    if not rows:
        return ""
    lines = [
        "| entry | step | seeds | within-response Spearman with A* | pooled Pearson with A* | decisive-token share "
        "| A* reliability (split-half Spearman) | A* reliability (split-half Pearson) | attainable Spearman "
        "| attainable Pearson |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        cells = ["" if row[name] is None else estimate(row[name], row.get(f"{name}_ci95")) for name in PROBED]
        lines.append(
            f"| `{row['entry']}` | {row['step']} | {len(row['seeds'])} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def probe_figures(probe: Mapping[str, Any], entry: str) -> dict[str, Any] | None:
    """The probe's Spearman and Pearson figures of ``entry`` (its label in the probe), or None if not probed."""
    scores = probe["modules"].get(entry)
    return None if scores is None else {k: scores[k] for k in ("spearman", "pearson")}


def _fig(figure: Mapping[str, Any] | None) -> str:
    if not figure or figure["value"] is None:
        return "not probed"
    return estimate(figure["value"], figure["ci"])


def p_cell(p: float) -> str:
    """A p-value as the tables print it: three decimals, ``<0.001`` below that."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def caption(pairs: int, baseline: str, margin: float | None = None, planned_mde: float | None = None) -> str:
    """The paragraph above a verdict table: the family its verdicts are corrected over, the method, what the
    interval and the MDE are (and the one the design fixed in advance, ``planned_mde``), and what ``unresolved``
    means."""
    equal = (
        f"an entry is called equal only when Holm-adjusted two one-sided tests put its difference inside the "
        f"equivalence margin ±{margin:g}"
        if margin is not None
        else "no equivalence margin was fixed in advance, so no entry is called equal"
    )
    return (
        f"Verdicts: Holm's step-down correction over the family of this table's {pairs} paired "
        f"difference{'s' if pairs != 1 else ''} "
        f"(each entry against `{baseline}`, two-sided paired t-tests), 5% familywise: better or worse when the "
        f"Holm-adjusted p-value is below 0.05, else unresolved; {equal}. The 95% intervals are per pair, "
        "unadjusted. The MDE (80% power, 5% two-sided) is post hoc: from the differences' own observed spread, "
        + (
            "not fixed in advance.\n"
            if planned_mde is None
            else f"beside the one the study's design fixed in advance from its pilot: {planned_mde:.3f}.\n"
        )
    )


def verdict_markdown(
    results: Mapping[str, Any],
    probe: Mapping[str, Any] | None = None,
    margin: float | None = None,
    planned_mde: float | None = None,
) -> str:
    """The verdict table (Markdown) of `verdict_rows` under its `caption`, with the probe's figures when ``probe``
    is given."""
    results = upgrade_results(results)
    rows = verdict_rows(results, margin)
    baseline = results["baseline"]
    head = (
        f"| entry | seeds paired | Δ vs `{baseline}` (95% interval) | p (Holm) | MDE (post hoc) | verdict |"
    )
    rule = "|---|---:|---:|---:|---:|---|"
    if probe is not None:
        head += " probe: within-response Spearman with A* | probe: pooled Pearson with A* |"
        rule += "---:|---:|"
        figures = probe_figures(probe, baseline) or {}
        base_row = f"| `{baseline}` | | baseline | | | | {_fig(figures.get('spearman'))} | {_fig(figures.get('pearson'))} |"
    lines = [head, rule] + ([base_row] if probe is not None else [])
    for row in rows:
        if row["verdict"] is None:
            cells = f"| `{row['entry']}` | {len(row['seeds'])} | fewer than 2 pairs | | | |"
        else:
            cells = (
                f"| `{row['entry']}` | {len(row['seeds'])} | {estimate(row['diff'], row['ci95'])} "
                f"| {p_cell(row['p_holm'])} | {row['mde']:.3f} | {row['verdict']} |"
            )
        if probe is not None:
            figures = probe_figures(probe, row["entry"]) or {}
            cells += f" {_fig(figures.get('spearman'))} | {_fig(figures.get('pearson'))} |"
        lines.append(cells)
    pairs = sum(row["verdict"] is not None for row in rows)
    return caption(pairs, baseline, margin, planned_mde) + "\n" + "\n".join(lines) + "\n"


def _repo_path(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def committed() -> list[Path]:
    """The committed ``verdict.json`` files of the studies and their follow-ups under studies/results."""
    results = ROOT / "studies" / "results"
    return sorted(results.glob("*/verdict.json")) + sorted(results.glob("*/*/verdict.json"))


def rerender(record: Path) -> list[str]:
    """The command line (`main`'s arguments) that rendered the committed ``record`` (a ``verdict.json``): the
    studies it pooled, or the folder it lies in, the probe and the margin it quotes, written back beside it."""
    source = json.loads(record.read_text())
    studies = source.get("studies") or [_repo_path(record.parent)]
    argv = [arg for study in studies for arg in ("--study", str(ROOT / study))]
    if source.get("probe"):
        argv += ["--probe", str(ROOT / source["probe"])]
    if source.get("margin") is not None:
        argv += ["--margin", str(source["margin"])]
    if source.get("planned_mde") is not None:
        argv += ["--planned-mde", str(source["planned_mde"])]
    return [*argv, "--out", str(record.with_suffix(".md"))]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="render every committed verdict again from the runs it was made from (`committed`, `rerender`)",
    )
    parser.add_argument(
        "--study",
        type=Path,
        action="append",
        help="a compare study folder (its results.json); repeated, the studies' runs are pooled (`pool`)",
    )
    parser.add_argument("--probe", type=Path, help="a probe.json of the same task at step 0")
    parser.add_argument("--out", type=Path, help="write the table here too")
    parser.add_argument(
        "--margin",
        type=float,
        help="an equivalence margin fixed in advance: an entry inside it (Holm-adjusted TOST) is called equal",
    )
    parser.add_argument(
        "--planned-mde",
        type=float,
        help="the MDE the study's design fixed in advance (its caption quotes it)",
    )
    args = parser.parse_args(argv)
    if args.rerender:
        if args.study or args.probe or args.out or args.margin is not None or args.planned_mde is not None:
            parser.error("--rerender takes no other option: it reads each verdict.json's own")
        for record in committed():
            main(rerender(record))
        return
    if not args.study:
        parser.error("--study is required (or --rerender)")
    if args.margin is not None and args.margin <= 0:
        parser.error(f"--margin must be > 0, got {args.margin}")
    for study in args.study:
        if not (study / "results.json").is_file():
            parser.error(f"--study {study}: no results.json there")
    try:  # one study pools to itself, in the current form
        results = pool([json.loads((study / "results.json").read_text()) for study in args.study])
    except ValueError as e:
        parser.error(str(e))
    probe = json.loads(args.probe.read_text()) if args.probe else None
    table = verdict_markdown(results, probe, args.margin, args.planned_mde)
    curve, probed = curve_markdown(results), probe_markdown(results)
    print(table, curve, probed, sep="\n", end="")
    if args.out:  # the tables, and beside them the rows and probe they quote (what the tests check)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table)
        args.out.with_name("curve.md").write_text(curve)
        if probed:
            args.out.with_name("probes.md").write_text(probed)
        probe_path = None if args.probe is None else _repo_path(args.probe)
        record = {
            "studies": [_repo_path(study) for study in args.study] if len(args.study) > 1 else None,
            "probe": probe_path,
            "margin": args.margin,
            "planned_mde": args.planned_mde,
            "rows": verdict_rows(results, args.margin),
            "curve": curve_rows(results),
            "probes": probe_rows(results),
        }
        args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
