"""creditgym's math verifier beside plain math-verify, in one run, on a labelled mix of ordinary and adversarial answers.

    python examples/benchmarks/verify_math.py [--workers 2] [--timeout 2.0] [--ordinary 350] [--adversarial 150]
                                              [--seed 0] [--json PATH]

The mix (fixed by ``seed``) holds (response, gold, intended label) triples:

- **ordinary** (350 by default): integers (boxed, GSM8K ``#### N``, "The answer is N", prose), fractions, decimals,
  10-digit decimals of fractions, expressions, radicals, sets, intervals, intervals against the equivalent
  inequality, plain-text answers, trigonometric values at standard angles against their surds, forms of Euler's
  identity, and hedged responses whose final statements conflict;
- **adversarial** (150): power towers, huge powers and factorials, deep nested fractions, 300-box responses, junk,
  unbalanced braces, 2,000-digit numbers, nested radicals raised to towers.

The intended label is the mathematical truth under the usual answer conventions (math-verify's: a decimal equals a
number it rounds to at 6 places; a hedge, two different final answers, is never correct).

(a) **math-verify**, serially, with its defaults (5 s SIGALRM timeouts): ``parse("$gold$")``, ``parse(response)``,
    ``verify(gold, answer)``. It runs in a child process under a 6 GB address-space limit, so that its attempts
    at huge numbers end in ``MemoryError`` rather than in the machine's OOM killer.
(b) **creditgym**: ``MathVerifier(workers).verify_many`` on a warm pool, with a ``timeout`` deadline per item.

The two sides take turns on chunks of 50 pairs, so other load on a shared machine skews both alike. Reported per
side: answers per second (wall time), p50/p99 latency (creditgym: ``details["elapsed"]``, from when a worker
started the item), agreement with the intended labels (correct vs not), items at the deadline (creditgym: killed
at ``timeout``; math-verify: 5 s or more), and the items creditgym left at its deadline that math-verify decided
within its own 5 s. ``run(...)`` returns the numbers as a dict (with a ready-made ``table``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from creditgym.verifiers.math import MathVerifier

MATH_VERIFY_LIMIT_S = 5.0
_MV_MEMORY = 6 << 30
_CHUNK = 50


@dataclass(frozen=True)
class Pair:
    kind: str
    response: str
    gold: str
    label: bool


def _box(text: str) -> str:
    return f"Putting it together, the final answer is $\\boxed{{{text}}}$."


def _fraction_pairs(rng: random.Random) -> list[tuple[str, str, bool]]:
    a, b = rng.randint(1, 400), rng.randint(3, 400)
    while Fraction(a, b).denominator == 1:
        b += 1
    f = Fraction(a, b)
    ten = f"{float(f):.10f}"
    return [
        (_box(f"\\frac{{{2 * a}}}{{{2 * b}}}"), f"\\frac{{{a}}}{{{b}}}", True),
        (_box(f"\\frac{{{a + 1}}}{{{b}}}"), f"\\frac{{{a}}}{{{b}}}", False),
        (f"So the ratio is approximately {ten}.\n#### {ten}", f"\\frac{{{a}}}{{{b}}}", True),  # 10 digits
        (_box(ten), f"\\dfrac{{{a}}}{{{b}}}", True),
        (_box(f"{float(f):.3f}"), f"\\frac{{{a}}}{{{b}}}", round(float(f), 3) == round(float(f), 6)),
    ]


def _ordinary(rng: random.Random, k: int) -> list[tuple[str, str, str, bool]]:
    """One ordinary case of each kind (kind, response, gold, label), varied by ``rng`` and ``k``."""
    n, m, c = rng.randint(2, 999) + k, rng.randint(2, 60), rng.randint(2, 30)
    p = rng.randint(1, 99)
    lo, hi = sorted(rng.sample(range(-20, 40), 2))
    xs = sorted(rng.sample(range(-30, 60), 3))
    angle, surd = rng.choice([(60, r"\frac{\sqrt{3}}{2}"), (45, r"\frac{\sqrt{2}}{2}"), (30, r"\frac{1}{2}")])
    trig_cases = [
        (_box(f"\\sin {angle}^\\circ"), surd, True),
        (_box(f"\\cos {90 - angle}^{{\\circ}}"), surd, True),
        (_box(f"\\sin\\frac{{\\pi}}{{{180 // angle}}}"), surd, True),
        (_box(f"\\sin {90 - angle}^\\circ"), surd, angle == 45),
        (_box(r"\tan 30^\circ"), r"\frac{\sqrt{3}}{3}", True),
        (_box(r"\tan 60^\circ"), r"\frac{\sqrt{3}}{3}", False),
    ]
    euler_cases = [
        (_box(r"e^{i\pi}"), "-1", True),
        (_box(r"e^{\pi i}"), "-1", True),
        (_box(r"\cos\pi + i\sin\pi"), "-1", True),
        (_box(r"e^{i\pi} + 1"), "0", True),
        (_box(r"e^{2\pi i}"), "1", True),
        (_box(r"e^{i\pi/2}"), "-1", False),
        (_box(r"e^{i\pi}"), "1", False),
    ]
    interval_cases = [
        (_box(f"x < {hi}"), f"(-\\infty, {hi})", True),
        (_box(f"x \\ge {lo}"), f"[{lo}, \\infty)", True),
        (_box(f"{lo} < x \\le {hi}"), f"({lo}, {hi}]", True),
        (_box(f"x \\le {hi}"), f"(-\\infty, {hi})", False),
        (_box(f"x > {lo}"), f"[{lo}, \\infty)", False),
        (_box(f"({lo}, {hi}]"), f"{lo} < x \\le {hi}", True),
    ]
    hedge_cases = [
        (f"So $x = \\boxed{{{n}}}$. The answer is {n + 1}.", str(n), False),
        (f"Hence $\\boxed{{{n}}}$.\n\nFinal answer: {n + 1}", str(n + 1), False),
        (f"It is $\\boxed{{{n}}}$, or maybe $\\boxed{{{n + 1}}}$.", str(n + 1), False),
        (f"I get $\\boxed{{{n}}}$. Alternatively, $\\boxed{{{n + 2}}}$.", str(n), False),
        (f"The answer is {n} or {n + 1}.", str(n), False),
        (f"So $\\boxed{{{n}}}$.\n\nThe answer is {n}.", str(n), True),
        (f"First I got $\\boxed{{{n + 1}}}$, but correcting the sign the final answer is $\\boxed{{{n}}}$.", str(n), True),
    ]  # fmt: skip
    right = rng.random() < 0.6
    shown = n if right else n + rng.choice([-1, 1, 10])
    kinds: dict[str, list[tuple[str, str, bool]]] = {
        "integer": [
            (_box(str(shown)), str(n), right),
            (f"She has {shown} apples left.\n#### {shown}", f"{n - m} + {m} = {n}\n#### {n}", right),
            (f"Adding up, the answer is {shown}.", str(n), right),
            (f"So there are {shown} marbles left in the jar.", str(n), right),
        ],
        "fraction": _fraction_pairs(rng),
        "decimal": [
            (_box("0.75"), r"\frac{3}{4}", True),
            (_box("0.333"), r"\frac{1}{3}", False),
            (_box("0.333333"), r"\frac{1}{3}", True),
            (_box(f"{p}.50"), f"{p}.5", True),
            (_box(f"{p / 100}"), f"{p}\\%", True),
        ],
        "expression": [
            (_box(f"(x-{c})(x+{c})"), f"x^2-{c * c}", True),
            (_box(f"(x-{c})^2"), f"x^2-{c * c}", False),
            (_box(f"{m}\\sqrt{{{c}}}"), f"\\sqrt{{{m * m * c}}}", True),
            (_box(f"{m + 1}\\sqrt{{{c}}}"), f"\\sqrt{{{m * m * c}}}", False),
            (_box(f"y = {m}x + {c}"), f"y={m}x+{c}", True),
        ],
        "set": [
            (
                _box("\\{" + ", ".join(map(str, reversed(xs))) + "\\}"),
                "\\{" + ",".join(map(str, xs)) + "\\}",
                True,
            ),
            (
                _box("\\{" + ", ".join(map(str, xs[:2])) + "\\}"),
                "\\{" + ",".join(map(str, xs)) + "\\}",
                False,
            ),
            (f"The solutions are $x = {xs[0]}$ or $x = {xs[1]}$.", f"\\{{{xs[0]}, {xs[1]}\\}}", True),
        ],
        "interval": [
            (_box(f"({lo}, {hi}]"), f"({lo},{hi}]", True),
            (_box(f"[{lo}, {hi}]"), f"({lo},{hi}]", False),
            (_box(f"(-\\infty, {lo}) \\cup ({hi}, \\infty)"), f"(-\\infty,{lo})\\cup({hi},\\infty)", True),
        ],
        "interval_inequality": interval_cases,
        "text": [
            (_box(r"\text{Monday}"), r"\text{Monday}", True),
            (_box(r"\text{Tuesday}"), r"\text{Monday}", False),
            ("The answer is (C).", "C", True),
            ("The answer is (B).", "C", False),
        ],
        "trig_surd": trig_cases,
        "euler": euler_cases,
        "hedge": hedge_cases,
    }
    return [(kind, *rng.choice(cases)) for kind, cases in kinds.items()]


def _tower(bases: list[int]) -> str:
    return "^{".join(map(str, bases)) + "}" * (len(bases) - 1)


def _adversarial(rng: random.Random, k: int) -> list[tuple[str, str, str, bool]]:
    """One adversarial case of each kind."""
    a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(2, 5)
    e = rng.choice([10**5, 10**6, 10**7]) + 2 * rng.randint(0, 500)
    n = rng.choice([10**4, 10**5, 10**6]) + rng.randint(0, 999)
    digits = "".join(rng.choice("0123456789") for _ in range(1999))
    big = str(rng.randint(1, 9)) + digits
    depth = rng.randint(40, 300)
    fib = [1, 1]
    while len(fib) < depth + 3:
        fib.append(fib[-1] + fib[-2])
    nested = "\\frac{1}{1+" * depth + "1" + "}" * depth
    r = rng.choice([2, 3, 5])
    junk = "".join(rng.choice("{}[]()\\^_$&%#!?~|<>=+-*/ ab\n") for _ in range(rng.randint(200, 3000)))
    kinds: dict[str, list[tuple[str, str, bool]]] = {
        "tower": [
            (_box(_tower([a, b, c, 2])), _tower([a, b, c, 2]), True),
            (_box(_tower([a, b, c, 2]) + "+1"), _tower([a, b, c, 2]), False),
            (_box(_tower([10, 10, 10, 10])), _tower([9, 9, 9, 9]), False),
            (_box(_tower([a, b, c + 1])), _tower([a, b + 1, c]), b ** (c + 1) == (b + 1) ** c),
            (_box(f"{a * a}^{{{b}^{{{c + 10}}}}}"), f"{a}^{{2 \\cdot {b}^{{{c + 10}}}}}", True),
        ],
        "huge_power": [
            (_box(f"{a}^{{{e}}}+1"), f"{a}^{{{e}}}", False),
            (_box(f"{a}^{{{e + 1}}}"), f"{a}^{{{e}}}", False),
            (_box(f"{a * a}^{{{e // 2}}}"), f"{a}^{{{e}}}", True),
            (_box(f"{a} ^ {{ {e} }}"), f"{a}^{{{e}}}", True),
            (_box(f"{a}^{{{e}}}-{a}^{{{e - 1}}}"), f"{a - 1} \\cdot {a}^{{{e - 1}}}", True),
        ],
        "huge_factorial": [
            (_box(f"{n + 1}!"), f"{n}!", False),
            (_box(f"{n}!"), f"{n}!", True),
            (_box(f"{n}!+1"), f"{n}!", False),
            (_box(f"({n})!"), f"{n}!", True),
        ],
        "nested_fraction": [
            (_box(nested), f"\\frac{{{fib[depth]}}}{{{fib[depth + 1]}}}", True),
            (_box(nested), str(rng.randint(2, 9)), False),
        ],
        "boxes_300": [
            (" ".join(f"$\\boxed{{{i}}}$" for i in range(300)), str(rng.randint(0, 299)), False),
            (" and ".join([f"$\\boxed{{{a}}}$"] * 300), str(a), True),
        ],
        "junk": [(junk, str(a), False), (junk + "\\boxed{" + junk, str(a), False)],
        "unbalanced": [
            ("\\boxed{\\frac{1}{" + str(a) + "}" * 0, f"\\frac{{1}}{{{a}}}", False),
            ("{" * 200 + f" so the answer is $\\boxed{{{a}}}$", str(a), True),
            (f"$\\boxed{{{a}}}$" + "}" * 200, str(a), True),
            ("\\boxed{" * 100 + str(a), str(a), False),
        ],
        "digits_2000": [
            (_box(big), big, True),
            (_box(big[:-1] + str((int(big[-1]) + 1) % 10)), big, False),
            (f"The total is {big}.", big, True),
        ],
        "radical_tower": [
            (
                _box(f"\\sqrt{{\\sqrt{{{r}}}}}^{{2^{{2^{{{c + 1}}}}}}}"),
                f"{r}^{{2^{{2^{{{c + 1}}} - 2}}}}",
                True,
            ),
            (_box(f"\\sqrt{{\\sqrt{{\\sqrt{{{r}}}}}}}^{{2^{{2^{{10}}}}}}"), f"{r}^{{2^{{1021}}}}", True),
            (_box(f"\\sqrt{{\\sqrt{{\\sqrt{{{r}}}}}}}^{{2^{{2^{{10}}}}}}"), f"{r}^{{2^{{1021}}}}+1", False),
            (_box(f"\\sqrt[3]{{{r}}}^{{3^{{3^{{3}}}}}}"), f"{r}^{{3^{{26}}}}", True),
            (
                _box(f"\\sqrt{{\\sqrt{{{r}}}}}^{{2^{{2^{{{c + 1}}}}}}}"),
                f"{r}^{{2^{{2^{{{c + 1}}} - 1}}}}",
                False,
            ),
        ],
    }
    return [(kind, *rng.choice(cases)) for kind, cases in kinds.items()]


def build_mix(ordinary: int = 350, adversarial: int = 150, seed: int = 0) -> list[Pair]:
    """The labelled mix: ``ordinary`` then ``adversarial`` pairs, shuffled together, the same for a given seed."""
    rng = random.Random(seed)
    plain: list[Pair] = []
    hard: list[Pair] = []
    k = 0
    while len(plain) < ordinary:
        plain += [Pair(*case) for case in _ordinary(rng, k)]
        k += 1
    while len(hard) < adversarial:
        hard += [Pair(*case) for case in _adversarial(rng, k)]
        k += 1
    pairs = plain[:ordinary] + hard[:adversarial]
    rng.shuffle(pairs)
    return pairs


# ------------------------------------------------------------------------------------------------- math-verify


def _limit_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_MV_MEMORY, _MV_MEMORY))


def _math_verify_chunk(pairs: list[tuple[str, str]]) -> list[tuple[bool, float]]:
    """Plain math-verify with its default timeouts, one pair after the other (runs in the child process)."""
    import logging

    from math_verify import parse, verify

    logging.disable(logging.CRITICAL)  # its timeout warnings
    out = []
    for response, gold in pairs:
        t0 = time.perf_counter()
        try:
            gold_parsed = parse(f"${gold}$") or parse(gold)
            ok = bool(verify(gold_parsed, parse(response)))
        except Exception:  # MemoryError under the address-space limit, RecursionError on deep nesting
            ok = False
        out.append((ok, time.perf_counter() - t0))
    return out


# ------------------------------------------------------------------------------------------------- the run


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def _side(n: int, wall: float, latencies: list[float], agree: int, at_deadline: int) -> dict[str, float]:
    return {
        "answers_per_s": n / wall,
        "wall_s": wall,
        "p50_ms": 1e3 * _percentile(latencies, 50),
        "p99_ms": 1e3 * _percentile(latencies, 99),
        "max_ms": 1e3 * max(latencies),
        "agreement": agree,
        "at_deadline": at_deadline,
    }


def run(
    ordinary: int = 350,
    adversarial: int = 150,
    workers: int = 2,
    timeout: float = 2.0,
    seed: int = 0,
    *,
    n: int | None = None,
) -> dict[str, Any]:
    """Both sides on the same labelled mix; returns the numbers, ``markdown`` (the table) and ``table`` (rows).

    ``n`` (if given) replaces ``ordinary`` and ``adversarial`` by the same 70/30 split of ``n`` pairs.
    """
    if n is not None:
        ordinary = round(0.7 * n)
        adversarial = n - ordinary
    pairs = build_mix(ordinary, adversarial, seed)
    warm = [(p.response, p.gold) for p in build_mix(20, 0, seed + 1)]
    mv: list[tuple[bool, float]] = []
    verdicts = []
    mv_wall = cg_wall = 0.0
    with (
        ProcessPoolExecutor(1, initializer=_limit_memory) as mv_process,
        MathVerifier(workers) as verifier,
    ):
        mv_process.submit(_math_verify_chunk, warm).result()
        verifier.verify_many([r for r, _ in warm], [g for _, g in warm], timeout=timeout)
        for start in range(0, len(pairs), _CHUNK):
            part = pairs[start : start + _CHUNK]
            t0 = time.perf_counter()
            mv += mv_process.submit(_math_verify_chunk, [(p.response, p.gold) for p in part]).result()
            mv_wall += time.perf_counter() - t0
            t0 = time.perf_counter()
            verdicts += verifier.verify_many(
                [p.response for p in part], [p.gold for p in part], timeout=timeout
            )
            cg_wall += time.perf_counter() - t0
    n = len(pairs)
    cg_ok = [v.status == "correct" for v in verdicts]
    cg_lat = [float(v.details.get("elapsed", 0.0)) for v in verdicts]
    cg_deadline = [v.status == "timeout" and lat >= timeout for v, lat in zip(verdicts, cg_lat, strict=True)]
    mv_deadline = [lat >= MATH_VERIFY_LIMIT_S for _, lat in mv]
    mv_decided_we_did_not = [
        p.kind for p, ours, theirs in zip(pairs, cg_deadline, mv_deadline, strict=True) if ours and not theirs
    ]
    plain = _side(n, mv_wall, [lat for _, lat in mv], sum(ok == p.label for (ok, _), p in zip(mv, pairs, strict=True)), sum(mv_deadline))  # fmt: skip
    ours = _side(n, cg_wall, cg_lat, sum(ok == p.label for ok, p in zip(cg_ok, pairs, strict=True)), sum(cg_deadline))  # fmt: skip
    wrong_by_kind = {
        "math_verify": dict(Counter(p.kind for p, (ok, _) in zip(pairs, mv, strict=True) if ok != p.label)),
        "creditgym": dict(Counter(p.kind for p, ok in zip(pairs, cg_ok, strict=True) if ok != p.label)),
    }
    ratio = ours["answers_per_s"] / plain["answers_per_s"]
    rows = [
        ("", "math-verify serial (defaults)", f"creditgym verify_many, {workers} workers"),
        ("answers/s", f"{plain['answers_per_s']:.1f}", f"{ours['answers_per_s']:.1f} ({ratio:.1f}x)"),
        ("p50 latency", f"{plain['p50_ms']:.1f} ms", f"{ours['p50_ms']:.1f} ms"),
        ("p99 latency", f"{plain['p99_ms']:.0f} ms", f"{ours['p99_ms']:.0f} ms"),
        ("items at the deadline", f"{plain['at_deadline']} (>= {MATH_VERIFY_LIMIT_S:g} s)", f"{ours['at_deadline']} ({timeout:g} s)"),
        ("  of which math-verify decided", "", f"{len(mv_decided_we_did_not)}"),
        ("agreement with the intended label", f"{plain['agreement']}/{n}", f"{ours['agreement']}/{n}"),
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    markdown = "\n".join(
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) + " |" for r in rows
    )
    table = [  # rows for other scripts' tables (env_step.py)
        (f"verify_many vs math-verify, {label}", f"{cg_cell} vs {mv_cell}")
        for label, mv_cell, cg_cell in rows[1:]
    ]
    return {
        "n": n,
        "ordinary": ordinary,
        "adversarial": adversarial,
        "workers": workers,
        "timeout_s": timeout,
        "seed": seed,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "load_average_before": os.getloadavg()[0],
        "math_verify": plain,
        "creditgym": ours,
        "throughput_ratio": ratio,
        "statuses": dict(Counter(v.status for v in verdicts)),
        "disagreements_by_kind": wrong_by_kind,
        "at_our_deadline_but_decided_by_math_verify": mv_decided_we_did_not,
        "markdown": markdown,
        "table": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ordinary", type=int, default=350, help="ordinary pairs (default: %(default)s)")
    parser.add_argument(
        "--adversarial", type=int, default=150, help="adversarial pairs (default: %(default)s)"
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="creditgym worker processes (default: %(default)s)"
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="creditgym deadline per item, s")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mix (default: %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    result = run(args.ordinary, args.adversarial, args.workers, args.timeout, args.seed)
    print(result["markdown"])
    print(f"creditgym statuses: {result['statuses']}")
    print(f"disagreements with the label, by kind: {result['disagreements_by_kind']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
