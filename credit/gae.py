"""GAE(gamma, lambda) over policy tokens only, with a critic (Schulman et al., arXiv 1506.02438).

Index the policy tokens of a row in order, k = 0..K-1 (prompt, env tokens and padding are skipped: the value
bootstrap and the lambda-trace carry across them, as verl does for multi-turn tool tokens). With
``V_k = values[b, t_k]`` (the value *before* token t_k, see `CreditBatch`) and ``V_K = 0`` (terminal):

    delta_k = r_k + gamma * V_{k+1} - V_k
    A_k     = delta_k + gamma * lam * A_{k+1},        A_K = 0
    returns_k = A_k + V_k                               (value targets, TD(lambda), before whitening)

then optionally ``A <- (A - mean) / sqrt(var + 1e-8)`` over all policy tokens of the batch (verl's
``masked_whiten``, unbiased var). A gamma step is one *policy* token: env tokens do not discount.

Defaults ``gamma = lam = 1``: with sparse terminal rewards, ``lam < 1`` lets intermediate critic errors swamp the
credit, while ``lam = 1`` gives ``A_t = R - V_t`` and carries only the prefix-value error (PACT, arXiv 2609.26355:
PPO with lam=0.95 collapsed to 26.3 avg vs 59.7 with lam=1). TRL's PPO default is lam=0.95; set it here to compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, advantage_metrics, register, require

__all__ = ["GAEConfig", "gae", "gae_advantages", "masked_whiten"]


@dataclass(frozen=True)
class GAEConfig:
    """Config of `gae`.

    Attributes:
        gamma: discount per policy token, in [0, 1].
        lam: GAE trace parameter, in [0, 1]; 1 = Monte-Carlo return minus the value (PACT), 0 = one-step TD.
        whiten: whiten advantages over all policy tokens of the batch (verl's default for GAE).
    """

    gamma: float = 1.0
    lam: float = 1.0
    whiten: bool = True

    def __post_init__(self) -> None:
        for name in ("gamma", "lam"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"GAEConfig.{name}: expected a float in [0, 1], got {v!r}")
        if not isinstance(self.whiten, bool):
            raise TypeError(f"GAEConfig.whiten: expected a bool, got {self.whiten!r}")


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` with mean and unbiased var over ``mask``; 0 where ``mask`` is False.

    Args:
        x: (B, T) float.
        mask: (B, T) bool. Fewer than 2 entries: the variance is taken as 0.
    """
    n = mask.sum()
    x = torch.where(mask, x, 0.0)
    mean = x.sum() / n.clamp(min=1)
    dev = torch.where(mask, x - mean, 0.0)
    var = (dev**2).sum() / (n - 1).clamp(min=1)
    return dev * torch.rsqrt(var + eps)


def gae_advantages(rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float, lam: float) -> Tensor:
    """GAE over the policy tokens of each row (formula in the module docstring); 0 where ``mask`` is False.

    Vectorised over B; a reverse scan over T (a cumulative sum when ``gamma * lam == 1``).

    Args:
        rewards: (B, T) float, 0 off the mask.
        values: (B, T) float, ``values[b, t] = V(s_t)``; read only on the mask.
        mask: (B, T) bool, policy tokens.
    """
    B, T = rewards.shape
    r = torch.where(mask, rewards, 0.0)  # (B, T)
    V = torch.where(mask, values, 0.0)  # (B, T)
    if gamma == 1.0 and lam == 1.0:
        # A_t = sum_{k >= t} r_k - V_t exactly (the deltas telescope), without summing T float deltas
        G = r.flip(1).cumsum(1).flip(1)  # (B, T)
        return torch.where(mask, G - V, 0.0)
    # index of the next policy token after t (T when there is none), then V there (0 = terminal)
    t_idx = torch.arange(T, device=mask.device).expand(B, T)
    pos = torch.where(mask, t_idx, T)
    first_at_or_after = pos.flip(1).cummin(1).values.flip(1)  # (B, T)
    nxt = torch.cat([first_at_or_after[:, 1:], pos.new_full((B, 1), T)], 1)  # (B, T)
    V_next = torch.cat([V, V.new_zeros(B, 1)], 1).gather(1, nxt)  # (B, T)
    delta = r + gamma * V_next - V  # (B, T)
    A = torch.zeros_like(r)
    carry = r.new_zeros(B)  # A at the next policy token
    for t in range(T - 1, -1, -1):
        carry = torch.where(mask[:, t], delta[:, t] + gamma * lam * carry, carry)
        A[:, t] = carry
    return torch.where(mask, A, 0.0)


@register("gae", config=GAEConfig, signals=("values",), critic=True)
@torch.no_grad()
def gae(batch: CreditBatch, cfg: GAEConfig) -> CreditOutput:
    """GAE advantages and TD(lambda) value targets over the policy tokens.

    Args:
        batch: token_rewards, policy_mask and values (required) are read.
        cfg: see `GAEConfig`.

    Returns:
        advantages (B, T) (whitened when ``cfg.whiten``), returns (B, T) = unwhitened advantages + values, both 0
        off the policy mask; metrics ``credit/gae/*`` (including ``explained_var`` of the values).
    """
    values = require(batch, "values", module="credit module 'gae'")
    mask = batch.policy_mask
    dtype = torch.promote_types(batch.token_rewards.dtype, torch.float32)
    V = torch.where(mask, values.to(dtype), 0.0)  # (B, T)
    A = gae_advantages(batch.token_rewards.to(dtype), V, mask, gamma=cfg.gamma, lam=cfg.lam)  # (B, T)
    returns = torch.where(mask, A + V, 0.0)
    advantages = masked_whiten(A, mask) if cfg.whiten else A
    n = mask.sum().clamp(min=1)
    ret_mean = returns.sum() / n
    var_ret = torch.where(mask, returns - ret_mean, 0.0).pow(2).sum() / n
    err = returns - V  # (B, T), the unwhitened advantages on the mask
    var_err = torch.where(mask, err - err.sum() / n, 0.0).pow(2).sum() / n
    explained_var = (1.0 - var_err / var_ret).item() if var_ret > 0 else 0.0
    return CreditOutput(
        advantages,
        returns,
        metrics={
            **advantage_metrics("gae", advantages, mask),
            "credit/gae/value_mean": (V.sum() / n).item(),
            "credit/gae/return_mean": ret_mean.item(),
            "credit/gae/explained_var": explained_var,
        },
    )
