"""Losses of the learner: the policy losses (PPO's clipped surrogate, PACT's DIS) and their registry, loss
aggregation, KL estimators, critic loss. `actor_loss` runs the policy loss a run names (``TrainConfig.loss``,
``--loss NAME``, or ``--loss mypkg.losses:name`` for one registered outside creditgym, see `register_loss`).

Pure tensor functions. Shapes: B rows, T token positions; ``mask`` (B, T) bool marks the policy tokens (the
same ``policy_mask`` the credit modules saw). Values at masked positions never reach the loss or the gradient,
even when they are inf or NaN (masked entries are replaced *before* any exp, not multiplied by 0 after).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from creditgym.agents.train.config import AGG_MODES, KL_KINDS, TrainConfig
from creditgym.credit.base import load_registered

__all__ = [
    "AGG_MODES",
    "DIS_RANGE",
    "KL_KINDS",
    "LOSS_ENTRY_POINT_GROUP",
    "ActorLoss",
    "ActorLossFn",
    "actor_loss",
    "aggregate",
    "available_losses",
    "dis_loss",
    "get_loss",
    "kl_penalty",
    "policy_loss",
    "register_loss",
    "value_loss",
]

_MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: keeps ratios finite (verl clamps the same way)
#: PACT's IS range of its DIS actor update on math (arXiv 2609.26355, hyperparameter table): [0.7, 6.0].
DIS_RANGE: tuple[float, float] = (0.7, 6.0)


def aggregate(loss_mat: Tensor, mask: Tensor, mode: str = "token-mean") -> Tensor:
    """Reduces a per-token loss (B, T) to a scalar over the tokens where ``mask`` is True.

    Modes (verl's ``loss_agg_mode`` names; entropy and KL terms use the same function):
        ``token-mean``: ``sum_{b,t} m l / sum_{b,t} m``: every policy token weighs the same (DAPO; default).
        ``seq-mean-token-mean``: mean over the tokens of each sequence, then mean over the sequences that hold at
            least one policy token (original GRPO): short responses weigh more per token.
        ``seq-mean-token-sum``: sum over the tokens of each sequence, then mean over the sequences that hold at
            least one policy token.

    With no policy token at all the result is 0 (with a zero gradient), never NaN. The means are local to this
    batch: under gradient accumulation, scale by the local/global token (or sequence) count yourself.

    Args:
        loss_mat: (B, T) float.
        mask: (B, T) bool.
        mode: one of `AGG_MODES`.

    Returns:
        () scalar.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {list(AGG_MODES)}")
    if loss_mat.shape != mask.shape or mask.dtype != torch.bool:
        raise ValueError(
            f"aggregate: expected loss_mat and a bool mask of the same shape (B, T), got "
            f"{tuple(loss_mat.shape)} and {tuple(mask.shape)} {mask.dtype}"
        )
    loss_mat = torch.where(mask, loss_mat, 0.0)
    if mode == "token-mean":
        return loss_mat.sum() / mask.sum().clamp(min=1)
    n_tok = mask.sum(-1)  # (B,)
    seq = loss_mat.sum(-1)  # (B,)
    if mode == "seq-mean-token-mean":
        seq = seq / n_tok.clamp(min=1)
    return seq.sum() / (n_tok > 0).sum().clamp(min=1)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """Clipped PPO surrogate with asymmetric ratio clipping (DAPO's clip-higher, arXiv 2503.14476).

        rho_t  = exp(logprobs_t - old_logprobs_t)
        l_t    = -min(rho_t A_t, clip(rho_t, 1 - clip_low, 1 + clip_high) A_t)
        loss   = aggregate(l, mask, agg)

    Gradients flow only through ``logprobs``: ``old_logprobs`` and ``advantages`` are detached, and masked
    positions get an exact zero gradient. The log-ratio is clamped to +-20.

    Args:
        logprobs: (B, T) current-policy log-probs of the sampled tokens (requires grad).
        old_logprobs: (B, T) behaviour-policy log-probs.
        advantages: (B, T) from a credit module (0 off the mask).
        mask: (B, T) bool, policy tokens.
        clip_low: lower clip ``epsilon_l`` in [0, 1).
        clip_high: upper clip ``epsilon_h`` >= 0 (DAPO uses 0.28).
        agg: aggregation mode, see `aggregate`.

    Returns:
        loss: () scalar to minimise.
        metrics: ``actor/pg_loss``, ``actor/clip_frac_low`` (share of policy tokens with ``rho < 1 - clip_low``
            and ``A < 0``: clipped, no gradient), ``actor/clip_frac_high`` (``rho > 1 + clip_high`` and ``A > 0``),
            ``actor/approx_kl`` (mean of ``(rho - 1) - log rho``, the k3 estimate of KL(old || new), >= 0),
            ``actor/ratio_mean``; all token means over the mask.
    """
    if not 0.0 <= clip_low < 1.0 or not clip_high >= 0.0:
        raise ValueError(
            f"policy_loss: expected 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}"
        )
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)
    A = torch.where(mask, advantages.detach(), 0.0)  # (B, T)
    log_rho = torch.where(mask, logprobs - old_logprobs.detach(), 0.0).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    rho = log_rho.exp()  # (B, T), 1 off the mask
    surrogate = torch.minimum(rho * A, rho.clamp(1.0 - clip_low, 1.0 + clip_high) * A)
    loss = aggregate(-surrogate, mask, agg)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        metrics = {
            "actor/pg_loss": loss.item(),
            "actor/clip_frac_low": (((rho < 1.0 - clip_low) & (A < 0) & mask).sum() / n).item(),
            "actor/clip_frac_high": (((rho > 1.0 + clip_high) & (A > 0) & mask).sum() / n).item(),
            "actor/approx_kl": (torch.where(mask, rho - 1.0 - log_rho, 0.0).sum() / n).item(),
            "actor/ratio_mean": (torch.where(mask, rho, 0.0).sum() / n).item(),
        }
    return loss, metrics


def dis_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    is_range: tuple[float, float] = DIS_RANGE,
    agg: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """DIS, decoupled importance sampling: PACT's actor update on math (arXiv 2609.26355, Algorithm 1 and the
    hyperparameter table: "DIS (from SAO) with IS range [0.7, 6.0]"; PPO clipping on code).

    The paper names the method and its range but our reference notes do not give DIS's formula; this is **our
    formalisation**, consistent with the name and with PACT's critic mask: the importance weight is decoupled from
    the gradient (a stop-gradient weight times the score function, as in CISPO, arXiv 2506.13585) and tokens
    whose weight leaves the range are masked out (like PACT's critic IS mask), not clipped::

        rho_t = exp(logprobs_t - old_logprobs_t)
        m_t   = 1{lo <= sg(rho_t) <= hi}                     (is_range = (lo, hi), default (0.7, 6.0))
        l_t   = -m_t sg(rho_t) A_t log pi_theta(y_t)          grad l_t = -m_t rho_t A_t grad log pi_theta(y_t)
        loss  = aggregate(l, mask, agg)                       (masked tokens still count in the denominator)

    The loss value is computed as ``-m_t rho_t A_t`` (the IS surrogate, same gradient since ``grad rho =
    rho grad log pi``). Unlike PPO's clip, DIS keeps the gradient of a token whose ratio has moved in the
    direction of its advantage until the ratio leaves ``[lo, hi]``: a far wider trust region than ``[0.8,
    1.28]``, with a hard cut instead of a flat plateau. On the first minibatch of a step ``rho = 1``: plain
    REINFORCE with the module's advantages. The log-ratio is clamped to +-20.

    Args:
        logprobs: (B, T) current-policy log-probs of the sampled tokens (requires grad).
        old_logprobs: (B, T) behaviour-policy log-probs.
        advantages: (B, T) from a credit module (0 off the mask).
        mask: (B, T) bool, policy tokens.
        is_range: ``(lo, hi)`` with ``0 <= lo <= 1 <= hi``: the kept range of the ratio.
        agg: aggregation mode, see `aggregate`.

    Returns:
        loss: () scalar to minimise.
        metrics: ``actor/pg_loss``, ``actor/is_mask_frac_low`` (share of policy tokens with ``rho < lo``),
            ``actor/is_mask_frac_high`` (``rho > hi``), ``actor/approx_kl``, ``actor/ratio_mean``.
    """
    lo, hi = is_range
    if not 0.0 <= lo <= 1.0 <= hi:
        raise ValueError(f"dis_loss: expected is_range = (lo, hi) with 0 <= lo <= 1 <= hi, got {is_range!r}")
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)
    A = torch.where(mask, advantages.detach(), 0.0)  # (B, T)
    log_rho = torch.where(mask, logprobs - old_logprobs.detach(), 0.0).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    rho = log_rho.exp()  # (B, T), 1 off the mask
    keep = (rho.detach() >= lo) & (rho.detach() <= hi)  # (B, T)
    loss = aggregate(-torch.where(keep, rho * A, 0.0), mask, agg)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        metrics = {
            "actor/pg_loss": loss.item(),
            "actor/is_mask_frac_low": (((rho < lo) & mask).sum() / n).item(),
            "actor/is_mask_frac_high": (((rho > hi) & mask).sum() / n).item(),
            "actor/approx_kl": (torch.where(mask, rho - 1.0 - log_rho, 0.0).sum() / n).item(),
            "actor/ratio_mean": (torch.where(mask, rho, 0.0).sum() / n).item(),
        }
    return loss, metrics


#: Installed packages add actor losses under this entry-point group (loaded when an unknown name is asked for).
LOSS_ENTRY_POINT_GROUP = "creditgym.losses"


class ActorLossFn(Protocol):
    """A policy loss: ``fn(logprobs, old_logprobs, advantages, mask, cfg) -> (loss, metrics)``.

    Args:
        logprobs: (B, T) current-policy log-probs of the sampled tokens (requires grad).
        old_logprobs: (B, T) behaviour-policy log-probs (detach them).
        advantages: (B, T) from the credit module, 0 off the mask (detach them).
        mask: (B, T) bool, the policy tokens.
        cfg: the run's resolved `TrainConfig`: the loss reads its own knobs there (``loss_agg``, ``clip_low``...).

    Returns:
        loss: () scalar to minimise, aggregated over ``mask`` (`aggregate` with ``cfg.loss_agg``).
        metrics: ``actor/*`` floats, logged by the trainer (``actor/pg_loss`` at least).
    """

    def __call__(
        self, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: TrainConfig, /
    ) -> tuple[Tensor, dict[str, float]]: ...


@dataclass(frozen=True)
class ActorLoss:
    """A registry entry: the loss function and what the update may assume of it.

    ``proportional_to_advantage``: each token's term is proportional to its advantage, so a row whose advantage
    is 0 at every policy token adds nothing to the gradient and the update runs it without an autograd graph
    (`creditgym.agents.train.update`). A loss with any other term (a behaviour-cloning term, a length penalty)
    registers False, and every row keeps its graph.
    """

    name: str
    fn: ActorLossFn
    proportional_to_advantage: bool = True

    def __call__(
        self, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: TrainConfig
    ) -> tuple[Tensor, dict[str, float]]:
        return self.fn(logprobs, old_logprobs, advantages, mask, cfg)


_LOSSES: dict[str, ActorLoss] = {}


def register_loss(
    name: str, *, proportional_to_advantage: bool = True
) -> Callable[[ActorLossFn], ActorLossFn]:
    """Decorator: registers a policy loss (the `ActorLossFn` signature) under ``name``, the value of ``--loss``.

    Args:
        name: the registry key, a Python identifier (``"ppo"``).
        proportional_to_advantage: see `ActorLoss`; False for a loss with a term that is not.

    Raises:
        ValueError: a name that is not an identifier, or one already registered.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"actor loss name must be a Python identifier like 'ppo', got {name!r}")

    def deco(fn: ActorLossFn) -> ActorLossFn:
        if name in _LOSSES:
            raise ValueError(f"actor loss {name!r} is already registered ({_LOSSES[name].fn!r})")
        _LOSSES[name] = ActorLoss(name, fn, proportional_to_advantage)
        return fn

    return deco


def get_loss(name: str | None) -> ActorLoss:
    """The loss registered as ``name`` (``"mypkg.losses:mine"`` imports ``mypkg.losses`` first; an unknown name
    loads the ``creditgym.losses`` entry points).

    Raises:
        ValueError: an unknown name (the known ones listed), or a ``module:name`` whose module fails to import
            or registers no such loss.
    """
    if name is not None:
        key = load_registered(name, _LOSSES, group=LOSS_ENTRY_POINT_GROUP, kind="actor loss")
        if key in _LOSSES:
            return _LOSSES[key]
    hint = " (a config's None is the credit module's: `resolve` fills it in)" if name is None else ""
    raise ValueError(f"unknown actor loss {name!r}{hint}; known losses: {available_losses()}")


def available_losses() -> list[str]:
    """Sorted names of the registered actor losses."""
    return sorted(_LOSSES)


def actor_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: TrainConfig
) -> tuple[Tensor, dict[str, float]]:
    """The run's policy loss: the one registered as ``cfg.loss`` (`get_loss`), with the `ActorLossFn` shapes."""
    return get_loss(cfg.loss)(logprobs, old_logprobs, advantages, mask, cfg)


@register_loss("ppo")
def _ppo(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: TrainConfig
) -> tuple[Tensor, dict[str, float]]:
    """``ppo``: `policy_loss` with the run's ``clip_low``, ``clip_high`` and ``loss_agg``."""
    return policy_loss(
        logprobs,
        old_logprobs,
        advantages,
        mask,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        agg=cfg.loss_agg,
    )


@register_loss("dis")
def _dis(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: TrainConfig
) -> tuple[Tensor, dict[str, float]]:
    """``dis``: `dis_loss` with PACT's range `DIS_RANGE` and the run's ``loss_agg``."""
    return dis_loss(logprobs, old_logprobs, advantages, mask, agg=cfg.loss_agg)


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens (Schulman, "Approximating KL divergence").

    With ``log r = ref_logprobs - logprobs`` (clamped to +-20):
        ``k1 = -log r`` (unbiased, can be negative), ``k2 = (log r)^2 / 2``,
        ``k3 = r - 1 - log r`` (unbiased, >= 0, low variance; verl's ``low_var_kl``, TRL's GRPO KL).
    ``ref_logprobs`` is detached. Aggregate the result with `aggregate` (the same mode as the policy loss).

    Args:
        logprobs: (B, T) current-policy log-probs.
        ref_logprobs: (B, T) reference-policy log-probs.
        mask: (B, T) bool.
        kind: one of `KL_KINDS`.

    Returns:
        (B, T) per-token penalty, exactly 0 where ``mask`` is False.
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; expected one of {list(KL_KINDS)}")
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, mask=mask)
    log_r = torch.where(mask, ref_logprobs.detach() - logprobs, 0.0).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    if kind == "k1":
        kl = -log_r
    elif kind == "k2":
        kl = 0.5 * log_r**2
    else:
        kl = log_r.exp() - 1.0 - log_r
    return torch.where(mask, kl, 0.0)


def value_loss(
    values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    kind: str = "mse",
    clip: float | None = None,
    old_values: Tensor | None = None,
    agg: str = "token-mean",
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Critic loss against the value targets ``returns`` (e.g. ``CreditOutput.returns``), aggregated over ``mask``.

    ``kind="mse"``: ``l = (V - R)^2 / 2``; with ``clip`` (PPO value clipping, needs ``old_values``):
    ``l = max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) / 2``.
    ``kind="bce"``: ``values`` are **logits** z of a sigmoid critic ``V = sigmoid(z)`` (PACT, arXiv 2609.26355);
    ``l = -R log sigmoid(z) - (1 - R) log(1 - sigmoid(z))`` (soft targets; still well-defined for R outside
    [0, 1], as PACT's importance-weighted targets ``rho R``). No clipping.

    Args:
        values: (B, T) critic outputs (requires grad); logits when ``kind="bce"``.
        returns: (B, T) targets, detached here.
        mask: (B, T) bool.
        kind: ``"mse"`` or ``"bce"``.
        clip: value-clip range c > 0, or None.
        old_values: (B, T) critic outputs at rollout time, required with ``clip``.
        agg: aggregation mode, see `aggregate`.
        weights: (B, T) non-negative per-token weights (detached), or None for 1.

    Returns:
        loss: () scalar; metrics ``critic/vf_loss``, ``critic/value_mean`` (of sigmoid(z) for bce),
        ``critic/vf_clip_frac`` (mse with clip).
    """
    if kind not in ("mse", "bce"):
        raise ValueError(f"unknown value loss kind {kind!r}; expected 'mse' or 'bce'")
    if clip is not None and (kind != "mse" or old_values is None or not clip > 0):
        raise ValueError(
            f"value clipping needs kind='mse', a clip > 0 and old_values; got kind={kind!r}, clip={clip!r}, "
            f"old_values={'given' if old_values is not None else None}"
        )
    _check_same_shape(values=values, returns=returns, mask=mask)
    R = torch.where(mask, returns.detach(), 0.0)
    V = torch.where(mask, values, 0.0)
    metrics: dict[str, float] = {}
    if kind == "bce":
        loss_mat = F.binary_cross_entropy_with_logits(V, R, reduction="none")
        shown = torch.sigmoid(V.detach())
    else:
        loss_mat = (V - R) ** 2
        shown = V.detach()
        if clip is not None and old_values is not None:
            V_old = torch.where(mask, old_values.detach(), 0.0)
            clipped = ((V_old + (V - V_old).clamp(-clip, clip)) - R) ** 2
            with torch.no_grad():
                frac = ((clipped > loss_mat) & mask).sum() / mask.sum().clamp(min=1)
                metrics["critic/vf_clip_frac"] = frac.item()
            loss_mat = torch.maximum(loss_mat, clipped)
        loss_mat = 0.5 * loss_mat
    if weights is not None:
        _check_same_shape(values=values, weights=weights)
        loss_mat = loss_mat * torch.where(mask, weights.detach(), 0.0)
    loss = aggregate(loss_mat, mask, agg)
    with torch.no_grad():
        metrics["critic/vf_loss"] = loss.item()
        metrics["critic/value_mean"] = (torch.where(mask, shown, 0.0).sum() / mask.sum().clamp(min=1)).item()
    return loss, metrics


def _check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(x.shape) for name, x in tensors.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"expected tensors of the same shape (B, T), got {shapes}")
    mask = tensors.get("mask")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(
            f"mask: expected a bool tensor, got {mask.dtype}; convert a {{0, 1}} mask with `.bool()`"
        )
