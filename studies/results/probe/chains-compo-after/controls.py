"""CompPO's controls on the probe's own batch, with the trained critic: the gate's effect, isolated.

``creditgym probe`` gives the checkpoint's trained providers (its TAC critic) only to the module label it was
trained as (``compo``); a variant label (``compo:gate=shuffled``, ``gae:lam=0.86``) starts an untrained critic
(V = 0), so its figures say nothing about the gate. This script re-samples the probe's batch (the same seeds, so
the same responses: checked against ``probe.json``), computes each variant of ``compo`` through the *trained*
providers, and scores it against the A* that ``probe.json`` holds, with the same paired bootstrap::

    .venv/bin/python studies/results/probe/chains-compo-after/controls.py --checkpoint runs/compo-after \\
        --probe studies/results/probe/chains-compo-after/probe.json \\
        --variant eta_min=0.86,eta_max=0.86 --variant gate=shuffled --variant gate=position

Writes ``controls.json`` and ``controls.md`` beside ``probe.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from creditgym.agents.probe.report import _cell, bootstrap_figures, response_ingredients
from creditgym.agents.probe.run import (
    ProbeConfig,
    _seed,
    module_advantages,
    probe_batch,
    setup_probe,
)

FIGS = ("spearman", "pearson", "decisive_share", "sign_agreement")


def parse_variant(text: str) -> dict[str, Any]:
    """``"eta_min=0.86,gate=shuffled"`` -> ``{"eta_min": 0.86, "gate": "shuffled"}`` (JSON values, else strings)."""
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True, help="the compo run the probe read")
    parser.add_argument("--probe", type=Path, required=True, help="its probe.json (complete)")
    parser.add_argument(
        "--variant", action="append", default=[], help="compo config overrides, key=value,..."
    )
    args = parser.parse_args()
    probe = json.loads(args.probe.read_text())
    c = probe["config"]
    cfg = ProbeConfig(
        env_id=c["env_id"],
        env_kwargs=c["env_kwargs"],
        max_new_tokens=c["max_new_tokens"],
        credit=("compo",),
        prompts=c["prompts"],
        group=c["group"],
        k=c["k"],
        every=c["every"],
        seed=c["seed"],
        checkpoint=args.checkpoint,
    )
    setup = setup_probe(cfg)
    module, trained_cfg, providers = setup.modules["compo"]
    episodes = probe_batch(setup, cfg)
    responses = probe["responses"]
    tokens = [
        [ep.env.tokenizer.decode([t]) for t in ep.env.ledger.token_id[ep.env.ledger.policy_mask]]
        for ep in episodes
    ]
    if [r["tokens"] for r in responses] != tokens:
        raise SystemExit(
            "the re-sampled batch differs from probe.json's: not the same seeds, model or checkpoint"
        )
    astar = [np.asarray(r["astar"]) for r in responses]
    labels = {"compo (probe.json)": None, "compo (recomputed)": {}}
    labels.update({f"compo:{v}": parse_variant(v) for v in args.variant})
    advantages = {}
    for label, overrides in labels.items():
        if overrides is None:
            advantages[label] = [np.asarray(r["advantages"]["compo"]) for r in responses]
            continue
        variant = dataclasses.replace(trained_cfg, **overrides)
        advantages[label] = module_advantages(
            module,
            variant,
            providers,
            episodes,
            setup.policy,
            step=setup.step,
            total_steps=setup.run.steps,
            seed=_seed(cfg.seed, 3),
        )
    for name in probe["modules"]:
        if name != "compo":
            advantages[f"{name} (probe.json)"] = [np.asarray(r["advantages"][name]) for r in responses]
    recomputed = np.concatenate(advantages["compo (recomputed)"])
    same = float(np.abs(recomputed - np.concatenate(advantages["compo (probe.json)"])).max())
    tables = [response_ingredients(a, astar) for a in advantages.values()]
    figs = bootstrap_figures(tables, n_boot=1000, seed=cfg.seed)
    result = {
        "checkpoint": args.checkpoint,
        "probe": str(args.probe),
        "max_abs_diff_recomputed_vs_probe": same,
        "modules": dict(zip(advantages, figs, strict=True)),
    }
    lines = [
        f"Controls on the probe's batch ({len(responses)} responses), `compo`'s trained critic shared by every "
        f"`compo:` row; 95% bootstrap intervals over responses, paired (the same resamples as `probe.json`). "
        f"Recomputed `compo` vs `probe.json`: max |diff| = {same:.1e}.",
        "",
        "| module | within-response Spearman | pooled Pearson | decisive-token share | sign agreement (abs(A*) >= 0.25) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, f in result["modules"].items():
        lines.append(f"| `{name}` | " + " | ".join(_cell(f[k]) for k in FIGS) + " |")
    out = args.probe.parent
    (out / "controls.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "controls.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
