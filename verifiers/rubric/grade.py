"""Rubrics: grade a response against a list of weighted criteria (IFEval checks, custom checkers, an LLM judge).

Public API::

    Criterion(id, kwargs={}, weight=1.0)          # frozen; validated at construction
    grade(response, criteria, *, mode="partial", timeout=5.0) -> Verdict
    register_checker("my:id")                      # decorator adding a checker to the vocabulary
    describe(criterion) -> str                     # the human-readable text shown in prompts
    known_ids() -> list[str]

Vocabulary: IFEval's 25 instruction ids (``keywords:existence``, ...) with IFEval's kwargs, checked by
``if-verifiable``'s copy of the official code (``.ifeval``); ``llm_judge``, a yes/no question to an
OpenAI-compatible endpoint (``.judge``); and any checker registered with :func:`register_checker`.

Verdict (:class:`~creditgym.verifiers.verdict.Verdict`):

- ``details["criteria"]``: one dict per criterion, in order: ``id``, ``weight``, ``score`` (in [0, 1]; ``None``
  when the check could not run, with ``error``), ``passed``, ``span`` (the first ``(start, end)`` character span
  the check rests on, or ``None`` where the checker cannot tell) and ``spans`` (all of them).
- ``score``: the weighted mean of criterion scores (``mode="partial"``) or 1.0 only if every criterion passed
  (``mode="all_or_nothing"``). ``status`` is ``"correct"`` if every criterion passed, else ``"wrong"``.
- ``"infra_error"`` (score ``None``): a check could not run (the LLM judge's endpoint failed after its retries, a
  checker raised). ``details["error"]`` names the criterion. Trainers drop such episodes.
- ``"timeout"`` (score 0.0): the IFEval checks ran past ``timeout`` seconds, or one of them past its tokenizer's own
  regex time limit (``nltk.redos``, 5 s a match: a pathological or megabyte response).
- ``spans``: the union of the criteria's spans, in criterion order.

IFEval checks run in a worker process (``creditgym.verifiers.workers``: a deadline per call, a memory limit, a
fresh worker after a timeout or a crash; docs/envs/rubric.md says why); custom checkers and the LLM judge run in
the calling process. Text that is not valid Unicode is repaired with U+FFFD first (``details["repaired"]``).
"""

from __future__ import annotations

import atexit
import inspect
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from creditgym.verifiers.rubric import ifeval as _rubric_ifeval
from creditgym.verifiers.rubric import judge as _rubric_judge
from creditgym.verifiers.verdict import Verdict
from creditgym.verifiers.workers.pool import DeadlinePool

__all__ = [
    "LLM_JUDGE",
    "CheckResult",
    "Checker",
    "Criterion",
    "RewardMode",
    "describe",
    "grade",
    "known_ids",
    "register_checker",
    "worker_pids",
]

Span = tuple[int, int]
CheckResult = bool | float | tuple[float, Span | None]
RewardMode = Literal["partial", "all_or_nothing"]
REWARD_MODES: tuple[str, ...] = ("partial", "all_or_nothing")
LLM_JUDGE = "llm_judge"
DEFAULT_TIMEOUT = 5.0
#: Address space (MB) the IFEval worker may map beyond what it holds at start.
WORKER_MEMORY_MB = 2048
_WORKER_TARGET = "creditgym.verifiers.rubric.ifeval:check_many"
_WORKER_WARM_UP = "creditgym.verifiers.rubric.ifeval:warm_up"


class Checker(Protocol):
    """A criterion check: ``(response, **kwargs) -> bool | float | (score, span)``; a score lies in [0, 1]."""

    def __call__(self, response: str, /, **kwargs: Any) -> CheckResult: ...


@dataclass(frozen=True)
class _Registered:
    fn: Checker
    description: str | Callable[..., str] | None
    signature: inspect.Signature


_CHECKERS: dict[str, _Registered] = {}


def register_checker(
    name: str, *, description: str | Callable[..., str] | None = None
) -> Callable[[Checker], Checker]:
    """Add a checker to the criterion vocabulary under ``name``.

    A checker is a function ``(response, **kwargs)`` returning ``bool`` (passed or not), a ``float`` score in
    [0, 1], or ``(score, span)`` with ``span`` the ``(start, end)`` characters the score rests on (or ``None``).
    A criterion's kwargs are checked against the function's signature when the :class:`Criterion` is made.
    Custom checkers run in the grading process (never in the deadline worker).

    Example::

        from creditgym.verifiers.rubric import Criterion, grade, register_checker

        @register_checker("my:mentions_number", description="Mention the number {n}.")
        def mentions_number(response: str, *, n: int) -> tuple[float, tuple[int, int] | None]:
            i = response.find(str(n))
            return (1.0, (i, i + len(str(n)))) if i >= 0 else (0.0, None)

        grade("It is 42.", [Criterion("my:mentions_number", {"n": 42})]).score   # 1.0

    Args:
        name: The criterion id; must not clash with a known one (IFEval ids, ``llm_judge``, earlier checkers).
        description: Text shown in prompts: a ``str.format`` template over the kwargs, or a function of the
            kwargs; default: the checker's name and kwargs.

    Raises:
        ValueError: ``name`` is already taken.
    """
    if name in _CHECKERS or name in _rubric_ifeval.SCHEMAS or name == LLM_JUDGE:
        raise ValueError(f"criterion id {name!r} is already registered")

    def decorate(fn: Checker) -> Checker:
        _CHECKERS[name] = _Registered(fn, description, inspect.signature(fn))
        return fn

    return decorate


def known_ids() -> list[str]:
    """Every criterion id, sorted."""
    return sorted([*_rubric_ifeval.SCHEMAS, LLM_JUDGE, *_CHECKERS])


def _validate_custom(criterion_id: str, kwargs: Mapping[str, Any]) -> None:
    params = list(_CHECKERS[criterion_id].signature.parameters.values())[1:]
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    for name in kwargs:
        if name not in names:
            raise ValueError(f"criterion {criterion_id!r}: unknown kwarg {name!r}; it takes {sorted(names)}")
    for p in params:
        if p.name in names and p.default is p.empty and p.name not in kwargs:
            raise ValueError(
                f"criterion {criterion_id!r}: missing kwarg {p.name!r} (it takes {sorted(names)})"
            )


@dataclass(frozen=True)
class Criterion:
    """One rubric item: a check id, its kwargs, and its weight in the partial score.

    Args:
        id: A known criterion id (see :func:`known_ids`).
        kwargs: The check's arguments, e.g. ``{"keywords": ["tea"]}``; ``None`` values are dropped (IFEval data
            lists unused kwargs as null).
        weight: Non-negative weight in the weighted mean.

    Raises:
        ValueError: unknown id (the message lists the known ones), kwargs that do not fit the check (naming the
            criterion and the kwarg), or a negative / non-finite weight.
    """

    id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.kwargs, Mapping):
            raise ValueError(
                f"criterion {self.id!r}: kwargs must be a dict, got {type(self.kwargs).__name__}"
            )
        kwargs = {k: v for k, v in self.kwargs.items() if v is not None}
        object.__setattr__(self, "kwargs", kwargs)
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)):
            raise ValueError(f"criterion {self.id!r}: weight must be a number, got {self.weight!r}")
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"criterion {self.id!r}: weight must be finite and >= 0, got {self.weight!r}")
        if self.id in _rubric_ifeval.SCHEMAS:
            _rubric_ifeval.validate(self.id, kwargs)
        elif self.id == LLM_JUDGE:
            _rubric_judge.validate(kwargs)
        elif self.id in _CHECKERS:
            _validate_custom(self.id, kwargs)
        else:
            raise ValueError(f"unknown criterion id {self.id!r}; known ids: {known_ids()}")

    @property
    def description(self) -> str:
        """The human-readable text of this criterion (see :func:`describe`)."""
        return describe(self)


def describe(criterion: Criterion) -> str:
    """Text of a criterion for prompts: IFEval's ``build_description``, the judge's question, or the template."""
    if criterion.id in _rubric_ifeval.SCHEMAS:
        return _rubric_ifeval.describe(criterion.id, criterion.kwargs)
    if criterion.id == LLM_JUDGE:
        return str(criterion.kwargs["question"])
    text = _CHECKERS[criterion.id].description
    if callable(text):
        return str(text(**criterion.kwargs))
    if text is None:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(criterion.kwargs.items()))
        return f"{criterion.id}({args})"
    return text.format(**criterion.kwargs)


# ------------------------------------------------------------------------------------------------ grading


def _repair(response: str | bytes) -> tuple[str, bool]:
    if isinstance(response, bytes):
        text = response.decode("utf-8", "replace")
        return text, text.encode("utf-8") != response
    if not isinstance(response, str):
        raise TypeError(
            f"response must be a str (or UTF-8 bytes), got {type(response).__name__}: {response!r:.80}"
        )
    try:
        response.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates: pair the valid ones, replace the rest with U+FFFD.
        return response.encode("utf-16", "surrogatepass").decode("utf-16", "replace"), True
    return response, False


def _normalise(result: Any, criterion_id: str) -> tuple[float, list[Span]]:
    span: Any = None
    if isinstance(result, tuple):
        if len(result) != 2:
            raise TypeError(
                f"checker {criterion_id!r} returned a tuple of {len(result)}; expected (score, span)"
            )
        result, span = result
    if isinstance(result, bool):
        score = 1.0 if result else 0.0
    elif isinstance(result, (int, float)) and math.isfinite(result) and 0.0 <= result <= 1.0:
        score = float(result)
    else:
        raise TypeError(f"checker {criterion_id!r} returned {result!r}; expected a bool or a float in [0, 1]")
    spans = [] if span is None else [(int(span[0]), int(span[1]))]
    return score, spans


def _run_one(criterion: Criterion, text: str) -> tuple[float, list[Span]]:
    if criterion.id == LLM_JUDGE:
        return _rubric_judge.ask(text, **criterion.kwargs), []
    return _normalise(_CHECKERS[criterion.id].fn(text, **criterion.kwargs), criterion.id)


_pool: DeadlinePool | None = None
_pool_lock = threading.Lock()


def _deadline_pool() -> DeadlinePool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = DeadlinePool(
                _WORKER_TARGET, 1, preload=[_WORKER_WARM_UP], prefetch=0, memory_mb=WORKER_MEMORY_MB
            )
        return _pool


def worker_pids() -> list[int]:
    """Process ids of the IFEval worker(s) now alive (diagnostics and tests; empty before the first grade)."""
    return _deadline_pool().pids()


@atexit.register
def _close_pool() -> None:
    if _pool is not None:
        _pool.close()


def grade(
    response: str | bytes,
    criteria: Sequence[Criterion],
    *,
    mode: RewardMode = "partial",
    timeout: float = DEFAULT_TIMEOUT,
) -> Verdict:
    """Check ``response`` against every criterion and combine the scores; see the module docstring.

    Args:
        response: The model's response text (invalid Unicode is repaired, see the module docstring).
        criteria: The rubric; at least one criterion with a positive total weight.
        mode: ``"partial"`` (weighted mean of criterion scores) or ``"all_or_nothing"``.
        timeout: Deadline in seconds for the IFEval checks, counted from when the worker starts them.

    Returns:
        The :class:`Verdict`; ``details["criteria"]`` lists each criterion's result in order.

    Raises:
        TypeError: ``response`` is not text, or an item of ``criteria`` is not a :class:`Criterion`.
        ValueError: no criteria, zero total weight, an unknown ``mode``, or a non-positive ``timeout``.
        WorkerStartError: the IFEval worker could not be started at all (the message names the cause).
    """
    if mode not in REWARD_MODES:
        raise ValueError(f"mode must be one of {REWARD_MODES}, got {mode!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    criteria = list(criteria)
    for i, c in enumerate(criteria):
        if not isinstance(c, Criterion):
            raise TypeError(f"criteria[{i}] must be a Criterion, got {type(c).__name__}: {c!r:.80}")
    total = sum(c.weight for c in criteria)
    if not criteria or total <= 0:
        raise ValueError("a rubric needs at least one criterion and a positive total weight")
    text, repaired = _repair(response)

    results: list[tuple[float | None, list[Span], str | None]] = [(None, [], None)] * len(criteria)
    offload = [i for i, c in enumerate(criteria) if c.id in _rubric_ifeval.SCHEMAS]
    timeouts: set[str] = set()  # why the IFEval checks timed out, for details["error"]
    if offload:
        payload = (text, [(criteria[i].id, json.dumps(criteria[i].kwargs)) for i in offload])
        outcome = _deadline_pool().run([payload], float(timeout))[0]
        for j, i in enumerate(offload):
            if outcome.kind == "ok" and outcome.value[j] == _rubric_ifeval.TIMED_OUT:
                timeouts.add("a check ran past its tokenizer's regex time limit")  # not the pool's deadline
                results[i] = (0.0, [], "timeout: the IFEval check ran past its tokenizer's regex time limit")
            elif outcome.kind == "ok":
                score, spans = outcome.value[j]
                results[i] = (score, [tuple(s) for s in spans], None)
            elif outcome.kind == "timeout":
                timeouts.add(f"ran past {timeout} s")
                results[i] = (0.0, [], f"timeout: the IFEval checks ran past {timeout} s")
            else:
                results[i] = (None, [], f"checker worker failed: {outcome.error}")
    for i, c in enumerate(criteria):
        if i in offload:
            continue
        try:
            score, spans = _run_one(c, text)
            results[i] = (score, spans, None)
        except Exception as e:  # a checker that cannot run is an infrastructure fault, never a silent 0
            results[i] = (None, [], f"{type(e).__name__}: {e}")

    rows: list[dict[str, Any]] = []
    for c, (score, spans, error) in zip(criteria, results, strict=True):
        row: dict[str, Any] = {
            "id": c.id,
            "weight": c.weight,
            "score": score,
            "passed": score is not None and score >= 1.0,
            "span": spans[0] if spans else None,
            "spans": spans,
        }
        if error is not None:
            row["error"] = error
        rows.append(row)
    details: dict[str, Any] = {"criteria": rows, "mode": mode, "repaired": repaired}
    all_spans = tuple(s for row in rows for s in row["spans"])
    failed = [(c.id, row["error"]) for c, row in zip(criteria, rows, strict=True) if row["score"] is None]
    if failed:
        details["error"] = "; ".join(f"criterion {cid!r}: {err}" for cid, err in failed)
        return Verdict(None, "infra_error", details, all_spans)
    if timeouts:
        details["error"] = f"the IFEval checks of a {len(text)}-character response: " + "; ".join(
            sorted(timeouts)
        )
        return Verdict(0.0, "timeout", details, all_spans)
    all_passed = all(row["passed"] for row in rows)
    if mode == "all_or_nothing":
        score = 1.0 if all_passed else 0.0
    else:
        score = sum(c.weight * row["score"] for c, row in zip(criteria, rows, strict=True)) / total
        score = min(1.0, max(0.0, score))
    return Verdict(score, "correct" if all_passed else "wrong", details, all_spans)
