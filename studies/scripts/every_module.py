"""Every credit module trained on SmolLM2 on its home task: did each run finish its steps, with every logged metric
finite, and where did its held-out score go? Read from the committed ``metrics.jsonl`` and ``summary.json`` of
each module's folder:

    python studies/scripts/every_module.py studies/results/real-model/every-module-20-steps

writes ``table.md`` (and prints it) in that folder. The commands are in its ``run.sh``, the wall times in its
``wall-times.txt``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

MODULES = ("grpo", "rloo", "gae", "cort", "cast", "compo", "pact", "vine")


def run_row(folder: Path) -> dict[str, Any]:
    """One module's run: steps done, non-finite metrics, held-out curve, mean training reward, mean step time."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((folder / "summary.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    bad = sorted({k for r in rows for k, v in r.items() if isinstance(v, float) and not math.isfinite(v)})
    train = [r for r in rows if "rollout/reward" in r]
    return {
        "module": config["credit"],
        "env": config["env_id"] + (f" {json.dumps(config['env_kwargs'])}" if config["env_kwargs"] else ""),
        "steps": f"{len(train)}/{config['steps']}",
        "non_finite": bad,
        "eval_curve": summary["eval_curve"],
        "reward_mean": sum(r["rollout/reward"] for r in train) / max(len(train), 1),
        "step_s": sum(r["time/step_s"] for r in train) / max(len(train), 1),
    }


def wall_times(folder: Path) -> dict[str, int]:
    """module -> wall seconds, from ``wall-times.txt`` lines ``<module> rc=0 <seconds>s``."""
    path = folder / "wall-times.txt"
    found = re.findall(r"^(\S+) rc=0 (\d+)s$", path.read_text(), re.M) if path.is_file() else []
    return {name: int(s) for name, s in found}


def render(folder: Path) -> str:
    """The markdown table of every module folder under ``folder``."""
    walls = wall_times(folder)
    lines = [
        "| module | env | steps done | non-finite metrics | held-out score by step | mean training reward | "
        "mean step (s) | wall (min) |",
        "|---|---|---:|---|---|---:|---:|---:|",
    ]
    for name in MODULES:
        if not (folder / name / "metrics.jsonl").is_file():
            continue
        r = run_row(folder / name)
        curve = ", ".join(f"{int(s)}: {v:.3f}" for s, v in r["eval_curve"])
        wall = f"{walls[name] / 60:.1f}" if name in walls else "n/a"
        lines.append(
            f"| `{r['module']}` | `{r['env']}` | {r['steps']} | {', '.join(r['non_finite']) or 'none'} | {curve} | "
            f"{r['reward_mean']:.3f} | {r['step_s']:.1f} | {wall} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    text = render(args.folder)
    (args.folder / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
