"""CAST: clipped asymmetric self-teaching with advantage flipping for GRPO (arXiv 2606.00172).

Not the game-solver "CAST" (arXiv 2607.25308). The base advantage, the clip bounds of ``w`` and the final bound
are the paper's (section 3); the map ``g -> w``, lambda and the flip rule are ours. Base advantage per row i (group
g(i), rewards in ``reward_range = (lo, hi)``)::

    B_i = (r_i - mean_g r) / (std_g r + eps)     mixed group (GRPO, `creditgym.credit.grpo`)
    B_i = -b_wrong + (b_correct + b_wrong) u     zero-variance group, u = clip((r_i - lo) / (hi - lo), 0, 1): all
                                                 correct (r = hi) +b_correct, all wrong (r = lo) -b_wrong
    B_i = 0                                      singleton group or padding row

Token signal ``g[i, t] = teacher_logprobs[i, t] - old_logprobs[i, t]`` (teacher-positive: g > 0). Shaping::

    w[i, t]   = clip(exp(sgn(B_i) * g[i, t]), lo_B, hi_B),  (lo, hi) = pos_clip if B_i > 0, neg_clip if B_i < 0
    A^[i, t]  = B_i * (1 + lambda * (w[i, t] - 1))          (keeps the sign of B_i)
    A[i, t]   = -kappa_+ |A^[i, t]|   if B_i > 0 and g[i, t] < -delta    (teacher-negative token, correct row)
              = +kappa_- |A^[i, t]|   if B_i < 0 and g[i, t] > +delta    (teacher-positive token, wrong row)
              = A^[i, t]              otherwise                          (and always when flip=False)
    A[i, t]  <- s_g(i) A[i, t],  s_g = min(1, adv_clip / max_{j in g, t} |A[j, t]|)   (keep_zero_sum=True)
    A[i, t]  <- clip(A[i, t], -adv_clip, adv_clip)                                 (keep_zero_sum=False)

``delta`` is ``cfg.delta`` (nats) when set, else the ``delta_quantile`` quantile of ``|g|`` over the batch's
policy tokens. Flipped tokens are returned as the mark ``flip``. A non-finite ``g`` gets ``w = 1`` and no flip
(counted in ``credit/cast/nonfinite_signal_tokens``). The teacher (``teacher``: ``"context"``, ``"model:PATH"``,
``"snapshot"``, ``"ema"``) is computed by the provider in `creditgym.agents.providers.teachers`; it never sees
the answer.

Shapes: every input and output (B, T). Defaults (``CASTConfig``): pos_clip=(0.8, 1.05), neg_clip=(0.95, 1.2),
flip=False (the study's chains collapsed with flips), delta=1.0, kappa_pos=1, kappa_neg=0.5, adv_clip=1.2 by group
scale, teacher="context" with "check". Why, and the flags of the paper's method: docs/credit/cast.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from creditgym.credit.base import (
    CreditBatch,
    CreditOutput,
    check_reward_range,
    declare_signal,
    register,
    require,
)
from creditgym.credit.grpo import GroupStats, GRPOConfig, group_metrics, grpo_advantage

__all__ = [
    "CASTConfig",
    "cast",
    "cast_base_advantage",
    "group_scale",
    "masked_quantile",
    "parse_context",
    "parse_teacher",
]


@dataclass(frozen=True)
class CASTConfig:
    """Config of `cast` (defaults: the paper's where it states them, ours otherwise; module docstring).

    Attributes:
        grpo: how the mixed-group advantage is computed (see `GRPOConfig`).
        reward_range: ``(lo, hi)``, ``lo < hi``: a reward ``hi`` is correct, ``lo`` wrong; a zero-variance group
            with a reward in between gets a base between ``-b_wrong`` and ``+b_correct`` (module docstring).
        b_correct: base advantage of every row of an all-correct group, ``>= 0``.
        b_wrong: magnitude of the (negative) base advantage of every row of an all-wrong group, ``>= 0``.
        lam: ``lambda >= 0``, how much of ``w - 1`` enters the advantage.
        pos_clip: ``(lo, hi)`` bounds of ``w`` on rows with ``B > 0``, ``0 < lo <= 1 <= hi``.
        neg_clip: ``(lo, hi)`` bounds of ``w`` on rows with ``B < 0``.
        flip: apply the local sign reversal (the paper's; False, the default: "CAST without flipping", because
            with flips every chain seed of the study collapsed, docs/credit/cast.md).
        delta: absolute flip threshold on ``|g|``, ``>= 0``; None = use ``delta_quantile``.
        delta_quantile: quantile of ``|g|`` over the batch's policy tokens used as the threshold, in [0, 1].
        kappa_pos: ``kappa_+ >= 0``, the magnitude factor of a flipped teacher-negative token on a correct row.
        kappa_neg: ``kappa_- >= 0``, the bounded positive factor on a teacher-positive token of a wrong row.
        adv_clip: final bound of the advantages, ``|A| <= adv_clip``, ``> 0``.
        keep_zero_sum: apply the bound as one scale per group (every token of the group's rows times
            ``min(1, adv_clip / max |A|)``), which keeps the ratios within the group and so a mixed group's GRPO
            zero sum; False: the paper's clip of each token (a group with 1 correct of 8 then sums to -1.28 per
            token).
        teacher: for the trainer: ``"context"`` (the policy's weights after an answer-free block, default),
            ``"model:PATH"`` (a separate model), ``"snapshot"`` or ``"ema"`` (ablations); see
            `creditgym.agents.providers.teachers`.
        teacher_context: for ``teacher="context"``: ``"examples:N"`` (N worked examples of the task family) or
            ``"check"`` (an instruction to check each step).
        teacher_refresh_every: for ``teacher="snapshot"``: refresh the copy every N optimizer steps, ``>= 1``.
        teacher_ema: for ``teacher="ema"``: ``phi <- ema phi + (1 - ema) theta`` after every step, in ``(0, 1)``.
    """

    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    reward_range: tuple[float, float] = (0.0, 1.0)
    b_correct: float = 1.0
    b_wrong: float = 1.0
    lam: float = 1.0
    pos_clip: tuple[float, float] = (0.8, 1.05)
    neg_clip: tuple[float, float] = (0.95, 1.2)
    flip: bool = False
    delta: float | None = 1.0
    delta_quantile: float = 0.75
    kappa_pos: float = 1.0
    kappa_neg: float = 0.5
    adv_clip: float = 1.2
    keep_zero_sum: bool = True
    teacher: str = "context"
    teacher_context: str = "check"
    teacher_refresh_every: int = 10
    teacher_ema: float = 0.9

    def __post_init__(self) -> None:
        if not isinstance(self.grpo, GRPOConfig):
            raise TypeError(f"CASTConfig.grpo: expected a GRPOConfig, got {type(self.grpo).__name__}")
        for name in ("flip", "keep_zero_sum"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CASTConfig.{name}: expected a bool, got {getattr(self, name)!r}")
        check_reward_range("CASTConfig.reward_range", self.reward_range)
        floats = (
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
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < 1:
            raise ValueError(f"CASTConfig.teacher_ema: expected a float in (0, 1), got {e!r}")
        for name, parse in (("teacher", parse_teacher), ("teacher_context", parse_context)):
            try:
                parse(getattr(self, name))
            except ValueError as err:
                raise ValueError(f"CASTConfig.{err}") from None


TEACHERS = ("context", "snapshot", "ema", "model:PATH")


def parse_teacher(teacher: str) -> tuple[str, str | None]:
    """``"context" | "snapshot" | "ema" | "model:PATH"`` -> (kind, PATH or None); ValueError on anything else."""
    kind, sep, path = str(teacher).partition(":")
    if kind == "model" and sep and path.strip():
        return "model", path.strip()
    if not sep and kind in ("context", "snapshot", "ema"):
        return kind, None
    raise ValueError(f"teacher: expected one of {list(TEACHERS)}, got {teacher!r}")


def parse_context(spec: str) -> tuple[str, int]:
    """``"examples:N"`` (N >= 0) or ``"check"`` -> (kind, N); ValueError on anything else."""
    kind, sep, n = str(spec).partition(":")
    if kind == "check" and not sep:
        return "check", 0
    if kind == "examples" and sep and n.strip().isdigit():
        return "examples", int(n)
    raise ValueError(f"teacher_context: expected 'examples:N' (N >= 0) or 'check', got {spec!r}")


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
    A, r, is_sample, g = grpo_advantage(batch, cfg.grpo)  # (B,) each; 0 outside mixed groups
    zero_var = is_sample & (g.n >= 2) & g.all_equal
    lo, hi = cfg.reward_range
    u = ((r - lo) / (hi - lo)).clamp(0.0, 1.0)  # (B,) the common reward's place in the range
    fixed = -cfg.b_wrong + (cfg.b_correct + cfg.b_wrong) * u
    B = torch.where(zero_var, fixed, A)
    return B, r, is_sample, g


def group_scale(A: Tensor, mask: Tensor, group_ids: Tensor, bound: float) -> Tensor:
    """(B, 1): per row, ``min(1, bound / m)`` with ``m`` the largest ``|A|`` over the policy tokens (``mask``) of
    every row of its group (1 where ``m`` is 0)."""
    _, group = torch.unique(group_ids, return_inverse=True)  # (B,) 0..n_groups-1
    row_max = torch.where(mask, A.abs(), 0.0).amax(-1)  # (B,)
    group_max = row_max.new_zeros(int(group.max()) + 1).scatter_reduce(0, group, row_max, "amax")
    m = group_max[group]  # (B,)
    return torch.where(m > bound, bound / m.clamp(min=bound), 1.0)[:, None]


declare_signal(
    "teacher_logprobs",
    "(B, T) log-probs of the sampled tokens under a stop-gradient teacher, teacher-forced, no grad",
)


@register(
    "cast",
    config=CASTConfig,
    signals={"teacher_logprobs": ("teacher", "teacher_context", "teacher_refresh_every", "teacher_ema")},
    group_relative=True,
)
@torch.no_grad()
def cast(batch: CreditBatch, cfg: CASTConfig) -> CreditOutput:
    """CAST token advantages: fixed-sign base for zero-variance groups, asymmetric teacher weights, flips.

    Args:
        batch: token_rewards, policy_mask, group_ids, old_logprobs are read, and the signal ``teacher_logprobs``
            (B, T): log-probs of the sampled tokens under the stop-gradient self-teacher (module docstring).
        cfg: see `CASTConfig`.

    Returns:
        advantages (B, T) in ``[-adv_clip, adv_clip]``, 0 off the policy mask; no returns; metrics
        ``credit/cast/*``: GRPO's group metrics, ``all_correct_frac`` / ``all_wrong_frac`` /
        ``all_partial_frac`` (zero-variance groups at ``hi``, at ``lo``, in between) / ``mixed_frac`` of the sample
        rows, ``delta`` (the threshold used), ``flip_pos_frac`` / ``flip_neg_frac`` (of the policy tokens of rows
        with B > 0 / B < 0), ``clip_frac`` (the share of all policy tokens the final bound changed),
        ``clip_frac_pos`` / ``clip_frac_neg`` (of the tokens of rows with B > 0 / B < 0), ``clip_mass_frac`` (the
        share of the ``|A|`` mass before the bound that it removes), ``w_mean``, ``nonfinite_signal_tokens``;
        ``diagnostics["mark/flip"]``: +1 on flipped tokens of wrong rows, -1 on flipped tokens of correct rows, 0
        elsewhere.
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
    if cfg.keep_zero_sum:
        scaled = A * group_scale(A, mask, batch.group_ids, cfg.adv_clip)
        clipped = scaled.clamp(-cfg.adv_clip, cfg.adv_clip)  # the bound exactly, past the scale's rounding
    else:
        clipped = A.clamp(-cfg.adv_clip, cfg.adv_clip)
    advantages = torch.where(mask, clipped, 0.0)  # (B, T)

    n_samples = max(int(is_sample.sum()), 1)
    zero_var = is_sample & (stats.n >= 2) & stats.all_equal
    mixed = is_sample & (stats.n >= 2) & ~stats.all_equal
    lo, hi = cfg.reward_range
    on_pos, on_neg = mask & (B > 0)[:, None], mask & (B < 0)[:, None]
    n_tok = max(int(mask.sum()), 1)
    cut = mask & (clipped != A)
    metrics = {
        **group_metrics("cast", r, stats, is_sample, advantages, mask),
        "credit/cast/all_correct_frac": float((zero_var & (r >= hi)).sum()) / n_samples,
        "credit/cast/all_wrong_frac": float((zero_var & (r <= lo)).sum()) / n_samples,
        "credit/cast/all_partial_frac": float((zero_var & (r > lo) & (r < hi)).sum()) / n_samples,
        "credit/cast/mixed_frac": float(mixed.sum()) / n_samples,
        "credit/cast/delta": float(delta),
        "credit/cast/flip_pos_frac": float(flip_pos.sum()) / max(int(on_pos.sum()), 1),
        "credit/cast/flip_neg_frac": float(flip_neg.sum()) / max(int(on_neg.sum()), 1),
        "credit/cast/clip_frac": float(cut.sum()) / n_tok,
        "credit/cast/clip_frac_pos": float((cut & on_pos).sum()) / max(int(on_pos.sum()), 1),
        "credit/cast/clip_frac_neg": float((cut & on_neg).sum()) / max(int(on_neg.sum()), 1),
        "credit/cast/clip_mass_frac": float((A - clipped)[mask].abs().sum())
        / max(float(A[mask].abs().sum()), 1e-12),
        "credit/cast/w_mean": float(w[valid].mean()) if bool(valid.any()) else 1.0,
        "credit/cast/nonfinite_signal_tokens": float((mask & ~finite).sum()),
    }
    flips = (flip_neg & mask).to(dtype) - (flip_pos & mask).to(dtype)  # (B, T): the sign each flip pushes
    return CreditOutput(advantages, metrics=metrics, diagnostics={"mark/flip": flips})
