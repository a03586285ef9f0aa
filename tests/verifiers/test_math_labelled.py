"""Labelled cases of the kinds where math-verify alone disagrees with the intended verdict, and pathological inputs.

Each case is (response, gold, intended status). They run through a real :class:`MathVerifier` (worker processes,
math-verify and sympy inside), in batches.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from creditgym.verifiers.math import MathVerifier


@pytest.fixture(scope="module")
def verifier() -> Iterator[MathVerifier]:
    with MathVerifier(2) as v:
        yield v


def _box(text: str) -> str:
    return f"So the final answer is $\\boxed{{{text}}}$."


def _check(verifier: MathVerifier, cases: list[tuple[str, str, str]], timeout: float = 10.0) -> None:
    verdicts = verifier.verify_many([r for r, _, _ in cases], [g for _, g, _ in cases], timeout=timeout)
    wrong = [
        (response[-80:], gold[:60], want, v.status, v.details.get("error"))
        for (response, gold, want), v in zip(cases, verdicts, strict=True)
        if v.status != want
    ]
    assert not wrong, wrong


TRIG = [
    (_box(r"\sin 60^\circ"), r"\frac{\sqrt{3}}{2}", "correct"),
    (_box(r"\sin(60^{\circ})"), r"\frac{\sqrt{3}}{2}", "correct"),
    (_box(r"\cos 30^\circ"), r"\frac{\sqrt{3}}{2}", "correct"),
    (_box(r"\cos 45^{\circ}"), r"\frac{\sqrt{2}}{2}", "correct"),
    (_box(r"\tan 30^\circ"), r"\frac{\sqrt{3}}{3}", "correct"),
    (_box(r"\tan 60^\circ"), r"\sqrt{3}", "correct"),
    (_box(r"\sin\frac{\pi}{6}"), r"\frac{1}{2}", "correct"),
    (_box(r"\cos\frac{\pi}{4}"), r"\frac{1}{\sqrt{2}}", "correct"),
    (_box(r"\sin 30^\circ"), r"\frac{\sqrt{3}}{2}", "wrong"),
    (_box(r"\tan 60^\circ"), r"\frac{\sqrt{3}}{3}", "wrong"),
    (_box(r"\sin 60"), r"\frac{\sqrt{3}}{2}", "wrong"),  # 60 radians
    (_box(r"\frac{\sqrt{3}}{2}"), r"\sin 60^\circ", "correct"),  # a gold written the other way
    (_box(r"30^\circ"), "30", "correct"),  # outside a trigonometric function a degree sign is a unit
]
EULER = [
    (_box(r"e^{i\pi}"), "-1", "correct"),
    (_box(r"e^{\pi i}"), "-1", "correct"),
    (_box(r"e^{i\pi} + 1"), "0", "correct"),
    (_box(r"\cos\pi + i\sin\pi"), "-1", "correct"),
    (_box(r"e^{2\pi i}"), "1", "correct"),
    (_box(r"e^{i\pi/2}"), "i", "correct"),
    (_box(r"e^{i\pi/2}"), "-1", "wrong"),
    (_box(r"e^{i\pi}"), "1", "wrong"),
    (_box(r"-e^{i\pi}"), "-1", "wrong"),
    (_box(r"(1+i)^2"), "2i", "correct"),
]
INTERVALS = [
    (_box("x < 3"), r"(-\infty, 3)", "correct"),
    (_box(r"x \ge -2"), r"[-2, \infty)", "correct"),
    (_box(r"-1 < x \le 4"), "(-1, 4]", "correct"),
    (_box(r"4 \geq x > -1"), "(-1, 4]", "correct"),
    (_box("3 > x"), r"(-\infty, 3)", "correct"),
    (_box("(-1, 4]"), r"-1 < x \le 4", "correct"),
    (_box(r"(-\infty, 3)"), "x < 3", "correct"),
    (_box(r"x \le 3"), r"(-\infty, 3)", "wrong"),
    (_box("x > -2"), r"[-2, \infty)", "wrong"),
    (_box("-1 < x < 4"), "(-1, 4]", "wrong"),
    (_box("x < 4"), r"(-\infty, 3)", "wrong"),
]
HEDGES = [
    (r"So $x = \boxed{5}$. The answer is 6.", "5", "wrong"),
    (r"So $x = \boxed{5}$. The answer is 6.", "6", "wrong"),
    ("Hence $\\boxed{5}$.\n\nFinal answer: 6", "6", "wrong"),
    ("$\\boxed{5}$\n#### 6", "5", "wrong"),
    (r"It is $\boxed{5}$, or maybe $\boxed{6}$.", "6", "wrong"),
    (r"I get $\boxed{5}$. Alternatively, $\boxed{6}$.", "5", "wrong"),
    (r"Perhaps $\boxed{5}$, possibly $\boxed{6}$.", "6", "wrong"),
    ("The answer is 5 or 6.", "5", "wrong"),
    ("So $\\boxed{5}$.\n\nThe answer is 5.", "5", "correct"),
    (r"So $\boxed{\frac{1}{2}}$, that is, the answer is 0.5.", "0.5", "correct"),
    (r"I first got $\boxed{6}$, but correcting the sign the final answer is $\boxed{5}$.", "5", "correct"),
    (r"So $\boxed{5}$. The answer is correct.", "5", "correct"),  # a word, not a second answer
]
DECIMALS = [
    (_box("3.0323886640"), r"\frac{749}{247}", "correct"),  # ten digits of a fraction
    ("The ratio is about 0.7127659574.\n#### 0.7127659574", r"\frac{67}{94}", "correct"),
    (_box("2.2795031056"), r"\dfrac{367}{161}", "correct"),
    (_box("0.333333"), r"\frac{1}{3}", "correct"),  # equal once both are rounded to 6 places
    (_box("0.3333333"), r"\frac{1}{3}", "correct"),
    (_box("0.3333"), r"\frac{1}{3}", "wrong"),
    (_box("0.333"), r"\frac{1}{3}", "wrong"),
    (_box("3.0324"), r"\frac{749}{247}", "wrong"),
    (_box("0.5"), r"\frac{1}{2}", "correct"),
    (_box("72.0"), "72", "correct"),
    (_box("72.5"), "72", "wrong"),
    (_box(r"\frac{1}{3}"), "0.333333", "correct"),
]


@pytest.mark.parametrize(
    "cases",
    [TRIG, EULER, INTERVALS, HEDGES, DECIMALS],
    ids=[
        "trig-values-vs-surds",
        "eulers-identity",
        "interval-vs-inequality",
        "hedging",
        "decimals-of-fractions",
    ],
)
def test_labelled_cases(verifier: MathVerifier, cases: list[tuple[str, str, str]]) -> None:
    _check(verifier, cases)


def test_a_hedge_reports_every_final_answer(verifier: MathVerifier) -> None:
    v = verifier.verify(r"So $x = \boxed{5}$. The answer is 6.", "5")
    assert v.details["hedged"] is True and v.details["alternatives"] == ["5", "6"]
    assert len(v.spans) == 2


# ------------------------------------------------------------------------------------------------ pathological

TOWER = r"2^{2^{2^{2^{2}}}}"
PATHOLOGICAL = [
    (_box(r"7^{10000000}+1"), "7^{10000000}", "wrong"),  # equal magnitudes; the difference is 1
    (_box(r"7^{10000001}"), "7^{10000000}", "wrong"),
    (_box(r"49^{5000000}"), "7^{10000000}", "correct"),
    (_box(r"7^{10000000}-7^{9999999}"), r"6 \cdot 7^{9999999}", "correct"),
    (_box(r"10^{10^{10^{10}}}"), r"9^{9^{9^{9}}}", "wrong"),
    (_box(TOWER), TOWER, "correct"),
    (_box(TOWER + "+1"), TOWER, "wrong"),
    (_box(r"4^{3^{100}}"), r"2^{2 \cdot 3^{100}}", "correct"),
    (_box(r"1000001!"), "1000000!", "wrong"),
    (_box(r"1000000!+1"), "1000000!", "wrong"),  # 0 against 1 modulo 101
    (_box(r"(10^{6})!"), "1000000!", "correct"),
    (_box(r"\sqrt{\sqrt{\sqrt{2}}}^{2^{2^{10}}}"), r"2^{2^{1021}}", "correct"),
    (_box(r"\sqrt{\sqrt{\sqrt{2}}}^{2^{2^{10}}}"), r"2^{2^{1021}}+1", "wrong"),
    (_box(r"\sqrt{\sqrt{\sqrt{2}}}^{2^{2^{10}}}"), r"2^{2^{1020}}", "wrong"),
    (_box(r"\sqrt[3]{5}^{3^{3^{3}}}"), r"5^{3^{26}}", "correct"),
    (_box(r"2^{10^{10}}"), "5", "wrong"),
    (_box("5"), r"2^{10^{10}}", "wrong"),
    (_box("1" * 2000), "1" * 2000, "correct"),
    (_box("1" * 1999 + "2"), "1" * 2000, "wrong"),
    (" ".join(f"$\\boxed{{{i}}}$" for i in range(300)), "7", "wrong"),  # 300 different final answers
    (_box("\\frac{1}{1+" * 200 + "1" + "}" * 200), "5", "wrong"),
    (_box("{" * 200 + "5"), "5", "unparseable"),
]


def test_pathological_inputs_get_a_verdict_well_before_the_deadline(verifier: MathVerifier) -> None:
    # Without the guard several of these hold a worker until its deadline (math-verify: 5 s timeouts or more).
    _check(verifier, PATHOLOGICAL, timeout=30.0)
    verdicts = verifier.verify_many(
        [r for r, _, _ in PATHOLOGICAL], [g for _, g, _ in PATHOLOGICAL], timeout=30.0
    )
    assert max(v.details["elapsed"] for v in verdicts) < 3.0  # a tenth of the deadline, on a loaded machine


def test_a_deep_continued_fraction_equals_its_fibonacci_ratio(verifier: MathVerifier) -> None:
    fib = [1, 1]
    while len(fib) < 302:
        fib.append(fib[-1] + fib[-2])
    nested = "\\frac{1}{1+" * 300 + "1" + "}" * 300
    verdict = verifier.verify(_box(nested), f"\\frac{{{fib[300]}}}{{{fib[301]}}}", timeout=30.0)
    assert verdict.status == "correct"


def test_what_the_guard_cannot_decide_is_a_budget_timeout_in_milliseconds(verifier: MathVerifier) -> None:
    cases = [
        (_box(r"\{2^{10^{10}}, 1\}"), r"\{1, 2\}"),  # outside the fast subset: never handed to sympy
        (_box(r"\sin(10^{10^{10}})"), "0"),
        (_box(r"2^{10^{10}} x"), "x"),
    ]
    verdicts = verifier.verify_many([r for r, _ in cases], [g for _, g in cases], timeout=30.0)
    for verdict in verdicts:
        assert verdict.status == "timeout" and verdict.score == 0.0, verdict
        assert verdict.details["budget"] is True and "not compared" in verdict.details["error"]
        assert verdict.details["elapsed"] < 3.0


# ------------------------------------------------------------------------------------------------ attack surface


def test_matching_residues_and_magnitude_never_make_an_answer_correct(verifier: MathVerifier) -> None:
    # 3^{(2^40)!} - 1 is 0 modulo every modulus the guard uses (Carmichael), and next to 2^{(2^41)!} it changes no
    # digit of the magnitude: the guard cannot tell the two apart, so it must not call them equal.
    gold = r"2^{(2^{41})!}"
    answer = _box(r"2^{(2^{41})!} + 3^{(2^{40})!} - 1")
    verdict = verifier.verify(answer, gold, timeout=30.0)
    assert verdict.status != "correct" and verdict.score == 0.0
    # The same padding with a constant the guard can see is simply wrong.
    assert verifier.verify(_box(r"2^{(2^{41})!} + 101"), gold, timeout=30.0).status == "wrong"


def test_a_budget_timeout_scores_zero_so_padding_an_answer_gains_nothing(verifier: MathVerifier) -> None:
    verdict = verifier.verify(_box(r"\{5, 2^{10^{10^{10}}}\}"), "5", timeout=30.0)
    assert verdict.status in ("timeout", "wrong") and verdict.score == 0.0


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        (_box(r"x \in \mathbb{R}"), r"(-\infty, 3)"),
        (_box(r"x < 3 \text{ or } x \ge 3"), r"(-\infty, 3)"),
        (_box(r"i"), "-1"),
        (_box(r"\sin 30^\circ, \sin 60^\circ"), r"\frac{1}{2}"),  # a set of candidates for a single value
        (_box(r"(-\infty, \infty)"), r"(-\infty, 3)"),
    ],
)
def test_the_new_equivalences_do_not_accept_wrong_answers(
    verifier: MathVerifier, response: str, gold: str
) -> None:
    assert verifier.verify(response, gold).status != "correct"
