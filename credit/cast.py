"""CAST: clipped asymmetric self-teaching with advantage flipping for GRPO (arXiv 2606.00172).

Not the game-solver "CAST" (arXiv 2607.25308). Formulas: credit_methods.md section 2; the base advantage, the
clip bounds and the final clip are the paper's, the map ``g -> w``, lambda and the flip rule are ours.

Base advantage per row i (group g(i); "correct" = ``r_i >= correct_threshold``, default 1.0, i.e. a binary
verifier's pass)::

    B_i = (r_i - mean_g r) / (std_g r + eps)     mixed group (rewards not all equal; GRPO, `creditgym.credit.grpo`)
    B_i = +b_correct                             zero-variance group whose common reward is correct
    B_i = -b_wrong                               zero-variance group whose common reward is not correct
    B_i = 0                                      singleton group or padding row (no group, as grpo / rloo)

Token signal: ``g[i, t] = teacher_logprobs[i, t] - old_logprobs[i, t]`` (teacher-positive: g > 0). Shaping::

    w[i, t]     = clip(exp(sgn(B_i) * g[i, t]), lo_B, hi_B),  (lo, hi) = (0.8, 1.05) if B_i > 0, (0.95, 1.2) if B_i < 0
    A^[i, t]    = B_i * (1 + lambda * (w[i, t] - 1))          (keeps the sign of B_i)
    A[i, t]     = -kappa_+ |A^[i, t]|     if B_i > 0 and g[i, t] < -delta    (teacher-negative token, correct row)
                = +kappa_- |A^[i, t]|     if B_i < 0 and g[i, t] > +delta    (teacher-positive token, wrong row)
                = A^[i, t]                otherwise                          (and always when flip=False)
    A[i, t]    <- clip(A[i, t], -adv_clip, adv_clip)          (adv_clip = 1.2)

``delta`` is ``cfg.delta`` when set, else the ``delta_quantile`` (default 0.75, the doc's 70th-80th percentile)
quantile of ``|g|`` over the batch's policy tokens with a finite g (linear interpolation). Without a threshold
about half of all tokens flip on noise.

The teacher (what the trainer computes): ``teacher_logprobs`` are the log-probs of the sampled tokens under a
stop-gradient **copy of the policy** that sees only the question and the generated prefix (the same context as the
student: no reference solution, no answer), teacher-forced, no grad. The copy is refreshed every
``teacher_refresh_every`` optimizer steps (a snapshot of the current weights), or, when ``teacher_ema`` is set,
updated after every step as ``phi <- ema * phi + (1 - ema) * theta``. The trainer reads both fields from this
config. Right after a snapshot refresh the teacher equals the behaviour policy and ``g = 0`` (GRPO plus the
zero-variance branch for that step); the gap is never annealed (unlike RLSD).

Non-finite ``g`` (e.g. a ``-inf`` teacher log-prob): the token gets the neutral ``w = 1`` and no flip, so its
advantage is ``clip(B_i)``; it is left out of the quantile and counted in ``credit/cast/nonfinite_signal_tokens``.

Alternatives (not implemented): ``w = clip(1 + sgn(B) g)`` (linear map); a per-response quantile threshold; a
flip to a fixed magnitude (``-kappa_+ |B_i|``) rather than ``|A^|``; an EMA teacher with a lag instead of a
snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, register, require
from creditgym.credit.grpo import GroupStats, GRPOConfig, group_metrics, group_stats, outcome_rewards

__all__ = ["CASTConfig", "cast", "cast_base_advantage", "masked_quantile"]


@dataclass(frozen=True)
class CASTConfig:
    """Config of `cast` (defaults: credit_methods.md section 2).

    Attributes:
        grpo: how the mixed-group advantage is computed (see `GRPOConfig`).
        correct_threshold: a reward ``>= correct_threshold`` counts as correct (for zero-variance groups).
        b_correct: base advantage of every row of an all-correct group, ``>= 0``.
        b_wrong: magnitude of the (negative) base advantage of every row of an all-wrong group, ``>= 0``.
        lam: ``lambda >= 0``, how much of ``w - 1`` enters the advantage.
        pos_clip: ``(lo, hi)`` bounds of ``w`` on rows with ``B > 0``, ``0 < lo <= 1 <= hi``.
        neg_clip: ``(lo, hi)`` bounds of ``w`` on rows with ``B < 0``.
        flip: apply the local sign reversal (False: the "CAST without flipping" ablation).
        delta: absolute flip threshold on ``|g|``, ``>= 0``; None = use ``delta_quantile``.
        delta_quantile: quantile of ``|g|`` over the batch's policy tokens used as the threshold, in [0, 1].
        kappa_pos: ``kappa_+ >= 0``, the magnitude factor of a flipped teacher-negative token on a correct row.
        kappa_neg: ``kappa_- >= 0``, the bounded positive factor on a teacher-positive token of a wrong row.
        adv_clip: final clip of the advantages to ``[-adv_clip, adv_clip]``, ``> 0``.
        teacher_refresh_every: for the trainer: refresh the teacher snapshot every N optimizer steps, ``>= 1``.
        teacher_ema: for the trainer: when set, an EMA teacher ``phi <- ema phi + (1 - ema) theta`` updated after
            every step (``teacher_refresh_every`` is then unused), in ``(0, 1)``.
    """

    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    correct_threshold: float = 1.0
    b_correct: float = 1.0
    b_wrong: float = 1.0
    lam: float = 1.0
    pos_clip: tuple[float, float] = (0.8, 1.05)
    neg_clip: tuple[float, float] = (0.95, 1.2)
    flip: bool = True
    delta: float | None = None
    delta_quantile: float = 0.75
    kappa_pos: float = 1.0
    kappa_neg: float = 0.5
    adv_clip: float = 1.2
    teacher_refresh_every: int = 10
    teacher_ema: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.grpo, GRPOConfig):
            raise TypeError(f"CASTConfig.grpo: expected a GRPOConfig, got {type(self.grpo).__name__}")
        if not isinstance(self.flip, bool):
            raise TypeError(f"CASTConfig.flip: expected a bool, got {self.flip!r}")
        floats = (
            "correct_threshold",
            "b_correct",
            "b_wrong",
            "lam",
            "delta_quantile",
            "kappa_pos",
            "kappa_neg",
        )
        for name in (*floats, "adv_clip"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
                raise TypeError(f"CASTConfig.{name}: expected a float, got {v!r}")
        for name in ("b_correct", "b_wrong", "lam", "kappa_pos", "kappa_neg"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"CASTConfig.{name}: expected a float >= 0, got {getattr(self, name)!r}")
        if not self.adv_clip > 0:
            raise ValueError(f"CASTConfig.adv_clip: expected a float > 0, got {self.adv_clip!r}")
        for name in ("pos_clip", "neg_clip"):
            v = getattr(self, name)
            if not (isinstance(v, tuple) and len(v) == 2 and 0 < v[0] <= 1 <= v[1] < float("inf")):
                raise ValueError(
                    f"CASTConfig.{name}: expected a tuple (lo, hi) with 0 < lo <= 1 <= hi, got {v!r}"
                )
        if self.delta is not None and (isinstance(self.delta, bool) or not self.delta >= 0):
            raise ValueError(f"CASTConfig.delta: expected None or a float >= 0, got {self.delta!r}")
        if not 0 <= self.delta_quantile <= 1:
            raise ValueError(
                f"CASTConfig.delta_quantile: expected a float in [0, 1], got {self.delta_quantile!r}"
            )
        n = self.teacher_refresh_every
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"CASTConfig.teacher_refresh_every: expected an int >= 1, got {n!r}")
        e = self.teacher_ema
        if e is not None and (isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < 1):
            raise ValueError(f"CASTConfig.teacher_ema: expected None or a float in (0, 1), got {e!r}")


def masked_quantile(x: Tensor, mask: Tensor, q: float) -> Tensor:
    """The ``q`` quantile of ``x[mask]`` with linear interpolation (as ``torch.quantile``), 0 when empty.

    Sort-based, so it has no input-size limit (``torch.quantile`` refuses more than 2**24 elements).
    """
    v = x[mask].sort().values  # (N,)
    if v.numel() == 0:
        return x.new_zeros(())
    pos = q * (v.numel() - 1)
    lo = int(pos)
    hi = min(lo + 1, v.numel() - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def cast_base_advantage(batch: CreditBatch, cfg: CASTConfig) -> tuple[Tensor, Tensor, Tensor, GroupStats]:
    """``B_i`` (formula in the module docstring).

    Returns:
        B: (B,) base advantages; r: (B,) outcome rewards; is_sample: (B,) bool; the rows' `GroupStats`.
    """
    r, is_sample = outcome_rewards(batch)  # (B,), (B,)
    g = group_stats(r, batch.group_ids, is_sample, unbiased=cfg.grpo.unbiased_std)
    mixed = is_sample & (g.n >= 2) & ~g.all_equal
    zero_var = is_sample & (g.n >= 2) & g.all_equal
    A = r - g.mean
    if cfg.grpo.norm_by_std:
        A = A / (g.std + cfg.grpo.eps)
    fixed = torch.where(r >= cfg.correct_threshold, cfg.b_correct, -cfg.b_wrong).to(r.dtype)
    B = torch.where(mixed, A, torch.where(zero_var, fixed, 0.0))
    return B, r, is_sample, g


@register("cast", config=CASTConfig, signals=("teacher_logprobs",))
@torch.no_grad()
def cast(batch: CreditBatch, cfg: CASTConfig) -> CreditOutput:
    """CAST token advantages: fixed-sign base for zero-variance groups, asymmetric teacher weights, flips.

    Args:
        batch: token_rewards, policy_mask, group_ids, old_logprobs are read, and the signal ``teacher_logprobs``
            (B, T): log-probs of the sampled tokens under the stop-gradient self-teacher (module docstring).
        cfg: see `CASTConfig`.

    Returns:
        advantages (B, T) in ``[-adv_clip, adv_clip]``, 0 off the policy mask; no returns; metrics
        ``credit/cast/*``: GRPO's group metrics, ``all_correct_frac`` / ``all_wrong_frac`` / ``mixed_frac`` of
        the sample rows, ``delta`` (the threshold used), ``flip_pos_frac`` / ``flip_neg_frac`` (of the policy
        tokens of rows with B > 0 / B < 0), ``clip_frac``, ``w_mean``, ``nonfinite_signal_tokens``.
    """
    teacher = require(batch, "teacher_logprobs", module="credit module 'cast'")
    mask = batch.policy_mask
    B, r, is_sample, stats = cast_base_advantage(batch, cfg)  # (B,) each
    dtype = B.dtype
    g = teacher.to(dtype) - batch.old_logprobs.to(dtype)  # (B, T)
    finite = torch.isfinite(g)
    valid = mask & finite
    g = torch.where(valid, g, 0.0)

    sgn = B.sign()[:, None]  # (B, 1)
    pos = (B > 0)[:, None]
    lo = torch.where(pos, cfg.pos_clip[0], cfg.neg_clip[0]).to(dtype)
    hi = torch.where(pos, cfg.pos_clip[1], cfg.neg_clip[1]).to(dtype)
    w = torch.minimum(torch.maximum((sgn * g).exp(), lo), hi)  # (B, T)
    w = torch.where(valid, w, 1.0)
    A_hat = B[:, None] * (1 + cfg.lam * (w - 1))  # (B, T)

    delta = (
        torch.as_tensor(cfg.delta, dtype=dtype)
        if cfg.delta is not None
        else masked_quantile(g.abs(), valid, cfg.delta_quantile)
    )
    flip_pos = valid & (B > 0)[:, None] & (g < -delta) if cfg.flip else torch.zeros_like(mask)
    flip_neg = valid & (B < 0)[:, None] & (g > delta) if cfg.flip else torch.zeros_like(mask)
    A = torch.where(flip_pos, -cfg.kappa_pos * A_hat.abs(), A_hat)
    A = torch.where(flip_neg, cfg.kappa_neg * A_hat.abs(), A)
    clipped = A.clamp(-cfg.adv_clip, cfg.adv_clip)
    advantages = torch.where(mask, clipped, 0.0)  # (B, T)

    n_samples = max(int(is_sample.sum()), 1)
    zero_var = is_sample & (stats.n >= 2) & stats.all_equal
    mixed = is_sample & (stats.n >= 2) & ~stats.all_equal
    correct = r >= cfg.correct_threshold
    on_pos, on_neg = mask & (B > 0)[:, None], mask & (B < 0)[:, None]
    n_tok = max(int(mask.sum()), 1)
    metrics = {
        **group_metrics("cast", r, stats, is_sample, advantages, mask),
        "credit/cast/all_correct_frac": float((zero_var & correct).sum()) / n_samples,
        "credit/cast/all_wrong_frac": float((zero_var & ~correct).sum()) / n_samples,
        "credit/cast/mixed_frac": float(mixed.sum()) / n_samples,
        "credit/cast/delta": float(delta),
        "credit/cast/flip_pos_frac": float(flip_pos.sum()) / max(int(on_pos.sum()), 1),
        "credit/cast/flip_neg_frac": float(flip_neg.sum()) / max(int(on_neg.sum()), 1),
        "credit/cast/clip_frac": float((mask & (clipped != A)).sum()) / n_tok,
        "credit/cast/w_mean": float(w[valid].mean()) if bool(valid.any()) else 1.0,
        "credit/cast/nonfinite_signal_tokens": float((mask & ~finite).sum()),
    }
    return CreditOutput(advantages, metrics=metrics)
