"""Where does a training step's time go? Rollout tokens/s with the HF backend and the split of one step.

    python examples/benchmarks/train_step.py [--steps 5] [--credit grpo] [--json runs/bench/train_step.json]

Runs a few real steps of ``creditgym train`` on the bundled tiny model (Math env, default settings) and prints the
mean time of each phase: generate (HF ``generate`` + the behaviour-logprob pass), env/verify (stepping the
episodes and verifying the answers), signals, credit, backward (the update). Quote the shares, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import Trainer

PHASES = ("generate", "env_verify", "signals", "credit", "backward")


def run(steps: int, credit: str, seed: int = 0) -> dict[str, float]:
    cfg = TrainConfig(credit=credit, steps=steps, seed=seed, eval_episodes=8)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(cfg, out)
        trainer.train_step()  # warm-up: first-call costs (allocations, verifier pool start) are not a step's cost
        rows = []
        for _ in range(steps):
            trainer.step += 1
            rows.append(trainer.train_step())
    result = {f"{p}_s": float(np.mean([r[f"time/{p}_s"] for r in rows])) for p in PHASES}
    result["step_s"] = float(np.mean([r["time/step_s"] for r in rows]))
    result["tokens_per_s"] = float(np.mean([r["rollout/tokens_per_s"] for r in rows]))
    result["responses_per_step"] = cfg.prompts_per_step * cfg.group_size
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--credit", default="grpo")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    r = run(args.steps, args.credit)
    print(f"{'phase':<12} {'seconds':>8} {'share':>7}")
    for p in PHASES:
        print(f"{p:<12} {r[f'{p}_s']:>8.3f} {r[f'{p}_s'] / r['step_s']:>7.1%}")
    print(f"{'step':<12} {r['step_s']:>8.3f}")
    print(
        f"rollout tokens/s (HF backend, {r['responses_per_step']} responses per step): {r['tokens_per_s']:.0f}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
