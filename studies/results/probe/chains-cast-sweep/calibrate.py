"""Calibrate CAST's absolute flip threshold ``delta`` for the context teacher: its noise floor.

The context teacher's gap ``g = log pi(y | block + x, y<t) - log pi(y | x, y<t)`` depends on which worked
examples fill the block, and that choice is arbitrary. So a gap is evidence only where it exceeds what swapping
the examples for another equally valid set moves it by. On a batch sampled from a checkpoint, ``g`` is computed
with ``R`` disjoint example sets; per token the spread across sets is the noise. ``delta`` = the 95th percentile of
``|g_a - g_b| / sqrt(2)`` over pairs of sets (the per-set noise is ``(g_a - g_b) / sqrt(2)`` when the sets' errors
are independent), i.e. about two standard deviations of the example-choice noise. Prints the |g| quantiles too.

    OMP_NUM_THREADS=1 .venv/bin/python studies/results/probe/chains-cast-sweep/calibrate.py --checkpoint RUN
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import torch

from creditgym.agents.probe.run import ProbeConfig, ProbeSetup, probe_batch, setup_probe
from creditgym.agents.providers import ForwardRequest, StepContext, teachers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None)
    ap.add_argument("--context", default="examples:2")
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cfg = ProbeConfig(
        env_id="creditgym/Math-v0",
        env_kwargs={"difficulty": 6},
        max_new_tokens=160,
        credit=(f'cast:teacher="context";teacher_context="{args.context}"',),
        prompts=args.prompts,
        group=args.group,
        seed=args.seed,
        checkpoint=args.checkpoint,
    )
    setup = setup_probe(cfg)
    ((_, _, providers),) = setup.modules.values()
    teacher = providers["teacher_logprobs"]
    episodes = probe_batch(setup, cfg)
    ctx = StepContext.of(0, episodes, setup.policy, ForwardRequest())
    gaps = []
    n = int(args.context.partition(":")[2] or 0)
    for s in range(args.sets):
        seed0 = 2**31 + 1000 * s
        teacher.block, teacher.example_prompts = _block(setup, args.context, seed0, n)
        g = (teacher.compute(ctx) - ctx.old_logprobs)[ctx.policy_mask]
        gaps.append(g.double().numpy())
    noise = np.concatenate([np.abs(a - b) / np.sqrt(2) for a, b in itertools.combinations(gaps, 2)])
    absg = np.abs(gaps[0])
    qs = (0.5, 0.75, 0.9, 0.95, 0.99)
    result = {
        "checkpoint": args.checkpoint,
        "context": args.context,
        "tokens": int(absg.size),
        "abs_g_quantiles": {str(q): float(np.quantile(absg, q)) for q in qs},
        "noise_quantiles": {str(q): float(np.quantile(noise, q)) for q in qs},
        "delta": float(np.quantile(noise, 0.95)),
        "share_abs_g_above_delta": float((absg > np.quantile(noise, 0.95)).mean()),
        "mean_g": float(np.mean(gaps[0])),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


def _block(setup: ProbeSetup, context: str, seed0: int, n: int) -> tuple[list[int], list[list[int]]]:
    old = teachers.EXAMPLE_SEED
    teachers.EXAMPLE_SEED = seed0
    try:
        return teachers.context_block(setup.env, setup.policy.tokenizer, context)
    finally:
        teachers.EXAMPLE_SEED = old


if __name__ == "__main__":
    with torch.no_grad():
        main()
