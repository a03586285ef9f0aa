"""Throughput and latency of ``creditgym.verifiers.math.verify_many`` against plain math-verify, serially.

    python examples/benchmarks/verify_math.py [--n 500] [--workers 2] [--timeout 2.0] [--json PATH]

Both sides judge the same ``n`` (response, gold) pairs, built from a fixed seed: boxed integers, fractions vs
decimals, GSM8K ``#### N``, "The answer is N", algebraic forms, radicals, sets, intervals, matrices, percentages,
multiple choice, hedged answers and answers left in prose. Every gold is different (no gold-parse cache hits).

(a) plain math-verify, in this process, one pair after the other: ``parse(gold)``, ``parse(response)``,
    ``verify(gold, answer)`` with math-verify's default (SIGALRM) timeouts;
(b) ``MathVerifier(workers).verify_many`` on a warm pool (workers started and warmed on other pairs first).

The two take turns on chunks of 100 pairs (same pairs on both sides), so other jobs on a shared machine skew
both alike. CPU time per item is reported too (parent plus workers for the pool): with ``workers`` idle cores the
throughput ratio would be about ``workers * serial_cpu / pool_cpu``, printed as "ratio if the cores were idle".

Latency of (a) is the time of one pair; latency of (b) is ``details["elapsed"]``, the time from when a worker
started the item to its result, which is what the deadline bounds. Throughput is pairs per second of wall time.
``run(n, workers, timeout)`` returns the numbers as a dict (with a ready-made ``table``) for other scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

from creditgym.verifiers.math import MathVerifier
from creditgym.verifiers.verdict import Verdict


def _prose(rng: random.Random) -> str:
    """A few sentences of worked reasoning with inline math, like a model's chain of thought."""
    parts = []
    for _ in range(rng.randint(3, 7)):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        parts.append(
            rng.choice(
                [
                    f"First we compute ${a} \\times {b} = {a * b}$. ",
                    f"Adding the two parts gives {a} + {b} = {a + b}. ",
                    f"Since the ratio is $\\frac{{{a}}}{{{b}}}$, we simplify it. ",
                    f"Let $x$ be the number of items; then $x + {a} = {a + b}$, so $x = {b}$. ",
                    f"We check the case $n = {a}$ separately, which leaves {b} possibilities. ",
                ]
            )
        )
    return "".join(parts)


def build_inputs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` realistic (response, gold) pairs, the same for a given seed."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    while len(pairs) < n:
        k = len(pairs)
        prose = _prose(rng)
        right = rng.random() < 0.6
        a, b = rng.randint(2, 500) + k, rng.randint(2, 60)
        kind = rng.choice(
            ["boxed", "boxed", "frac", "gsm8k", "gsm8k", "answer_is", "algebra", "radical", "set", "interval",
             "matrix", "percent", "choice", "hedged", "prose"]
        )  # fmt: skip
        if kind == "boxed":
            pairs.append((f"{prose}Therefore the answer is $\\boxed{{{a if right else a + 1}}}$.", str(a)))
        elif kind == "frac":
            num, den = rng.randint(1, 9) + 10 * k, rng.choice([2, 4, 5, 8, 10])
            pairs.append(
                (
                    f"{prose}So the probability is $\\boxed{{\\frac{{{num}}}{{{den}}}}}$.",
                    str(num / den if right else num / den + 1),
                )
            )
        elif kind == "gsm8k":
            pairs.append(
                (
                    f"{prose}In total she has {a if right else a - 2} apples.\n#### {a if right else a - 2}",
                    f"She starts with {a - b} and gets {b} more.\n#### {a}",
                )
            )
        elif kind == "answer_is":
            pairs.append((f"{prose}The answer is {a if right else 2 * a}.", str(a)))
        elif kind == "algebra":
            c = b + k
            answer = f"(x-{c})(x+{c})" if right else f"(x-{c})^2"
            pairs.append((f"{prose}Factoring, we get $\\boxed{{{answer}}}$.", f"x^2-{c * c}"))
        elif kind == "radical":
            c = rng.choice([2, 3, 5, 6, 7])
            pairs.append(
                (
                    f"{prose}The side length is $\\boxed{{{b if right else b + 1}\\sqrt{{{c}}}}}$.",
                    f"\\sqrt{{{b * b * c}}}",
                )
            )
        elif kind == "set":
            xs = sorted({a, a + b, a + 2 * b})
            shown = list(reversed(xs)) if right else [*xs[:-1], xs[-1] + 1]
            pairs.append(
                (
                    f"{prose}The solutions are $\\boxed{{\\{{{', '.join(map(str, shown))}\\}}}}$.",
                    f"\\{{{','.join(map(str, xs))}\\}}",
                )
            )
        elif kind == "interval":
            pairs.append(
                (f"{prose}Hence $x \\in \\boxed{{({b}, {a}]}}$.", f"({b},{a}]" if right else f"[{b},{a}]")
            )
        elif kind == "matrix":
            m = [[a, b], [b, a + (0 if right else 1)]]
            pairs.append(
                (
                    f"{prose}$$\\boxed{{\\begin{{pmatrix}} {m[0][0]} & {m[0][1]} \\\\ {m[1][0]} & {m[1][1]} \\end{{pmatrix}}}}$$",
                    f"\\begin{{bmatrix}}{a}&{b}\\\\{b}&{a}\\end{{bmatrix}}",
                )
            )
        elif kind == "percent":
            p = rng.randint(1, 99)
            pairs.append((f"{prose}The discount is $\\boxed{{{p if right else p + 5}\\%}}$.", str(p / 100)))
        elif kind == "choice":
            letter = rng.choice("ABCDE")
            said = letter if right else rng.choice([x for x in "ABCDE" if x != letter])
            pairs.append((f"{prose}Comparing the options, the answer is ({said}).", letter))
        elif kind == "hedged":
            pairs.append((f"{prose}So it is $\\boxed{{{a}}}$ or $\\boxed{{{a + 1}}}$.", str(a)))
        else:
            pairs.append((f"{prose}So there are {a if right else a + 3} marbles left in the jar.", str(a)))
    return pairs


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of processes (the pool's workers are the fork server's children, not ours)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
        except (OSError, ValueError, IndexError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def _plain_math_verify(pairs: list[tuple[str, str]]) -> tuple[list[bool], list[float], float]:
    from math_verify import parse, verify

    results, latencies = [], []
    start = time.perf_counter()
    for response, gold in pairs:
        t0 = time.perf_counter()
        gold_parsed = parse(gold) or parse(f"${gold}$")
        results.append(bool(verify(gold_parsed, parse(response))))
        latencies.append(time.perf_counter() - t0)
    return results, latencies, time.perf_counter() - start


def run(n: int = 500, workers: int = 2, timeout: float = 2.0, chunk: int = 100) -> dict[str, Any]:
    """Measure both sides on the same ``n`` pairs; returns throughput, p50/p99 latency and a printable table.

    The two sides take turns on chunks of ``chunk`` pairs (serial, then pool, on the same pairs), so a job
    starting or stopping elsewhere on the machine skews both alike.
    """
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" / timeout warnings
    pairs = build_inputs(n, seed=0)
    warmup = build_inputs(4 * workers, seed=1)

    load_before = os.getloadavg()[0]  # other jobs on the machine skew wall-clock numbers
    plain_ok: list[bool] = []
    plain_lat: list[float] = []
    verdicts: list[Verdict] = []
    plain_wall = plain_cpu = pool_wall = parent_cpu = workers_cpu = 0.0
    with MathVerifier(workers) as verifier:
        _plain_math_verify(warmup)
        verifier.verify_many([r for r, _ in warmup], [g for _, g in warmup], timeout=timeout)
        pids = verifier.worker_pids()
        # Alternate the two sides over chunks, so that other load on a shared machine hits both alike.
        for start in range(0, n, chunk):
            part = pairs[start : start + chunk]
            cpu0 = time.process_time()
            ok, lat, wall = _plain_math_verify(part)
            plain_cpu += time.process_time() - cpu0
            plain_ok += ok
            plain_lat += lat
            plain_wall += wall

            cpu0, workers_cpu0 = time.process_time(), _cpu_seconds(pids)
            t0 = time.perf_counter()
            verdicts += verifier.verify_many([r for r, _ in part], [g for _, g in part], timeout=timeout)
            pool_wall += time.perf_counter() - t0
            parent_cpu += time.process_time() - cpu0
            workers_cpu += _cpu_seconds(pids) - workers_cpu0
    pool_lat = [float(v.details.get("elapsed", 0.0)) for v in verdicts]
    statuses = {
        s: sum(v.status == s for v in verdicts)
        for s in ("correct", "wrong", "unparseable", "timeout", "infra_error")
    }

    plain = {
        "items_per_s": n / plain_wall,
        "p50_ms": 1e3 * _percentile(plain_lat, 50),
        "p99_ms": 1e3 * _percentile(plain_lat, 99),
        "wall_s": plain_wall,
        "cpu_ms_per_item": 1e3 * plain_cpu / n,
    }
    pool = {
        "items_per_s": n / pool_wall,
        "p50_ms": 1e3 * _percentile(pool_lat, 50),
        "p99_ms": 1e3 * _percentile(pool_lat, 99),
        "wall_s": pool_wall,
        "cpu_ms_per_item": 1e3 * (parent_cpu + workers_cpu) / n,
        "parent_cpu_ms_per_item": 1e3 * parent_cpu / n,
        "statuses": statuses,
    }
    ratio = pool["items_per_s"] / plain["items_per_s"]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    # What the ratio would be with `workers` otherwise idle cores: CPU cost per item, scaled by parallelism.
    cpu_bound_ratio = min(workers, cpus) * plain["cpu_ms_per_item"] / pool["cpu_ms_per_item"]
    agree = sum(ok == (v.status == "correct") for ok, v in zip(plain_ok, verdicts, strict=True))
    table = [
        (f"math-verify serial, {n} pairs", f"{plain['items_per_s']:.0f} items/s  p50 {plain['p50_ms']:.1f} ms  p99 {plain['p99_ms']:.1f} ms"),
        (f"verify_many, {workers} workers", f"{pool['items_per_s']:.0f} items/s  p50 {pool['p50_ms']:.1f} ms  p99 {pool['p99_ms']:.1f} ms"),
        ("  throughput ratio pool / serial", f"{ratio:.2f}x"),
        ("  CPU per item serial / pool", f"{plain['cpu_ms_per_item']:.2f} ms / {pool['cpu_ms_per_item']:.2f} ms (parent {pool['parent_cpu_ms_per_item']:.2f} ms)"),
        ("  ratio if the cores were idle", f"{cpu_bound_ratio:.2f}x (load average before: {load_before:.2f})"),
        ("  p99 within the deadline", f"{pool['p99_ms'] / 1e3 <= timeout} ({timeout:g} s)"),
        ("  same correct/not-correct call", f"{agree}/{n}"),
    ]  # fmt: skip
    return {
        "n": n,
        "workers": workers,
        "timeout_s": timeout,
        "cpus": cpus,
        "load_average_before": load_before,
        "cpu_bound_ratio": cpu_bound_ratio,
        "math_verify_serial": plain,
        "verify_many": pool,
        "throughput_ratio": ratio,
        "p99_within_deadline": pool["p99_ms"] / 1e3 <= timeout,
        "agreement": agree,
        "table": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="number of (response, gold) pairs")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the pool")
    parser.add_argument("--timeout", type=float, default=2.0, help="per-item deadline in seconds")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    result = run(args.n, args.workers, args.timeout)
    width = max(len(name) for name, _ in result["table"])
    for name, value in result["table"]:
        print(f"{name:<{width}}  {value}")
    print(f"statuses: {result['verify_many']['statuses']}  (cpus available: {result['cpus']})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
