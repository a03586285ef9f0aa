"""Forking tokens: the outcome advantage kept only on the highest-entropy tokens ("Beyond the 80/20 rule",
arXiv 2506.01939).

    A_i      = GRPO's group-relative outcome advantage of row i (`creditgym.credit.grpo`)
    H[i, t]  = entropy of the behaviour policy's next-token distribution at token t (signal ``token_entropy``)
    F        = the ceil(rho * N) policy tokens of highest H, N policy tokens counted per ``scope``
    A[i, t]  = A_i * [t in F] * policy_mask[i, t]

The paper computes the entropy threshold over the whole batch (``scope="batch"``, the default, rho = 0.2): a
response full of confident tokens may keep none. ``scope="response"`` picks the top share within each response
instead. Ties are broken by position (a stable sort), so exactly ceil(rho * N) tokens are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, declare_signal, register, require
from creditgym.credit.grpo import GRPOConfig, group_metrics, grpo_advantage

__all__ = ["ForkingConfig", "forking", "top_entropy_mask"]

SCOPES = ("batch", "response")


@dataclass(frozen=True)
class ForkingConfig:
    """Config of `forking`.

    Attributes:
        rho: share of the policy tokens kept, in (0, 1] (the paper's 20%).
        scope: ``"batch"``: the top share over every policy token of the batch (the paper); ``"response"``: the
            top share of each response.
        norm_by_std: divide the group advantage by the group std (GRPO); False = Dr.GRPO's mean-only baseline.
        eps: std floor of the group advantage, > 0.
    """

    rho: float = 0.2
    scope: str = "batch"
    norm_by_std: bool = True
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if not (isinstance(self.rho, (int, float)) and 0 < self.rho <= 1):
            raise ValueError(f"ForkingConfig.rho: expected a share in (0, 1] such as 0.2, got {self.rho!r}")
        if self.scope not in SCOPES:
            raise ValueError(f"ForkingConfig.scope: expected one of {SCOPES}, got {self.scope!r}")
        GRPOConfig(norm_by_std=self.norm_by_std, eps=self.eps)  # validates both


def _top(h: Tensor, k: int) -> Tensor:
    """(N,) bool: the k largest entries of ``h`` (N,), ties to the earlier position."""
    order = torch.sort(h, descending=True, stable=True).indices[:k]
    keep = torch.zeros_like(h, dtype=torch.bool)
    keep[order] = True
    return keep


def top_entropy_mask(entropy: Tensor, mask: Tensor, rho: float, scope: str) -> Tensor:
    """(B, T) bool: the ceil(rho * N) policy tokens of highest ``entropy`` (B, T), per batch or per response."""
    keep = torch.zeros_like(mask)
    if scope == "batch":
        n = int(mask.sum())
        keep[mask] = _top(entropy[mask], math.ceil(rho * n)) if n else keep[mask]
        return keep
    for b in range(mask.shape[0]):
        n = int(mask[b].sum())
        if n:
            keep[b, mask[b]] = _top(entropy[b, mask[b]], math.ceil(rho * n))
    return keep


declare_signal(
    "token_entropy",
    "(B, T) entropy (nats) of the behaviour policy's next-token distribution that each "
    "sampled token was drawn from, no grad",
)


@register("forking", config=ForkingConfig, signals=("token_entropy",), group_relative=True)
@torch.no_grad()
def forking(batch: CreditBatch, cfg: ForkingConfig) -> CreditOutput:
    """GRPO's advantage on the top-entropy share of the policy tokens, 0 elsewhere (module docstring).

    Args:
        batch: token_rewards, policy_mask, group_ids and the signal ``token_entropy`` (B, T) are read.
        cfg: see `ForkingConfig`.

    Returns:
        advantages (B, T); diagnostics ``mark/forking`` (+1 / -1 on kept tokens by the advantage's sign);
        metrics ``credit/forking/*`` with ``kept_frac`` and the entropy threshold.
    """
    H = require(batch, "token_entropy", module="forking").float()  # (B, T)
    A, r, is_sample, g = grpo_advantage(batch, GRPOConfig(norm_by_std=cfg.norm_by_std, eps=cfg.eps))  # (B,)
    mask = batch.policy_mask
    keep = top_entropy_mask(H, mask, cfg.rho, cfg.scope)  # (B, T)
    advantages = torch.where(keep, A[:, None], 0.0)  # (B, T)
    marks = torch.where(keep, torch.sign(A)[:, None], 0.0)
    n = max(int(mask.sum()), 1)
    metrics = group_metrics("forking", r, g, is_sample, advantages, mask)
    metrics["credit/forking/kept_frac"] = float(keep.sum()) / n
    metrics["credit/forking/entropy_kept_min"] = float(H[keep].min()) if keep.any() else 0.0
    return CreditOutput(advantages, metrics=metrics, diagnostics={"mark/forking": marks})
