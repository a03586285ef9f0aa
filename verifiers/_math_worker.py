"""Worker side of :mod:`creditgym.verifiers.math`: extraction plus math-verify, run inside pool workers.

This module imports sympy and math-verify (about 0.5 s), so only the fork server and the workers import it; the
parent process never does. Each call runs in the worker's main thread with math-verify's own SIGALRM timeouts
disabled (``parsing_timeout=None``, ``timeout_seconds=None``): the pool's external deadline kills the worker.

:func:`score` returns plain tuples (cheap to pickle); the parent turns them into :class:`Verdict` objects.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections import OrderedDict
from itertools import groupby
from typing import Any

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse
from math_verify import verify as mv_verify
from math_verify.parser import extract_match, get_extraction_regexes
from sympy import MatrixBase

from creditgym.verifiers import _math_extract as ex

__all__ = ["FALLBACK_CHARS", "MAX_ANSWER_CHARS", "TEST_HOOK_PREFIX", "score"]

#: math-verify's fallback extraction only sees this many trailing characters of a response.
FALLBACK_CHARS = 4000
#: Answers longer than this are not handed to the LaTeX parser (they are ``unparseable``).
MAX_ANSWER_CHARS = 10_000
TEST_HOOK_PREFIX = ex.TEST_HOOK_PREFIX
_EXTRACTED_CHARS = 2000
_MAX_ALTERNATIVES = 16

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
_PLAIN_NUMBER_RE = re.compile(r"-?\d{1,50}(?:\.\d{1,30})?")
_GOLD_CACHE: OrderedDict[str, list[Any]] = OrderedDict()
_GOLD_CACHE_SIZE = 4096

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
    if not gold_parsed:
        return (
            "gold_error",
            f"gold {ex.short_repr(gold)} (answer part {ex.short_repr(gold_text)}) does not parse as a math expression",
        )
    return _score_math(response, gold_text, gold_parsed)


# ------------------------------------------------------------------------------------------------ parsing


def _has_value(parsed: list[Any]) -> bool:
    return any(not isinstance(p, str) for p in parsed)


def _parse_latex(text: str) -> list[Any]:
    """Parse one answer (LaTeX or plain): ``[sympy_value, normalised_string]``, or ``[]`` if it does not parse.

    Plain numbers ("72", "-3", "0.25") skip the LaTeX grammar (an ANTLR parser, about 9 ms a call) and become
    the exact sympy number the grammar would give.
    """
    if not text or len(text) > MAX_ANSWER_CHARS:
        return []
    if _PLAIN_NUMBER_RE.fullmatch(text):
        return [sympy.Rational(text) if "." in text else sympy.Integer(text), text]
    parsed = parse("\\boxed{" + text + "}", _LATEX, parsing_timeout=None)
    if not _has_value(parsed) and "\\" not in text:
        parsed = parse(text, _EXPR, parsing_timeout=None)
    return parsed if _has_value(parsed) else []


def _parse_gold(gold_text: str) -> list[Any]:
    cached = _GOLD_CACHE.get(gold_text)
    if cached is not None:
        _GOLD_CACHE.move_to_end(gold_text)
        return cached
    parsed = _parse_latex(gold_text)
    if not parsed:
        parsed = parse(gold_text, _LATEX_EXPR, parsing_timeout=None)
        parsed = parsed if _has_value(parsed) else []
    if parsed:
        _GOLD_CACHE[gold_text] = parsed
        if len(_GOLD_CACHE) > _GOLD_CACHE_SIZE:
            _GOLD_CACHE.popitem(last=False)
    return parsed


def _equal(gold: list[Any], answer: list[Any]) -> bool:
    return bool(mv_verify(gold, answer, timeout_seconds=None))


def _value(parsed: list[Any]) -> Any:
    return next((p for p in parsed if not isinstance(p, str)), None)


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


def _fallback(text: str) -> tuple[list[Any], tuple[int, int] | None]:
    """math-verify's own extraction (LaTeX, then plain expressions; rightmost match first), with the match span.

    Mirrors ``math_verify.parser.extract_target_from_pred`` (any_match mode) so the span of what was extracted
    is known; matches that only restate work (:func:`_not_an_answer`) are skipped.
    """
    for _, group in groupby(_FALLBACK_PATTERNS, key=lambda entry: entry[2]):
        matches = sorted(
            ((m, target) for pattern, target, _ in group for m in pattern.finditer(text)),
            key=lambda mt: (mt[0].end(), -mt[0].start()),
            reverse=True,
        )
        for match, target in matches:
            if _not_an_answer(text, match):
                continue
            try:
                value, string = extract_match(match, target)
            except Exception:
                continue
            if value is not None:
                spans = [match.span(name) for name, v in match.groupdict().items() if v is not None]
                span = (min(s for s, _ in spans), max(e for _, e in spans)) if spans else match.span()
                return [value, string], span
    return [], None


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


def _score_math(response: str, gold_text: str, gold_parsed: list[Any]) -> Result:
    if not response.strip():
        return _verdict("unparseable", _details(None, gold_text, None, error="empty response"))
    found = ex.extract(response)
    if found is None:  # no box, no ####, no "answer is": math-verify's extraction over the tail
        offset = max(0, len(response) - FALLBACK_CHARS)
        parsed, span = _fallback(response[offset:])
        if not parsed or span is None:
            return _verdict("unparseable", _details(None, gold_text, "fallback", error="no answer found"))
        start, end = span[0] + offset, span[1] + offset
        answer = ex.Answer(response[start:end], start, end)
        return _judge(answer, parsed, gold_text, gold_parsed, "fallback")
    if found.error is not None or not found.answers:
        spans = [found.error_span] if found.error_span else []
        error = found.error or "no answer found"
        return _verdict("unparseable", _details(None, gold_text, found.method, error=error), spans)

    answers = list(found.answers)
    distinct = len({_normal(a.text) for a in answers})
    if distinct > _MAX_ALTERNATIVES and not _is_collection(_value(gold_parsed)):
        return _hedged(answers, gold_text, found.method)  # a long list of candidates: no need to parse them
    if distinct > 1:
        if _is_collection(_value(gold_parsed)):  # "x = 2 or x = 3" for gold {2, 3}: a list of the elements
            joined = ", ".join(a.text for a in answers)
            parsed = _parse_latex(joined)
            whole = ex.Answer(joined, answers[0].start, answers[-1].end)
            if not parsed:
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
        if not all(parsed_all) or not all(_equal(parsed_all[0], p) for p in parsed_all[1:]):
            return _hedged(answers, gold_text, found.method)
        return _judge(answers[-1], parsed_all[-1], gold_text, gold_parsed, found.method)
    answer = answers[-1]
    parsed = _parse_latex(answer.text)
    if not parsed:
        error = "answer is too long" if len(answer.text) > MAX_ANSWER_CHARS else "answer does not parse"
        return _verdict(
            "unparseable", _details(answer.text, gold_text, found.method, error=error), [answer.span]
        )
    return _judge(answer, parsed, gold_text, gold_parsed, found.method)


def _judge(
    answer: ex.Answer,
    parsed: list[Any],
    gold_text: str,
    gold_parsed: list[Any],
    method: str,
    spans: list[tuple[int, int]] | None = None,
) -> Result:
    spans = spans or [answer.span]
    value = _value(parsed)
    if isinstance(value, sympy.FiniteSet) and len(value) > 1 and not _is_collection(_value(gold_parsed)):
        # "\boxed{2, 3}" or "\boxed{\pm 2}" for a single-valued gold: several candidate answers at once
        details = _details(
            answer.text, gold_text, method, hedged=True, alternatives=[str(v) for v in value.args]
        )
        return _verdict("wrong", details, spans)
    status = "correct" if _equal(gold_parsed, parsed) else "wrong"
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
        for text in _WARM_UP_ANSWERS:
            parsed = _parse_latex(text)
            if parsed:
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
