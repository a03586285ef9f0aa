"""CoRT: counterfactual replay -> bounded token weights for rubric GRPO (arXiv 2607.25659).

Each response is replayed teacher-forced under a matched criteria-free prompt; the log-prob contrast
``delta[i, t] = old_logprobs - counterfactual_logprobs`` (the paper's signal) becomes a bounded, per-response
normalised weight that redistributes the signed GRPO advantage over the response's tokens. The weight map and
schedule are ours (the paper's abstract fixes only the signal, the normalisation and the ramp); per response i
over its T_i policy tokens::

    d[i, t]  = delta[i, t]                               (sign_aware: max(delta[i, t], 0))
    d[i, t]  = (d[i, t] - mean_t d[i, :]) / sqrt(sd_t d[i, :]^2 + s0^2)   (standardize=True: population sd;
                                                          s0 = sd_floor nats, the noise floor)
    z[i, t]  = clip(d[i, t], -c, c) / tau                 (c in nats, or in sds when standardised)
    w[i, t]  = clip(s_i * exp(z[i, t]), w_min, w_max)     (normalize=True: s_i > 0 the one scale at which
                                                           mean_t w[i, :] = 1: `project_weights`)
    w[i, t]  = clip(T_i * softmax_t(z[i, :]), w_min, w_max)   (normalize=False: the paper's ablation)
    alpha_k  = smoothstep((k - k0) / (k1 - k0)),  smoothstep(x) = 3 x^2 - 2 x^3 on x clipped to [0, 1],
               k = batch.step, k0 = ramp_start * K, k1 = ramp_end * K, K = batch.total_steps
    A[i, t]  = A_i * (1 + alpha_k * (w[i, t] - 1))       A_i = the GRPO advantage (`creditgym.credit.grpo`)

Properties: w > 0, so every token keeps the sign of A_i; with ``normalize`` the weights lie in ``[w_min, w_max]``
with mean 1 per response, so ``sum_t A[i, t] = T_i * A_i``; with alpha = 0 the result is GRPO exactly. Tokens with
a non-finite contrast get the neutral weight 1 (counted in ``credit/cort/nonfinite_signal_tokens``).

Shapes: every input and output (B, T). Defaults (``CoRTConfig``): delta_clip=5, tau=2.25, w_min=0.25, w_max=4,
ramp 0.05-0.3 of the run, normalize and standardize on, sd_floor=0.5. How tau was calibrated, where the weight
lands (the ``criterion_spans`` signal) and the probe's verdict: docs/credit/cort.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, declare_signal, register, require
from creditgym.credit.grpo import GRPOConfig, group_metrics, grpo_advantage

__all__ = [
    "CoRTConfig",
    "cort",
    "cort_logits",
    "cort_ramp",
    "cort_weights",
    "project_weights",
    "span_metrics",
]

declare_signal(
    "counterfactual_logprobs",
    "(B, T) log-probs of the sampled tokens replayed teacher-forced under a counterfactual prompt (the env's "
    "prompt without the criteria the verdict checks), no grad",
)
declare_signal(
    "criterion_spans",
    "(B, T) 1.0 on the policy tokens whose characters overlap a span the episode's verdict rests on "
    "(Verdict.spans: a rubric criterion's evidence, a math answer), else 0; diagnostics only",
)

_SD_FLOOR = 1e-6  # a response whose contrasts are all equal standardises to 0 (uniform weights)
_BISECTIONS = 200  # halvings of the level bracket at most (float64 resolution is reached well before)
_M_TOL = 1e-13  # relative width of the level bracket at which the bisection stops


@dataclass(frozen=True)
class CoRTConfig:
    """Config of `cort` (defaults: ours where arXiv 2607.25659 gives none, see the module docstring).

    Attributes:
        grpo: how the response advantage ``A_i`` is computed (see `GRPOConfig`).
        delta_clip: ``c > 0``, the contrast (nats; standardised: sds) is clipped to ``[-c, c]``.
        tau: softmax temperature, ``> 0``; the default 2.25 spreads the standardised weights over about
            [0.5, 2] on the hard rubric (docs/credit/cort.md, Calibration).
        w_min: lower weight bound, in ``(0, 1]``.
        w_max: upper weight bound, ``>= 1``.
        ramp_start: ``k0 / K``, the fraction of training at which the weights start to switch on, in [0, 1].
        ramp_end: ``k1 / K``, the fraction at which they are fully on, in ``[ramp_start, 1]`` (equal: a step).
        normalize: project the weights onto mean 1 per response within the bounds (False: the "CoRT without
            per-response normalisation" ablation).
        sign_aware: use ``max(delta, 0)`` (only reward rubric dependence; an ablation).
        standardize: standardise the contrast within each response (mean 0, sd 1) before ``clip`` and ``tau``
            (False: the raw contrast in nats, the map before the calibration).
        sd_floor: the noise floor of the standardisation, ``s0 >= 0`` nats: the contrast is divided by
            ``sqrt(sd^2 + s0^2)``, so a response whose contrasts vary by much less than ``s0`` (noise) gets
            near-uniform weights, and one that varies by much more is standardised as before; 0: plain sd.
    """

    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    delta_clip: float = 5.0
    tau: float = 2.25
    w_min: float = 0.25
    w_max: float = 4.0
    ramp_start: float = 0.05
    ramp_end: float = 0.3
    normalize: bool = True
    sign_aware: bool = False
    standardize: bool = True
    sd_floor: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.grpo, GRPOConfig):
            raise TypeError(f"CoRTConfig.grpo: expected a GRPOConfig, got {type(self.grpo).__name__}")
        for name in ("normalize", "sign_aware", "standardize"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CoRTConfig.{name}: expected a bool, got {getattr(self, name)!r}")
        for name in ("delta_clip", "tau", "w_min", "w_max", "ramp_start", "ramp_end", "sd_floor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"CoRTConfig.{name}: expected a float, got {v!r}")
        if not self.delta_clip > 0 or not self.tau > 0:
            raise ValueError(
                f"CoRTConfig: expected delta_clip > 0 and tau > 0, got delta_clip={self.delta_clip!r}, "
                f"tau={self.tau!r}"
            )
        if not 0 <= self.sd_floor < float("inf"):
            raise ValueError(
                f"CoRTConfig.sd_floor: expected a finite float >= 0 (nats), got {self.sd_floor!r}"
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


def cort_logits(delta: Tensor, valid: Tensor, cfg: CoRTConfig) -> Tensor:
    """``z = s / tau``, the per-token logits of the weight map (module docstring), float64, 0 off ``valid``.

    Args:
        delta: (B, T) float, ``old_logprobs - counterfactual_logprobs``; read only where ``valid``.
        valid: (B, T) bool, policy tokens with a finite contrast.
        cfg: see `CoRTConfig`.
    """
    d = torch.where(valid, delta.double(), 0.0)  # (B, T)
    if cfg.sign_aware:
        d = d.clamp(min=0.0)
    if cfg.standardize:
        n = valid.sum(-1, keepdim=True).clamp(min=1)  # (B, 1) T_i
        mu = d.sum(-1, keepdim=True) / n
        var = torch.where(valid, d - mu, 0.0).square().sum(-1, keepdim=True) / n
        # the noise floor: a response whose contrasts vary far less than sd_floor standardises to near 0
        sd = (var + cfg.sd_floor**2).sqrt()
        d = torch.where(valid, (d - mu) / sd.clamp(min=_SD_FLOOR), 0.0)  # sd 0 (a constant row): all 0
    return torch.where(valid, d.clamp(-cfg.delta_clip, cfg.delta_clip) / cfg.tau, 0.0)


def project_weights(z: Tensor, valid: Tensor, w_min: float, w_max: float) -> Tensor:
    """``w = clip(exp(z - m), w_min, w_max)`` with, per row, the level ``m`` at which ``mean w = 1`` (float64).

    The exact clip-and-rescale onto {mean 1, every weight in [w_min, w_max]}: the one scale ``s = exp(-m)`` at
    which ``clip(s * exp(z))`` has mean 1, so the weights the bounds leave free keep their ratios. (Repeating
    clip-then-renormalise converges to another point of that set, one that lifts every clipped-low weight
    together and so forgets their order.) Found by bisection on ``m``: the row mean of ``clip(exp(z - m))`` is
    continuous and non-increasing in ``m``, ``w_max`` at ``m = min z - log w_max`` and ``w_min`` at ``m = max z
    - log w_min``, so for finite ``z`` and ``w_min <= 1 <= w_max`` a root exists and the weights at it are
    unique. Every weight lies in ``[w_min, w_max]`` exactly; the row mean is 1 to ~1e-12.

    Args:
        z: (B, T) finite logits, read where ``valid``.
        valid: (B, T) bool.
        w_min, w_max: the bounds, ``0 < w_min <= 1 <= w_max``.

    Returns:
        (B, T) float64: the weights on ``valid`` (mean 1 per row with any valid token), 1 elsewhere.
    """
    z = torch.where(valid, z.double(), 0.0)  # (B, T)
    n = valid.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    lo_w, hi_w = math.log(w_min), math.log(w_max)
    lo = torch.where(valid, z, torch.inf).amin(-1, keepdim=True) - hi_w  # (B, 1) mean(lo) = w_max >= 1
    hi = torch.where(valid, z, -torch.inf).amax(-1, keepdim=True) - lo_w  # (B, 1) mean(hi) = w_min <= 1
    empty = ~valid.any(-1, keepdim=True)
    lo, hi = torch.where(empty, 0.0, lo), torch.where(empty, 0.0, hi)

    def row_mean(m: Tensor) -> Tensor:
        return torch.where(valid, (z - m).clamp(lo_w, hi_w).exp(), 0.0).sum(-1, keepdim=True) / n

    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        above = row_mean(mid) >= 1  # the root lies right of mid
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
        if bool(((hi - lo) <= _M_TOL * (1 + hi.abs())).all()):
            break
    w = (z - (lo + hi) / 2).clamp(lo_w, hi_w).exp().clamp(w_min, w_max)  # exp(log w_max) may round above it
    return torch.where(valid, w, 1.0)


def cort_weights(delta: Tensor, valid: Tensor, cfg: CoRTConfig) -> Tensor:
    """Per-response token weights from the contrasts (formula in the module docstring).

    Args:
        delta: (B, T) float, ``old_logprobs - counterfactual_logprobs``; read only where ``valid``.
        valid: (B, T) bool, policy tokens with a finite contrast.
        cfg: see `CoRTConfig`.

    Returns:
        w: (B, T) in ``delta``'s dtype: on ``valid``, within ``[w_min, w_max]`` (and mean 1 per row when
        ``cfg.normalize``); exactly 1 elsewhere.
    """
    z = cort_logits(delta, valid, cfg)  # (B, T) float64
    if cfg.normalize:
        w = project_weights(z, valid, cfg.w_min, cfg.w_max)
    else:  # the ablation: u = T_i * softmax(z), clipped, not renormalised
        n = valid.sum(-1, keepdim=True).clamp(min=1)
        level = torch.where(valid, z, -torch.inf).logsumexp(-1, keepdim=True) - n.log()  # (B, 1)
        level = torch.where(valid.any(-1, keepdim=True), level, 0.0)
        w = (z - level).clamp(math.log(cfg.w_min), math.log(cfg.w_max)).exp().clamp(cfg.w_min, cfg.w_max)
    return torch.where(valid, w, 1.0).to(delta.dtype)


def span_metrics(w: Tensor, valid: Tensor, spans: Tensor) -> dict[str, float]:
    """Where the weight mass goes: ``span_mass`` = the share of the weights' sum on tokens inside the verdict's
    spans, ``span_tokens`` = those tokens' share of the weighted tokens (uniform weights: equal), pooled over the
    batch (with mean-1 weights per response, ``span_mass > span_tokens`` means the spans get more than their
    share).

    Args:
        w: (B, T) weights; valid: (B, T) bool, the weighted tokens; spans: (B, T) float, > 0 inside a span.
    """
    inside = valid & (spans > 0)
    total, n = float(w[valid].sum()), int(valid.sum())
    return {
        "credit/cort/span_mass": float(w[inside].sum()) / total if total > 0 else 0.0,
        "credit/cort/span_tokens": int(inside.sum()) / n if n else 0.0,
    }


@register(
    "cort",
    config=CoRTConfig,
    signals=("counterfactual_logprobs", "criterion_spans"),
    group_relative=True,
)
@torch.no_grad()
def cort(batch: CreditBatch, cfg: CoRTConfig) -> CreditOutput:
    """CoRT token advantages: the GRPO advantage redistributed by counterfactual-replay weights.

    Args:
        batch: token_rewards, policy_mask, group_ids, old_logprobs (``l+``, the rubric prompt), step and
            total_steps are read, and the signal ``counterfactual_logprobs`` (B, T): log-probs of the sampled
            tokens teacher-forced under the matched criteria-free prompt by the behaviour policy, no grad. The
            signal ``criterion_spans`` (B, T), > 0 on tokens inside the verdict's spans, feeds only the
            ``span_mass`` / ``span_tokens`` metrics, never the advantages (a caller without spans, e.g. through
            an adapter, passes zeros: the span metrics then read 0).
        cfg: see `CoRTConfig`.

    Returns:
        advantages (B, T), 0 off the policy mask; no returns; metrics ``credit/cort/*``: GRPO's group metrics,
        ``alpha``; over the weighted tokens ``weight_min/max/mean`` and the quantiles ``weight_q05/q95``;
        ``top_share`` (the mean over responses of the largest weight's share of the response's weight sum);
        ``delta_mean`` / ``delta_sd`` (raw contrasts, nats); ``nonfinite_signal_tokens``; ``span_mass`` and
        ``span_tokens`` (`span_metrics`).
    """
    counterfactual = require(batch, "counterfactual_logprobs", module="credit module 'cort'")
    spans = require(batch, "criterion_spans", module="credit module 'cort'")
    mask = batch.policy_mask
    A, r, is_sample, g = grpo_advantage(batch, cfg.grpo)  # (B,) each
    dtype = r.dtype

    delta = batch.old_logprobs.to(dtype) - counterfactual.to(dtype)  # (B, T)
    finite = torch.isfinite(delta)
    valid = mask & finite
    w = cort_weights(delta, valid, cfg)  # (B, T)
    alpha = cort_ramp(batch.step, batch.total_steps, cfg)
    advantages = torch.where(mask, A[:, None] * (1 + alpha * (w - 1)), 0.0)  # (B, T)

    wv, rows = w[valid].double(), valid.any(-1)
    w_row = torch.where(valid, w, 0.0)[rows]  # (B', T) responses with a weighted token
    q05, q95 = wv.quantile(torch.tensor([0.05, 0.95], dtype=wv.dtype)).tolist() if wv.numel() else [1.0, 1.0]
    metrics = {
        **group_metrics("cort", r, g, is_sample, advantages, mask),
        "credit/cort/alpha": float(alpha),
        "credit/cort/weight_min": wv.min().item() if wv.numel() else 1.0,
        "credit/cort/weight_max": wv.max().item() if wv.numel() else 1.0,
        "credit/cort/weight_mean": wv.mean().item() if wv.numel() else 1.0,
        "credit/cort/weight_q05": q05,
        "credit/cort/weight_q95": q95,
        "credit/cort/top_share": (w_row.amax(-1) / w_row.sum(-1)).mean().item() if wv.numel() else 0.0,
        "credit/cort/delta_mean": delta[valid].mean().item() if wv.numel() else 0.0,
        "credit/cort/delta_sd": delta[valid].double().std(correction=0).item() if wv.numel() else 0.0,
        "credit/cort/nonfinite_signal_tokens": float((mask & ~finite).sum()),
        **span_metrics(w, valid, spans),
    }
    return CreditOutput(advantages, metrics=metrics)
