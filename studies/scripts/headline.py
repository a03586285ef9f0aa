"""The powered study's verdict per module at a glance: one row per module on its home task, with the
paired difference to `grpo` at the end of training, the probe's figures during training beside it, and the same
module on the easy control. Every difference, interval and MDE is read from a committed ``verdict.json``
(studies/scripts/verdict.py); the verdicts are Holm's correction over the family this table shows (its home-task
rows), from the p-values those files keep, so a row's verdict can differ from its study's table.

    python studies/scripts/headline.py --out studies/results/headline.md

`ROWS` names, for each row, the study (a folder of studies/results with a ``verdict.json``) whose verdict row it
quotes, the folder whose probes during training it quotes (None where the module was not probed during training
on that task), and the entry's name on the easy control (None where it did not run there).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from verdict import ALPHA, estimate, p_cell, verdict_of  # studies/scripts/verdict.py, beside this script

from creditgym.agents.study.stats import holm

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "results"
EASY = "study-easy"
LINKS = "study-chains/vine-links-pooled0-4"
CONTROLS = "study-chains/controls-pooled"


@dataclass(frozen=True)
class Row:
    """One module on its home task: ``entry`` in the verdict of ``study`` and in the probes of ``probed``."""

    entry: str
    task: str
    study: str
    probed: str | None
    easy: str | None


#: The modules on their home tasks (the chains for `cast`, `compo`, `pact` and `vine`, the hard rubric for
#: `cort`; `vine` as VinePPO runs it, with steps at the chain's links, at 5 seeds: with one step a response, its
#: old default, it is the outcome baseline), the baselines beside `grpo` on the chains, then the ablations and
#: the study's controls (CAST without its flips and with the snapshot teacher; CompPO's standard critic, shuffled
#: gate and GAE at the gate's mean lambda; PACT's probe critic and PACT without IS); each at the largest pool of
#: seeds the study has.
ROWS: tuple[Row, ...] = (
    Row("cast", "chains", "study-chains", "study-chains/probed-pooled", "cast"),
    Row("compo", "chains", "study-chains", "study-chains/probed-pooled", "compo"),
    Row("pact", "chains", "study-chains", "study-chains/probed-pooled", "pact"),
    Row('vine:delimiter=";"', "chains", LINKS, LINKS, None),
    Row("vine:every=16", "chains", CONTROLS, None, None),
    Row("vine", "chains, one step a response", CONTROLS, "study-chains/probed", "vine"),
    Row("cort", "hard rubric", "study-hard/pooled0-19", "study-hard/probed", "cort"),
    Row("rloo", "chains", CONTROLS, None, "rloo"),
    Row("gae", "chains", CONTROLS, None, "gae"),
    Row("cast:flip=false", "chains", CONTROLS, None, "cast:flip=false"),
    Row("cast:teacher=snapshot", "chains", CONTROLS, None, "cast:teacher=snapshot"),
    Row("compo:critic=standard", "chains", CONTROLS, None, None),
    Row("compo:gate=shuffled", "chains", CONTROLS, None, None),
    Row("gae:lam=0.865", "chains", CONTROLS, None, None),
    Row("pact:critic=probe", "chains", CONTROLS, None, None),
    Row("pact:without_is=true", "chains", CONTROLS, None, None),
)


@cache
def _verdict(study: str) -> dict[str, Any]:
    return json.loads((RESULTS / study / "verdict.json").read_text())


def verdict_row(study: str, entry: str) -> Mapping[str, Any]:
    """The verdict row of ``entry`` in ``study``'s ``verdict.json``.

    Raises:
        KeyError: the study has no verdict row for that entry.
    """
    for row in _verdict(study)["rows"]:
        if row["entry"] == entry:
            return row
    raise KeyError(f"{study}/verdict.json has no row for {entry!r}")


def probe_cell(probed: str | None, entry: str) -> str:
    """The within-response Spearman with A* of ``entry`` at each step it was probed during training, mean over
    the probed seeds: ``+0.027 / -0.004 / +0.016 (4 seeds)``, or ``not probed during training``."""
    if probed is None:
        return "not probed during training"
    rows = [r for r in _verdict(probed)["probes"] if r["entry"] == entry]
    if not rows:
        raise KeyError(f"{probed}/verdict.json has no probe rows for {entry!r}")
    figures = " / ".join("n/a" if r["spearman"] is None else f"{r['spearman']:+.3f}" for r in rows)
    seeds = len(rows[0]["seeds"])
    return f"{figures} ({seeds} seed{'s' if seeds != 1 else ''})"


def headline_verdicts(rows: Sequence[Row] = ROWS) -> list[dict[str, Any]]:
    """Per row, its study's verdict row with ``p_holm`` and ``verdict`` taken again over this table's family: the
    home-task differences of ``rows`` (Holm, `ALPHA` familywise)."""
    found = [dict(verdict_row(row.study, row.entry)) for row in rows]
    for v, p_holm in zip(found, holm([v["p"] for v in found]), strict=True):
        v["p_holm"] = p_holm
        v["verdict"] = verdict_of(v)
    return found


def wider_family(rows: Sequence[Row] = ROWS) -> tuple[int, list[tuple[str, float]]]:
    """The family grown by the easy column's differences: its size, and the home-task rows resolved in
    `headline_verdicts` that it would leave unresolved, each with its Holm-adjusted p-value there."""
    home = headline_verdicts(rows)
    easy = [verdict_row(EASY, row.easy)["p"] for row in rows if row.easy is not None]
    adjusted = holm([v["p"] for v in home] + easy)[: len(home)]
    lost = [(v["entry"], p) for v, p in zip(home, adjusted, strict=True) if v["p_holm"] < ALPHA <= p]
    return len(home) + len(easy), lost


def headline_caption(rows: Sequence[Row] = ROWS) -> str:
    """The paragraph above the table: the family and method of its verdicts, and what a wider family changes."""
    size, lost = wider_family(rows)
    change = ", ".join(f"`{entry}` (adjusted p {p_cell(p)})" for entry, p in lost) or "none"
    return (
        f"Verdicts: Holm's step-down correction over the family of this table's {len(rows)} home-task paired "
        "differences (each entry against `grpo`, two-sided paired t-tests), 5% familywise; unresolved is not "
        "equal (no equivalence margin was fixed in advance). The 95% intervals are per pair, unadjusted; the MDE "
        "(80% power) is post hoc, from the differences' observed spread. The easy control's intervals carry no "
        f"verdict here (its own table corrects over its entries). Counted in the family too ({size} tests), they "
        f"would leave unresolved: {change}.\n"
    )


def headline_markdown(rows: Sequence[Row] = ROWS) -> str:
    """The table (Markdown) under its `headline_caption`: per row, the verdict over this table's family, the
    probes during training and the easy control."""
    lines = [
        "| entry | home task | seeds paired | Δ vs `grpo` at step 60 (95% interval) | p (Holm) | MDE (post hoc) "
        "| verdict | within-response Spearman with A* during training, steps 0 / 30 / 60 "
        "| easy control: Δ vs `grpo` (6 seeds) | folder |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for row, v in zip(rows, headline_verdicts(rows), strict=True):
        e = None if row.easy is None else verdict_row(EASY, row.easy)
        easy = "not run" if e is None else estimate(e["diff"], e["ci95"])
        lines.append(
            f"| `{row.entry}` | {row.task} | {len(v['seeds'])} | {estimate(v['diff'], v['ci95'])} "
            f"| {p_cell(v['p_holm'])} | {v['mde']:.3f} | {v['verdict']} | {probe_cell(row.probed, row.entry)} "
            f"| {easy} | `{row.study}` |"
        )
    return headline_caption(rows) + "\n" + "\n".join(lines) + "\n"


def holm_changes() -> list[dict[str, Any]]:
    """Every pair of a committed verdict table (and of the headline) that an uncorrected 5% test calls better or
    worse and Holm's correction over its table leaves unresolved: the table, the entry, its difference with its
    interval, and the two p-values."""
    tables = [(p.parent.relative_to(RESULTS).as_posix(), _verdict(p.parent.relative_to(RESULTS).as_posix())["rows"])
              for p in sorted(RESULTS.glob("**/verdict.json"))]  # fmt: skip
    tables.append(("headline.md", headline_verdicts()))
    return [
        {
            "table": table,
            "entry": v["entry"],
            "diff": v["diff"],
            "ci95": v["ci95"],
            "p": v["p"],
            "p_holm": v["p_holm"],
        }
        for table, rows in tables
        for v in rows
        if v.get("p_holm") is not None and v["p"] < ALPHA <= v["p_holm"]
    ]


def holm_changes_markdown() -> str:
    """The table (Markdown) of `holm_changes`."""
    lines = [
        "Pairs an uncorrected 5% test called worse or better that Holm's correction over their table leaves "
        "unresolved:\n",
        "| table | entry | Δ vs `grpo` (95% interval) | p | p (Holm) |",
        "|---|---|---:|---:|---:|",
    ]
    for c in holm_changes():
        lines.append(
            f"| `{c['table']}` | `{c['entry']}` | {estimate(c['diff'], c['ci95'])} | {p_cell(c['p'])} "
            f"| {p_cell(c['p_holm'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        help="write the table here too, and beside it holm-changes.md (`holm_changes_markdown`)",
    )
    args = parser.parse_args(argv)
    table = headline_markdown()
    print(table, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table)
        args.out.with_name("holm-changes.md").write_text(holm_changes_markdown())


if __name__ == "__main__":
    main()
