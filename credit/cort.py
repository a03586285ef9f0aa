"""CoRT: counterfactual replay -> bounded token weights for rubric GRPO (arXiv 2607.25659).

Each response is replayed teacher-forced under a matched criteria-free prompt. The log-prob contrast says how much
a token depends on the rubric; it becomes a bounded, per-response-normalised weight that redistributes the signed
GRPO advantage over the response's tokens (the response-level reward is unchanged).

Signal (paper): ``delta[i, t] = l+[i, t] - l-[i, t]`` with ``l+ = old_logprobs`` (the rollout prompt, rubric
included) and ``l- = counterfactual_logprobs`` (the criteria-free prompt). Weight map and schedule (ours: the
paper's exact map was not recoverable; credit_methods.md section 1), per response i over its T_i policy tokens::

    s[i, t]  = clip(delta[i, t], -c, c)                 (sign_aware: clip(max(delta, 0), 0, c))
    u[i, t]  = T_i * softmax_t(s[i, :] / tau)            (mean 1 over the response)
    w~[i, t] = clip(u[i, t], w_min, w_max)
    w[i, t]  = w~[i, t] / mean_t w~[i, :]                (normalize=True; the paper's ablation: without it the
                                                          mean weight drifts to ~1.04 and training destabilises)
    alpha_k  = smoothstep((k - k0) / (k1 - k0)),  smoothstep(z) = 3 z^2 - 2 z^3 on z clipped to [0, 1],
               k = batch.step, k0 = ramp_start * K, k1 = ramp_end * K, K = batch.total_steps
    A[i, t]  = A_i * (1 + alpha_k * (w[i, t] - 1))       A_i = the GRPO advantage (`creditgym.credit.grpo`)

Properties: w > 0, so every token keeps the sign of A_i; with ``normalize`` the weights have mean 1 per response,
so ``sum_t A[i, t] = T_i * A_i`` (the GRPO total is kept); with alpha = 0 the result is GRPO exactly. The ramp is
the same thing as mixing the weights with uniform ones. Multi-turn rows: the weights are normalised over all the
policy tokens of the row (the response), turns included.

Non-finite contrasts (e.g. a ``-inf`` counterfactual log-prob): such tokens are left out of the softmax and the
normalisation, get the neutral weight 1 (their advantage is ``A_i``), and are counted in
``credit/cort/nonfinite_signal_tokens``.

Alternatives (not implemented, name them when comparing): a temperature-free rank map; re-projecting onto
``[w_min, w_max]`` with mean exactly 1 (a scalar bisection) instead of one clip-then-renormalise, which can leave
a weight slightly above ``w_max`` (at most ``w_max / mean(w~)``); per-criterion replays (the paper removes the
criteria jointly); zeroing negative contrasts only in the ramp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, register, require
from creditgym.credit.grpo import GRPOConfig, group_metrics, group_stats, outcome_rewards

__all__ = ["CoRTConfig", "cort", "cort_ramp", "cort_weights"]


@dataclass(frozen=True)
class CoRTConfig:
    """Config of `cort` (defaults: credit_methods.md section 1, marked [ours] there).

    Attributes:
        grpo: how the response advantage ``A_i`` is computed (see `GRPOConfig`).
        delta_clip: ``c > 0``, the contrast is clipped to ``[-c, c]`` before the softmax.
        tau: softmax temperature, ``> 0``.
        w_min: lower weight bound, in ``(0, 1]``.
        w_max: upper weight bound, ``>= 1``.
        ramp_start: ``k0 / K``, the fraction of training at which the weights start to switch on, in [0, 1].
        ramp_end: ``k1 / K``, the fraction at which they are fully on, in ``[ramp_start, 1]`` (equal: a step).
        normalize: renormalise the clipped weights to mean 1 per response (False: the "CoRT without per-response
            normalisation" ablation).
        sign_aware: use ``max(delta, 0)`` (only reward rubric dependence; an ablation).
    """

    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    delta_clip: float = 5.0
    tau: float = 1.0
    w_min: float = 0.25
    w_max: float = 4.0
    ramp_start: float = 0.05
    ramp_end: float = 0.3
    normalize: bool = True
    sign_aware: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.grpo, GRPOConfig):
            raise TypeError(f"CoRTConfig.grpo: expected a GRPOConfig, got {type(self.grpo).__name__}")
        for name in ("normalize", "sign_aware"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CoRTConfig.{name}: expected a bool, got {getattr(self, name)!r}")
        for name in ("delta_clip", "tau", "w_min", "w_max", "ramp_start", "ramp_end"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"CoRTConfig.{name}: expected a float, got {v!r}")
        if not self.delta_clip > 0 or not self.tau > 0:
            raise ValueError(
                f"CoRTConfig: expected delta_clip > 0 and tau > 0, got delta_clip={self.delta_clip!r}, "
                f"tau={self.tau!r}"
            )
        if not 0 < self.w_min <= 1 <= self.w_max < float("inf"):
            raise ValueError(
                f"CoRTConfig: expected 0 < w_min <= 1 <= w_max < inf, got w_min={self.w_min!r}, "
                f"w_max={self.w_max!r}"
            )
        if not 0 <= self.ramp_start <= self.ramp_end <= 1:
            raise ValueError(
                f"CoRTConfig: expected 0 <= ramp_start <= ramp_end <= 1 (fractions of training), got "
                f"ramp_start={self.ramp_start!r}, ramp_end={self.ramp_end!r}"
            )


def cort_ramp(step: int, total_steps: int, cfg: CoRTConfig) -> float:
    """``alpha_k = smoothstep((k - k0) / (k1 - k0))`` in [0, 1]; a step at ``k0`` when ``k0 == k1``."""
    k0, k1 = cfg.ramp_start * total_steps, cfg.ramp_end * total_steps
    if k1 <= k0:
        return 1.0 if step >= k0 else 0.0
    z = min(max((step - k0) / (k1 - k0), 0.0), 1.0)
    return 3 * z**2 - 2 * z**3


def cort_weights(delta: Tensor, valid: Tensor, cfg: CoRTConfig) -> Tensor:
    """Per-response token weights from the contrasts (formula in the module docstring).

    Args:
        delta: (B, T) float, ``old_logprobs - counterfactual_logprobs``; read only where ``valid``.
        valid: (B, T) bool, policy tokens with a finite contrast.
        cfg: see `CoRTConfig`.

    Returns:
        w: (B, T), the weights on ``valid`` (mean 1 per row when ``cfg.normalize``; within
        ``[w_min, w_max]`` when not), exactly 1 elsewhere.
    """
    d = torch.where(valid, delta, 0.0)  # (B, T)
    s = d.clamp(0.0, cfg.delta_clip) if cfg.sign_aware else d.clamp(-cfg.delta_clip, cfg.delta_clip)
    logits = torch.where(valid, s / cfg.tau, -torch.inf)  # (B, T)
    n = valid.sum(-1, keepdim=True)  # (B, 1) T_i
    peak = logits.amax(-1, keepdim=True).clamp(min=-cfg.delta_clip / cfg.tau)  # finite even for empty rows
    e = torch.where(valid, (logits - peak).exp(), 0.0)
    u = n * e / e.sum(-1, keepdim=True).clamp(min=torch.finfo(e.dtype).tiny)  # (B, T), mean 1 per row
    w = torch.where(valid, u.clamp(cfg.w_min, cfg.w_max), 0.0)
    if cfg.normalize:
        w = w * (n / w.sum(-1, keepdim=True).clamp(min=torch.finfo(w.dtype).tiny))
    return torch.where(valid, w, 1.0)


@register("cort", config=CoRTConfig, signals=("counterfactual_logprobs",))
@torch.no_grad()
def cort(batch: CreditBatch, cfg: CoRTConfig) -> CreditOutput:
    """CoRT token advantages: the GRPO advantage redistributed by counterfactual-replay weights.

    Args:
        batch: token_rewards, policy_mask, group_ids, old_logprobs (``l+``, the rubric prompt), step and
            total_steps are read, and the signal ``counterfactual_logprobs`` (B, T): log-probs of the sampled
            tokens teacher-forced under the matched criteria-free prompt by the behaviour policy, no grad.
        cfg: see `CoRTConfig`.

    Returns:
        advantages (B, T), 0 off the policy mask; no returns; metrics ``credit/cort/*`` (GRPO's group metrics,
        ``alpha``, ``weight_min/max/mean`` over the weighted tokens, ``delta_mean``, ``nonfinite_signal_tokens``).
    """
    counterfactual = require(batch, "counterfactual_logprobs", module="credit module 'cort'")
    mask = batch.policy_mask
    r, is_sample = outcome_rewards(batch)  # (B,), (B,)
    dtype = r.dtype
    g = group_stats(r, batch.group_ids, is_sample, unbiased=cfg.grpo.unbiased_std)
    A = r - g.mean  # (B,)
    if cfg.grpo.norm_by_std:
        A = A / (g.std + cfg.grpo.eps)
    A = torch.where(is_sample & (g.n >= 2) & ~g.all_equal, A, 0.0)

    delta = batch.old_logprobs.to(dtype) - counterfactual.to(dtype)  # (B, T)
    finite = torch.isfinite(delta)
    valid = mask & finite
    w = cort_weights(delta, valid, cfg)  # (B, T)
    alpha = cort_ramp(batch.step, batch.total_steps, cfg)
    advantages = torch.where(mask, A[:, None] * (1 + alpha * (w - 1)), 0.0)  # (B, T)

    wv = w[valid]
    metrics = {
        **group_metrics("cort", r, g, is_sample, advantages, mask),
        "credit/cort/alpha": float(alpha),
        "credit/cort/weight_min": wv.min().item() if wv.numel() else 1.0,
        "credit/cort/weight_max": wv.max().item() if wv.numel() else 1.0,
        "credit/cort/weight_mean": wv.mean().item() if wv.numel() else 1.0,
        "credit/cort/delta_mean": delta[valid].mean().item() if wv.numel() else 0.0,
        "credit/cort/nonfinite_signal_tokens": float((mask & ~finite).sum()),
    }
    return CreditOutput(advantages, metrics=metrics)
