"""GRPO: group-relative outcome advantage, broadcast to every policy token (arXiv 2402.03300; Dr.GRPO 2503.20783).

    r_i = sum_t token_rewards[i, t]                        (outcome reward of row i)
    A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)      norm_by_std=True   (GRPO)
    A_i =  r_i - mean_{j in g(i)} r_j                                     norm_by_std=False  (Dr.GRPO)
    A[i, t] = A_i * policy_mask[i, t]

``std`` is unbiased (Bessel, ``n - 1``) by default, as verl's ``torch.std``. Group statistics count only rows that
hold at least one policy token (padding rows are not samples). A group whose rewards are all equal gets
advantage exactly 0 (no fp residue inflated by the division), and so does a singleton group: it has no baseline.
Note that verl gives a singleton mean 0 and std 1 (so ``A = r``); we return 0, like RLOO, so a lone sample
never pushes the policy on its raw reward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, advantage_metrics, register

__all__ = [
    "GRPOConfig",
    "GroupStats",
    "group_metrics",
    "group_stats",
    "grpo",
    "grpo_advantage",
    "outcome_rewards",
]


@dataclass(frozen=True)
class GRPOConfig:
    """Config of `grpo`.

    Attributes:
        norm_by_std: divide by the group std (GRPO); False = mean-only baseline (Dr.GRPO, 2503.20783).
        eps: added to the std, > 0: a floor against near-zero-variance groups.
        unbiased_std: std with Bessel's correction (``n - 1``, verl's convention); False divides by ``n``.
    """

    norm_by_std: bool = True
    eps: float = 1e-6
    unbiased_std: bool = True

    def __post_init__(self) -> None:
        for name in ("norm_by_std", "unbiased_std"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"GRPOConfig.{name}: expected a bool, got {getattr(self, name)!r}")
        if not self.eps > 0:
            raise ValueError(
                f"GRPOConfig.eps: expected a float > 0 (a std floor, e.g. 1e-6), got {self.eps!r}"
            )


class GroupStats(NamedTuple):
    """Statistics of each row's group, one entry per row (B,), over the group's sample rows only."""

    n: Tensor  # (B,) number of sample rows in the group
    total: Tensor  # (B,) sum of their rewards
    mean: Tensor  # (B,)
    std: Tensor  # (B,)
    all_equal: Tensor  # (B,) bool: every sample of the group has the same reward


def outcome_rewards(batch: CreditBatch) -> tuple[Tensor, Tensor]:
    """Outcome reward per row and which rows are samples.

    Returns:
        r: (B,) float32 or wider, ``token_rewards.sum(-1)`` (multi-turn: the sum of the turn rewards).
        is_sample: (B,) bool, the row holds at least one policy token.
    """
    dtype = torch.promote_types(batch.token_rewards.dtype, torch.float32)
    return batch.token_rewards.to(dtype).sum(-1), batch.policy_mask.any(-1)


def group_stats(r: Tensor, group_ids: Tensor, is_sample: Tensor, *, unbiased: bool = True) -> GroupStats:
    """Per-row statistics of the group a row belongs to, counting only rows where ``is_sample``.

    Deterministic on every device: reductions over a dense (B, G) membership matrix, no scatter atomics.

    Args:
        r: (B,) float rewards.
        group_ids: (B,) integer ids.
        is_sample: (B,) bool.
        unbiased: std with ``n - 1`` (True) or ``n``.
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)  # (B,) in [0, G)
    G = int(inverse.max()) + 1 if inverse.numel() else 0
    member = (inverse[:, None] == torch.arange(G, device=r.device)[None, :]) & is_sample[:, None]  # (B, G)
    x = torch.where(member, r[:, None], 0.0)  # (B, G)
    n = member.sum(0)  # (G,)
    total = x.sum(0)
    mean = total / n.clamp(min=1)
    dev = torch.where(member, r[:, None] - mean[None, :], 0.0)
    std = ((dev**2).sum(0) / (n - int(unbiased)).clamp(min=1)).sqrt()
    hi = torch.where(member, r[:, None], -torch.inf).amax(0)
    lo = torch.where(member, r[:, None], torch.inf).amin(0)
    return GroupStats(n[inverse], total[inverse], mean[inverse], std[inverse], (hi == lo)[inverse])


def grpo_advantage(batch: CreditBatch, cfg: GRPOConfig) -> tuple[Tensor, Tensor, Tensor, GroupStats]:
    """The per-row GRPO advantage ``A_i`` (module docstring), also the base of `cort` and `cast`.

    Returns:
        A: (B,) advantage, 0 for a padding row, a singleton group or a group whose rewards are all equal;
        r: (B,) outcome rewards; is_sample: (B,) bool; the rows' `GroupStats`.
    """
    r, is_sample = outcome_rewards(batch)  # (B,), (B,)
    g = group_stats(r, batch.group_ids, is_sample, unbiased=cfg.unbiased_std)
    A = r - g.mean  # (B,)
    if cfg.norm_by_std:
        A = A / (g.std + cfg.eps)
    return torch.where(is_sample & (g.n >= 2) & ~g.all_equal, A, 0.0), r, is_sample, g


@register("grpo", config=GRPOConfig, group_relative=True)
@torch.no_grad()
def grpo(batch: CreditBatch, cfg: GRPOConfig) -> CreditOutput:
    """Group-normalised outcome advantage broadcast to the policy tokens (formula in the module docstring).

    Args:
        batch: token_rewards, policy_mask, group_ids are read; no signal needed.
        cfg: see `GRPOConfig`.

    Returns:
        advantages (B, T), 0 off the policy mask; no returns; metrics ``credit/grpo/*``.
    """
    A, r, is_sample, g = grpo_advantage(batch, cfg)  # (B,) each
    advantages = torch.where(batch.policy_mask, A[:, None], 0.0)  # (B, T)
    return CreditOutput(
        advantages, metrics=group_metrics("grpo", r, g, is_sample, advantages, batch.policy_mask)
    )


def group_metrics(
    name: str, r: Tensor, g: GroupStats, is_sample: Tensor, advantages: Tensor, mask: Tensor
) -> dict[str, float]:
    """Advantage summary plus reward mean and the fractions of sample rows in degenerate groups."""
    n_samples = max(int(is_sample.sum()), 1)
    return {
        **advantage_metrics(name, advantages, mask),
        f"credit/{name}/reward_mean": (r[is_sample].sum() / n_samples).item(),
        f"credit/{name}/zero_std_frac": ((g.all_equal & (g.n >= 2) & is_sample).sum() / n_samples).item(),
        f"credit/{name}/singleton_frac": (((g.n == 1) & is_sample).sum() / n_samples).item(),
    }
