"""How a run samples its policy: one object from the config to every sampler (rollouts, probes, Monte-Carlo
continuations), so temperature, top-p and the seeded generator travel together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class HasSampling(Protocol):
    """What `Sampling.of` reads (a `TrainConfig`, or anything with the same two settings)."""

    @property
    def temperature(self) -> float: ...

    @property
    def top_p(self) -> float: ...


@dataclass(frozen=True)
class Sampling:
    """Temperature (0 = greedy), nucleus mass in (0, 1], and the seeded generator that makes draws repeatable
    (None: ``torch``'s global one). No defaults here: a run's come from `TrainConfig` (`Sampling.of`)."""

    temperature: float
    top_p: float
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"Sampling: temperature must be >= 0 (0 = greedy) and top_p in (0, 1], got {self.temperature}, "
                f"{self.top_p}"
            )

    @classmethod
    def of(cls, cfg: HasSampling, generator: torch.Generator | None = None) -> Sampling:
        """``cfg``'s temperature and top-p, drawing from ``generator``."""
        return cls(float(cfg.temperature), float(cfg.top_p), generator)

    @classmethod
    def greedy(cls) -> Sampling:
        """Greedy decoding (held-out evaluation): the most likely token, whatever the nucleus."""
        return cls(temperature=0.0, top_p=1.0)

    def kwargs(self) -> dict[str, object]:
        """The keyword arguments of ``Policy.sample`` and a backend's ``generate`` that this fixes."""
        return {"temperature": self.temperature, "top_p": self.top_p, "generator": self.generator}
