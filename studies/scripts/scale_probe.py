"""The probe across model scale (issue 41): every credit module, and the positive control, scored against the
Monte-Carlo A* on the bundled 1M-parameter model and on SmolLM2-135M-Instruct, on the same two tasks, before any
training. Every figure is read from a committed ``probe.json`` under ``studies/results/scale``:

    python studies/scripts/scale_probe.py            # writes studies/results/scale/table.md and table.json

``<model>-<task>/`` holds the probe of every module at once (`creditgym probe`, default entries); the critic
modules (`WARMED`) are read from ``<model>-<task>-warm/``, the same batch and the same A* (``--reuse``) with each
critic warmed up by a 4-step run of its module (``--warm``), the same run for both models. A probe that refused
(A*'s reliability could not reach the target within its budget) shows the K it would need instead of figures.
The commands are in ``studies/results/scale/run.sh``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCALE = ROOT / "studies" / "results" / "scale"

MODELS: dict[str, str] = {"tiny": "tiny (1M)", "smollm2": "SmolLM2-135M"}
TASKS: dict[str, str] = {
    "rubric": "hard rubric",
    "sums": "Math-v0 level 2",
    "word": "word problems (level 7, T = 0.7)",
}
MODULES = ("grpo", "rloo", "gae", "cort", "cast", "compo", "pact", "vine")
WARMED = frozenset({"gae", "compo", "pact"})
CONTROL = "oracle:noise=0.5"


def load(folder: str) -> dict[str, Any] | None:
    """A probe's ``probe.json`` under `SCALE`, or None when the folder holds none."""
    path = SCALE / folder / "probe.json"
    return json.loads(path.read_text()) if path.is_file() else None


def figure(fig: Mapping[str, Any] | None) -> str:
    """``value [low, high]`` of a figure with its interval, ``n/a`` when it has none."""
    if fig is None or fig.get("value") is None:
        return "n/a"
    low, high = fig["ci"]
    return f"{fig['value']:.3f} [{low:.3f}, {high:.3f}]"


def clear_of_zero(fig: Mapping[str, Any] | None) -> bool:
    """Whether a figure's 95% interval lies above 0."""
    return fig is not None and fig.get("ci") is not None and fig["ci"][0] > 0


def needed_k(probe: Mapping[str, Any]) -> int | None:
    """The K a refused probe said it would need (from its refusal), None when it does not say."""
    found = re.search(r"(?:projects|at least) K = (\d+)", probe.get("refused", ""))
    return int(found.group(1)) if found else None


def column(model: str, task: str) -> dict[str, Any]:
    """One model on one task: the batch, A*'s reliability, and each module's within-response Spearman."""
    base, warm = load(f"{model}-{task}"), load(f"{model}-{task}-warm")
    if base is None or not (base.get("complete") or base.get("refused")):
        return {"status": "not run"}  # (or not finished)
    if not base.get("complete"):
        last = (base.get("rounds") or [{}])[-1]
        rewards = [r["reward"] for r in base.get("responses", [])]
        return {
            "status": "refused",
            "responses": len(rewards),
            "reward_mean": sum(rewards) / len(rewards) if rewards else None,
            "k": last.get("k"),
            "reliability": last.get("reliability"),
            "needed_k": needed_k(base),
        }
    modules: dict[str, Any] = {}
    for name in MODULES:
        source = warm if name in WARMED and warm is not None and warm.get("complete") else base
        fig = source["modules"].get(name, {}).get("spearman")
        modules[name] = {"spearman": fig, "warmed": source is warm, "clear": clear_of_zero(fig)}
    control = base.get("control", {}).get(CONTROL)
    return {
        "status": "complete",
        "responses": base["batch"]["responses"],
        "reward_mean": base["batch"]["reward_mean"],
        "k": base["batch"].get("k", base["config"]["k"]),
        "target": base["config"]["target"],
        "resumed_from": base["timing"].get("resumed_from"),
        "prefixes": base["batch"]["probed_prefixes"],
        "rollouts": base["batch"]["rollouts"] + base["batch"].get("control_rollouts", 0),
        "reliability": base["reliability"]["spearman"],
        "attainable": base["attainable"]["spearman"],
        "modules": modules,
        "control": control,
    }


def table() -> dict[str, dict[str, Any]]:
    """``"<task>/<model>"`` -> `column`, for every task and model."""
    return {f"{task}/{model}": column(model, task) for task in TASKS for model in MODELS}


def cell(col: Mapping[str, Any], row: str) -> str:
    """One cell of the markdown table."""
    if col["status"] == "not run":
        return "not run"
    if col["status"] == "refused":
        if row == "A* reliability (split-half)":
            return f"{figure(col['reliability'])} at K = {col['k']}"
        if row == "batch":
            why = f"needs K >= {col['needed_k']}" if col["needed_k"] else "A* is 0 in every response"
            return f"{col['responses']} responses, mean reward {col['reward_mean']:.2f}: refused ({why})"
        return "-"
    if row == "batch":
        return (
            f"{col['responses']} responses, mean reward {col['reward_mean']:.2f}, K = {col['k']} "
            f"({'fixed' if col['target'] is None else 'target ' + format(col['target'], 'g')}), "
            f"{col['rollouts']} rollouts" + (" (resumed after a refusal)" if col["resumed_from"] else "")
        )
    if row == "A* reliability (split-half)":
        return figure(col["reliability"])
    if row == "attainable correlation":
        return figure(col["attainable"])
    if row == CONTROL:
        control = col["control"]
        if control is None:
            return "n/a"
        verdict = "matches" if control["match"] else "MISSES"
        return f"{figure(control['measured'])}; expected {figure(control['expected'])}: {verdict}"
    entry = col["modules"][row]
    mark = " **>0**" if entry["clear"] else ""
    return f"{figure(entry['spearman'])}{mark}"


def render(data: Mapping[str, Mapping[str, Any]]) -> str:
    """The markdown of `table`'s data: one table per task, a column per model, a row per figure."""
    lines = [
        "Within-response Spearman correlation of each module's per-token advantages with A* (Monte-Carlo), with its",
        "95% bootstrap interval over responses, on one batch per model and task sampled before any training. `grpo`",
        "gives every token of a response the same advantage, so its figure is 0 by construction: a module beats it",
        "where its interval lies above 0 (marked **>0**). The attainable correlation (the square root of A*'s",
        "reliability) is about the most a module can reach against this noisy A*. Critic modules (`gae`, `compo`,",
        "`pact`) are scored with critics warmed up by a 4-step run of the module, on the same batch and A*.",
        "`oracle:noise=0.5` is the positive control: A* from independent continuations, half its tokens' values",
        "permuted; its expected figure is the reliability times the kept share.",
        "Generated by `python studies/scripts/scale_probe.py` from the probe.json files beside this one.",
    ]
    rows = ("batch", "A* reliability (split-half)", "attainable correlation", *MODULES, CONTROL)
    for task, title in TASKS.items():
        lines += ["", f"**{title}**", "", "| figure | " + " | ".join(MODELS.values()) + " |"]
        lines.append("|---|" + "---:|" * len(MODELS))
        for row in rows:
            name = row if row in rows[:3] else f"`{row}`"
            if row in WARMED:
                name += " (critic warmed 4 steps)"
            cells = (cell(data[f"{task}/{model}"], row) for model in MODELS)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SCALE, help="folder for table.md and table.json")
    args = parser.parse_args()
    data = table()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "table.md").write_text(render(data))
    print(render(data))


if __name__ == "__main__":
    main()
