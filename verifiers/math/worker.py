"""Worker side of :mod:`creditgym.verifiers.math`: extraction plus math-verify, run inside pool workers; the
verdicts here, the reading and comparing of answers in :mod:`.parsing`.

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
import signal
import time
from typing import Any

import sympy

from creditgym.verifiers.math import extract as ex
from creditgym.verifiers.math.parsing import (
    MAX_ANSWER_CHARS,
    BudgetExceeded,
    Parsed,
    equal,
    fallback,
    is_collection,
    parse_gold,
    parse_latex,
    without_variable,
)

__all__ = ["FALLBACK_CHARS", "MAX_ANSWER_CHARS", "TEST_HOOK_PREFIX", "score"]

#: math-verify's fallback extraction only sees this many trailing characters of a response.
FALLBACK_CHARS = 4000
TEST_HOOK_PREFIX = ex.TEST_HOOK_PREFIX
_EXTRACTED_CHARS = 2000
_MAX_ALTERNATIVES = 16

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
    gold_parsed = parse_gold(gold_text)
    if gold_parsed is None:
        return (
            "gold_error",
            f"gold {ex.short_repr(gold)} (answer part {ex.short_repr(gold_text)}) does not parse as a math expression",
        )
    return _score_math(response, gold_text, gold_parsed)


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
        parsed, span = fallback(response[offset:])
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
    collection = is_collection(gold_parsed.value)
    if distinct > _MAX_ALTERNATIVES and not collection:
        return _hedged(answers, gold_text, found.method)  # a long list of candidates: no need to parse them
    if distinct > 1:
        if collection:  # "x = 2 or x = 3" for gold {2, 3}: a list of the elements
            joined = ", ".join(without_variable([a.text for a in answers]))
            parsed = parse_latex(joined)
            whole = ex.Answer(joined, answers[0].start, answers[-1].end)
            if parsed is None:
                return _verdict(
                    "unparseable", _details(joined, gold_text, found.method, error="answer does not parse")
                )
            return _judge(
                whole, parsed, gold_text, gold_parsed, found.method, spans=[a.span for a in answers]
            )
        parsed_all = [parse_latex(a.text) for a in answers]
        if found.method != "boxed" and any(parsed_all):  # prose: "2 (or equivalently 2.0)" leaves scraps
            answers = [a for a, p in zip(answers, parsed_all, strict=True) if p]
            parsed_all = [p for p in parsed_all if p]
        if not _all_equal(parsed_all):
            return _hedged(answers, gold_text, found.method)
        return _judge(answers[-1], parsed_all[-1], gold_text, gold_parsed, found.method)  # type: ignore[arg-type]
    answer = answers[-1]
    parsed = parse_latex(answer.text)
    if parsed is None:
        error = "answer is too long" if len(answer.text) > MAX_ANSWER_CHARS else "answer does not parse"
        return _verdict(
            "unparseable", _details(answer.text, gold_text, found.method, error=error), [answer.span]
        )
    return _judge(answer, parsed, gold_text, gold_parsed, found.method)


def _all_equal(parsed_all: list[Parsed | None]) -> bool:
    """Whether every candidate parses and equals the first (two candidates that cannot be compared differ)."""
    if not all(parsed_all):
        return False
    first = parsed_all[0]
    try:
        return all(equal(first, p) for p in parsed_all[1:])  # type: ignore[arg-type]
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
    if isinstance(value, sympy.FiniteSet) and len(value) > 1 and not is_collection(gold_parsed.value):
        # "\boxed{2, 3}" or "\boxed{\pm 2}" for a single-valued gold: several candidate answers at once
        details = _details(
            answer.text, gold_text, method, hedged=True, alternatives=[str(v) for v in value.args]
        )
        return _verdict("wrong", details, spans)
    try:
        status = "correct" if equal(gold_parsed, parsed) else "wrong"
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
            parsed = parse_latex(text)
            if parsed is not None:
                equal(parsed, parsed)
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
