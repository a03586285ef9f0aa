"""Cheap credit: every module against the exact truth (``creditgym/Planted-v0``) and against A* (the hard rubric,
level-2 sums), for the bundled tiny model and SmolLM2-135M-Instruct, with each module's training-step time
relative to ``grpo``'s.

    bash studies/results/cheap-credit/run.sh           # the probes (their commands and wall times are there)
    python studies/scripts/cheap_credit.py time         # step times -> studies/results/cheap-credit/step-times.json
    python studies/scripts/cheap_credit.py filler       # how far a filler token moves a slot (layout="random")
    python studies/scripts/cheap_credit.py              # table.json and docs/study/cheap-credit.md from the files

The rubric and sums rows read the committed scale probes (``studies/results/scale``: the seed modules, ``vine``,
the positive control and the null baselines; the critic modules from their warm-started rescoring) and, for the
modules added since, their rescoring on the same batches and A* (``--reuse``, in this folder).

Step time: one real optimizer step of ``Trainer.train_step`` (rollouts, signals, credit, the actor and critic
updates) at the probe's batch size (or the smaller one ``--prompts-per-step`` and ``--group-size`` ask for), from
the same weights and so on the same batch every time (the weights are restored before each timed step),
alternating with ``grpo``'s: the ratio of the medians of ``repeats`` timed steps each, after one untimed warm-up
step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "studies" / "results" / "cheap-credit"
SCALE = ROOT / "studies" / "results" / "scale"
PAGE = ROOT / "docs" / "study" / "cheap-credit.md"
MODELS = {"creditgym/tiny": "tiny", "smollm2-135m": "smollm2"}
TASKS = {
    "planted": (
        "creditgym/Planted-v0",
        {"match": "parity"},
        {"prompts_per_step": 8, "group_size": 4, "max_new_tokens": 16},
    ),
    "rubric-hard": (
        "creditgym/Rubric-v0",
        {"preset": "hard"},
        {"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 48},
    ),
    "sums": ("creditgym/Math-v0", {}, {"prompts_per_step": 8, "group_size": 4, "max_new_tokens": 48}),
}
PLANTED_VINE = (
    "vine:every=4"  # Planted's parity tokens hold no delimiter: vine with a boundary every 4 tokens
)
FIELDS = ("module", "model", "task", "truth", "spearman", "ci_low", "ci_high", "step_time_vs_grpo")
EXTRA = (
    "pearson",
    "decisive_share",
)  # beside each row: with a truth that is 0 on most tokens, ties blunt Spearman
NEW = ("forking", "ktae", "prime")


# -- step times -------------------------------------------------------------------------------------------------


def _labels(task: str) -> list[str]:
    from creditgym.credit import available

    names = [
        n for n in available() if not (task == "planted" and n == "cort")
    ]  # Planted has no criteria block
    return [PLANTED_VINE if task == "planted" and n == "vine" else n for n in names]


def step_times(
    model: str,
    task: str,
    repeats: int,
    seed: int = 0,
    labels: list[str] | None = None,
    sizes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Median seconds of a training step per module (``labels``, default every one the task can run), each beside
    ``grpo``'s measured in alternation with it. ``same_batch``: every timed step of the module saw one batch (the
    same mean reward and token count), as restoring the weights before each step means it should."""
    import torch

    from creditgym.agents.study.compare import parse_entry
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.trainer import Trainer

    env_id, env_kwargs, task_sizes = TASKS[task]
    sizes = {**task_sizes, **(sizes or {})}

    def trainer(label: str, folder: str) -> tuple[Trainer, dict[str, torch.Tensor]]:
        entry = parse_entry(label)
        cfg = TrainConfig(
            env_id=env_id,
            env_kwargs=env_kwargs,
            model=model,
            credit=entry.module,
            credit_kwargs=dict(entry.kwargs),
            seed=seed,
            steps=10,
            eval_episodes=2,
            **sizes,
        )
        tr = Trainer(cfg, Path(folder) / entry.module)
        return tr, {k: v.detach().clone() for k, v in tr.policy.model.state_dict().items()}

    seen: dict[str, set[tuple[float, float]]] = {}

    def timed(tr: Trainer, weights: dict[str, torch.Tensor], key: str) -> float:
        tr.policy.model.load_state_dict(weights)  # the same weights, hence the same batch, every time
        t0 = time.perf_counter()
        metrics = tr.train_step()
        spent = time.perf_counter() - t0
        seen.setdefault(key, set()).add((metrics["rollout/reward"], metrics["rollout/response_tokens"]))
        return spent

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        base, base_w = trainer("grpo", folder)
        timed(base, base_w, "grpo")  # warm-up
        for label in labels or _labels(task):
            if label == "grpo":
                continue
            tr, w = trainer(label, folder)
            timed(tr, w, label)  # warm-up: first-call costs are not a step's cost
            mod, ref = [], []
            for _ in range(1 if label.startswith("vine") else repeats):
                ref.append(timed(base, base_w, "grpo"))
                mod.append(timed(tr, w, label))
            out[label] = {
                "step_s": statistics.median(mod),
                "grpo_step_s": statistics.median(ref),
                "ratio": statistics.median(mod) / statistics.median(ref),
                "repeats": len(mod),
                "same_batch": len(seen[label]) == 1,
            }
            print(f"{MODELS[model]} {task} {label}: {out[label]['ratio']:.2f} x grpo", flush=True)
            del tr
    out["grpo"] = {
        "step_s": None,
        "grpo_step_s": None,
        "ratio": 1.0,
        "repeats": 0,
        "same_batch": len(seen["grpo"]) == 1,
    }
    return out


# -- how far filler moves a slot ----------------------------------------------------------------------------------


def filler_effect(model: str = "creditgym/tiny", prompts: int = 4, group: int = 16) -> dict[str, Any]:
    """With ``layout="random"``, the spread over one prompt's responses of the policy's probability of filling the
    first slot (the tokens before it differ): 0 if filler did not matter, as `exact_advantages` assumes."""
    from creditgym.agents.probe.exact import SlotValues
    from creditgym.agents.probe.run import probe_batch
    from creditgym.agents.probe.setup import ProbeConfig, setup_probe
    from creditgym.envs.core import Source

    cfg = ProbeConfig(
        env_id="creditgym/Planted-v0",
        env_kwargs={"match": "parity", "layout": "random"},
        model=model,
        credit=("grpo",),
        prompts=prompts,
        group=group,
        k=2,
        target=None,
        seed=0,
        bootstrap=0,
    )
    setup = setup_probe(cfg)
    spread = {}
    for ep in probe_batch(setup, cfg):
        led = ep.env.ledger
        start = int((np.asarray(led.source) == Source.PROMPT).sum())
        ids = [int(t) for t in led.token_id]
        s0 = ep.env.decisive_slots[0]
        width = int(setup.policy.model.get_output_embeddings().weight.shape[0])
        masks = ep.env.decisive_masks(width)[:1]
        p = SlotValues(setup.policy, masks).value(ids[: start + s0], 0)[0]  # the last slot of one: its mass
        spread.setdefault(ep.group, []).append(p)
    return {
        "model": model,
        "per_prompt": [
            {"mean": float(np.mean(v)), "sd": float(np.std(v)), "n": len(v)} for v in spread.values()
        ],
        "command": "python studies/scripts/cheap_credit.py filler",
    }


# -- the table --------------------------------------------------------------------------------------------------


def _probe(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _row(
    module: str, model: str, task: str, truth: str, figs: dict[str, Any], ratio: float | None
) -> dict[str, Any]:
    """One row of the table from a probe entry's figures (the required fields, then `EXTRA`)."""
    ci = figs["spearman"].get("ci") or [None, None]
    return {
        "module": module,
        "model": model,
        "task": task,
        "truth": truth,
        "spearman": figs["spearman"]["value"],
        "ci_low": ci[0],
        "ci_high": ci[1],
        "step_time_vs_grpo": ratio,
        **{k: figs[k]["value"] for k in EXTRA},
    }


def _ratio(times: dict[str, Any], model: str, task: str, module: str) -> float | None:
    t = times.get(f"{MODELS[model]}/{task}", {})
    entry = t.get(module) or t.get(module.split(":")[0]) or {}
    return None if entry.get("ratio") is None else round(entry["ratio"], 3)


def _mc_sources(short: str, task: str) -> list[tuple[Path, tuple[str, ...] | None]]:
    """The probe files of one (model, task) and which of their modules each gives (None: every one)."""
    scale_task = {"rubric-hard": "rubric", "sums": "sums"}[task]
    return [
        (SCALE / f"{short}-{scale_task}" / "probe.json", None),
        (SCALE / f"{short}-{scale_task}-warm" / "probe.json", ("gae", "compo", "pact")),
        (OUT / f"{short}-{scale_task}" / "probe.json", NEW),
    ]


def table() -> dict[str, Any]:
    times = json.loads((OUT / "step-times.json").read_text()) if (OUT / "step-times.json").exists() else {}
    rows, batches = [], {}
    for model, short in MODELS.items():
        planted = _probe(OUT / f"{short}-planted" / "probe.json")
        batches[f"{short}/planted"] = {**planted["batch"], "error_bound": planted["exact"]["error_bound"]}
        for name, fig in planted["modules"].items():
            rows.append(_row(name, model, "planted", "mc", fig, _ratio(times, model, "planted", name)))
        for name, fig in planted["nulls"].items():
            rows.append(_row(name, model, "planted", "mc", fig, None))
        for name, fig in planted["exact"]["entries"].items():
            ratio = None if name.startswith(("A*", "null:")) else _ratio(times, model, "planted", name)
            rows.append(_row(name, model, "planted", "exact", fig, ratio))
        for task in ("rubric-hard", "sums"):
            seen = set()
            for path, only in reversed(_mc_sources(short, task)):  # the newest scoring of a module wins
                result = _probe(path)
                batches.setdefault(f"{short}/{task}", result["batch"])
                modules = {n: f for n, f in result["modules"].items() if only is None or n in only}
                for name, fig in {**modules, **result.get("nulls", {})}.items():  # nulls: the same A*
                    if name in seen:
                        continue
                    seen.add(name)
                    ratio = None if name.startswith(("null:", "oracle")) else _ratio(times, model, task, name)
                    rows.append(_row(name, model, task, "mc", fig, ratio))
    return {"fields": [*FIELDS, *EXTRA], "rows": rows, "batches": batches, "step_times": times}


def _order(name: str) -> tuple[int, int, str]:
    """Rows in reading order: the outcome baselines, the seed modules, the new ones, vine, the control, the
    nulls, the sampled A*."""
    from creditgym.credit import available

    base = name.split(":")[0]
    if name.startswith("A*"):
        return (6, 0, name)
    if base == "null":
        return (5, 0, name)
    if base == "oracle":
        return (4, 0, name)
    if base == "vine":
        return (3, 0, name)
    if base in ("grpo", "rloo"):
        return (0, ("grpo", "rloo").index(base), name)
    names = list(available())
    return (2 if base in NEW else 1, names.index(base) if base in names else len(names), name)


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "n/a" if x is None else format(x, fmt)


def target(data: dict[str, Any], model: str = "smollm2-135m", task: str = "rubric-hard") -> list[str]:
    """The target's verdict, module by module: a step at most 1.5 x grpo's, a Spearman with A* at least half of
    ``vine``'s and above the best null's, its interval clear of both."""
    rows = {
        r["module"]: r for r in data["rows"] if (r["model"], r["task"], r["truth"]) == (model, task, "mc")
    }
    vine = next(r for name, r in rows.items() if name.startswith("vine"))
    half = vine["spearman"] / 2
    nulls = {n: r for n, r in rows.items() if n.startswith("null:")}
    best_null, null_row = max(nulls.items(), key=lambda kv: kv[1]["spearman"])
    bar = max(half, null_row["spearman"])
    out = [
        f"The target, on {MODELS[model]} and the {task} task: `vine` {vine['spearman']:.3f}, so at least "
        f"{half:.3f}; the best null is `{best_null}` at {null_row['spearman']:.3f}; a step at most 1.5 x grpo's.",
        "",
    ]
    for name, r in rows.items():
        if name.startswith(("null:", "oracle", "vine")) or name in ("grpo", "rloo"):
            continue
        ratio = r["step_time_vs_grpo"]
        cheap_enough = ratio is not None and ratio <= 1.5
        clear = r["ci_low"] is not None and r["ci_low"] > bar
        verdict = "meets it" if cheap_enough and clear else "falls short"
        why = []
        if not cheap_enough:
            why.append(
                "its step costs " + ("an unmeasured amount" if ratio is None else f"{ratio:.2f} x grpo's")
            )
        if not clear:
            why.append(f"its interval [{_f(r['ci_low'])}, {_f(r['ci_high'])}] is not clear of {bar:.3f}")
        out.append(
            f"- `{name}` {_f(r['spearman'])}: {verdict}" + (f" ({'; '.join(why)})" if why else "") + "."
        )
    return out


def render(data: dict[str, Any]) -> str:
    """The docs page of ``table.json`` (and, after the generated part, ``notes.md`` of the results folder)."""
    walls = (
        (OUT / "wall-times.txt").read_text().strip().splitlines() if (OUT / "wall-times.txt").exists() else []
    )
    filler = json.loads((OUT / "filler.json").read_text()) if (OUT / "filler.json").exists() else None
    lines = [
        "# Cheap credit: against the exact truth and against A*",
        "",
        "Every credit module's within-response Spearman with the truth: the **exact** truth on "
        '[`creditgym/Planted-v0`](../envs/planted.md) (`match="parity"`, the two decisive slots leading the '
        "response, 16 tokens; [how it is computed](../probe.md#against-the-exact-truth)), and the Monte-Carlo "
        "A* (**mc**) there and on the hard rubric and level-2 sums, for the bundled tiny model and "
        "SmolLM2-135M-Instruct, all on batches sampled before any training. Intervals: the probe's 95% "
        "percentile bootstrap clustered by prompt (not corrected for the number of rows: read a row's interval "
        "against its own table's nulls). Step time: one real training step (at the batch size each table states), divided "
        "by `grpo`'s measured in alternation with it (`python studies/scripts/cheap_credit.py time`). Critic "
        "modules (`gae`, `compo`, `pact`) are untrained on Planted and warmed up 4 steps on the rubric and sums "
        "(as in [Across model scale](scale.md)); `vine` is the Monte-Carlo reference line, not a cheap module.",
        "",
    ]
    for model, short in MODELS.items():
        for task in ("planted", "rubric-hard", "sums"):
            b = data["batches"].get(f"{short}/{task}")
            if b is None:
                continue
            truths = ("exact", "mc") if task == "planted" else ("mc",)
            head = " | ".join(f"Spearman with the {t} truth" for t in truths)
            if task == "planted":
                head += " | Pearson (exact, pooled) | decisive-token share (exact)"
            timing = data["step_times"].get(f"{short}/{task}")
            if timing is None:
                timed = "step times not measured"
            else:
                sizes = timing.get("sizes", TASKS[task][2])
                reps = max(v["repeats"] for v in timing.values() if isinstance(v, dict) and "repeats" in v)
                timed = (
                    f"step times at {sizes['prompts_per_step']} x {sizes['group_size']} responses, median of "
                    f"{reps} alternating step{'s' if reps > 1 else ''}"
                )
            lines += [
                f"**{short}, {task}** ({b['responses']} responses, mean reward {b['reward_mean']:.2f}, "
                f"K = {b['k']}"
                + (f", exact to {b['error_bound']:.0e}" if task == "planted" else "")
                + f"; {timed})",
                "",
                f"| entry | {head} | step time vs grpo |",
                "|---|" + "---:|" * (len(truths) + (2 if task == "planted" else 0)) + "---:|",
            ]
            cells: dict[str, dict[str, dict[str, Any]]] = {}
            for r in data["rows"]:
                if r["model"] == model and r["task"] == task:
                    cells.setdefault(r["module"], {})[r["truth"]] = r
            for name, by in sorted(cells.items(), key=lambda kv: _order(kv[0])):
                shown = []
                for t in truths:
                    r = by.get(t)
                    shown.append(
                        "" if r is None else f"{_f(r['spearman'])} [{_f(r['ci_low'])}, {_f(r['ci_high'])}]"
                    )
                if task == "planted":
                    ex = by.get("exact", {})
                    shown += [_f(ex.get("pearson")), _f(ex.get("decisive_share"))]
                ratio = next((r["step_time_vs_grpo"] for r in by.values() if r["step_time_vs_grpo"]), None)
                label = name if name.startswith("A*") else f"`{name}`"
                lines.append(f"| {label} | {' | '.join(shown)} | {_f(ratio, '.2f')} |")
            lines.append("")
    if filler:
        sds = ", ".join(f"{p['sd']:.2f}" for p in filler["per_prompt"])
        lines += [
            'Why the slots lead the response: with `layout="random"` the tokens before a slot move its '
            f"probability. On the bundled model, the standard deviation of the first slot's probability over "
            f"each prompt's {filler['per_prompt'][0]['n']} responses is {sds} (`{filler['command']}`): "
            "no truth that sets the filler's advantage to 0 holds there.",
            "",
        ]
    if any(r["task"] == "rubric-hard" and r["model"] == "smollm2-135m" for r in data["rows"]):
        lines += ["## The target", "", *target(data), ""]
    notes = OUT / "notes.md"
    if notes.exists():
        lines += [notes.read_text().strip(), ""]
    lines += [
        "Reproduce (CPU): `bash studies/results/cheap-credit/run.sh`, then "
        "`python studies/scripts/cheap_credit.py time` and `python studies/scripts/cheap_credit.py`. Wall times "
        "of the probes on two shared cores:",
        "",
        "```text",
        *walls,
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="table", choices=("table", "time", "filler"))
    ap.add_argument("--repeats", type=int, default=3, help="timed steps per module (vine: 1)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma list (time)")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma list (time)")
    ap.add_argument("--prompts-per-step", type=int, help="time: fewer prompts than the probe's batch")
    ap.add_argument("--group-size", type=int, help="time: a smaller group than the probe's batch")
    args = ap.parse_args()
    if args.what == "time":
        path = OUT / "step-times.json"
        times = json.loads(path.read_text()) if path.exists() else {}
        small = {"prompts_per_step": args.prompts_per_step, "group_size": args.group_size}
        small = {k: v for k, v in small.items() if v is not None}
        for model in args.models.split(","):
            for task in args.tasks.split(","):
                t0 = time.perf_counter()
                key = f"{MODELS[model]}/{task}"
                entry = step_times(model, task, args.repeats, sizes=small)
                entry["wall_s"] = round(time.perf_counter() - t0, 1)
                entry["sizes"] = {**TASKS[task][2], **small}
                entry["repeats_asked"] = args.repeats
                times = json.loads(path.read_text()) if path.exists() else {}  # another run may have written
                times[key] = entry
                path.write_text(json.dumps(times, indent=1) + "\n")
        return
    if args.what == "filler":
        (OUT / "filler.json").write_text(json.dumps(filler_effect(), indent=1) + "\n")
        return
    data = table()
    (OUT / "table.json").write_text(json.dumps(data, indent=1) + "\n")
    PAGE.write_text(render(data))
    print(PAGE.read_text())


if __name__ == "__main__":
    main()
