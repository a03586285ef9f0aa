"""The fast parser reads its subset of LaTeX as math-verify does, refuses the rest, and never builds huge values.

These run in this process: they import the worker-side modules (sympy, math-verify) directly.
"""

from __future__ import annotations

import itertools
import logging

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from math_verify import LatexExtractionConfig, parse
from math_verify import verify as mv_verify

from creditgym.verifiers.math import fast, parsing

logging.getLogger("math_verify").setLevel(logging.CRITICAL)

# Equivalence classes of answers in the fast subset (math-verify's own verdicts: equal within a group only).
GROUPS = [
    ["72", "72.0", "72.00", r"\frac{144}{2}", "8 \\cdot 9", "2^3 \\times 9", r"\sqrt{5184}"],
    ["0.5", r"\frac{1}{2}", r"\dfrac{2}{4}", "1/2", r"\frac12", "0.50", r"\frac{\sqrt{4}}{4}"],
    [r"\frac{1}{3}", "0.333333", r"\frac{2}{6}"],
    [r"2\sqrt{3}", r"\sqrt{12}", r"\frac{6}{\sqrt{3}}", r"\sqrt{3} \cdot 2"],
    [r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", r"2^{-1/2}"],
    [r"3\pi", r"\pi \cdot 3", r"\frac{6\pi}{2}"],
    ["x^2-1", "(x-1)(x+1)", "(x+1)(x-1)", "-1 + x^2"],
    ["(x-1)^2", "x^2-2x+1", "(1-x)^2"],
    [r"\frac{x}{2}", r"\frac{1}{2}x", "0.5x", "x/2"],
    [r"\{1, 2, 3\}", r"\{3, 2, 1\}", "1, 2, 3", r"\{1, 2, 2, 3\}"],
    ["(1, 2]", r"\left(1, 2\right]"],
    ["[1, 2]"],
    ["(1, 2)"],
    [r"(-\infty, 0) \cup (1, \infty)", r"(1, \infty) \cup (-\infty, 0)"],
    [r"[0, \infty)"],
    ["5!", "120", "(2+3)!"],
    ["e^{2}", "e^2", "e \\cdot e"],
    ["y = 2x + 1", "y=2x+1"],
    ["-3", "-(3)", "+(-3)", "0 - 3"],
    ["10^{-3}", "0.001", r"\frac{1}{1000}"],
]
CORPUS = [text for group in GROUPS for text in group]


def _mv(text: str) -> list:
    return parse("\\boxed{" + text + "}", [LatexExtractionConfig()], parsing_timeout=None)


def _fast(text: str) -> parsing.Parsed:
    parsed = parsing.fast_parse(text)
    assert parsed is not None and not parsed.huge, text
    return parsed


@pytest.mark.parametrize("text", CORPUS)
def test_the_fast_value_is_math_verifys_value(text: str) -> None:
    ours = _fast(text).value
    theirs = _mv(text)
    assert theirs, f"math-verify does not parse {text!r}"
    assert mv_verify(theirs, [ours], timeout_seconds=None) and mv_verify([ours], theirs, timeout_seconds=None)


def test_equality_decisions_match_math_verify_across_the_corpus() -> None:
    # Every pair within a group, and the first answers of the groups against each other.
    pairs = {(a, b) for group in GROUPS for a, b in itertools.combinations(group, 2)}
    pairs |= set(itertools.combinations([group[0] for group in GROUPS], 2))
    disagreements = []
    for a, b in sorted(pairs):
        ours = parsing.equal(_fast(a), _fast(b))
        theirs = bool(mv_verify(_mv(a), _mv(b), timeout_seconds=None))
        if ours != theirs:
            disagreements.append((a, b, ours, theirs))
    assert not disagreements, disagreements


_small = st.integers(min_value=-30, max_value=30).map(str)


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.one_of(_small.filter(lambda s: not s.startswith("-")), st.sampled_from(["x", r"\pi"])))
    a, b = draw(_expressions(depth=depth - 1)), draw(_expressions(depth=depth - 1))
    form = draw(st.sampled_from(["{a}+{b}", "{a}-{b}", "{a} \\cdot {b}", "\\frac{{{a}}}{{{b}}}", "({a})^{{2}}",
                                 "\\sqrt{{{a}}}", "({a})({b})"]))  # fmt: skip
    return form.format(a=a, b=b)


@settings(max_examples=150, deadline=None)
@given(_expressions())
def test_random_expressions_parse_to_math_verifys_value(text: str) -> None:
    theirs = _mv(text)
    parsed = parsing.fast_parse(text)
    if parsed is None or not theirs or parsed.huge:  # division by zero and the like: left to math-verify
        return
    # Compared as values: math-verify's own check misses x + 0 = x when x stands alone (it compares the strings).
    assert sympy.simplify(theirs[0].doit() - parsed.value) == 0, (text, theirs, parsed.value)


@pytest.mark.parametrize(
    "text",
    [r"\text{Monday}", r"50\%", "1,000", "X", "x^23", "2 3", r"\begin{pmatrix}1\end{pmatrix}", r"\log_2 8",
     r"30^\circ", "f(x)", "(1, 2, 3)", r"\pm 2", "x = y = 2", "1 < 2", r"2\frac{1}{2}", "(2)(3)", "2(3)"],
)  # fmt: skip
def test_text_outside_the_subset_is_left_to_math_verify(text: str) -> None:
    with pytest.raises(fast.Uncovered):
        fast.to_sympy(fast.parse(text))


@pytest.mark.parametrize(
    "text",
    [r"2^{10^{100}}", r"9^{9^{9^{9}}}", r"(10^{9})!", r"x^{10^{6}}", r"2^{10^{6}} \cdot 3^{10^{6}}",
     r"\frac{1}{2^{10^{7}}}", r"\sqrt{2}^{10^{12}}", r"1.5^{10^{8}}"],
)  # fmt: skip
def test_huge_values_are_refused_before_they_are_built(text: str) -> None:
    with pytest.raises(fast.TooBig):
        fast.to_sympy(fast.parse(text))


def test_nesting_is_bounded() -> None:
    assert fast.to_sympy(fast.parse("\\frac{1}{1+" * 300 + "1" + "}" * 300)) < 1
    with pytest.raises(fast.Uncovered, match="deeper"):
        fast.parse("(" * (fast.MAX_DEPTH + 10) + "1" + ")" * (fast.MAX_DEPTH + 10))
