"""Reading and comparing answers, for the math verifier's workers (:mod:`.worker`): the fast parser first, a scan
for values too large to build, then math-verify's LaTeX parser after its rewrites; equality by the quick exact
checks, then math-verify's ``verify``. This module imports sympy and math-verify, so only the workers import it.
"""

from __future__ import annotations

import logging
import re
import sys
from collections import OrderedDict
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse
from math_verify import verify as mv_verify
from math_verify.grader import should_treat_as_complex
from math_verify.parser import extract_match, get_extraction_regexes
from sympy import MatrixBase

from creditgym.verifiers.math import extract as ex
from creditgym.verifiers.math import fast, guard

__all__ = [
    "MAX_ANSWER_CHARS",
    "BudgetExceeded",
    "Parsed",
    "equal",
    "fallback",
    "fast_parse",
    "huge_inside",
    "is_collection",
    "parse_gold",
    "parse_latex",
    "without_variable",
]

#: Answers longer than this are not handed to the LaTeX parser (they are ``unparseable``).
MAX_ANSWER_CHARS = 10_000
_MAX_FALLBACK_TRIES = 8
_LATEX = [LatexExtractionConfig()]
_EXPR = [ExprExtractionConfig()]
_LATEX_EXPR = [LatexExtractionConfig(), ExprExtractionConfig()]
_FALLBACK_PATTERNS = sorted(
    (
        (pattern, target, priority)
        for patterns, target in get_extraction_regexes(_LATEX_EXPR)
        for pattern, priority in patterns
    ),
    key=lambda entry: entry[2],
)
_GOLD_CACHE: OrderedDict[str, Parsed] = OrderedDict()
_GOLD_CACHE_SIZE = 4096
#: Outside the fast parser's subset, answers whose exponents exceed this, or factorials of more than
#: ``_FACTORIAL_LIMIT``, or nesting deeper than ``_UNCOVERED_DEPTH``, are not handed to sympy.
_EXPONENT_LIMIT = 100_000
_FACTORIAL_LIMIT = 5_000
_UNCOVERED_DEPTH = 60
_TRIG_DEGREES_RE = re.compile(
    r"(\\(?:sin|cos|tan|cot|sec|csc))\s*(\\left\s*)?(\()?\s*(-?\d+(?:\.\d+)?)\s*\^\s*(?:\{\s*\\circ\s*\}|\\circ)"
    r"\s*(?(3)(?:\\right\s*)?\))"
)
_IMAGINARY_RE = re.compile(
    r"(?<![A-Za-z\\])i(?![A-Za-z])|\\(?:mathrm|text)\s*\{\s*i\s*\}|\\imath(?![A-Za-z])"
)
_GROUP_AFTER_CARET_RE = re.compile(r"\^\s*(\{|\\?[A-Za-z]+|\d)")
_FACTORIAL_RE = re.compile(r"(\d+)\s*\)?\s*!")
# Characters no math answer holds (an unescaped macro parameter, a question mark, @, a backtick): a text longer
# than _JUNK_CHARS with one is not handed to math-verify's LaTeX parser, whose error recovery on such junk costs
# tens of milliseconds a try (short ones are cheap to try, and "5?" keeps math-verify's reading).
_NOT_MATH_RE = re.compile(r"(?<!\\)#|[?@`]")
_JUNK_CHARS = 40


def _junk(text: str) -> bool:
    return len(text) > _JUNK_CHARS and _NOT_MATH_RE.search(text) is not None


# Python's recursion limit would stop the fast parser (and sympy) on deep but legitimate nesting first.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))

for _name in ("math_verify", "latex2sympy2_extended"):
    logging.getLogger(_name).setLevel(logging.ERROR)


class BudgetExceeded(Exception):
    """The comparison would need values past the size budget and no cheap view decides it."""


@dataclass(frozen=True)
class Parsed:
    """A parsed answer: math-verify's ``[value, string]`` list, the fast parser's tree, and whether the value is
    too large to build (then ``items`` is empty and only the guard compares it)."""

    items: tuple[Any, ...]
    node: fast.Node | None = None
    huge: bool = False

    @property
    def value(self) -> Any:
        return next((p for p in self.items if not isinstance(p, str)), None)


def _mv_rewrite(text: str) -> str:
    """Degrees inside trigonometric functions become radians; ``i`` becomes ``I`` where math-verify reads the
    answer as complex (it parses ``i`` as a variable otherwise)."""
    text = _TRIG_DEGREES_RE.sub(lambda m: f"{m.group(1)}{{(\\frac{{{m.group(4)}\\pi}}{{180}})}}", text)
    if should_treat_as_complex(text):
        text = _IMAGINARY_RE.sub("I", text)
    return text


def huge_inside(text: str) -> str | None:
    """Why sympy must not be given ``text`` (a huge power or factorial, deep nesting), or ``None``."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch in "{([":
            stack.append(i)
            if len(stack) > _UNCOVERED_DEPTH:
                return f"nesting deeper than {_UNCOVERED_DEPTH} levels"
        elif ch in "})]" and stack:
            closing[stack.pop()] = i
    for match in _GROUP_AFTER_CARET_RE.finditer(text):
        start = match.start(1)
        braced = match.group(1) == "{"
        exponent = text[start + 1 : closing.get(start, start)] if braced else match.group(1)
        try:
            value = fast.to_sympy(fast.parse(exponent))
        except fast.TooBig:
            return f"an exponent too large to build ({ex.short_repr(exponent, 40)})"
        except (fast.Uncovered, TypeError, ValueError, ZeroDivisionError):
            continue
        if value.is_number and value.is_comparable and abs(value) > _EXPONENT_LIMIT:
            return f"an exponent above {_EXPONENT_LIMIT:,} ({ex.short_repr(exponent, 40)})"
    for match in _FACTORIAL_RE.finditer(text):
        if len(match.group(1)) > 6 or int(match.group(1)) > _FACTORIAL_LIMIT:
            return f"a factorial of {ex.short_repr(match.group(1), 20)}"
    return None


def fast_parse(text: str) -> Parsed | None:
    """The fast parser's reading of ``text`` (huge when too large to build), or ``None`` outside its subset."""
    try:
        node = fast.parse(text)
    except (fast.Uncovered, RecursionError):
        return None
    try:
        return Parsed((fast.to_sympy(node), text), node)
    except fast.TooBig:
        return Parsed((), node, huge=True)
    except (fast.Uncovered, TypeError, ValueError, ZeroDivisionError, RecursionError, ArithmeticError):
        return None


def parse_latex(text: str, *, gold: bool = False) -> Parsed | None:
    """Parse one answer (LaTeX or plain); ``None`` if it does not parse.

    Raises:
        BudgetExceeded: an answer (not a gold) outside the fast subset that would make sympy build a huge value.
    """
    if not text or len(text) > MAX_ANSWER_CHARS:
        return None
    quick = fast_parse(text)
    if quick is not None:
        return quick
    if not gold:
        if _junk(text):
            return None
        reason = huge_inside(text)
        if reason is not None:
            raise BudgetExceeded(f"the answer holds {reason}")
    rewritten = _mv_rewrite(text)
    parsed = parse("\\boxed{" + rewritten + "}", _LATEX, parsing_timeout=None)
    if not _has_value(parsed) and "\\" not in rewritten:
        parsed = parse(rewritten, _EXPR, parsing_timeout=None)
    return Parsed(tuple(parsed)) if _has_value(parsed) else None


def _has_value(parsed: list[Any]) -> bool:
    return any(not isinstance(p, str) for p in parsed)


def parse_gold(gold_text: str) -> Parsed | None:
    cached = _GOLD_CACHE.get(gold_text)
    if cached is not None:
        _GOLD_CACHE.move_to_end(gold_text)
        return cached
    parsed = parse_latex(gold_text, gold=True)
    if parsed is None:
        items = parse(_mv_rewrite(gold_text), _LATEX_EXPR, parsing_timeout=None)
        parsed = Parsed(tuple(items)) if _has_value(items) else None
    if parsed is not None:
        _GOLD_CACHE[gold_text] = parsed
        if len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
            _GOLD_CACHE.popitem(last=False)
    return parsed


def _as_node(value: Any) -> fast.Node | None:
    """A tree for an exact sympy number parsed by math-verify, so that the guard can compare it."""
    if not isinstance(value, sympy.Rational):
        return None
    numerator: fast.Node = ("num", str(abs(value.p)))
    node = numerator if value.q == 1 else ("div", numerator, ("num", str(value.q)))
    return ("neg", node) if value < 0 else node


def _rational_function(value: Any) -> bool:
    """A rational function of its variables with rational coefficients, on which ``cancel`` decides equality."""
    return (
        isinstance(value, sympy.Expr)
        and bool(value.free_symbols)
        and value.is_rational_function()
        and all(atom.is_Rational for atom in value.atoms(sympy.Number))
        and all(power.exp.is_Integer for power in value.atoms(sympy.Pow))
    )


def equal(gold: Parsed, answer: Parsed) -> bool:
    """Whether ``answer`` equals ``gold``; raises :class:`BudgetExceeded` when a huge value cannot be compared."""
    if gold.huge or answer.huge:
        g = gold.node or _as_node(gold.value)
        a = answer.node or _as_node(answer.value)
        decision = guard.decide(g, a) if g is not None and a is not None else None
        if decision is None:
            raise BudgetExceeded("comparing these values would need numbers past the size budget")
        return decision == "correct"
    g, a = gold.value, answer.value
    if _rational_function(g) and _rational_function(a):  # x^2-1 vs (x-1)(x+1): exact, and 10-100x faster
        difference = g - a
        if not difference.is_polynomial():
            difference = sympy.numer(sympy.together(difference))
        return bool(sympy.expand(difference) == 0)
    if _constants_differ(g, a):  # sin(61 deg) vs sqrt(2)/2: no need for simplify() to fail slowly
        return False
    return bool(
        mv_verify(list(gold.items), list(answer.items), timeout_seconds=None, allow_set_relation_comp=True)
    )


def _constants_differ(g: Any, a: Any) -> bool:
    """Whether two exact constants (no variables, no decimals) certainly differ, by evaluation at 30 and 50 digits.

    math-verify then says "different" too (its ``evalf`` and ``simplify`` tests both need ``g - a`` to vanish);
    decimals are left to it because it compares them rounded to 6 places.
    """
    if not (isinstance(g, sympy.Expr) and isinstance(a, sympy.Expr)) or g.free_symbols or a.free_symbols:
        return False
    if (
        g.atoms(sympy.Float)
        or a.atoms(sympy.Float)
        or g.has(sympy.zoo, sympy.nan)
        or a.has(sympy.zoo, sympy.nan)
    ):
        return False
    try:
        gaps = [abs(sympy.N(g - a, digits)) for digits in (30, 50)]
        scale = 1 + abs(sympy.N(g, 30))
        return all(gap.is_comparable and gap > scale * sympy.Float("1e-20") for gap in gaps)
    except (TypeError, ValueError, ArithmeticError):
        return False


def is_collection(value: Any) -> bool:
    """Sets, intervals, tuples and matrices: golds for which listing several values is an answer, not a hedge."""
    if isinstance(value, sympy.FiniteSet):
        return len(value) > 1
    return isinstance(value, (sympy.Set, sympy.Tuple, MatrixBase))


# A bare computation over literal numbers ("81 + 17", "6 * 7"): a restated question, not a result.
_COMPUTATION = re.compile(r"^\$?\s*-?\d+(?:\.\d+)?(?:\s*[-+*×·]\s*-?\d+(?:\.\d+)?)+\s*\$?$")
_BEFORE_EQUALS = re.compile(r"\s*=")


def _not_an_answer(text: str, match: re.Match[str]) -> bool:
    """A fallback match that only restates work: the left side of an ``=``, or a computation of literals.

    Without this rule a response cut off at ``"81 + 17 = "`` would score as the answer 98 (math-verify evaluates
    the expression), and RL would learn to restate the question.
    """
    return bool(_BEFORE_EQUALS.match(text, match.end())) or bool(_COMPUTATION.match(match.group(0).strip()))


def fallback(text: str) -> tuple[Parsed | None, tuple[int, int] | None]:
    """math-verify's own extraction (LaTeX, then plain expressions; rightmost match first), with the match span.

    Mirrors ``math_verify.parser.extract_target_from_pred`` (any_match mode) so the span of what was extracted
    is known; matches that only restate work (:func:`_not_an_answer`) are skipped.

    Raises:
        BudgetExceeded: the match holds a huge power or factorial that sympy must not build.
    """
    for _, group in groupby(_FALLBACK_PATTERNS, key=lambda entry: entry[2]):
        matches = sorted(
            ((m, target) for pattern, target, _ in group for m in pattern.finditer(text)),
            key=lambda mt: (mt[0].end(), -mt[0].start()),
            reverse=True,
        )
        for match, target in matches[:_MAX_FALLBACK_TRIES]:  # junk full of "$" must not cost 100 parses
            if _not_an_answer(text, match):
                continue
            groups = [name for name, v in match.groupdict().items() if v is not None]
            spans = [match.span(name) for name in groups]
            span = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else match.span()
            many = len(groups) > 1 and isinstance(target, LatexExtractionConfig)  # "$x = 2$ or $x = 3$"
            candidate = ", ".join(without_variable([match.group(g) for g in groups])) if many else None
            quick = fast_parse(candidate or text[span[0] : span[1]])
            if quick is not None:
                return quick, span
            inner = text[span[0] : span[1]]
            if inner.count("{") != inner.count("}") or _junk(inner):  # junk: skip the slow parser
                continue
            reason = huge_inside(match.group(0))
            if reason is not None:
                raise BudgetExceeded(f"the answer holds {reason}")
            try:
                value, string = extract_match(match, target)
            except Exception:
                continue
            if value is not None:
                return Parsed((value, string)), span
    return None, None


_ASSIGNMENT_RE = re.compile(r"\s*([A-Za-z])\s*=\s*(?!=)")


def without_variable(texts: list[str]) -> list[str]:
    """The values of "x = 2 or x = 3" when every alternative assigns the same variable, else the texts."""
    heads = [_ASSIGNMENT_RE.match(t) for t in texts]
    if all(heads) and len({h.group(1) for h in heads if h}) == 1:
        return [t[h.end() :] for t, h in zip(texts, heads, strict=True) if h]
    return texts
