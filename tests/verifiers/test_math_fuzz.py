"""Fuzz ``verify_many`` with over 1,000 random and adversarial responses under a short deadline.

Checks: no exception, a valid verdict for every item, every item done within its deadline + 0.5 s (measured from
when a worker started it, ``details["elapsed"]``), the batch's wall time bounded by the work it contained, and
no worker process left behind once the verifier is closed. Seeded, so a failure reproduces.
"""

from __future__ import annotations

import random
import time

import pytest

from creditgym.verifiers.math import MathVerifier
from creditgym.verifiers.verdict import STATUSES

TIMEOUT = 1.0
WORKERS = 2

GOLDS = [
    "5",
    "-3",
    "0.5",
    r"\frac{1}{2}",
    r"\sqrt{2}",
    "x=3",
    r"\{1,2\}",
    "(1,2]",
    r"50\%",
    "C",
    "#### 72",
    "1000",
]
TOKENS = [
    r"\boxed{", r"\fbox{", "{", "}", r"\{", r"\}", "$", "$$", r"\(", r"\)", r"\[", r"\]", r"\frac", r"\dfrac",
    r"\sqrt", "^", "_", r"\left(", r"\right)", r"\text{", r"\text{ or }", " or ", " and ", ", ", "; ", "/", r"\quad",
    "####", "The answer is ", "Answer: ", "Final Answer: ", "(C)", "C", r"\pi", r"\infty", r"\cdot", r"\times",
    "=", "+", "-", "*", "(", ")", "[", "]", "%", r"\%", "\\", "\n", " ", "x", "y", "0", "1", "2", "3", "7", "42",
    "0.5", "3.14", "1,000", r"\begin{pmatrix}", r"\end{pmatrix}", "&", r"\\", "α", "∞", "√", "😀", "中文", "\x00",
    "\ud800", r"\boxed{\boxed{", "!", "e", "i", r"\cup", r"\in", "<", ">", r"\le", r"\pm",
]  # fmt: skip
UNICODE_RANGES = [(0x20, 0x7E), (0x80, 0x2FF), (0x370, 0x3FF), (0x2200, 0x22FF), (0x4E00, 0x4FFF), (0x1F600, 0x1F64F), (0xD800, 0xDFFF), (0, 0x1F)]  # fmt: skip


def _nested_frac(depth: int) -> str:
    text = "1"
    for _ in range(depth):
        text = rf"\frac{{{text}}}{{2}}"
    return text


ADVERSARIAL: list[tuple[str, str]] = [
    (r"\boxed{10^{10^{10^{10}}}}", "9^{9^{9^{9}}}"),
    (r"\boxed{9^{9^{9^{9}}}}", "10^{10^{10^{10}}}"),
    (r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", "2"),
    (r"\boxed{(x+y+z+w)^{60}}", "(w+x+y+z)^{60}"),
    (r"\boxed{1000000!}", "5"),
    (r"\boxed{\sum_{i=1}^{10^{10}} i}", "5"),
    (rf"\boxed{{{_nested_frac(500)}}}", "1"),
    (rf"\boxed{{{_nested_frac(60)}}}", "1"),
    ("{" * 100_000, "1"),
    ("}" * 100_000 + r"\boxed{1}", "1"),
    (r"\boxed{" * 50_000, "1"),
    ("\\" * 100_001, "1"),
    ("$" * 100_001, "1"),
    (r"\boxed{" + "1" * 1_000_000 + "}", "1"),  # megabyte-long answers
    (r"\boxed{" + "x+" * 500_000 + "1}", "1"),
    ("blah " * 200_000 + r"\boxed{3}", "3"),
    ("blah 7 " * 150_000, "7"),
    ("The answer is " * 70_000, "1"),
    ("#### " * 200_000, "72"),
    ("(A) " * 250_000, "A"),
    (r"\boxed{1} or " * 20_000 + r"\boxed{1}", "1"),
    (r"\boxed{" + "9" * 5000 + "}", "9"),
    (r"\boxed{\begin{pmatrix}" + "1&" * 3000 + r"1\end{pmatrix}}", "1"),
    (r"\boxed{x^{x^{x^{x^{x^{x^{x^{x}}}}}}}}", "x"),
    ("\ud800\udfff\x00 😀 " * 1000 + r"\boxed{５}", "5"),
    ("The answer is" + " " * 200_000 + "x", "1"),  # long blank runs: regex backtracking traps
    (r"\boxed{$" + " " * 200_000 + "C" + " " * 200_000 + "x}", "C"),
    (r"\boxed{1}" + " " * 199 + "w" + r"\boxed{2}", "2"),
]


def _random_soup(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 60)))


def _random_unicode(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(0, 300)):
        lo, hi = rng.choice(UNICODE_RANGES)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _perturbed(rng: random.Random) -> str:
    base = rng.choice(
        [r"The answer is $\boxed{\frac{1}{2}}$.", "#### 72", r"\boxed{\{1, 2\}}", "Answer: (C)"]
    )
    chars = list(base)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(chars) + 1)
        if rng.random() < 0.5 and chars:
            del chars[min(at, len(chars) - 1)]
        else:
            chars.insert(at, rng.choice("{}\\$^_()[] ,or0123456789"))
    return "".join(chars)


def build_cases(seed: int = 20261130) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    cases = list(ADVERSARIAL)
    for i in range(1000):
        make = (_random_soup, _random_soup, _random_unicode, _perturbed)[i % 4]
        cases.append((make(rng), rng.choice(GOLDS)))
    rng.shuffle(cases)
    return cases


@pytest.mark.slow
def test_fuzz_verify_many_is_bounded_and_leaks_nothing() -> None:
    cases = build_cases()
    assert len(cases) >= 1000
    verifier = MathVerifier(WORKERS)
    try:
        t0 = time.monotonic()
        verdicts = verifier.verify_many([r for r, _ in cases], [g for _, g in cases], timeout=TIMEOUT)
        wall = time.monotonic() - t0
        pids = verifier.worker_pids()
    finally:
        verifier.close()

    assert len(verdicts) == len(cases)
    late = []
    for (response, gold), verdict in zip(cases, verdicts, strict=True):
        assert verdict.status in STATUSES
        assert verdict.status != "infra_error", (response[:200], gold, verdict.details.get("error"))
        assert verdict.score == (1.0 if verdict.status == "correct" else 0.0)
        if verdict.details["elapsed"] > TIMEOUT + 0.5:
            late.append((response[:80], verdict.details["elapsed"]))
        for start, end in verdict.spans:
            assert 0 <= start <= end <= len(response)
    assert not late, late
    busy = sum(v.details["elapsed"] for v in verdicts)
    assert wall < busy / WORKERS + 10.0, (wall, busy)  # the parent adds little beyond the work itself
    assert wall < 60.0

    by_response = {r: v for (r, _), v in zip(cases, verdicts, strict=True)}
    assert by_response[r"\boxed{10^{10^{10^{10}}}}"].status in ("timeout", "wrong")
    assert by_response["blah " * 200_000 + r"\boxed{3}"].status == "correct"

    for pid in pids:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.02)
        assert not _alive(pid), f"worker {pid} outlived close()"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
