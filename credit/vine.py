"""VinePPO: advantages from Monte-Carlo values at step boundaries (Kazemnejad et al., arXiv 2410.01679, Sec. 4).

The response is cut into steps: after each token whose text holds one of ``delimiter`` (by default a newline,
VinePPO's reasoning steps, ``;``, the chain tasks' links ``a = 34 - 6 = 28;``, and ``.``, a sentence), and after
``max_step`` tokens without one; or every ``every`` tokens. A new turn always starts a step. ``V(s)`` of a step
boundary is the mean reward of ``K`` continuations sampled from the prefix that ends there, with the policy being
trained; the boundary after the last step has ``V = R_i``. Every token of a step gets the step's advantage::

    A[i, t] = V(end of the step holding t) - V(start of that step)      (gamma = 1, sparse outcome reward)

so with a boundary at every token, ``A[i, t] = V(t + 1) - V(t)``, the Monte-Carlo ground truth of
``creditgym probe``. There is no critic: the values are the ``mc_values`` signal, computed by its provider in
``creditgym.agents.providers.mc`` (forks of the episode's env, ``k`` continuations per boundary), which needs an env that
forks inside an episode (Math-v0, Rubric-v0). It is the expensive reference the cheap modules are measured
against: one step costs ``K x (boundaries per response)`` extra rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from creditgym.credit.base import (
    CreditBatch,
    CreditOutput,
    advantage_metrics,
    declare_signal,
    register,
    require,
)

__all__ = ["NEWLINE", "STEP_ENDS", "VineConfig", "vine"]

#: VinePPO's reasoning steps, one per line.
NEWLINE = "\n"
#: What ends a step by default: a line, a link of the chain tasks (``a = 34 - 6 = 28;``), a sentence.
STEP_ENDS: tuple[str, ...] = (NEWLINE, ";", ".")


@dataclass(frozen=True)
class VineConfig:
    """Config of `vine`; every field is a parameter of the ``mc_values`` signal's provider.

    Attributes:
        k: continuations sampled per step boundary (VinePPO's K), ``>= 1``.
        every: a step boundary every ``every`` policy tokens (1 = every token); None = steps that end at a
            delimiter (VinePPO's reasoning steps).
        delimiter: with ``every=None``, the texts that end a step (a token whose text holds any of them): by
            default a newline, ``";"`` and ``"."`` (`STEP_ENDS`), which cut the shipped tasks' responses into
            lines, the chains' links and sentences; one string, e.g. ``";"`` (in a study entry:
            ``vine:delimiter=";"``), or a list of them.
        max_step: with ``every=None``, a step also ends after ``max_step`` tokens without a delimiter (a response
            with none still gets step credit), ``>= 1``; None: no limit.
    """

    k: int = 8
    every: int | None = None
    delimiter: str | tuple[str, ...] = STEP_ENDS
    max_step: int | None = 32

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(
                f"VineConfig.k: expected an int >= 1 (continuations per boundary), got {self.k!r}"
            )
        for name in ("every", "max_step"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"VineConfig.{name}: expected an int >= 1 or None, got {v!r}")
        ends = (self.delimiter,) if isinstance(self.delimiter, str) else self.delimiter
        if not isinstance(ends, (tuple, list)) or not ends or not all(isinstance(d, str) and d for d in ends):
            raise ValueError(
                f"VineConfig.delimiter: expected a non-empty string (the text that ends a step) or a list of them, "
                f"got {self.delimiter!r}"
            )
        if isinstance(self.delimiter, list):  # a JSON list from the command line
            object.__setattr__(self, "delimiter", tuple(self.delimiter))


declare_signal(
    "mc_values",
    "(B, T, 2) Monte-Carlo values around the step holding each policy token: [..., 0] = V(prefix before "
    "the step), [..., 1] = V(prefix after it), each the mean reward of K continuations sampled from that prefix; "
    "after the last step, the response's reward",
)


@register("vine", config=VineConfig, signals={"mc_values": ("k", "every", "delimiter", "max_step")})
@torch.no_grad()
def vine(batch: CreditBatch, cfg: VineConfig) -> CreditOutput:
    """The step advantage ``V(step end) - V(step start)`` on every token of the step (module docstring).

    Args:
        batch: policy_mask and the signal ``mc_values`` (B, T, 2) are read.
        cfg: see `VineConfig` (read by the signal's provider).

    Returns:
        advantages (B, T), 0 off the policy mask; metrics ``credit/vine/*``.
    """
    mc = require(batch, "mc_values", module="vine")
    if mc.dim() != 3 or mc.shape[-1] != 2:
        raise ValueError(
            f"vine: signal 'mc_values' must have shape (B, T, 2) (V at each step's start and end), got "
            f"{tuple(mc.shape)}"
        )
    mask = batch.policy_mask
    advantages = torch.where(mask, mc[..., 1] - mc[..., 0], 0.0)  # (B, T)
    start = torch.where(mask, mc[..., 0], 0.0)
    metrics = advantage_metrics("vine", advantages, mask)
    metrics["credit/vine/value_mean"] = (start.sum() / mask.sum().clamp(min=1)).item()
    return CreditOutput(advantages, metrics=metrics)
