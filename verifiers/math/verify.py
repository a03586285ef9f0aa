"""Math answers: extract the final answer, compare it with math-verify, under a hard per-call deadline.

Public API::

    verify(response, gold, *, timeout=2.0) -> Verdict
    verify_many(responses, golds, *, timeout=2.0, workers=None) -> list[Verdict]
    MathVerifier(workers=None)  # owns a worker pool; context manager; .verify / .verify_many / .close()

The two functions share one lazily created :class:`MathVerifier` (closed at interpreter exit). This module imports
neither sympy nor math-verify: they live in the worker processes only (``creditgym.verifiers.math.worker``), so
importing it is cheap and the parent never runs a sympy call that could hang. If no worker can start at all, the
first call raises :class:`~creditgym.verifiers.workers.pool.WorkerStartError` naming the cause, within seconds.

Verdicts (:class:`~creditgym.verifiers.verdict.Verdict`):

- ``correct`` (score 1.0) / ``wrong`` (0.0): an answer was found and compared with the gold.
- ``unparseable`` (0.0): no answer was found, or it does not parse (e.g. ``\\boxed{\\frac{1}{``).
- ``timeout`` (0.0): the check ran past ``timeout`` seconds, counted from when a worker **started** it (time
  spent queued does not count); the worker was killed and replaced. Also, within milliseconds and with
  ``details["budget"] = True``, when the answer holds values past the size budget (``2^{10^{10}}`` inside a set)
  that no cheap exact view can compare: such values are never handed to sympy.
- ``infra_error`` (score ``None``): the worker process died twice on this item (segfault, OOM kill, killed from
  outside); ``details["error"]`` says why. Trainers drop such samples.

``spans`` holds the character span(s) ``(start, end)`` of the extracted answer in ``response`` (all candidate
answers when hedging). ``details`` always has ``extracted`` (the answer string, ``None`` if none), ``gold`` (the
gold's answer part), ``method`` (the rule that found the answer: ``"boxed"``, ``"gsm8k"``, ``"answer_is"``,
``"choice"``, ``"fallback"``), ``hedged`` (bool) and ``elapsed`` (seconds the worker spent on the item); plus
``error`` for ``unparseable`` / ``timeout`` / ``infra_error`` and ``alternatives`` when hedged.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

from creditgym.verifiers.math import extract as _math_extract
from creditgym.verifiers.verdict import Verdict
from creditgym.verifiers.workers.pool import DeadlinePool, Outcome

__all__ = ["DEFAULT_TIMEOUT", "MathVerifier", "verify", "verify_many"]

DEFAULT_TIMEOUT = 2.0
_WORKER_MODULE = "creditgym.verifiers.math.worker"
_MAX_DEFAULT_WORKERS = 8
_GOLD_HELP = (
    "a gold must be a math answer (a number, LaTeX expression, equation, set, interval, matrix, percentage), "
    "a GSM8K solution ending in '#### N', a MATH solution with a \\boxed{} answer, or a choice letter A-J; "
    "fix the dataset entry"
)


def _default_workers() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(_MAX_DEFAULT_WORKERS, cpus))


class MathVerifier:
    """A math-answer verifier that owns a pool of worker processes.

    Use it as a context manager, or call :meth:`close`; pools still open at interpreter exit are closed then.
    Workers start on the first call (a second or two for the first one, which also starts the pool's fork server:
    a fresh interpreter that imports sympy and math-verify once). Workers never import your ``__main__``, so
    verifying works the same from a script with or without an ``if __name__ == "__main__":`` guard, ``python -c``,
    ``python - <<EOF``, a notebook or an interpreter embedded in another program.

    Extraction rules (the first that finds something decides):

    1. **boxed**: the last top-level ``\\boxed{...}`` / ``\\fbox{...}`` (braces matched, escaped ``\\{`` ignored).
    2. **gsm8k**: what follows the last ``####``.
    3. **answer_is**: "The (final) answer is N", "Answer: N".
    4. **fallback**: math-verify's own extraction (LaTeX, then plain numbers/expressions; the last match) over
       the last 4,000 characters of the response, so megabyte-long responses stay within the deadline.

    When the gold is a single letter A-J, the response is read as **multiple choice** (method ``"choice"``):
    ``\\boxed{C}``, ``\\boxed{\\text{C}}``, ``#### C``, "The answer is (C)", "Answer: C", or a last line that is
    just ``(C)`` / ``C``; letters are compared.

    **Hedging scores 0** (``wrong``, ``details["hedged"] = True``): several *different* final answers, as boxes
    separated only by connectors (``\\boxed{2} or \\boxed{3}``, ``, and / ; \\quad \\text{ or }``, ``$``,
    "x =" as in ``x = \\boxed{2} or x = \\boxed{3}``),
    ``\\boxed{2 \\text{ or } 3}``, "the answer is 2 or 3", "one of 2, 3, 5", or a set of candidates
    (``\\boxed{2, 3}``, ``\\boxed{\\pm 2}``) for a single-valued gold. Equal repeated answers are not hedging,
    and an earlier box followed by prose and a final box ("... \\boxed{2}, but correcting myself ... \\boxed{3}")
    is judged on the last box. When the gold itself is a collection (a set of several values, an interval, a
    tuple), listing its elements ("x = 2 or x = 3" for ``\\{2, 3\\}``) is an answer and is compared as a set.

    Golds: plain answers ("5", ``\\frac{1}{2}``, "0.5", "x=3", ``\\{1,2\\}``, "(1,2]", a matrix, ``50\\%``), GSM8K
    solutions ("... #### 72") and MATH solutions (the last ``\\boxed{}``); ``int``/``float`` golds are turned into
    strings. A gold that does not parse is a caller bug: it is detected in the worker (the parent never runs
    sympy) and :meth:`verify_many` raises ``ValueError`` naming it once the batch is done.

    Numbers follow math-verify's tolerance rule: when either side is a decimal, both are rounded to 6 decimal
    places and compared, so ``3.0323886640`` and ``0.333333`` equal ``\\frac{749}{247}`` and ``\\frac{1}{3}``, while
    ``0.333`` does not; integers, fractions and radicals compare exactly. An answer that is exactly ``0.5`` is
    ``\\frac{1}{2}``. Other conventions beyond math-verify's own: degrees inside trigonometric functions are
    degrees (``\\sin 60^\\circ = \\frac{\\sqrt{3}}{2}``; elsewhere ``30^\\circ`` is 30), ``i`` is the imaginary unit
    (``e^{i\\pi} = -1``), an interval equals the equivalent inequality in either order (``x < 3`` and
    ``(-\\infty, 3)``), and a boxed answer followed by a different final statement ("... \\boxed{5}. The answer is
    6.") is a hedge, as is "\\boxed{5}, or maybe \\boxed{6}", and, with no box, a last number that closes a list
    ("maybe 41 or 42", "1, 2, ..., 42").

    Speed and size: common answers (numbers, fractions, radicals, polynomials, sets, intervals, inequalities,
    standard trigonometric values) are read by a bounded parser of their own in well under a millisecond; the rest
    by math-verify's LaTeX grammar. Values too large to build (``7^{10^7}``, ``10^{10^{10^{10}}}``, ``10^6!``) are
    compared without being built: equal canonical forms are ``correct``; different magnitudes, signs or residues
    modulo a few primes are ``wrong``; anything else is a ``budget`` timeout (see ``_math_guard.py``). Answers
    longer than 10,000 characters are ``unparseable``. ``details["extracted"]`` is cut at 2,000 characters.

    Args:
        workers: Worker processes (default: the CPUs available to this process, at most 8).
        memory_mb: Address space each worker may map beyond what it holds at start (``RLIMIT_AS``), so a
            runaway sympy computation fails with ``MemoryError`` instead of exhausting the machine; ``None`` for
            no limit.
        prefetch: Items queued in each worker behind the one it runs (hides the dispatch round trip).
    """

    def __init__(
        self, workers: int | None = None, *, memory_mb: int | None = 4096, prefetch: int = 2
    ) -> None:
        self._pool = DeadlinePool(
            f"{_WORKER_MODULE}:score",
            workers if workers is not None else _default_workers(),
            preload=[_WORKER_MODULE],
            prefetch=prefetch,
            memory_mb=memory_mb,
        )
        self._closed = False

    @property
    def workers(self) -> int:
        """The number of worker processes."""
        return self._pool.size

    @property
    def closed(self) -> bool:
        return self._closed

    def resize(self, workers: int) -> None:
        """Use ``workers`` worker processes from the next call on."""
        self._pool.resize(workers)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (diagnostics and tests)."""
        return self._pool.pids()

    def verify(self, response: str, gold: str | int | float, *, timeout: float = DEFAULT_TIMEOUT) -> Verdict:
        """Judge one response against one gold answer; see the class docstring for the rules.

        Args:
            response: The model's full response text.
            gold: The reference answer (plain, GSM8K ``#### N``, MATH ``\\boxed{}``, or a choice letter).
            timeout: Hard deadline in seconds, counted from when a worker starts the item.

        Returns:
            The :class:`Verdict`.

        Raises:
            TypeError: ``response`` is not a string (or ``gold`` not a string/number).
            ValueError: ``gold`` does not parse, or ``timeout`` is not a positive number.
        """
        return self.verify_many([response], [gold], timeout=timeout)[0]

    def verify_many(
        self,
        responses: Sequence[str],
        golds: Sequence[str | int | float],
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> list[Verdict]:
        """Judge many responses in parallel; ``responses[i]`` is compared with ``golds[i]``.

        Each item has its own deadline of ``timeout`` seconds from when a worker starts it, so the batch takes
        about (sum of item times) / workers, and a slow item never makes a later one time out.

        Raises:
            TypeError: a response is not a string (or a gold not a string/number).
            ValueError: lengths differ, ``timeout`` is not positive, or some gold does not parse (raised after
                the batch ran, naming the first bad golds).
            WorkerStartError: no worker could be started at all (the message names the cause).
        """
        if self._closed:
            raise RuntimeError("this MathVerifier is closed; create a new one")
        if isinstance(responses, str) or isinstance(golds, str):
            raise TypeError(
                "verify_many takes sequences of responses and golds; use verify() for a single pair"
            )
        responses, golds = list(responses), list(golds)
        if len(responses) != len(golds):
            raise ValueError(
                f"got {len(responses)} responses but {len(golds)} golds; pass one gold per response"
            )
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        for i, response in enumerate(responses):
            if not isinstance(response, str):
                raise TypeError(
                    f"response {i} must be a str, got {type(response).__name__}: {response!r:.80}"
                )
        gold_strs = [_gold_str(i, gold) for i, gold in enumerate(golds)]

        outcomes = self._pool.run(list(zip(responses, gold_strs, strict=True)), float(timeout))

        verdicts: list[Verdict] = []
        bad: list[str] = []
        for i, (outcome, gold) in enumerate(zip(outcomes, gold_strs, strict=True)):
            value = outcome.value if outcome.kind == "ok" else None
            if value is not None and value[0] == "gold_error":
                bad.append(f"item {i}: {value[1]}")
                verdicts.append(Verdict(None, "infra_error", {"gold": gold, "error": value[1]}))
                continue
            verdicts.append(_to_verdict(outcome, gold))
        if bad:
            shown = "; ".join(bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
            raise ValueError(f"{len(bad)} gold answer(s) do not parse ({shown}): {_GOLD_HELP}")
        return verdicts

    def close(self) -> None:
        """Kill and reap the worker processes. Idempotent."""
        self._closed = True
        self._pool.close()

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gold_str(index: int, gold: Any) -> str:
    if isinstance(gold, str):
        return gold
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        return str(gold)
    raise TypeError(f"gold {index} must be a str (or int/float), got {type(gold).__name__}: {gold!r:.80}")


def _gold_label(gold: str) -> str:
    try:
        return _math_extract.gold_answer(gold)
    except ValueError:
        return gold


def _to_verdict(outcome: Outcome, gold: str) -> Verdict:
    if outcome.kind == "ok":
        _, status, score, details, spans = outcome.value
        details["elapsed"] = outcome.elapsed
        return Verdict(score, status, details, spans)
    details = {
        "extracted": None,
        "gold": _gold_label(gold),
        "method": None,
        "hedged": False,
        "elapsed": outcome.elapsed,
        "error": outcome.error,
    }
    if outcome.kind == "timeout":
        return Verdict(0.0, "timeout", details)
    return Verdict(None, "infra_error", details)


# ------------------------------------------------------------------------------------------------ module level

_default: MathVerifier | None = None
_default_lock = threading.Lock()


def _default_verifier(workers: int | None) -> MathVerifier:
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = MathVerifier(workers)
        elif workers is not None and workers != _default.workers:
            _default.resize(workers)
        return _default


@atexit.register
def _close_default() -> None:
    if _default is not None:
        _default.close()


def verify(response: str, gold: str | int | float, *, timeout: float = DEFAULT_TIMEOUT) -> Verdict:
    """Judge one response with the shared default :class:`MathVerifier` (see its docstring for the rules).

    Args:
        response: The model's full response text.
        gold: The reference answer: plain ("5", ``\\frac{1}{2}``, ``\\{1,2\\}``), GSM8K ("... #### 72"), MATH
            (a solution with ``\\boxed{}``), or a choice letter A-J.
        timeout: Hard deadline in seconds, counted from when a worker starts the check.

    Returns:
        The :class:`Verdict` (``status`` in correct / wrong / unparseable / timeout / infra_error).

    Raises:
        TypeError: ``response`` is not a string.
        ValueError: ``gold`` does not parse as a math answer, or ``timeout`` is not positive.
    """
    return _default_verifier(None).verify(response, gold, timeout=timeout)


def verify_many(
    responses: Sequence[str],
    golds: Sequence[str | int | float],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    workers: int | None = None,
) -> list[Verdict]:
    """Judge ``responses[i]`` against ``golds[i]`` in parallel with the shared default :class:`MathVerifier`.

    Args:
        responses: Model responses.
        golds: One gold per response.
        timeout: Hard deadline per item, in seconds from when a worker starts it.
        workers: Worker processes for the shared pool (resizes it; default: CPUs available, at most 8).

    Returns:
        One :class:`Verdict` per response, in order.

    Raises:
        TypeError: a response is not a string.
        ValueError: lengths differ, ``timeout`` is not positive, or a gold does not parse.
    """
    return _default_verifier(workers).verify_many(responses, golds, timeout=timeout)
