"""Throughput of ``creditgym.verifiers.rubric.grade`` with IFEval checkers only (run in the rubric's worker).

    python examples/benchmarks/rubric_grade.py [--tasks 200] [--repeats 3] [--seed 0] [--json PATH]

The inputs are fixed by ``seed``: ``tasks`` procedural rubric tasks (1-4 criteria each) and, for each, five
responses: the oracle (passes everything), the oracle lower-cased, with commas added, cut in half, and an empty
string. Every (task, response) pair is graded ``repeats`` times after one warm-up pass (which also pays for the
start of the IFEval worker, whose fork server imports ``if-verifiable`` and loads langdetect's profiles). The checks
run in a worker process under a deadline and a memory limit, so every call pays one round trip to it. Reported:
responses graded per second overall and per response kind, with p50/p99 latency. ``run(...)`` returns the numbers
as a dict for other scripts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from creditgym.envs.rubric_tasks import ProceduralRubric
from creditgym.verifiers.rubric import Criterion, grade

KINDS = ("oracle", "lower", "commas", "half", "empty")


def build_inputs(tasks: int, seed: int = 0) -> list[tuple[str, str, tuple[Criterion, ...]]]:
    """``(kind, response, criteria)`` triples, the same for a given seed."""
    out = []
    for task in ProceduralRubric(1, 4, "train").take(tasks, seed=seed):
        oracle = task.oracle or ""
        responses = {
            "oracle": oracle,
            "lower": oracle.lower(),
            "commas": oracle.replace(" ", ", ", 3),
            "half": oracle[: len(oracle) // 2],
            "empty": "",
        }
        out += [(kind, responses[kind], task.criteria) for kind in KINDS]
    return out


def run(tasks: int = 200, repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    inputs = build_inputs(tasks, seed)
    for _, response, criteria in inputs:  # warm-up
        grade(response, criteria)
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    scores: dict[str, list[float]] = {kind: [] for kind in KINDS}
    t_all = time.perf_counter()
    for _ in range(repeats):
        for kind, response, criteria in inputs:
            t0 = time.perf_counter()
            verdict = grade(response, criteria)
            times[kind].append(time.perf_counter() - t0)
            scores[kind].append(float(verdict.score or 0.0))
    wall = time.perf_counter() - t_all
    rows = {}
    for kind in KINDS:
        t = np.asarray(times[kind])
        rows[kind] = {
            "n": len(t),
            "responses_per_s": float(len(t) / t.sum()),
            "p50_ms": float(np.percentile(t, 50) * 1e3),
            "p99_ms": float(np.percentile(t, 99) * 1e3),
            "mean_score": float(np.mean(scores[kind])),
        }
    n = sum(r["n"] for r in rows.values())
    result = {
        "tasks": tasks,
        "repeats": repeats,
        "seed": seed,
        "criteria_per_task": float(np.mean([len(c) for _, _, c in inputs])),
        "responses": n,
        "seconds": wall,
        "responses_per_s": n / wall,
        "by_kind": rows,
    }
    lines = ["| kind | n | responses/s | p50 ms | p99 ms | mean score |", "|---|---|---|---|---|---|"]
    for kind, r in rows.items():
        lines.append(
            f"| {kind} | {r['n']} | {r['responses_per_s']:.0f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} "
            f"| {r['mean_score']:.3f} |"
        )
    lines.append(f"| **all** | {n} | **{n / wall:.0f}** | | | |")
    result["table"] = "\n".join(lines)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200, help="procedural tasks (default: %(default)s)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed passes over the inputs (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the task set (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    result = run(args.tasks, args.repeats, args.seed)
    print(result["table"])
    print(
        f"\n{result['responses_per_s']:.0f} responses graded per second "
        f"({result['criteria_per_task']:.2f} criteria per task, IFEval checkers only, in the deadline worker)"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
