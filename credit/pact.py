"""PACT: unique token credit and policy-aligned critic training (arXiv 2609.26355, "From Credit Assignment to
Critic Alignment"; code github.com/AllSpark-Research/PACT). Exact formulas from the full text: Theorem 1 (token
credit), section 4 (the BCE critic and the IS-corrected target) and Algorithm 1 (actor, then critic).

Token credit (Theorem 1): the unique credit satisfying completeness, prefix consistency and neutrality is the
martingale difference ``C_t = V(next prefix) - V(prefix)``; it telescopes to ``R - V(first prefix)``. With
GAE(gamma = 1, lambda = 1) the actor's advantage is the Monte-Carlo credit-to-go, which carries only the
prefix-value error (lambda < 1 lets intermediate critic errors swamp the sparse credit: PPO lambda=0.95 collapsed
to 26.3 avg vs 59.7 with lambda=1). Over each row's policy tokens (env tokens skipped), with ``R`` the row's
outcome reward normalised to [0, 1] and ``V_t = values[b, t]`` (the value *before* token t, see `CreditBatch`)::

    R             = (sum_t token_rewards[b, t] - lo) / (hi - lo)      (reward_range = (lo, hi), default (0, 1))
    A_t           = R - V_t                                           (advantages; lambda = 1)
    token_credit  = C_t = V_{next policy token} - V_t,  C_last = R - V_last,   sum_t C_t = R - V_first
    returns_t     = R                                                 (critic targets without the IS correction)

The critic (for the trainer): a **sigmoid** critic, the value head outputs logits z and ``V = sigmoid(z)``;
``batch.values`` must hold the probabilities ``sigmoid(z)``, and the critic is trained with soft BCE on the
logits: ``creditgym.agents.loss.value_loss(z, targets, mask, kind="bce")``. BCE has the conditional mean as its
minimiser, like MSE, and stays well-defined for targets outside [0, 1] (the IS targets ``rho R``). The paper's
critic is **a critic model** (``critic="model"``, default; ``creditgym.agents.critic_model``): a separate LM (a
copy of the actor's initial weights, or ``critic_model``) with a linear value head, its own AdamW at
``critic_lr_ratio x`` the actor's learning rate (the paper: 5e-6 vs 1e-6), fitted only in the critic phase.
``critic="probe"`` is the cheap ablation: a linear head on the actor's detached hidden state. The fields
``critic``, ``critic_lr_ratio`` and ``critic_model`` parameterise the ``values`` provider; `pact` itself does not
read them.

Actor-then-critic with the IS correction (Algorithm 1): the trainer first updates the actor on ``A_t``, then runs
one extra no-grad pass of the **updated** actor over the same rollouts to get ``updated_logprobs`` (this module's
``critic_signals``), then fits the critic on `pact_targets` (registered as ``critic_targets``)::

    rho_t = exp(updated_logprobs_t - old_logprobs_t)   (detached)
    Y_t   = rho_t R,    m_t = 1{rho_min <= rho_t <= rho_max} = 1{0 <= rho_t <= 6}
    L     = sum_t m_t BCE(V(prefix_t), Y_t) / sum_t m_t

``without_is=True`` (the "PACT without IS" ablation): ``Y_t = R`` on every policy token, no IS mask.
``rho`` departs from 1 by however far the actor moved in its ``epochs x minibatches`` updates of the step;
`rho_metrics` gives its spread (logged by the critic provider as ``credit/pact/rho_*``).

The paper's actor update on math is DIS with the IS range [0.7, 6.0], not PPO clipping: ``--loss dis``
(``creditgym.agents.loss.dis_loss``), available to every module; PACT's default stays ``--loss ppo`` (the
paper's choice on code) so that its comparisons with the other modules change one thing at a time.

Non-finite values (the critic diverged on a token): that token's advantage and credit are 0, the credit chain
skips it (still telescoping over the others), counted in ``credit/pact/nonfinite_signal_tokens``. Tokens with a
non-finite ``rho`` are left out of the critic mask.

Alternatives (not implemented): the exact multi-step IS target ``prod_{k >= t} rho_k R``; PPO-style critic-first
order (the critic lags one policy behind); GAE with lambda < 1 (`creditgym.credit.gae`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, advantage_metrics, register, require
from creditgym.credit.grpo import outcome_rewards

__all__ = ["CRITICS", "PACTConfig", "pact", "pact_critic_targets", "pact_targets", "rho_metrics"]

#: ``PACTConfig.critic``: the paper's critic model, or a linear probe on the actor's hidden state.
CRITICS: tuple[str, ...] = ("model", "probe")


@dataclass(frozen=True)
class PACTConfig:
    """Config of `pact` (defaults: the paper's).

    Attributes:
        reward_range: ``(lo, hi)``, ``lo < hi``: the outcome reward is mapped to ``(R - lo) / (hi - lo)`` so that
            the sigmoid critic's targets lie in [0, 1] (binary verifier rewards: the default (0, 1)).
        rho_min: lower end of the critic's IS mask, ``>= 0``.
        rho_max: upper end of the critic's IS mask, ``> rho_min``.
        without_is: critic targets ``R`` with no IS weight or mask (the "PACT without IS" ablation).
        critic: ``"model"``: the paper's critic, a separate LM with a value head (its own weights, initialised
            from ``critic_model`` or from the actor, its own optimizer; ``creditgym.agents.critic_model``);
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
    critic: str = "model"
    critic_lr_ratio: float = 5.0
    critic_model: str | None = None

    def __post_init__(self) -> None:
        rr = self.reward_range
        if not (
            isinstance(rr, tuple)
            and len(rr) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rr)
            and -float("inf") < rr[0] < rr[1] < float("inf")
        ):
            raise ValueError(
                f"PACTConfig.reward_range: expected a tuple (lo, hi) of floats with lo < hi, got {rr!r}"
            )
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


@torch.no_grad()
def pact_critic_targets(
    rewards: Tensor, old_logprobs: Tensor, updated_logprobs: Tensor, policy_mask: Tensor, cfg: PACTConfig
) -> tuple[Tensor, Tensor]:
    """PACT's critic targets after the actor update: ``Y_t = rho_t R`` and the IS mask (module docstring).

    Args:
        rewards: (B,) raw outcome rewards (``outcome_rewards(batch)[0]``), normalised here with
            ``cfg.reward_range``.
        old_logprobs: (B, T) behaviour log-probs of the sampled tokens.
        updated_logprobs: (B, T) log-probs of the same tokens under the updated actor, no grad.
        policy_mask: (B, T) bool.
        cfg: see `PACTConfig`.

    Returns:
        targets: (B, T) ``rho R`` (``R`` when ``cfg.without_is``), 0 where ``mask`` is False.
        mask: (B, T) bool, the policy tokens with ``rho_min <= rho <= rho_max`` (a finite rho); all policy tokens
        when ``cfg.without_is``.
    """
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    R = _normalise(rewards.to(dtype), cfg)[:, None]  # (B, 1)
    if cfg.without_is:
        return torch.where(policy_mask, R, 0.0), policy_mask.clone()
    rho = (updated_logprobs.to(dtype) - old_logprobs.to(dtype)).exp()  # (B, T)
    mask = policy_mask & torch.isfinite(rho) & (rho >= cfg.rho_min) & (rho <= cfg.rho_max)
    return torch.where(mask, rho * R, 0.0), mask


@torch.no_grad()
def pact_targets(batch: CreditBatch, cfg: PACTConfig) -> tuple[Tensor, Tensor]:
    """`pact_critic_targets` read from a batch whose signals hold ``updated_logprobs`` (the critic hook)."""
    updated = require(batch, "updated_logprobs", module="credit module 'pact' (critic phase)")
    rewards, _ = outcome_rewards(batch)
    return pact_critic_targets(rewards, batch.old_logprobs, updated, batch.policy_mask, cfg)


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


@register(
    "pact",
    config=PACTConfig,
    signals={"values": ("critic", "critic_lr_ratio", "critic_model")},
    critic=True,
    critic_signals=("updated_logprobs",),
    critic_targets=pact_targets,
    critic_loss="bce",
)
@torch.no_grad()
def pact(batch: CreditBatch, cfg: PACTConfig) -> CreditOutput:
    """PACT's actor advantages ``R - V(prefix)``, critic targets ``R`` and token credits (module docstring).

    Args:
        batch: token_rewards, policy_mask and ``values`` (B, T): ``sigmoid`` of the critic's logits, the value
            of the prefix before each token.
        cfg: see `PACTConfig`.

    Returns:
        advantages (B, T); returns (B, T) = R (the no-IS critic targets; with the IS correction the trainer uses
        `pact_targets` after the actor update); token_credit (B, T) = ``C_t``; all 0 off the policy mask; metrics
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
    return CreditOutput(advantages, returns, metrics=metrics, token_credit=token_credit)
