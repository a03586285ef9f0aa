"""Worked arithmetic chains (``creditgym/Math-v0`` level 6): 3-6 steps, each written out with its result.

The question states the chain; a correct response writes every step with its operands and result, then boxes the
last result::

    question: Work out each step and write its result: a = 23 + 7; b = a * 3; c = b - 4. What is c?
    solution: a = 23 + 7 = 30; b = 30 * 3 = 90; c = 90 - 4 = 86.
    response: a = 23 + 7 = 30; b = 30 * 3 = 90; c = 90 - 4 = 86. The answer is \\boxed{86}.

Every step after the first applies ``+ k``, ``- k`` or ``* m`` (``m >= 2``) to the previous result, all of them
one-to-one, so one wrong intermediate result, carried on, dooms the final answer. Results stay in 0-99. Every chain
is recomputed with sympy from the question's own text (:func:`check_chain`), and the worked solution is checked
against that recomputation step by step.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

import numpy as np
import sympy

CHAIN_STEPS = (3, 6)  # fewest and most steps of a chain
VARIABLES = "abcdef"
MAX_VALUE = 99  # every intermediate result lies in 0..MAX_VALUE
PROMPT = "Work out each step and write its result:"
_STEP = re.compile(r"([a-z]) = ([a-z]|\d+) ([-+*]) (\d+)")
_WORKED = re.compile(r"([a-z]) = (\d+) ([-+*]) (\d+) = (\d+)")


@dataclass(frozen=True)
class Step:
    """``var = left op right``: ``left`` is a number (first step) or the previous step's variable."""

    var: str
    left: str
    op: str
    right: int


def _next_step(rng: np.random.Generator, var: str, prev: str, value: int) -> tuple[Step, int]:
    options = [("+", k) for k in range(2, 10) if value + k <= MAX_VALUE]
    options += [("-", k) for k in range(2, 10) if value - k >= 0]
    options += [("*", m) for m in (2, 3) if value * m <= MAX_VALUE]
    op, k = options[int(rng.integers(len(options)))]
    return Step(var, prev, op, k), _apply(value, op, k)


def _apply(value: int, op: str, k: int) -> int:
    return value + k if op == "+" else value - k if op == "-" else value * k


def generate_chain(rng: np.random.Generator) -> tuple[Step, ...]:
    """A chain of ``CHAIN_STEPS`` steps: ``a = X +/- Y`` then one step on the previous result at a time."""
    n = int(rng.integers(CHAIN_STEPS[0], CHAIN_STEPS[1] + 1))
    x, y = int(rng.integers(10, 50)), int(rng.integers(2, 10))
    op = "+" if rng.random() < 0.5 else "-"
    steps, value = [Step("a", str(x), op, y)], _apply(x, op, y)
    for var in VARIABLES[1:n]:
        step, value = _next_step(rng, var, steps[-1].var, value)
        steps.append(step)
    return tuple(steps)


def evaluate(steps: tuple[Step, ...]) -> list[int]:
    """The result of every step, in plain integer arithmetic."""
    values: list[int] = []
    for step in steps:
        left = int(step.left) if step.left.isdigit() else values[-1]
        values.append(_apply(left, step.op, step.right))
    return values


def question(steps: tuple[Step, ...]) -> str:
    """``"Work out each step and write its result: a = 23 + 7; b = a * 3; c = b - 4. What is c?"``"""
    body = "; ".join(f"{s.var} = {s.left} {s.op} {s.right}" for s in steps)
    return f"{PROMPT} {body}. What is {steps[-1].var}?"


def solution(steps: tuple[Step, ...], values: list[int] | None = None) -> str:
    """The worked chain ``"a = 23 + 7 = 30; b = 30 * 3 = 90; c = 90 - 4 = 86."``.

    ``values`` replaces the step results (a response with wrong intermediate results, carried on); by default the
    right ones.
    """
    values = evaluate(steps) if values is None else values
    lefts = [steps[0].left, *(str(v) for v in values[:-1])]
    return (
        "; ".join(
            f"{s.var} = {left} {s.op} {s.right} = {v}"
            for s, left, v in zip(steps, lefts, values, strict=True)
        )
        + "."
    )


_SYMPY_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def check_chain(text: str, worked: str, answer: sympy.Expr) -> bool:
    """Recompute the chain stated in ``text`` with sympy; True when ``answer`` and every step of ``worked`` agree.

    The question is read back from its own text (not from the generator's steps) and every step computed in sympy
    integers; ``worked`` must state the same steps, in order, each from the previous step's recomputed result.
    """
    values: dict[str, sympy.Integer] = {}
    stated = _STEP.findall(text)
    for var, left, op, right in stated:
        x = values[left] if left in values else sympy.Integer(left)
        values[var] = _SYMPY_OPS[op](x, sympy.Integer(right))
    rows = _WORKED.findall(worked)
    if not stated or len(rows) != len(stated) or values[stated[-1][0]] != answer:
        return False
    for (var, left, op, right), (wvar, wleft, wop, wright, result) in zip(stated, rows, strict=True):
        x = values[left] if left in values else sympy.Integer(left)
        if (var, op, right) != (wvar, wop, wright) or sympy.Integer(wleft) != x:
            return False
        if sympy.Integer(result) != values[var]:
            return False
    return True
