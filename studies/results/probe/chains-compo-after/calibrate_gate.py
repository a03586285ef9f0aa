"""CompPO's gate on the chains: kappa's distribution, its z-scores, and the gate eta under several settings.

The measurement behind ``CompPOConfig``'s gate defaults (``eta_min``, ``eta_max``, ``a``, ``b``). It samples the
probe's batch (same seeds as ``creditgym probe --prompts 8 --group 4 --seed 0`` on the chains), computes kappa
with the trainer's ``attention_stats`` provider, and prints, for each gate setting, eta's spread over the batch's
policy tokens (and within a response). Proposed slope and offset: ``a, b`` put the median z at
``sigmoid = 0.9`` and the 5th percentile at ``0.2`` (so over ``[eta_min, eta_max] = [0.5, 1]`` most tokens
pass credit on, eta ~ 0.95, and the most diffuse twentieth fall back on the critic, eta ~ 0.6)::

    .venv/bin/python studies/results/probe/chains-compo-after/calibrate_gate.py \
        --json studies/results/probe/chains-compo-after/gate.json [--checkpoint runs/compo-before]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditgym.agents.probe.run import ProbeConfig, probe_batch, setup_probe
from creditgym.agents.providers import StepContext
from creditgym.credit.compo import CompPOConfig, compo_gate
from creditgym.credit.gae import masked_whiten

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def spread(x: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean, sd, min, max and quantiles of ``x`` over ``mask``, and the mean within-row sd."""
    v = x[mask].double()
    rows = [x[b][mask[b]].double().std(correction=0).item() for b in range(x.shape[0]) if mask[b].sum() > 1]
    return {
        "mean": v.mean().item(),
        "sd": v.std(correction=0).item(),
        "min": v.min().item(),
        "max": v.max().item(),
        **{f"q{round(q * 100):02d}": torch.quantile(v, q).item() for q in QUANTILES},
        "row_sd_mean": float(np.mean(rows)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint", default=None, help="a creditgym train run folder (default: tiny model)"
    )
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    cfg = ProbeConfig(
        env_id="creditgym/Math-v0",
        env_kwargs={"difficulty": 6},
        max_new_tokens=160,
        credit=("compo",),
        prompts=args.prompts,
        group=args.group,
        seed=args.seed,
        checkpoint=args.checkpoint,
        model="creditgym/tiny",
    )
    setup = setup_probe(cfg)
    _, credit_cfg, providers = setup.modules["compo"]
    with torch.no_grad():
        episodes = probe_batch(setup, cfg)
        provider = providers["attention_stats"]
        ctx = StepContext.of(setup.step, episodes, setup.policy, provider.forward_request())
        kappa = provider.compute(ctx).double().cpu()  # (B, T)
    mask = ctx.policy_mask.cpu()
    z = masked_whiten(kappa, mask)
    zq = {q: torch.quantile(z[mask], q).item() for q in QUANTILES}
    a = (logit(0.9) - logit(0.2)) / (zq[0.5] - zq[0.05])
    b = logit(0.9) - a * zq[0.5]
    settings: dict[str, dict[str, Any]] = {
        "old default (0.9, 1, a=1, b=0)": {"eta_min": 0.9, "eta_max": 1.0, "a": 1.0, "b": 0.0},
        "proposed (0.5, 1, a, b from the quantiles)": {
            "eta_min": 0.5,
            "eta_max": 1.0,
            "a": round(a, 2),
            "b": round(b, 2),
        },
        "current CompPOConfig()": {k: getattr(CompPOConfig(), k) for k in ("eta_min", "eta_max", "a", "b")},
    }
    etas = {
        name: spread(compo_gate(kappa, mask, 0, CompPOConfig(**s)), mask) | {"config": s}
        for name, s in settings.items()
    }
    result = {
        "checkpoint": args.checkpoint,
        "responses": len(episodes),
        "policy_tokens": int(mask.sum()),
        "layers": list(credit_cfg.layers),
        "kappa": spread(kappa, mask),
        "z": spread(z, mask),
        "proposed": {"a": a, "b": b},
        "eta": etas,
    }
    print(f"{len(episodes)} responses, {int(mask.sum())} policy tokens, layers {list(credit_cfg.layers)}")
    for name in ("kappa", "z"):
        s = result[name]
        print(f"{name:>5}: " + ", ".join(f"{k} {v:.3f}" for k, v in s.items()))
    print(f"proposed a = {a:.3f}, b = {b:.3f}")
    print("| gate | eta mean | sd | min | q05 | q50 | q95 | max | within-response sd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, s in etas.items():
        print(
            f"| {name} | {s['mean']:.3f} | {s['sd']:.3f} | {s['min']:.3f} | {s['q05']:.3f} | {s['q50']:.3f} | "
            f"{s['q95']:.3f} | {s['max']:.3f} | {s['row_sd_mean']:.3f} |"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
