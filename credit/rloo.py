"""RLOO: leave-one-out baseline over the group, broadcast to every policy token (arXiv 2402.14740).

    r_i = sum_t token_rewards[i, t]
    A_i = r_i - mean_{j in g(i), j != i} r_j = r_i - (S_g - r_i) / (n_g - 1) = n_g / (n_g - 1) * (r_i - mean_g)
    A[i, t] = A_i * policy_mask[i, t]

Only rows with at least one policy token count as samples. A singleton group has no baseline and gets 0; a group
whose rewards are all equal gets exactly 0. Unbiased (the baseline does not depend on the row's own action).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from creditgym.credit.base import CreditBatch, CreditOutput, register
from creditgym.credit.grpo import group_metrics, group_stats, outcome_rewards

__all__ = ["RLOOConfig", "rloo"]


@dataclass(frozen=True)
class RLOOConfig:
    """Config of `rloo`: RLOO has no knobs (kept so every module has the same signature)."""


@register("rloo", config=RLOOConfig, group_relative=True)
@torch.no_grad()
def rloo(batch: CreditBatch, cfg: RLOOConfig) -> CreditOutput:
    """Leave-one-out outcome advantage broadcast to the policy tokens (formula in the module docstring).

    Returns:
        advantages (B, T), 0 off the policy mask; no returns; metrics ``credit/rloo/*``.
    """
    r, is_sample = outcome_rewards(batch)  # (B,), (B,)
    g = group_stats(r, batch.group_ids, is_sample)
    A = r - (g.total - r) / (g.n - 1).clamp(min=1)  # (B,)
    A = torch.where(is_sample & (g.n >= 2) & ~g.all_equal, A, 0.0)
    advantages = torch.where(batch.policy_mask, A[:, None], 0.0)  # (B, T)
    return CreditOutput(
        advantages, metrics=group_metrics("rloo", r, g, is_sample, advantages, batch.policy_mask)
    )
