"""The probe across model scale (docs/study/scale.md): every credit module, and the positive control, scored against the
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
from types import SimpleNamespace
from typing import Any

import numpy as np

from creditgym.agents.probe.nulls import beats_credit, min_prompts, null_advantages
from creditgym.agents.probe.reliability import RELIABILITY, reliability
from creditgym.agents.probe.report import attainable, bootstrap_figures, response_ingredients
from creditgym.agents.providers.mc import MCEstimate

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
NULLS = (
    "null:position",
    "null:last",
    "null:uniform",
)  # no committed probe records entropies: no null:entropy
# intervals per task table, the Bonferroni family: per model the reliability, each module, each null, the control
FAMILY = (1 + len(MODULES) + len(NULLS) + 1) * len(MODELS)
ALPHA = 0.05 / FAMILY
N_BOOT = 10000  # resamples: the tails at alpha / 2 need thousands


def estimate(responses: list[Mapping[str, Any]]) -> MCEstimate:
    """The probe's Monte-Carlo estimate rebuilt from its responses (reward, group, starts, continuation rewards)."""
    episodes = [SimpleNamespace(reward=r["reward"], group=r["group"]) for r in responses]
    return MCEstimate(
        episodes,  # type: ignore[arg-type]
        [np.arange(len(r["tokens"])) for r in responses],
        [np.asarray(r["starts"]) for r in responses],
        [np.asarray(r["continuation_rewards"], dtype=np.float64) for r in responses],
    )


def rescore(base: Mapping[str, Any], warm: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every figure of a complete probe recomputed from its responses: the pooled reliability, each module's and
    each null's within-response Spearman, all with ``1 - ALPHA`` intervals from a bootstrap clustered by prompt
    (the same resamples for every entry); the critic modules from the warmed probe."""
    rows, seed = base["responses"], base["config"]["seed"]
    groups = [r["group"] for r in rows]
    est = estimate(rows)
    astar = [np.asarray(r["astar"]) for r in rows]
    nulls = null_advantages(
        [r["reward"] for r in rows], groups, [len(a) for a in astar], [r["starts"] for r in rows]
    )
    advs = {}
    for name in (*MODULES, CONTROL):
        source = warm if name in WARMED and warm is not None and warm.get("complete") else base
        advs[name] = (source is warm, [np.asarray(r["advantages"][name]) for r in source["responses"]])
    entries = {**{k: v for k, (_, v) in advs.items()}, **nulls}
    tables = [response_ingredients(adv, astar) for adv in entries.values()]
    figs = bootstrap_figures(tables, n_boot=N_BOOT, seed=seed, groups=groups, alpha=ALPHA)
    scored = dict(zip(entries, figs, strict=True))
    rel = reliability(est, n_boot=N_BOOT, seed=seed, groups=groups, alpha=ALPHA)
    prompts = len(set(groups))
    null_figs = {name: scored[name] for name in nulls}
    modules = {
        name: {
            "spearman": scored[name]["spearman"],
            "warmed": advs[name][0],
            "clear": clear_of_zero(scored[name]["spearman"]) and prompts >= min_prompts(ALPHA),
            "beats_nulls": beats_credit(scored[name], null_figs, "spearman", prompts=prompts, alpha=ALPHA),
        }
        for name in MODULES
    }
    saved = base.get("control", {}).get(CONTROL)
    control = None
    if saved is not None:
        measured = scored[CONTROL]["spearman"]
        within = rel["spearman"]
        expected = {
            "value": within["value"] * saved["factor"],
            "ci": [x * saved["factor"] for x in within["ci"]],
        }
        lo, hi = measured["ci"]
        control = {
            "factor": saved["factor"],
            "measured": measured,
            "expected": expected,
            "match": lo <= expected["value"] <= hi,
            "below": measured["value"] < expected["value"],
        }
    return {
        "prompts": prompts,
        "reliability": rel[RELIABILITY],
        "reliability_within": rel["spearman"],
        "attainable": attainable(rel)[RELIABILITY],
        "modules": modules,
        "nulls": {name: {"spearman": f["spearman"]} for name, f in null_figs.items()},
        "control": control,
    }


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
            "reliability_within": last.get("reliability"),  # what the refusal was judged on (within-response)
            "needed_k": needed_k(base),
        }
    return {
        "status": "complete",
        "responses": base["batch"]["responses"],
        "reward_mean": base["batch"]["reward_mean"],
        "k": base["batch"].get("k", base["config"]["k"]),
        "target": base["config"]["target"],
        "resumed_from": base["timing"].get("resumed_from"),
        "prefixes": base["batch"]["probed_prefixes"],
        "rollouts": base["batch"]["rollouts"] + base["batch"].get("control_rollouts", 0),
        "grown": len(base.get("rounds") or []) > 1,
        **rescore(base, warm),
    }


def table() -> dict[str, dict[str, Any]]:
    """``"<task>/<model>"`` -> `column`, for every task and model."""
    return {f"{task}/{model}": column(model, task) for task in TASKS for model in MODELS}


def cell(col: Mapping[str, Any], row: str) -> str:
    """One cell of the markdown table."""
    if col["status"] == "not run":
        return "not run"
    if col["status"] == "refused":
        if row == "A* reliability (split-half, within-response)":
            return f"{figure(col['reliability_within'])} at K = {col['k']} (95%, what the refusal judged)"
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
    if row == "A* reliability (split-half, pooled)":
        return figure(col["reliability"]) + (" (K grown adaptively)" if col["grown"] else "")
    if row == "A* reliability (split-half, within-response)":
        return figure(col["reliability_within"])
    if row == "attainable correlation":
        return figure(col["attainable"])
    if row == CONTROL:
        control = col["control"]
        if control is None:
            return "n/a"
        verdict = "inside" if control["match"] else "MISSES"
        side = "below" if control["below"] else "above"
        return f"{figure(control['measured'])}; expected {figure(control['expected'])}: {side}, {verdict}"
    if row in NULLS:
        return figure(col["nulls"][row]["spearman"])
    entry = col["modules"][row]
    mark = " **beats nulls**" if entry["beats_nulls"] else " **>0**" if entry["clear"] else ""
    return f"{figure(entry['spearman'])}{mark}"


def render(data: Mapping[str, Mapping[str, Any]]) -> str:
    """The markdown of `table`'s data: one table per task, a column per model, a row per figure."""
    lines = [
        "Within-response Spearman correlation of each module's per-token advantages with A* (Monte-Carlo), on one",
        "batch per model and task sampled before any training, recomputed from the committed probe.json files.",
        f"Intervals: percentile bootstrap clustered by prompt (prompts resampled, {N_BOOT} resamples), Bonferroni",
        f"corrected over the {FAMILY} intervals of each task's table: each is a {100 * (1 - ALPHA):.2f}% interval",
        f"(alpha = 0.05 / {FAMILY}). At that alpha a clustered bootstrap over P prompts needs P >= {min_prompts(ALPHA)}",
        "(below it, a resample of one prompt drawn P times is likelier than the tail): with fewer prompts nothing",
        "is called. A module **beats nulls** where its figure is above the best null baseline's and its interval's",
        "lower end is too; **>0** marks an interval above 0 only (`grpo`, constant within a response, scores 0).",
        "Null baselines: `null:position` (minus the token position times the sign of the response's advantage),",
        "`null:last` (that sign on the last probed segment), `null:uniform` (that sign on every token: constant",
        "within a response, so 0 here, as `grpo`); no committed probe records token entropies, so there is no",
        "entropy rule. A*'s reliability is the pooled split-half Pearson, Spearman-Brown corrected to K (the",
        "within-response form, shown below it, overstates it); where K was grown until the bound reached the",
        "target the stopping rule biases it upward. The attainable correlation is its square root. Critic modules",
        "(`gae`, `compo`, `pact`) are scored with critics warmed up by a 4-step run of the module, on the same",
        "batch and A*. `oracle:noise=0.5` is the positive control: A* from independent continuations, half its",
        "tokens' values permuted; its expected figure is the within-response reliability times the kept share.",
        "Generated by `python studies/scripts/scale_probe.py` from the probe.json files beside this one.",
    ]
    rows = (
        "batch",
        "A* reliability (split-half, pooled)",
        "A* reliability (split-half, within-response)",
        "attainable correlation",
        *MODULES,
        *NULLS,
        CONTROL,
    )
    for task, title in TASKS.items():
        lines += ["", f"**{title}**", "", "| figure | " + " | ".join(MODELS.values()) + " |"]
        lines.append("|---|" + "---:|" * len(MODELS))
        for row in rows:
            name = row if row in rows[:4] else f"`{row}`"
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
