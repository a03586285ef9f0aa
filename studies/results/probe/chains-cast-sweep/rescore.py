"""Score many CAST variants on a finished probe's batch and A*, without new rollouts.

The probe's batch is drawn again from the same checkpoint and seed (``creditgym.agents.probe.probe_batch``; the
decoded tokens are checked against ``probe.json``), every variant computes its advantages on it with the
trainer's providers, and each is scored against the A* stored in ``probe.json``: the four probe figures (95%
bootstrap intervals over responses, the same resamples for every variant) and the flip mark's figures
(`mark_figures`). A variant with ``teacher="snapshot"`` or ``"ema"`` gets the checkpoint's trained teacher weights.

    OMP_NUM_THREADS=1 .venv/bin/python studies/results/probe/chains-cast-sweep/rescore.py \\
        --probe studies/results/probe/chains-cast-before/probe.json --out studies/results/probe/chains-cast-sweep \\
        'cast:teacher="snapshot";delta=null' 'cast:lam=0.5' ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from creditgym.agents.probe.report import bootstrap_figures, mark_figures, response_ingredients
from creditgym.agents.probe.run import (
    ProbeConfig,
    _seed,
    module_credit,
    probe_batch,
    setup_probe,
)
from creditgym.agents.train.checkpoint import load_checkpoint


def _cell(f: dict[str, Any]) -> str:
    if f.get("value") is None:
        return "n/a"
    ci = f.get("ci")
    return f"{f['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", required=True, help="a finished probe.json")
    ap.add_argument("--out", required=True, help="folder for sweep.json and sweep.md")
    ap.add_argument("--name", default="sweep", help="file stem of the outputs")
    ap.add_argument("variants", nargs="+", help="credit entries, e.g. 'cast:lam=0.5;delta=0.3'")
    args = ap.parse_args()

    probe = json.loads(Path(args.probe).read_text())
    c = probe["config"]
    cfg = ProbeConfig(
        env_id=c["env_id"],
        env_kwargs=c["env_kwargs"],
        model=c["model"],
        credit=tuple(args.variants),
        prompts=c["prompts"],
        group=c["group"],
        k=c["k"],
        every=c["every"],
        temperature=c["temperature"],
        top_p=c["top_p"],
        max_new_tokens=c["max_new_tokens"],
        seed=c["seed"],
        checkpoint=c["checkpoint"],
    )
    setup = setup_probe(cfg)
    state = load_checkpoint(c["checkpoint"]) if c["checkpoint"] else None
    for _module, _cfg, providers in setup.modules.values():
        teacher = providers.get("teacher_logprobs")
        if state is not None and teacher is not None and getattr(teacher, "kind", "") in ("snapshot", "ema"):
            teacher.load_state_dict(state["providers"]["teacher_logprobs"])
    episodes = probe_batch(setup, cfg)
    responses = probe["responses"]
    assert len(episodes) == len(responses), (len(episodes), len(responses))
    for ep, r in zip(episodes, responses, strict=True):
        tok = ep.env.tokenizer
        got = [tok.decode([t]) for t in ep.env.response_tokens().tolist()]
        assert got == r["tokens"], "the batch drawn again differs from probe.json's"
    astar = [np.asarray(r["astar"], dtype=np.float64) for r in responses]
    tables, marks = [], {}
    for label, (module, credit_cfg, providers) in setup.modules.items():
        adv, m = module_credit(
            module,
            credit_cfg,
            providers,
            episodes,
            setup.policy,
            step=setup.step,
            total_steps=setup.run.steps,
            seed=_seed(cfg.seed, 3),
        )
        tables.append(response_ingredients(adv, astar))
        if m:
            marks[label] = mark_figures(m["flip"], astar, n_boot=1000, seed=cfg.seed)
    figs = dict(zip(setup.modules, bootstrap_figures(tables, n_boot=1000, seed=cfg.seed), strict=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(
        json.dumps({"probe": args.probe, "figures": figs, "flip": marks}, indent=1) + "\n"
    )
    lines = [
        f"Variants scored on the batch and A* of `{args.probe}` (checkpoint step {c['checkpoint_step']}); "
        "95% bootstrap intervals over responses.",
        "",
        "| variant | within-response Spearman | pooled Pearson | decisive-token share | sign agreement | flipped "
        "tokens (share) | flips whose A* has the flip's sign | chance |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, f in figs.items():
        m = marks.get(label)
        flip = (
            f"{m['marked']} ({m['marked_frac']:.3f}) | {_cell(m['share'])} | {_cell(m['chance'])}"
            if m
            else " | | "
        )
        cells = " | ".join(_cell(f[k]) for k in ("spearman", "pearson", "decisive_share", "sign_agreement"))
        lines.append(f"| `{label}` | {cells} | {flip} |")
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
