"""What each entry's training did, window by window, from a study's per-step metrics: the measurements a verdict's
"why" quotes (rollout reward, policy entropy, response length, mean advantage, the critic's explained variance).

    python studies/scripts/diagnostics.py --study runs/study-chains --windows 20 \\
        --out studies/results/study-chains/diagnostics.md

Reads ``runs/<entry>/seed<k>/metrics.jsonl`` of a `creditgym compare` study folder. Per entry and window of
``--windows`` steps: the mean over the entry's seeds of each seed's mean over the window's steps. The mean advantage
is the module's own ``credit/<module>/adv_mean`` (0 by construction for group-normalised modules); the explained
variance is the critic's (``credit/<module>/explained_var``), where the module has one; the last two columns are
CAST's: the share of all-wrong groups and of the tokens of correct rows flipped to a negative advantage. ``--out`` also writes the
rows as JSON beside the table (``.json``).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from creditgym.agents.study.compare import parse_entry, run_dir
from creditgym.agents.study.stats import mean

#: column -> (metric key, where ``{module}`` is the entry's module name)
COLUMNS: dict[str, str] = {
    "reward": "rollout/reward",
    "entropy": "actor/entropy",
    "response tokens": "rollout/response_tokens",
    "mean advantage": "credit/{module}/adv_mean",
    "critic EV": "credit/{module}/explained_var",
    "all-wrong groups": "credit/{module}/all_wrong_frac",
    "correct-row flips": "credit/{module}/flip_pos_frac",
}

FORMATS = {
    "reward": ".3f",
    "entropy": ".3f",
    "response tokens": ".1f",
    "mean advantage": "+.3f",
    "critic EV": "+.3f",
    "all-wrong groups": ".3f",
    "correct-row flips": ".3f",
}


def window_means(rows: Sequence[Mapping[str, Any]], key: str, size: int) -> dict[int, float]:
    """``{window start: mean of key}`` over the training rows (those with ``rollout/reward``) of each window of
    ``size`` steps (steps 1..size, size+1..2 size, ...); a window where no row has ``key`` is left out."""
    by_window: dict[int, list[float]] = {}
    for row in rows:
        if "rollout/reward" not in row or key not in row or not math.isfinite(row[key]):
            continue
        start = (int(row["step"]) - 1) // size * size + 1
        by_window.setdefault(start, []).append(float(row[key]))
    return {start: mean(xs) for start, xs in sorted(by_window.items())}


def diagnostics(study: Path, size: int) -> list[dict[str, Any]]:
    """One row per (entry, window): each column's mean over the entry's seeds (None where no seed logs it)."""
    config = json.loads((study / "config.json").read_text())
    out = []
    for label in config["entries"]:
        entry = parse_entry(label)
        per_seed = []
        for seed in config["seeds"]:
            path = run_dir(study, entry, seed) / "metrics.jsonl"
            if path.is_file():
                rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                per_seed.append(
                    {c: window_means(rows, k.format(module=entry.module), size) for c, k in COLUMNS.items()}
                )
        starts = sorted({s for seed in per_seed for s in seed["reward"]})
        for start in starts:
            seeds = sum(start in seed["reward"] for seed in per_seed)
            row: dict[str, Any] = {"entry": label, "steps": [start, start + size - 1], "seeds": seeds}
            for column in COLUMNS:
                values = [seed[column][start] for seed in per_seed if start in seed[column]]
                row[column] = mean(values) if values else None
            out.append(row)
    return out


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    head = "| entry | steps | seeds | " + " | ".join(COLUMNS) + " |"
    lines = [head, "|---|---|---:|" + "---:|" * len(COLUMNS)]
    for row in rows:
        cells = ["" if row[c] is None else format(row[c], FORMATS[c]) for c in COLUMNS]
        lo, hi = row["steps"]
        lines.append(f"| `{row['entry']}` | {lo}-{hi} | {row['seeds']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--study", type=Path, required=True, help="a compare study folder (config.json, runs/)"
    )
    parser.add_argument("--windows", type=int, default=20, help="steps per window (default 20)")
    parser.add_argument("--out", type=Path, help="write the table here too, and its rows beside it (.json)")
    args = parser.parse_args(argv)
    if not (args.study / "config.json").is_file():
        parser.error(f"--study {args.study}: no config.json there (not a compare study folder)")
    if args.windows < 1:
        parser.error(f"--windows must be >= 1, got {args.windows}")
    rows = diagnostics(args.study, args.windows)
    table = markdown(rows)
    print(table, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table)
        args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
