"""How fast is a token-level episode? And the math verifier's pool against plain math-verify.

    python examples/benchmarks/env_step.py [--tokens 20000] [--verify-n 500] [--json runs/bench/env_step.json]

Prints one table and writes the same numbers as JSON. Per-token stepping goes through ``gymnasium.make`` (so
Gymnasium's wrappers are included), beside a bare Python loop appending to a list in the same run: the ratio is
what to quote, since absolute times vary with the machine. Verification is excluded from the stepping numbers
(no episode ends inside the timed loops); it is measured on its own below them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import creditgym  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _non_stop_tokens(env: gym.Env, n: int, seed: int = 0) -> np.ndarray:
    base = env.unwrapped
    tokens = np.random.default_rng(seed).integers(0, base.vocab_size, size=n, dtype=np.int64)
    stop = np.isin(tokens, list(base.stop_token_ids))
    tokens[stop] = 100  # never end the episode inside the timed loop
    return tokens


def bench_step(n_tokens: int, repeats: int = 5) -> dict[str, float]:
    env = gym.make("creditgym/Math-v0", max_new_tokens=n_tokens + 1)
    tokens = _non_stop_tokens(env, n_tokens)
    as_ints = [int(t) for t in tokens]
    best_step, best_list = float("inf"), float("inf")
    for _ in range(repeats):
        env.reset(seed=0)
        step = env.step
        t0 = time.perf_counter()
        for t in as_ints:
            step(t)
        best_step = min(best_step, time.perf_counter() - t0)
        t0 = time.perf_counter()
        out: list[int] = []
        append = out.append
        for t in as_ints:
            append(t)
        best_list = min(best_list, time.perf_counter() - t0)
    env.close()
    return {
        "us_per_token": 1e6 * best_step / n_tokens,
        "list_append_us_per_token": 1e6 * best_list / n_tokens,
    }


def bench_chunks(chunk: int = 1000, n_chunks: int = 50, repeats: int = 5) -> dict[str, float]:
    env = gym.make("creditgym/Math-v0", max_new_tokens=chunk * n_chunks + 1)
    tokens = _non_stop_tokens(env, chunk * n_chunks).reshape(n_chunks, chunk)
    best = float("inf")
    for _ in range(repeats):
        env.reset(seed=0)
        t0 = time.perf_counter()
        for row in tokens:
            env.step(row)
        best = min(best, time.perf_counter() - t0)
    env.close()
    return {"ms_per_1000_token_chunk": 1e3 * best / n_chunks * 1000 / chunk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=[500, 2_000, 20_000],
        help="episode lengths to step token by token (the observation copies the whole context)",
    )
    parser.add_argument("--verify-n", type=int, default=500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    steps = {n: bench_step(n) for n in args.tokens}
    chunks = bench_chunks()
    from verify_math import run as run_verify

    verify = run_verify(n=args.verify_n, workers=args.workers, timeout=2.0)

    rows = []
    for n, step in steps.items():
        ratio = step["us_per_token"] / step["list_append_us_per_token"]
        rows += [
            (
                f"step via gymnasium.make, {n:,}-token episode",
                f"{step['us_per_token']:.2f} us/token",
                "target <= 5 us",
            ),
            ("  bare Python list.append, same loop", f"{step['list_append_us_per_token']:.3f} us/token", ""),
            ("  ratio step / append", f"{ratio:.0f}x", ""),
        ]
    chunk_ms = chunks["ms_per_1000_token_chunk"]
    rows.append(("1,000-token chunk via step(array)", f"{chunk_ms:.3f} ms/chunk", "target <= 0.5 ms"))
    for key, value in verify.get("table", []):
        rows.append((key, value, ""))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>22}  note")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>22}  {note}")
    result = {"step": {str(n): v for n, v in steps.items()}, "chunks": chunks, "verify": verify}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
