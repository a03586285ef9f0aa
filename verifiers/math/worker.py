"""Worker side of :mod:`creditgym.verifiers.math`: extraction plus math-verify, run inside pool workers.

This module imports sympy and math-verify (about 0.5 s), so only the fork server and the workers import it; the
parent process never does. Each call runs in the worker's main thread with math-verify's own SIGALRM timeouts
disabled (``parsing_timeout=None``, ``timeout_seconds=None``): the pool's external deadline kills the worker.

An answer is read in three steps, cheapest first:

1. the fast parser (:mod:`._math_fast`) for the common subset of LaTeX, with a size budget: a value too large to
   build is compared by the guard (:mod:`._math_guard`) without being built;
2. outside that subset, a scan for huge powers and factorials and deep nesting that would make sympy hang
   (``budget`` verdicts, in milliseconds);
3. math-verify's LaTeX parser, after two rewrites it lacks: degrees inside trigonometric functions
   (``\\sin 60^\\circ`` is ``\\sin\\frac{\\pi}{3}``; elsewhere ``30^\\circ`` stays 30, math-verify's convention), and
   ``i`` as the imaginary unit wherever math-verify itself treats the answer as complex (``e^{i\\pi} = -1``).

Equality is math-verify's ``verify`` with ``allow_set_relation_comp=True`` (an interval equals the equivalent
inequality, in either order), after two quicker exact checks it would agree with: rational functions with rational
coefficients are equal when the numerator of their difference expands to 0, and two constants without decimals
differ when their difference evaluates to a clear non-zero at 30 and at 50 digits.

:func:`score` returns plain tuples (cheap to pickle); the parent turns them into :class:`Verdict` objects.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
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

__all__ = ["FALLBACK_CHARS", "MAX_ANSWER_CHARS", "TEST_HOOK_PREFIX", "score"]

#: math-verify's fallback extraction only sees this many trailing characters of a response.
FALLBACK_CHARS = 4000
#: Answers longer than this are not handed to the LaTeX parser (they are ``unparseable``).
MAX_ANSWER_CHARS = 10_000
TEST_HOOK_PREFIX = ex.TEST_HOOK_PREFIX
_EXTRACTED_CHARS = 2000
_MAX_ALTERNATIVES = 16
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

# ("verdict", status, score, details, spans) or ("gold_error", message)
Result = tuple[Any, ...]


def score(item: tuple[str, str]) -> Result:
    """Judge one ``(response, gold)`` pair; see :func:`creditgym.verifiers.math.verify` for the rules."""
    response, gold = item
    if gold.startswith(TEST_HOOK_PREFIX) and os.environ.get("CREDITGYM_TEST_HOOKS") == "1":
        return _test_hook(gold[len(TEST_HOOK_PREFIX) :])
    try:
        gold_text = ex.gold_answer(gold)
    except ValueError as exc:
        return ("gold_error", str(exc))
    letter = ex.choice_letter(gold_text)
    if letter is not None:
        return _score_choice(response, letter)
    gold_parsed = _parse_gold(gold_text)
    if gold_parsed is None:
        return (
            "gold_error",
            f"gold {ex.short_repr(gold)} (answer part {ex.short_repr(gold_text)}) does not parse as a math expression",
        )
    return _score_math(response, gold_text, gold_parsed)


# ------------------------------------------------------------------------------------------------ parsing


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


def _fast_parse(text: str) -> Parsed | None:
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


def _parse_latex(text: str, *, gold: bool = False) -> Parsed | None:
    """Parse one answer (LaTeX or plain); ``None`` if it does not parse.

    Raises:
        BudgetExceeded: an answer (not a gold) outside the fast subset that would make sympy build a huge value.
    """
    if not text or len(text) > MAX_ANSWER_CHARS:
        return None
    quick = _fast_parse(text)
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


def _parse_gold(gold_text: str) -> Parsed | None:
    cached = _GOLD_CACHE.get(gold_text)
    if cached is not None:
        _GOLD_CACHE.move_to_end(gold_text)
        return cached
    parsed = _parse_latex(gold_text, gold=True)
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


def _equal(gold: Parsed, answer: Parsed) -> bool:
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


def _is_collection(value: Any) -> bool:
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


def _fallback(text: str) -> tuple[Parsed | None, tuple[int, int] | None]:
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
            candidate = ", ".join(_without_variable([match.group(g) for g in groups])) if many else None
            quick = _fast_parse(candidate or text[span[0] : span[1]])
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


# ------------------------------------------------------------------------------------------------ verdicts


def _details(extracted: str | None, gold: str, method: str | None, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"extracted": extracted, "gold": gold, "method": method, "hedged": False}
    if extracted is not None and len(extracted) > _EXTRACTED_CHARS:
        details["extracted"] = extracted[:_EXTRACTED_CHARS] + "..."
        details["extracted_truncated"] = True
    details.update(extra)
    return details


def _verdict(status: str, details: dict[str, Any], spans: list[tuple[int, int]] | tuple[()] = ()) -> Result:
    return ("verdict", status, 1.0 if status == "correct" else 0.0, details, tuple(spans))


def _hedged(answers: list[ex.Answer], gold: str, method: str) -> Result:
    alternatives = [a.text[:_EXTRACTED_CHARS] for a in answers[:_MAX_ALTERNATIVES]]
    details = _details(
        answers[-1].text, gold, method, hedged=True, alternatives=alternatives, n_alternatives=len(answers)
    )
    return _verdict("wrong", details, [a.span for a in answers])


def _normal(text: str) -> str:
    return (
        "".join(text.split())
        .replace("\\left", "")
        .replace("\\right", "")
        .replace("\\!", "")
        .replace("\\,", "")
    )


def _score_choice(response: str, letter: str) -> Result:
    found = ex.extract_choice(response)
    if found.error is not None or not found.answers:
        error = found.error or "no choice letter (A-J) found"
        spans = [found.error_span] if found.error_span else []
        return _verdict("unparseable", _details(None, letter, "choice", error=error), spans)
    letters = list(found.answers)
    if len({a.text for a in letters}) > 1:
        return _hedged(letters, letter, "choice")
    answer = letters[-1]
    status = "correct" if answer.text == letter else "wrong"
    return _verdict(status, _details(answer.text, letter, "choice"), [answer.span])


def _score_math(response: str, gold_text: str, gold_parsed: Parsed) -> Result:
    if not response.strip():
        return _verdict("unparseable", _details(None, gold_text, None, error="empty response"))
    found = ex.extract(response)
    method = "fallback" if found is None else found.method
    try:
        return _score_found(response, found, gold_text, gold_parsed)
    except BudgetExceeded as exc:  # a verdict in milliseconds instead of a worker stuck until its deadline
        details = _details(None, gold_text, method, error=f"{exc}; not compared", budget=True)
        return _verdict("timeout", details)


def _score_found(response: str, found: ex.Extraction | None, gold_text: str, gold_parsed: Parsed) -> Result:
    if found is None:  # no box, no ####, no "answer is": math-verify's extraction over the tail
        offset = max(0, len(response) - FALLBACK_CHARS)
        parsed, span = _fallback(response[offset:])
        if parsed is None or span is None:
            return _verdict("unparseable", _details(None, gold_text, "fallback", error="no answer found"))
        start, end = span[0] + offset, span[1] + offset
        answer = ex.Answer(response[start:end], start, end)
        listed = ex.listed_before(response, answer)
        if listed is not None:
            return _hedged([listed, answer], gold_text, "fallback")
        return _judge(answer, parsed, gold_text, gold_parsed, "fallback")
    if found.error is not None or not found.answers:
        spans = [found.error_span] if found.error_span else []
        error = found.error or "no answer found"
        return _verdict("unparseable", _details(None, gold_text, found.method, error=error), spans)

    answers = list(found.answers)
    distinct = len({_normal(a.text) for a in answers})
    collection = _is_collection(gold_parsed.value)
    if distinct > _MAX_ALTERNATIVES and not collection:
        return _hedged(answers, gold_text, found.method)  # a long list of candidates: no need to parse them
    if distinct > 1:
        if collection:  # "x = 2 or x = 3" for gold {2, 3}: a list of the elements
            joined = ", ".join(_without_variable([a.text for a in answers]))
            parsed = _parse_latex(joined)
            whole = ex.Answer(joined, answers[0].start, answers[-1].end)
            if parsed is None:
                return _verdict(
                    "unparseable", _details(joined, gold_text, found.method, error="answer does not parse")
                )
            return _judge(
                whole, parsed, gold_text, gold_parsed, found.method, spans=[a.span for a in answers]
            )
        parsed_all = [_parse_latex(a.text) for a in answers]
        if found.method != "boxed" and any(parsed_all):  # prose: "2 (or equivalently 2.0)" leaves scraps
            answers = [a for a, p in zip(answers, parsed_all, strict=True) if p]
            parsed_all = [p for p in parsed_all if p]
        if not _all_equal(parsed_all):
            return _hedged(answers, gold_text, found.method)
        return _judge(answers[-1], parsed_all[-1], gold_text, gold_parsed, found.method)  # type: ignore[arg-type]
    answer = answers[-1]
    parsed = _parse_latex(answer.text)
    if parsed is None:
        error = "answer is too long" if len(answer.text) > MAX_ANSWER_CHARS else "answer does not parse"
        return _verdict(
            "unparseable", _details(answer.text, gold_text, found.method, error=error), [answer.span]
        )
    return _judge(answer, parsed, gold_text, gold_parsed, found.method)


_ASSIGNMENT_RE = re.compile(r"\s*([A-Za-z])\s*=\s*(?!=)")


def _without_variable(texts: list[str]) -> list[str]:
    """The values of "x = 2 or x = 3" when every alternative assigns the same variable, else the texts."""
    heads = [_ASSIGNMENT_RE.match(t) for t in texts]
    if all(heads) and len({h.group(1) for h in heads if h}) == 1:
        return [t[h.end() :] for t, h in zip(texts, heads, strict=True) if h]
    return texts


def _all_equal(parsed_all: list[Parsed | None]) -> bool:
    """Whether every candidate parses and equals the first (two candidates that cannot be compared differ)."""
    if not all(parsed_all):
        return False
    first = parsed_all[0]
    try:
        return all(_equal(first, p) for p in parsed_all[1:])  # type: ignore[arg-type]
    except BudgetExceeded:
        return False


def _judge(
    answer: ex.Answer,
    parsed: Parsed,
    gold_text: str,
    gold_parsed: Parsed,
    method: str,
    spans: list[tuple[int, int]] | None = None,
) -> Result:
    spans = spans or [answer.span]
    value = parsed.value
    if isinstance(value, sympy.FiniteSet) and len(value) > 1 and not _is_collection(gold_parsed.value):
        # "\boxed{2, 3}" or "\boxed{\pm 2}" for a single-valued gold: several candidate answers at once
        details = _details(
            answer.text, gold_text, method, hedged=True, alternatives=[str(v) for v in value.args]
        )
        return _verdict("wrong", details, spans)
    try:
        status = "correct" if _equal(gold_parsed, parsed) else "wrong"
    except BudgetExceeded as exc:
        details = _details(answer.text, gold_text, method, error=f"{exc}; not compared", budget=True)
        return _verdict("timeout", details, spans)
    return _verdict(status, _details(answer.text, gold_text, method), spans)


# ------------------------------------------------------------------------------------------------ warm-up

# The LaTeX grammar is an ANTLR parser whose prediction cache fills lazily: the first parses of each construct
# cost 5-50x more than later ones. Filling it here, at import, means the fork server does it once and every
# worker (replacements after a timeout included) starts with a warm cache.
_WARM_UP_ANSWERS = (
    "-3", r"\frac{1}{2}", r"\dfrac{3}{4}", r"\sqrt{2}", r"2\sqrt{3}", r"\frac{\sqrt{2}}{2}", "x^2-1", "(x-1)(x+1)",
    "(x-3)^2", "x=3", "y = 2x + 1", r"\{1,2,3\}", "(1,2]", r"[0, \infty)", r"(-\infty,0)\cup(1,\infty)",
    r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\begin{bmatrix}1&2\\3&4\end{bmatrix}", r"50\%", r"\pi",
    r"\frac{3\pi}{4}", r"\log_2 8", r"\sin x", "10^{-3}", "2^{10}", r"\text{Monday}", r"5\text{ cm}", r"30^\circ",
    r"\pm 2", "2, 3", "a+b", r"\infty", r"x \in (1,2]", r"x \le 3", "1,000", r"\$5", "1/2", r"\sqrt[3]{2}",
    r"\binom{5}{2}", "5!", "|x|", r"2 \times 3", r"2 \cdot 3",
)  # fmt: skip
_WARM_UP_PAIRS = (
    (r"So the answer is $\boxed{\frac{1}{2}}$.", "0.5"),
    ("The answer is 5 apples.", "5"),
    ("She has 7.\n#### 7", "3 + 4 = 7\n#### 7"),
    ("So there are 17 marbles left.", "17"),
    (r"Therefore $x = \frac{3}{4}$", "0.75"),
    ("The answer is (C).", "C"),
    (r"\boxed{2} or \boxed{3}", "2"),
)


def _warm_up() -> None:
    try:
        # sympy's simplify imports sympy.physics.units the first time it runs (0.4-0.6 s): once here, in the
        # fork server, instead of in the first item of every worker that reaches simplify
        import sympy.physics.units  # noqa: F401

        for text in _WARM_UP_ANSWERS:
            parsed = _parse_latex(text)
            if parsed is not None:
                _equal(parsed, parsed)
        for pair in _WARM_UP_PAIRS:
            score(pair)
    except Exception:  # a warm-up failure must never stop the worker from starting
        logging.getLogger(__name__).debug("math verifier warm-up failed", exc_info=True)


_warm_up()


# ------------------------------------------------------------------------------------------------ test hooks


def _test_hook(command: str) -> Result:
    """Misbehave on purpose, for the pool's tests (enabled only by ``CREDITGYM_TEST_HOOKS=1``)."""
    name, _, arg = command.partition(":")
    if name == "sleep":
        time.sleep(float(arg))
    elif name == "spin":
        while True:
            pass
    elif name == "exit":
        os._exit(3)
    elif name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif name == "die_once":  # die unless the marker file exists (so the retry succeeds)
        if not os.path.exists(arg):
            with open(arg, "w") as marker:
                marker.write(str(os.getpid()))
            os._exit(3)
    elif name == "raise":
        raise RuntimeError("test hook: raise")
    else:
        return ("gold_error", f"unknown test hook {command!r}")
    return _verdict("correct", _details(command, command, "hook", pid=os.getpid()))
