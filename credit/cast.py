"""CAST: clipped asymmetric self-teaching with advantage flipping for GRPO (arXiv 2606.00172).

Not the game-solver "CAST" (arXiv 2607.25308). The base advantage, the clip bounds of ``w`` and the final clip
are the paper's (section 3, "Asymmetric clipping and advantage flipping"); the map ``g -> w``, lambda and the
flip rule are ours.

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

``delta`` is ``cfg.delta`` when set (default 1.0 nats), else the ``delta_quantile`` quantile of ``|g|`` over the
batch's policy tokens with a finite g (linear interpolation; the reference's "70th-80th percentile"). The quantile
is meaningless when the gap is noise: it flips a fixed share of tokens whatever their gap. Measured with the
snapshot teacher on the chains (``runs/cast-before``, lr 5e-5): its 75th percentile was 0.0000-0.0002 nats at
every step and it flipped 8-16% of the tokens of each sign's rows (0% right after each refresh, when g = 0).
How the absolute default was calibrated: the (lambda, delta, kappa_-) grid of
``examples/results/probe/chains-cast-sweep/`` scored against the probe's A* on two batches (the before and after
checkpoints). lambda and kappa_- barely move any figure; the pooled Pearson with A* rises with delta for the default
teacher (before / after batch: 0.063 / 0.061 at delta 0.25, the first choice, ``-log 0.8``, where ``w`` reaches its
clip bound; 0.076 / 0.079 at 0.5; 0.083 / 0.081 at 1.0; GRPO 0.085 / 0.099), because no teacher's flips beat chance
there. At 1.0 the default teacher flips 1.1-1.7% of the tokens.

The teacher (``teacher``, computed by the trainer's provider, `creditgym.agents.teachers`): never given the answer.
``"context"`` (default): the policy's own weights, scoring the response after an answer-free block prepended to
the prompt for the teacher only (``teacher_context``: ``"check"``, an instruction to check each step, default, or
``"examples:N"``, N worked examples of the task family); ``"model:PATH"``: a separate model; ``"snapshot"`` (a copy
refreshed every ``teacher_refresh_every`` steps) and ``"ema"`` (``phi <- ema phi + (1 - ema) theta``) are
ablations. With a lagged copy, "teacher-negative" means "recently reinforced": on correct rows the flips land on
the answer digits the last updates pushed up, and right after a refresh g = 0. Scored against the probe's A* on
the chains (``examples/results/probe/chains-cast-sweep/``), the share of flipped tokens whose A* has the flip's
sign was 0.34 for a snapshot lagging 5 steps (chance: 0.46), 0.36-0.38 for ``examples:2`` (on the 1M-parameter
tiny model the examples disturb the copying of the question's operands), 0.39-0.45 for ``check`` and 0.28-0.50
(few flips) for a separate, stronger model: no answer-free teacher beat chance there, so the default is the one
that does least harm, with an absolute threshold that flips few tokens.

The final clip ``[-adv_clip, adv_clip]`` (1.2, the paper's) binds on large base advantages. In a mixed group of 8
with k correct (GRPO, unbiased std), ``B = +2.47, +1.62, +1.21`` on the correct rows for k = 1, 2, 3 and
``-1.21, -1.62, -2.47`` on the wrong rows for k = 5, 6, 7: the clip cuts the rare success of a hard group by up to
51% (k = 1: 2.47 -> 1.2, so the group's advantages sum to -1.28 rather than 0: the prompt's responses are pushed
down on net) and the rare failure of an easy group alike. Zero-variance groups (``|B| = 1``) reach the bound only
at ``w = 1.2``. ``credit/cast/clip_frac_pos`` / ``clip_frac_neg`` / ``clip_mass_frac`` log it per step. Measured
in a 20-step chains run with the defaults (``examples/results/probe/chains-cast-after``): per step the clip touched
14.1% of the policy tokens (7-23%), 21.7% of the tokens of rows with B > 0 (0-59%) and 12.4% of those with B < 0
(2-48%), and removed 7.8% of the pre-clip ``|A|`` mass (3-15%); with ``delta=0.25`` 12.8%, 26.6%, 8.7% and 6.7%.

Non-finite ``g`` (e.g. a ``-inf`` teacher log-prob): the token gets the neutral ``w = 1`` and no flip, so its
advantage is ``clip(B_i)``; it is left out of the quantile and counted in ``credit/cast/nonfinite_signal_tokens``.

Alternatives (not implemented): ``w = clip(1 + sgn(B) g)`` (linear map); a per-response quantile threshold; a
flip to a fixed magnitude (``-kappa_+ |B_i|``) rather than ``|A^|``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, register, require
from creditgym.credit.grpo import GroupStats, GRPOConfig, group_metrics, grpo_advantage

__all__ = ["CASTConfig", "cast", "cast_base_advantage", "masked_quantile", "parse_context", "parse_teacher"]


@dataclass(frozen=True)
class CASTConfig:
    """Config of `cast` (defaults: the paper's where it states them, ours otherwise; module docstring).

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
        teacher: for the trainer: ``"context"`` (the policy's weights after an answer-free block, default),
            ``"model:PATH"`` (a separate model), ``"snapshot"`` or ``"ema"`` (ablations); see
            `creditgym.agents.teachers`.
        teacher_context: for ``teacher="context"``: ``"examples:N"`` (N worked examples of the task family) or
            ``"check"`` (an instruction to check each step).
        teacher_refresh_every: for ``teacher="snapshot"``: refresh the copy every N optimizer steps, ``>= 1``.
        teacher_ema: for ``teacher="ema"``: ``phi <- ema phi + (1 - ema) theta`` after every step, in ``(0, 1)``.
    """

    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    correct_threshold: float = 1.0
    b_correct: float = 1.0
    b_wrong: float = 1.0
    lam: float = 1.0
    pos_clip: tuple[float, float] = (0.8, 1.05)
    neg_clip: tuple[float, float] = (0.95, 1.2)
    flip: bool = True
    delta: float | None = 1.0
    delta_quantile: float = 0.75
    kappa_pos: float = 1.0
    kappa_neg: float = 0.5
    adv_clip: float = 1.2
    teacher: str = "context"
    teacher_context: str = "check"
    teacher_refresh_every: int = 10
    teacher_ema: float = 0.9

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
    fixed = torch.where(r >= cfg.correct_threshold, cfg.b_correct, -cfg.b_wrong).to(r.dtype)
    B = torch.where(zero_var, fixed, A)
    return B, r, is_sample, g


@register(
    "cast",
    config=CASTConfig,
    signals={"teacher_logprobs": ("teacher", "teacher_context", "teacher_refresh_every", "teacher_ema")},
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
        ``credit/cast/*``: GRPO's group metrics, ``all_correct_frac`` / ``all_wrong_frac`` / ``mixed_frac`` of
        the sample rows, ``delta`` (the threshold used), ``flip_pos_frac`` / ``flip_neg_frac`` (of the policy
        tokens of rows with B > 0 / B < 0), ``clip_frac`` (of all policy tokens), ``clip_frac_pos`` /
        ``clip_frac_neg`` (of the tokens of rows with B > 0 / B < 0), ``clip_mass_frac`` (the share of the
        pre-clip ``|A|`` mass the clip removes), ``w_mean``, ``nonfinite_signal_tokens``; ``token_marks["flip"]``:
        +1 on flipped tokens of wrong rows, -1 on flipped tokens of correct rows, 0 elsewhere.
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
    cut = mask & (clipped != A)
    metrics = {
        **group_metrics("cast", r, stats, is_sample, advantages, mask),
        "credit/cast/all_correct_frac": float((zero_var & correct).sum()) / n_samples,
        "credit/cast/all_wrong_frac": float((zero_var & ~correct).sum()) / n_samples,
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
    return CreditOutput(advantages, metrics=metrics, token_marks={"flip": flips})
