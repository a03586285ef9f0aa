"""CompPO / Comp-GAE: attention concentration gates the GAE trace (arXiv 2608.21501, "Let Credit Follow
Computation: Architecture-Aware Credit Transport for LLM RL").

A detached statistic of the behaviour policy's attention (its concentration) becomes a bounded per-token retention
gate in both the one-step bootstrap and the GAE trace; a constant gate recovers GAE. The formulas are ours (the
paper's abstract fixes only the architecture). Signal ``attention_stats`` = concentration kappa, (B, T) or
(B, T, K) for K layers (then averaged)::

    kappa_t = 1 - (1 / |L|) sum_{l in L} Hbar_l(t)    Hbar_l(t) = head-mean entropy of layer l's attention row
                                                       that predicts token t, over log(#keys)  (in [0, 1])
    g_t     = eta_min + (eta_max - eta_min) * sigmoid(a * kappa_t + b)          (the attention gate)
    s       = clip(1 - sum (G1_k - V_k)^2 / sum (G1_k - mean G1)^2, 0, 1)      (the critic's skill, over the batch)
    eta_t   = 1 - s * (1 - g_t)        (skill_scaled=True; False: eta_t = g_t)

``G1`` is the Monte-Carlo return (the trace with every eta = 1): with a critic that explains none of it (s = 0)
the trace carries the whole return to every token (GAE with lambda = 1), and the gate takes effect as the critic
learns. Comp-GAE over each row's policy tokens k = 0..K-1 (other tokens skipped, as `creditgym.credit.gae`),
``V_k = values[b, t_k]`` (the value *before* token t_k), ``V_K = 0``::

    delta_k = r_k + gamma V_{k+1} - V_k
    A_k     = delta_k + gamma eta_{k+1} A_{k+1},   A_K = 0
    G_k     = A_k + V_k                                          (value targets: the gated returns)

then optionally whitened over the batch's policy tokens. ``eta == lam`` constant (``eta_min = eta_max = lam``,
``skill_scaled=False``) gives GAE(gamma, lam). Controls (``gate``): ``"shuffled"``, ``"position"``. The critic
(``critic``): ``"tac"`` or ``"standard"`` (`creditgym.agents.providers.critics`). Non-finite kappa: the batch's mean
kappa; non-finite value: ``eta = 1``, advantage 0.

Shapes: (B, T) in and out. Defaults (``CompPOConfig``): gamma=1, eta_min=0.5, eta_max=1, a=25, b=-3.9,
skill_scaled, layers=(-2, -1), critic="tac". How the gate was calibrated: docs/credit/compo.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from creditgym.credit.base import (
    CreditBatch,
    CreditOutput,
    advantage_metrics,
    declare_signal,
    register,
    require,
)
from creditgym.credit.gae import masked_whiten

__all__ = [
    "CompPOConfig",
    "comp_gae_advantages",
    "compo",
    "compo_gate",
    "critic_skill",
]

GATES = ("attention", "shuffled", "position")
CRITICS = ("tac", "standard")


@dataclass(frozen=True)
class CompPOConfig:
    """Config of `compo` (defaults: ours; arXiv 2608.21501 states none, see the module docstring).

    Attributes:
        gamma: discount per policy token, in [0, 1].
        eta_min: lower gate bound, in ``[0, eta_max]``.
        eta_max: upper gate bound, in ``[eta_min, 1]``.
        a: slope of the gate in the concentration kappa (sign: a hyperparameter; > 0 = focused tokens carry).
        b: offset of the gate. The defaults of ``eta_min, eta_max, a, b`` come from kappa's measured
            distribution on the chains (docs/credit/compo.md, Calibration).
        skill_scaled: scale the gate's leak ``1 - g`` by the critic's skill ``s`` on the batch (module
            docstring), so that a critic that explains nothing of the return gets lambda = 1; False: the gate as
            is (a constant gate is then GAE at that lambda exactly).
        gate: ``"attention"`` (the method), ``"shuffled"`` or ``"position"`` (the controls; module docstring).
        layers: the decoder layers (0-based, negative from the end) whose attention rows give kappa: the
            parameter of the ``attention_stats`` signal, and the TAC's ``kappa`` feature.
        critic: ``"tac"`` (the transport-aligned critic, ``creditgym.agents.providers.critics``) or ``"standard"`` (a
            linear value head on the last hidden state, the paper's weaker ablation): the parameter of the
            ``values`` signal.
        whiten: whiten the advantages over all policy tokens of the batch.
        seed: base seed of the shuffled-gate control (combined with ``batch.step``).
    """

    gamma: float = 1.0
    eta_min: float = 0.5
    eta_max: float = 1.0
    a: float = 25.0
    b: float = -3.9
    skill_scaled: bool = True
    gate: Literal["attention", "shuffled", "position"] = "attention"
    layers: tuple[int, ...] = (-2, -1)
    critic: Literal["tac", "standard"] = "tac"
    whiten: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("gamma", "eta_min", "eta_max", "a", "b"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not abs(v) < float("inf"):
                raise ValueError(f"CompPOConfig.{name}: expected a finite float, got {v!r}")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"CompPOConfig.gamma: expected a float in [0, 1], got {self.gamma!r}")
        if not 0 <= self.eta_min <= self.eta_max <= 1:
            raise ValueError(
                f"CompPOConfig: expected 0 <= eta_min <= eta_max <= 1, got eta_min={self.eta_min!r}, "
                f"eta_max={self.eta_max!r}"
            )
        if self.gate not in GATES:
            raise ValueError(f"CompPOConfig.gate: expected one of {GATES}, got {self.gate!r}")
        if self.critic not in CRITICS:
            raise ValueError(f"CompPOConfig.critic: expected one of {CRITICS}, got {self.critic!r}")
        if (
            not isinstance(self.layers, tuple)
            or not self.layers
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in self.layers)
        ):
            raise ValueError(f"CompPOConfig.layers: expected a non-empty tuple of ints, got {self.layers!r}")
        for name in ("whiten", "skill_scaled"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"CompPOConfig.{name}: expected a bool, got {getattr(self, name)!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"CompPOConfig.seed: expected an int >= 0, got {self.seed!r}")


def _shuffle_rows(x: Tensor, mask: Tensor, seed: int) -> Tensor:
    """``x`` with the values at each row's ``mask`` positions permuted at random among those positions."""
    B, T = mask.shape
    gen = torch.Generator().manual_seed(seed)  # on the CPU: the same permutation on every device
    keys = torch.rand(B, T, generator=gen, dtype=torch.float64).to(mask.device)
    keys = torch.where(mask, keys, 2.0)  # policy positions first, in random order
    perm = keys.argsort(1)  # (B, T)
    t_idx = torch.arange(T, device=mask.device).expand(B, T)
    in_order = torch.where(mask, t_idx, T + t_idx).argsort(1)  # policy positions first, in order
    return x.scatter(1, in_order, x.gather(1, perm))


def _moments(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and population sd of ``x`` over ``mask`` (0 and 0 when empty)."""
    n = mask.sum().clamp(min=1)
    mean = torch.where(mask, x, 0.0).sum() / n
    return mean, (torch.where(mask, x - mean, 0.0).square().sum() / n).sqrt()


def compo_gate(kappa: Tensor, mask: Tensor, step: int, cfg: CompPOConfig) -> Tensor:
    """The attention gate g (B, T) in ``[eta_min, eta_max]`` on ``mask`` (module docstring), 1 elsewhere.

    A function of each token's own kappa (no batch statistic), so a constant kappa gives a constant gate and
    ``|g_t - g_t'| <= (eta_max - eta_min) |a| / 4 * |kappa_t - kappa_t'|``.

    Args:
        kappa: (B, T) concentration; read only where ``mask`` and finite (elsewhere: the batch's mean kappa).
        mask: (B, T) bool, policy tokens.
        step: optimizer step (seeds the shuffled control).
        cfg: see `CompPOConfig`.
    """
    valid = mask & torch.isfinite(kappa)
    mean, sd = _moments(torch.where(valid, kappa, 0.0), valid)
    x = torch.where(valid, kappa, mean)
    if cfg.gate == "position":  # the relative position, with the batch's kappa mean and sd
        idx = mask.cumsum(1) - 1  # (B, T) index among the row's policy tokens
        n = mask.sum(1, keepdim=True)
        pos = (idx / (n - 1).clamp(min=1)).to(kappa.dtype)
        pos_mean, pos_sd = _moments(pos, mask)
        x = mean + sd * (pos - pos_mean) / pos_sd.clamp(min=1e-12)
    eta = cfg.eta_min + (cfg.eta_max - cfg.eta_min) * torch.sigmoid(cfg.a * x + cfg.b)
    if cfg.gate == "shuffled":
        eta = _shuffle_rows(eta, mask, seed=(cfg.seed << 32) + step)
    return torch.where(mask, eta, 1.0)


def critic_skill(rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float) -> float:
    """``s = clip(1 - sum (G1 - V)^2 / sum (G1 - mean G1)^2, 0, 1)`` over ``mask``: the share of the Monte-Carlo
    returns' variance the critic explains (0 when the returns are all equal).

    Args:
        rewards: (B, T) float, 0 off the mask.
        values: (B, T) float, ``V(s_t)``; read only on the mask.
        mask: (B, T) bool, the policy tokens with a finite value.
        gamma: discount per policy token.
    """
    V = torch.where(mask, values, 0.0)
    G1 = comp_gae_advantages(rewards, V, torch.ones_like(V), mask, gamma=gamma) + V  # (B, T)
    _, sd = _moments(G1, mask)
    if not sd > 0:
        return 0.0
    mse = torch.where(mask, G1 - V, 0.0).square().sum() / mask.sum()
    return float((1 - mse / sd.square()).clamp(0.0, 1.0))


def comp_gae_advantages(
    rewards: Tensor, values: Tensor, eta: Tensor, mask: Tensor, *, gamma: float
) -> Tensor:
    """Comp-GAE ``A_k = delta_k + gamma eta_{k+1} A_{k+1}`` over each row's policy tokens; 0 off ``mask``.

    Args:
        rewards: (B, T) float, 0 off the mask.
        values: (B, T) float, ``values[b, t] = V(s_t)``; read only on the mask.
        eta: (B, T) gate; ``eta[b, t]`` weighs the trace arriving *from* token t (read only on the mask).
        mask: (B, T) bool, policy tokens.
        gamma: discount per policy token.
    """
    B, T = rewards.shape
    r = torch.where(mask, rewards, 0.0)
    V = torch.where(mask, values, 0.0)
    t_idx = torch.arange(T, device=mask.device).expand(B, T)
    pos = torch.where(mask, t_idx, T)
    first_at_or_after = pos.flip(1).cummin(1).values.flip(1)  # (B, T)
    nxt = torch.cat([first_at_or_after[:, 1:], pos.new_full((B, 1), T)], 1)  # (B, T) next policy token
    V_next = torch.cat([V, V.new_zeros(B, 1)], 1).gather(1, nxt)  # (B, T), 0 = terminal
    delta = r + gamma * V_next - V  # (B, T)
    A = torch.zeros_like(r)
    carry = r.new_zeros(B)  # A at the next policy token
    eta_next = r.new_ones(B)  # eta at the next policy token
    for t in range(T - 1, -1, -1):
        m = mask[:, t]
        carry = torch.where(m, delta[:, t] + gamma * eta_next * carry, carry)
        eta_next = torch.where(m, eta[:, t], eta_next)
        A[:, t] = carry
    return torch.where(mask, A, 0.0)


declare_signal(
    "attention_stats",
    "(B, T) or (B, T, K) detached statistics of the behaviour policy's attention rows "
    "(default provider: the concentration of each row, in [0, 1])",
)


def _unread(cfg: CompPOConfig) -> tuple[str, ...]:
    """A constant gate (``eta_min == eta_max``) is GAE at that lambda: it never reads ``attention_stats``."""
    return ("attention_stats",) if cfg.eta_min == cfg.eta_max else ()


@register(
    "compo",
    config=CompPOConfig,
    signals={"attention_stats": ("layers",), "values": ("critic", "layers")},
    critic=True,
    unread=_unread,
)
@torch.no_grad()
def compo(batch: CreditBatch, cfg: CompPOConfig) -> CreditOutput:
    """CompPO: Comp-GAE advantages and value targets with an attention-concentration gate.

    Args:
        batch: token_rewards, policy_mask, step, ``values`` (B, T) (the critic, ``V(s_t)``) and the signal
            ``attention_stats`` (B, T) or (B, T, K): the concentration kappa in [0, 1] of the attention rows that
            predict each token, from the behaviour forward pass (module docstring).
        cfg: see `CompPOConfig`.

    Returns:
        advantages (B, T) (whitened when ``cfg.whiten``), returns (B, T) = unwhitened advantages + values, both 0
        off the policy mask; metrics ``credit/compo/*`` (``eta_mean/sd/min/max``: the gate's spread,
        ``critic_skill`` (``s``; 1 when not ``skill_scaled``), ``kappa_mean/std``, ``value_mean``,
        ``return_mean``, ``explained_var``, ``nonfinite_signal_tokens``).
    """
    stats = require(batch, "attention_stats", module="credit module 'compo'")
    values = require(batch, "values", module="credit module 'compo'")
    mask = batch.policy_mask
    dtype = torch.promote_types(batch.token_rewards.dtype, torch.float32)
    if stats.dim() > 3:
        raise ValueError(
            f"credit module 'compo': attention_stats must be (B, T) or (B, T, K), got {tuple(stats.shape)}"
        )
    kappa = (stats.mean(-1) if stats.dim() == 3 else stats).to(dtype)  # (B, T)
    kappa = torch.where(mask, kappa, 0.0)  # nothing under the mask reaches the batch statistics
    V = values.to(dtype)
    v_ok = mask & torch.isfinite(V)
    k_ok = mask & torch.isfinite(kappa)
    V = torch.where(v_ok, V, 0.0)

    rewards = batch.token_rewards.to(dtype)
    skill = critic_skill(rewards, V, v_ok, gamma=cfg.gamma) if cfg.skill_scaled else 1.0
    eta = 1 - skill * (1 - compo_gate(kappa, mask, batch.step, cfg))  # (B, T)
    eta = torch.where(v_ok, eta, 1.0)  # never bootstrap from a non-finite value
    A = comp_gae_advantages(rewards, V, eta, mask, gamma=cfg.gamma)  # (B, T)
    returns = torch.where(mask, A + V, 0.0)
    A = torch.where(v_ok, A, 0.0)
    advantages = masked_whiten(A, v_ok) if cfg.whiten else A

    n = v_ok.sum().clamp(min=1)
    ret_mean = torch.where(v_ok, returns, 0.0).sum() / n
    var_ret = torch.where(v_ok, returns - ret_mean, 0.0).pow(2).sum() / n
    err = torch.where(v_ok, A - A.sum() / n, 0.0)
    explained_var = (1.0 - err.pow(2).sum() / n / var_ret).item() if var_ret > 0 else 0.0
    e, kv = eta[mask], kappa[k_ok]
    metrics = {
        **advantage_metrics("compo", advantages, mask),
        "credit/compo/eta_mean": e.mean().item() if e.numel() else 1.0,
        "credit/compo/eta_sd": e.std(correction=0).item() if e.numel() else 0.0,
        "credit/compo/eta_min": e.min().item() if e.numel() else 1.0,
        "credit/compo/eta_max": e.max().item() if e.numel() else 1.0,
        "credit/compo/critic_skill": skill,
        "credit/compo/kappa_mean": kv.mean().item() if kv.numel() else 0.0,
        "credit/compo/kappa_std": kv.std(correction=0).item() if kv.numel() else 0.0,
        "credit/compo/value_mean": (V.sum() / n).item(),
        "credit/compo/return_mean": ret_mean.item(),
        "credit/compo/explained_var": explained_var,
        "credit/compo/nonfinite_signal_tokens": float((mask & ~(v_ok & k_ok)).sum()),
    }
    return CreditOutput(advantages, returns, metrics=metrics)
