"""What does the credit probe cost? Rollouts per second, its wall time, and ``vine``'s training step against ``grpo``.

    python examples/benchmarks/probe.py [--prompts 4 --group 4 --k 16] [--env creditgym/Math-v0] [--json PATH]

Runs ``creditgym probe`` on the bundled tiny model (``P x G`` responses, a fixed ``K`` continuations at every
token, every registered module scored; no target, no positive control) and reports its Monte-Carlo rollouts per second and wall time (target: under 3 minutes
for 16 responses with K = 16 on a 2-core CPU); then times training steps of ``vine`` (its defaults: K = 8, newline
steps) and ``grpo`` on the same recorded rollout batches, as ``credit_overhead.py`` does, and prints their ratio. The machine's load average is recorded
beside the numbers: on a shared machine quote the ratio, and say the absolute times were measured under load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from creditgym import credit
from creditgym.agents.probe.run import ProbeConfig, run_probe
from creditgym.agents.study.compare import parse_entry
from creditgym.agents.train.config import TrainConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from credit_overhead import measure_task  # the sibling benchmark's timing on recorded batches


def step_ratio(env_id: str, steps: int, seed: int) -> dict[str, dict[str, float]]:
    """``grpo`` and ``vine`` timed on the same recorded batches (one warm-up step, then ``steps``)."""
    cfg = TrainConfig(
        env_id=env_id, steps=1 + steps, seed=seed, prompts_per_step=4, group_size=4, eval_episodes=1
    )
    timing = argparse.Namespace(warmup=1, steps=steps, repeats=1, clock="cpu")
    _, results = measure_task(cfg, [parse_entry("grpo"), parse_entry("vine")], timing)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="creditgym/Math-v0")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2, help="timed training steps of vine and grpo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    load_before = os.getloadavg()
    modules = tuple(credit.available())
    cfg = ProbeConfig(
        env_id=args.env,
        credit=modules,
        prompts=args.prompts,
        group=args.group,
        k=args.k,
        target=None,
        every=1,
        seed=args.seed,
    )
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        result = run_probe(cfg, out)
        wall = time.perf_counter() - t0
    steps = step_ratio(args.env, args.steps, args.seed)
    report = {
        "env_id": args.env,
        "responses": result["batch"]["responses"],
        "k": args.k,
        "rollouts": result["batch"]["rollouts"],
        "rollouts_per_s": result["timing"]["rollouts_per_s"],
        "rollouts_s": result["timing"]["rollouts_s"],
        "probe_wall_s": wall,
        "under_3_min": wall < 180,
        "grpo_step_s": steps["grpo"]["step_s_per_step"],
        "vine_step_s": steps["vine"]["step_s_per_step"],
        "vine_step_over_grpo": steps["vine"]["ratio_to_grpo"],
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
    }
    print(f"{'what':<44} {'value':>10}")
    print(f"{'responses x K':<44} {report['responses']:>5} x {args.k:<3}")
    print(f"{'rollouts (every token)':<44} {report['rollouts']:>10}")
    print(f"{'rollouts per second':<44} {report['rollouts_per_s']:>10.1f}")
    print(f"{'probe wall time, all modules (s)':<44} {wall:>10.1f}")
    print(f"{'vine step / grpo step (K=8, newline steps)':<44} {report['vine_step_over_grpo']:>9.2f}x")
    print(
        f"load average before / after: {load_before[0]:.1f} / {report['machine']['load_average_after'][0]:.1f}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
