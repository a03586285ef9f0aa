"""Your own rows and a verifier as a token-level env in one call, graded, then trained on.

python examples/single_turn_env.py                                  # grade a right and a wrong answer
python examples/single_turn_env.py --steps 2 --out runs/single-turn   # and train the bundled model on the rows
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.run_folder import RunFolderError
from creditgym.agents.train.trainer import train
from creditgym.envs import SingleTurnEnv

ROWS = [  # each row: a prompt, and the answer the math verifier grades against (the rubric verifier: criteria)
    {"id": "sum", "prompt": "What is 12 + 30?\nPut your final answer within \\boxed{}.", "answer": "42"},
    {"id": "twice", "prompt": "What is 2 * 21?\nPut your final answer within \\boxed{}.", "answer": 42},
    {"id": "less", "prompt": "What is 50 - 8?\nPut your final answer within \\boxed{}.", "answer": "42"},
]


def play(env: SingleTurnEnv, response: str) -> tuple[float, str]:
    """Write ``response`` into the env token by token (one step = one token) and return its reward and status."""
    env.reset(seed=0)
    for token in [*env.tokenizer(response, add_special_tokens=False)["input_ids"], min(env.stop_token_ids)]:
        _, reward, terminated, truncated, info = env.step(np.int64(token))
        if terminated or truncated:
            break
    return float(reward), str(info["status"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=0, help="training steps on the rows (0: only grade)")
    parser.add_argument("--out", default="runs/single-turn", help="run folder, with --steps")
    args = parser.parse_args()

    env = SingleTurnEnv(ROWS, verifier="math")  # a list of dicts, a .jsonl path, or a datasets.Dataset
    for response in ("The answer is \\boxed{42}.", "The answer is \\boxed{41}."):
        reward, status = play(env, response)
        print(f"{response!r}: reward {reward} ({status})")
    if args.steps:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = out.parent / f"{out.name}-rows.jsonl"
        rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))  # the run's config.json names this file
        try:
            cfg = TrainConfig(
                env_id="creditgym/SingleTurn-v0",
                env_kwargs={"rows": str(rows), "verifier": "math"},
                steps=args.steps,
                prompts_per_step=2,
                group_size=4,
                eval_episodes=3,
            )
        except ValueError as e:  # e.g. --steps -1
            parser.error(str(e))
        try:
            summary = train(cfg, out)
        except RunFolderError as e:  # a run already in --out: never overwritten
            parser.error(str(e))
        print(
            f"trained {args.steps} steps: held-out {summary['eval_before']:.3f} -> {summary['eval_after']:.3f}"
        )


if __name__ == "__main__":
    main()
