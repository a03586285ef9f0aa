"""Each module's probe figures with its defaults before and after, and their paired difference (docs/credit/*.md).

The ``defaults-<module>-before`` probes ran at the base commit dc9fa02, the ``-after`` ones at the commit of the new
defaults with ``--reuse`` of the before file: the same batch and the same A*, so a response's figures pair up. The
difference after - before of each figure gets a 95% percentile interval from the same bootstrap resamples of the
responses (1000, seed 0), as the probe's own intervals. Writes ``paired.json`` and ``paired.md`` beside this file::

    .venv/bin/python studies/results/probe/defaults-before-after/paired.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from creditgym.agents.probe.report import _figures, response_ingredients

HERE = Path(__file__).resolve().parent
MODULES = ("cast", "compo", "pact", "vine", "cort")
FIGS = ("spearman", "pearson", "decisive_share")


def figure(draws: np.ndarray) -> dict[str, float | list[float] | None]:
    rest = draws[1:][~np.isnan(draws[1:])]
    ci = [float(np.percentile(rest, 2.5)), float(np.percentile(rest, 97.5))] if rest.size else None
    return {"value": None if np.isnan(draws[0]) else float(draws[0]), "ci": ci}


def paired(module: str, n_boot: int = 1000, seed: int = 0) -> dict[str, dict[str, dict]]:
    runs = {
        w: json.loads((HERE.parent / f"defaults-{module}-{w}" / "probe.json").read_text())
        for w in ("before", "after")
    }
    before, after = runs["before"]["responses"], runs["after"]["responses"]
    astar = [np.asarray(r["astar"]) for r in before]
    if any(not np.array_equal(a, r["astar"]) for a, r in zip(astar, after, strict=True)):
        raise ValueError(f"{module}: the before and after probes scored different A*")
    b = len(astar)
    w = np.vstack([np.ones(b), np.random.default_rng(seed).multinomial(b, np.full(b, 1.0 / b), n_boot)])
    figs = {
        name: _figures(response_ingredients([np.asarray(r["advantages"][label]) for r in rows], astar), w)
        for name, rows, label in (
            ("before", before, module),
            ("after", after, module),
            ("grpo", after, "grpo"),
        )
    }
    return {
        key: {
            "before": figure(figs["before"][key]),
            "after": figure(figs["after"][key]),
            "after - before": figure(figs["after"][key] - figs["before"][key]),
            "grpo": figure(figs["grpo"][key]),
        }
        for key in FIGS
    }


def cell(f: dict) -> str:
    if f["value"] is None:
        return "n/a"
    lo, hi = f["ci"] if f["ci"] is not None else (f["value"], f["value"])
    return f"{f['value']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def main() -> None:
    out = {m: paired(m) for m in MODULES}
    (HERE / "paired.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        "| module | figure | before | after | after - before | grpo |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for m, figs in out.items():
        for key, f in figs.items():
            lines.append(
                f"| `{m}` | {key} | {cell(f['before'])} | {cell(f['after'])} | {cell(f['after - before'])} | "
                f"{cell(f['grpo'])} |"
            )
    (HERE / "paired.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
