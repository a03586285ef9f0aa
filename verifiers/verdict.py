"""The result type every verifier returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["correct", "wrong", "unparseable", "timeout", "infra_error"]
STATUSES: tuple[str, ...] = ("correct", "wrong", "unparseable", "timeout", "infra_error")


@dataclass(frozen=True)
class Verdict:
    """What a verifier decided about one response.

    Attributes:
        score: The reward in [0, 1], or ``None`` when no score could be given because of an infrastructure
            fault (``status == "infra_error"``). Trainers drop such episodes instead of scoring them 0.
        status: ``"correct"`` / ``"wrong"`` (a judged answer), ``"unparseable"`` (no answer could be read),
            ``"timeout"`` (the check ran past its deadline, or would have: an answer past the math verifier's
            size budget; scored 0: the response is what made it slow),
            ``"infra_error"`` (the verifier itself failed: a dead worker, an unreachable engine or endpoint).
        details: Verifier-specific facts (extracted answer, per-criterion scores, per-test outcomes, error text).
        spans: Character spans ``(start, end)`` in the response that the verdict rests on, such as the
            extracted final answer, so credit modules and plots can point at them.
    """

    score: float | None
    status: Status
    details: Mapping[str, Any] = field(default_factory=dict)
    spans: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Verdict.status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "infra_error":
            if self.score is not None:
                raise ValueError(f"an infra_error verdict carries score=None, got {self.score!r}")
        elif self.score is None or not 0.0 <= self.score <= 1.0:
            raise ValueError(
                f"Verdict.score must be a float in [0, 1] for status {self.status!r}, got {self.score!r}"
            )

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"
