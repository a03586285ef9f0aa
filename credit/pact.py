"""PACT: unique token credit and policy-aligned critic training (arXiv 2609.26355, "From Credit Assignment to
Critic Alignment"; Theorem 1, section 4 and Algorithm 1 of the full text).

Token credit (Theorem 1): the martingale difference ``C_t = V(next prefix) - V(prefix)``, which telescopes to
``R - V(first prefix)``; the actor's advantage is GAE(1, 1), the Monte-Carlo credit-to-go. Over each row's policy
tokens (env tokens skipped), ``V_t = values[b, t]`` (the value *before* token t, a sigmoid critic's probability)::

    R             = (sum_t token_rewards[b, t] - lo) / (hi - lo)      (reward_range = (lo, hi))
    A_t           = R - V_t                                           (advantages; lambda = 1)
    credit        = C_t = V_{next policy token} - V_t,  C_last = R - V_last,   sum_t C_t = R - V_first
    returns_t     = R                                                 (critic targets without IS)

Actor, then critic (Algorithm 1): after the actor update, the ``critic_model`` provider's ``update`` scores the
sampled tokens under the updated actor (``updated_logprobs``) and fits the critic with soft BCE on
`pact_critic_targets`::

    rho_t = exp(updated_logprobs_t - old_logprobs_t)   (detached)
    m_t   = 1{rho_min <= rho_t <= rho_max}
    L     = sum_t m_t rho_t BCE(V(prefix_t), R) / sum_t m_t      (rho_in="weight")
    L     = sum_t m_t BCE(V(prefix_t), rho_t R) / sum_t m_t      (rho_in="target": the paper's form)

Both have the minimiser ``E[rho R | prefix]`` (``E[rho | prefix] = 1`` under the behaviour policy); the weighted
form is >= 0, the paper's has no minimum where ``rho R > 1``. ``without_is=True``: target ``R``, weight 1, no
mask. The critic is the paper's critic model (``critic="model"``, `creditgym.agents.providers.critic_model`) or a
linear probe (``critic="probe"``); those fields parameterise the ``values`` provider. A non-finite value gives that
token advantage and credit 0 (the chain skips it).

Shapes: (B, T) in and out. Defaults (``PACTConfig``, the paper's): reward_range=(0, 1), rho in [0, 6],
critic="model", critic_lr_ratio=5; ours: rho_in="weight". Its actor loss is DIS (the paper's on math; registered
as the module's ``actor_loss``, used when ``--loss`` is not given); details: docs/credit/pact.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from creditgym.credit.base import (
    CreditBatch,
    CreditOutput,
    ProvidedBy,
    advantage_metrics,
    check_reward_range,
    register,
    require,
)
from creditgym.credit.grpo import outcome_rewards

__all__ = ["CRITICS", "CriticTargets", "PACTConfig", "pact", "pact_critic_targets", "rho_metrics"]

#: ``PACTConfig.critic``: the paper's critic model, or a linear probe on the actor's hidden state.
CRITICS: tuple[str, ...] = ("model", "probe")
#: ``PACTConfig.rho_in``: where the IS ratio enters the critic's soft BCE.
RHO_IN: tuple[str, ...] = ("weight", "target")


@dataclass(frozen=True)
class PACTConfig:
    """Config of `pact` (defaults: the paper's).

    Attributes:
        reward_range: ``(lo, hi)``, ``lo < hi``: the outcome reward is mapped to ``(R - lo) / (hi - lo)`` so that
            the sigmoid critic's targets lie in [0, 1] (binary verifier rewards: the default (0, 1)).
        rho_min: lower end of the critic's IS mask, ``>= 0``.
        rho_max: upper end of the critic's IS mask, ``> rho_min``.
        without_is: critic targets ``R`` with no IS weight or mask (the "PACT without IS" ablation).
        rho_in: where rho enters the critic's soft BCE: ``"weight"``, ``rho BCE(V, R)`` (bounded below by 0;
            ours), or ``"target"``, ``BCE(V, rho R)`` (the paper's form, unbounded below where ``rho R > 1``);
            both have the minimiser ``E[rho R | prefix]``.
        critic: ``"model"``: the paper's critic, a separate LM with a value head (its own weights, initialised
            from ``critic_model`` or from the actor, its own optimizer; ``creditgym.agents.providers.critic_model``);
            ``"probe"``: a linear value head on the actor's detached hidden state (cheap; ``TrainConfig.critic_lr``).
        critic_lr_ratio: the critic model's learning rate over the actor's (``TrainConfig.lr``); the paper's 5
            (critic 5e-6, actor 1e-6).
        critic_model: a model folder (same tokenizer as the actor) whose decoder initialises the critic model;
            None: a copy of the actor's initial weights.
    """

    reward_range: tuple[float, float] = (0.0, 1.0)
    rho_min: float = 0.0
    rho_max: float = 6.0
    without_is: bool = False
    rho_in: Literal["weight", "target"] = "weight"
    critic: str = "model"
    critic_lr_ratio: float = 5.0
    critic_model: str | None = None

    def __post_init__(self) -> None:
        check_reward_range("PACTConfig.reward_range", self.reward_range)
        for name in ("rho_min", "rho_max"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"PACTConfig.{name}: expected a float, got {v!r}")
        if not 0 <= self.rho_min < self.rho_max:
            raise ValueError(
                f"PACTConfig: expected 0 <= rho_min < rho_max, got rho_min={self.rho_min!r}, rho_max={self.rho_max!r}"
            )
        if not isinstance(self.without_is, bool):
            raise TypeError(f"PACTConfig.without_is: expected a bool, got {self.without_is!r}")
        if self.rho_in not in RHO_IN:
            raise ValueError(f"PACTConfig.rho_in: expected one of {RHO_IN}, got {self.rho_in!r}")
        if self.critic not in CRITICS:
            raise ValueError(f"PACTConfig.critic: expected one of {CRITICS}, got {self.critic!r}")
        ratio = self.critic_lr_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < float("inf"):
            raise ValueError(f"PACTConfig.critic_lr_ratio: expected a finite float > 0, got {ratio!r}")
        if self.critic_model is not None and not (isinstance(self.critic_model, str) and self.critic_model):
            raise ValueError(
                f"PACTConfig.critic_model: expected a model folder (a non-empty string) or None, got "
                f"{self.critic_model!r}"
            )


def _normalise(rewards: Tensor, cfg: PACTConfig) -> Tensor:
    lo, hi = cfg.reward_range
    return (rewards - lo) / (hi - lo)


class CriticTargets(NamedTuple):
    """What PACT's critic is fitted on, ``sum_t mask weights BCE(V, targets) / sum_t mask``: `pact_critic_targets`.

    Attributes:
        targets: (B, T) soft BCE targets, 0 where ``mask`` is False.
        weights: (B, T) per-token loss weights, 0 where ``mask`` is False.
        mask: (B, T) bool, the tokens the critic is fitted on.
    """

    targets: Tensor
    weights: Tensor
    mask: Tensor


@torch.no_grad()
def pact_critic_targets(
    rewards: Tensor, old_logprobs: Tensor, updated_logprobs: Tensor, policy_mask: Tensor, cfg: PACTConfig
) -> CriticTargets:
    """PACT's critic targets after the actor update: ``R`` weighted by ``rho`` (or ``rho R``), and the IS mask.

    Args:
        rewards: (B,) raw outcome rewards (``outcome_rewards(batch)[0]``), normalised here with
            ``cfg.reward_range``.
        old_logprobs: (B, T) behaviour log-probs of the sampled tokens.
        updated_logprobs: (B, T) log-probs of the same tokens under the updated actor, no grad.
        policy_mask: (B, T) bool.
        cfg: see `PACTConfig`.

    Returns:
        `CriticTargets`: with ``cfg.rho_in == "weight"`` targets ``R`` and weights ``rho``; with ``"target"``
        targets ``rho R`` and weights 1; the mask: the policy tokens with ``rho_min <= rho <= rho_max`` (a finite
        rho). ``cfg.without_is``: targets ``R``, weights 1, every policy token.
    """
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    R = _normalise(rewards.to(dtype), cfg)[:, None].expand(policy_mask.shape)  # (B, T)
    if cfg.without_is:
        return CriticTargets(torch.where(policy_mask, R, 0.0), policy_mask.to(dtype), policy_mask.clone())
    rho = (updated_logprobs.to(dtype) - old_logprobs.to(dtype)).exp()  # (B, T)
    mask = policy_mask & torch.isfinite(rho) & (rho >= cfg.rho_min) & (rho <= cfg.rho_max)
    rho = torch.where(mask, rho, 0.0)
    if cfg.rho_in == "target":
        return CriticTargets(rho * R, mask.to(dtype), mask)
    return CriticTargets(torch.where(mask, R, 0.0), rho, mask)


@torch.no_grad()
def rho_metrics(
    old_logprobs: Tensor, updated_logprobs: Tensor, policy_mask: Tensor, cfg: PACTConfig
) -> dict[str, float]:
    """The spread of the critic phase's ``rho = exp(updated - old)`` over the policy tokens: ``credit/pact/``
    ``rho_mean``, ``rho_sd``, ``rho_abs_log_mean`` (mean ``|log rho|``) and ``rho_masked_share`` (the share of
    policy tokens outside ``[rho_min, rho_max]`` or non-finite, which the critic's IS mask drops).
    """
    log_rho = (updated_logprobs.double() - old_logprobs.double())[policy_mask]  # (N,) policy tokens
    finite = torch.isfinite(log_rho)
    rho = log_rho[finite].exp()
    kept = (rho >= cfg.rho_min) & (rho <= cfg.rho_max)
    n = max(log_rho.numel(), 1)
    return {
        "credit/pact/rho_mean": rho.mean().item() if rho.numel() else 0.0,
        "credit/pact/rho_sd": rho.std(correction=0).item() if rho.numel() else 0.0,
        "credit/pact/rho_abs_log_mean": log_rho[finite].abs().mean().item() if rho.numel() else 0.0,
        "credit/pact/rho_masked_share": float(log_rho.numel() - int(kept.sum())) / n,
    }


#: The fields of `PACTConfig` that its critic's provider takes: the critic, and the IS-corrected targets it fits.
CRITIC_FIELDS = (
    "critic",
    "critic_lr_ratio",
    "critic_model",
    "reward_range",
    "rho_min",
    "rho_max",
    "without_is",
    "rho_in",
)


@register(
    "pact",
    config=PACTConfig,
    signals={"values": ProvidedBy("critic_model", CRITIC_FIELDS)},
    critic=True,
    actor_loss="dis",
)
@torch.no_grad()
def pact(batch: CreditBatch, cfg: PACTConfig) -> CreditOutput:
    """PACT's actor advantages ``R - V(prefix)``, critic targets ``R`` and token credits (module docstring).

    Args:
        batch: token_rewards, policy_mask and ``values`` (B, T): ``sigmoid`` of the critic's logits, the value
            of the prefix before each token.
        cfg: see `PACTConfig`.

    Returns:
        advantages (B, T); returns (B, T) = R (the no-IS critic targets; with the IS correction the critic model
        is fitted on `pact_critic_targets` after the actor update); ``diagnostics["credit"]`` (B, T) = ``C_t``;
        all 0 off the policy mask; metrics
        ``credit/pact/*`` (``value_mean``, ``return_mean``, ``credit_abs_mean`` (mean ``|C_t|``, the last
        ``R - V_last`` included), ``value_step_abs_mean`` (the paper's sparsity figure, Theorem 4: mean
        ``|V_t - V_{t-1}|`` between consecutive policy tokens), ``explained_var`` (the critic's, of ``R``),
        ``reward_out_of_range_frac``, ``nonfinite_signal_tokens``).
    """
    values = require(batch, "values", module="credit module 'pact'")
    mask = batch.policy_mask
    B, T = batch.shape
    r, is_sample = outcome_rewards(batch)  # (B,), (B,)
    dtype = r.dtype
    R = _normalise(r, cfg)  # (B,)
    V = values.to(dtype)
    ok = mask & torch.isfinite(V)
    V = torch.where(ok, V, 0.0)
    advantages = torch.where(ok, R[:, None] - V, 0.0)  # (B, T)
    returns = torch.where(mask, R[:, None], 0.0)

    t_idx = torch.arange(T, device=mask.device).expand(B, T)
    pos = torch.where(ok, t_idx, T)
    first_at_or_after = pos.flip(1).cummin(1).values.flip(1)  # (B, T)
    nxt = torch.cat([first_at_or_after[:, 1:], pos.new_full((B, 1), T)], 1)  # (B, T); T = after the last
    V_next = torch.cat([V, R[:, None]], 1).gather(1, nxt)  # (B, T): V at the next token, R after the last
    token_credit = torch.where(ok, V_next - V, 0.0)
    inner = ok & (nxt < T)  # a token followed by another valued policy token: C_t = V_{t+1} - V_t
    n_inner = inner.sum().clamp(min=1)

    n = ok.sum().clamp(min=1)
    var_ret = torch.where(ok, returns - (torch.where(ok, returns, 0.0).sum() / n), 0.0).pow(2).sum() / n
    err = torch.where(ok, advantages - advantages.sum() / n, 0.0)
    explained_var = (1.0 - err.pow(2).sum() / n / var_ret).item() if var_ret > 0 else 0.0
    n_samples = max(int(is_sample.sum()), 1)
    metrics = {
        **advantage_metrics("pact", advantages, mask),
        "credit/pact/value_mean": (V.sum() / n).item(),
        "credit/pact/return_mean": (torch.where(is_sample, R, 0.0).sum() / n_samples).item(),
        "credit/pact/credit_abs_mean": (token_credit.abs().sum() / n).item(),
        "credit/pact/value_step_abs_mean": (
            torch.where(inner, token_credit, 0.0).abs().sum() / n_inner
        ).item(),
        "credit/pact/explained_var": explained_var,
        "credit/pact/reward_out_of_range_frac": float((is_sample & ((R < 0) | (R > 1))).sum()) / n_samples,
        "credit/pact/nonfinite_signal_tokens": float((mask & ~ok).sum()),
    }
    return CreditOutput(advantages, returns, metrics=metrics, diagnostics={"credit": token_credit})
