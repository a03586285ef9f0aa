"""PRIME: implicit process rewards ``beta * log(pi / pi_ref)`` per token plus the outcome reward, each with a
leave-one-out (RLOO) baseline over the group, the process part summed into returns (arXiv 2502.01456).

    r_phi[i, t] = beta * (old_logprobs[i, t] - reference_logprobs[i, t])          implicit process reward
    m_i         = mean_t r_phi[i, t]  over row i's policy tokens
    b_i         = mean_{j in g(i), j != i} m_j                                    leave-one-out baseline
    P[i, t]     = sum_{s >= t, s policy} gamma^(n(s) - n(t)) * (r_phi[i, s] - b_i)   n(.) = index among policy tokens
    A_o[i]      = r_i - mean_{j in g(i), j != i} r_j                              RLOO outcome advantage
    A[i, t]     = (process_coef * P[i, t] + A_o[i]) * policy_mask[i, t]

The paper's implicit PRM pi_phi is a separate model trained online on the outcome labels; creditgym has none, so
pi_phi is the behaviour policy itself (its sampling log-probs ``old_logprobs``) and pi_ref a frozen copy of the
initial policy (signal ``reference_logprobs``). At the first step, pi == pi_ref and the module gives `rloo`'s
advantage. A singleton group has no baseline: its rows get 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, declare_signal, register, require
from creditgym.credit.grpo import group_metrics, group_stats, outcome_rewards

__all__ = ["PRIMEConfig", "discounted_returns", "prime"]


@dataclass(frozen=True)
class PRIMEConfig:
    """Config of `prime`.

    Attributes:
        beta: the implicit reward's scale, > 0 (the paper's 0.05).
        gamma: discount of the process returns, in [0, 1] (the paper's 1).
        process_coef: weight of the process part relative to the outcome part, >= 0 (the paper's recipe weighs
            the two equally).
    """

    beta: float = 0.05
    gamma: float = 1.0
    process_coef: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.beta, (int, float)) and self.beta > 0):
            raise ValueError(f"PRIMEConfig.beta: expected a scale > 0 such as 0.05, got {self.beta!r}")
        if not (isinstance(self.gamma, (int, float)) and 0 <= self.gamma <= 1):
            raise ValueError(f"PRIMEConfig.gamma: expected a discount in [0, 1], got {self.gamma!r}")
        if not (isinstance(self.process_coef, (int, float)) and self.process_coef >= 0):
            raise ValueError(f"PRIMEConfig.process_coef: expected a weight >= 0, got {self.process_coef!r}")


def discounted_returns(x: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """(B, T) ``sum_{s >= t} gamma^(n(s) - n(t)) x[:, s]`` over the policy tokens ``mask`` (0 elsewhere)."""
    x = torch.where(mask, x, 0.0)
    if gamma == 1.0:
        return torch.where(mask, x.flip(-1).cumsum(-1).flip(-1), 0.0)
    out = torch.zeros_like(x)
    acc = torch.zeros_like(x[:, 0])
    for t in range(x.shape[1] - 1, -1, -1):
        acc = torch.where(mask[:, t], x[:, t] + gamma * acc, acc)
        out[:, t] = acc
    return torch.where(mask, out, 0.0)


declare_signal(
    "reference_logprobs",
    "(B, T) log-probs of the sampled tokens under a frozen copy of the initial policy, "
    "teacher-forced, no grad",
)


@register("prime", config=PRIMEConfig, signals=("reference_logprobs",), group_relative=True)
@torch.no_grad()
def prime(batch: CreditBatch, cfg: PRIMEConfig) -> CreditOutput:
    """RLOO-baselined implicit process returns plus the RLOO outcome advantage (module docstring).

    Args:
        batch: token_rewards, policy_mask, group_ids, old_logprobs and the signal ``reference_logprobs`` (B, T).
        cfg: see `PRIMEConfig`.

    Returns:
        advantages (B, T); diagnostics ``credit`` (the implicit process reward r_phi per token); metrics
        ``credit/prime/*``.
    """
    ref = require(batch, "reference_logprobs", module="prime").float()  # (B, T)
    mask = batch.policy_mask
    r, is_sample = outcome_rewards(batch)  # (B,)
    g = group_stats(r, batch.group_ids, is_sample)
    has_base = is_sample & (g.n >= 2)
    A_o = torch.where(has_base & ~g.all_equal, r - (g.total - r) / (g.n - 1).clamp(min=1), 0.0)  # (B,)
    r_phi = torch.where(mask, cfg.beta * (batch.old_logprobs.float() - ref), 0.0)  # (B, T)
    m = r_phi.sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
    gm = group_stats(m, batch.group_ids, is_sample)
    b = (gm.total - m) / (gm.n - 1).clamp(min=1)  # (B,)
    P = discounted_returns(r_phi - b[:, None], mask, cfg.gamma)  # (B, T)
    P = torch.where(has_base[:, None], P, 0.0)
    advantages = torch.where(mask, cfg.process_coef * P + A_o[:, None], 0.0)  # (B, T)
    metrics = group_metrics("prime", r, g, is_sample, advantages, mask)
    metrics["credit/prime/process_reward_mean"] = float(r_phi[mask].mean()) if mask.any() else 0.0
    return CreditOutput(advantages, metrics=metrics, diagnostics={"credit": r_phi})
