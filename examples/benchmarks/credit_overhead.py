"""What does each credit module cost? Training-step time of every module divided by ``grpo``'s, in one run.

    python examples/benchmarks/credit_overhead.py [--steps 3] [--env creditgym/Math-v0] [--json PATH]

Each module trains the bundled tiny model for a warm-up step and ``--steps`` timed steps from the same seed (so
the first batch is the same for all), and the table splits the step into the signals the module asked for (the
counterfactual replay, the teacher pass, the attention pass, the value head; PACT's post-update pass) and the
credit function itself. Quote the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from creditgym import credit
from creditgym.agents.config import TrainConfig
from creditgym.agents.trainer import Trainer


def measure(name: str, env_id: str, steps: int, seed: int) -> dict[str, float]:
    cfg = TrainConfig(env_id=env_id, credit=name, steps=steps + 1, seed=seed, eval_episodes=8)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(cfg, out)
        rows = []
        for _ in range(steps + 1):
            rows.append(trainer.train_step())
            trainer.step += 1
    rows = rows[1:]  # the warm-up step pays one-time costs (allocations, the verifier pool)

    def mean(key: str) -> float:
        return float(np.mean([r.get(key) or 0.0 for r in rows]))

    return {
        "step_s": mean("time/step_s"),
        "signals_s": mean("time/signals_s") + mean("time/critic_phase_s"),
        "credit_s": mean("time/credit_s"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--env", default="creditgym/Math-v0")
    parser.add_argument("--modules", default=",".join(credit.available()))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    names = [n for n in args.modules.split(",") if n]
    if "grpo" not in names:
        names.insert(0, "grpo")
    results = {name: measure(name, args.env, args.steps, args.seed) for name in names}
    base = results["grpo"]["step_s"]
    print(f"{'module':<8} {'step / grpo':>11} {'signals share':>14} {'credit share':>13}")
    for name, r in results.items():
        r["ratio_to_grpo"] = r["step_s"] / base
        r["signals_share"] = r["signals_s"] / r["step_s"]
        r["credit_share"] = r["credit_s"] / r["step_s"]
        print(
            f"{name:<8} {r['ratio_to_grpo']:>10.2f}x {r['signals_share']:>14.1%} {r['credit_share']:>13.2%}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
