"""CompPO / Comp-GAE: attention concentration gates the GAE trace (arXiv 2608.21501, "Let Credit Follow
Computation: Architecture-Aware Credit Transport for LLM RL").

Paper: a detached statistic of the behaviour policy's attention (its concentration) is mapped to a bounded
per-token retention gate that enters both the one-step bootstrap and the GAE trace; a constant gate recovers
fixed-coefficient GAE. The formulas below are ours (arXiv 2608.21501's abstract fixes only the idea's
architecture: an attention-concentration gate in the bootstrap and the trace, and a transport-aligned critic).

Signal ``attention_stats`` = **concentration** kappa (not entropy), (B, T) or (B, T, K) for K layers (then
averaged over K)::

    kappa_t = 1 - (1 / |L|) sum_{l in L} Hbar_l(t),   Hbar_l(t) = head-mean entropy of layer l's causal attention
                                                       row that predicts token t, divided by log(#keys)  (in [0, 1])

The trainer's ``attention_stats`` provider (``creditgym.agents.signals``) computes kappa from the behaviour
pass over the decoder layers ``cfg.layers`` (a parameter the module declares for that signal). Gate, over the
policy tokens of the batch (detached)::

    z_t   = (kappa_t - mean kappa) / sqrt(var kappa + 1e-8)          (batch statistics, unbiased var)
    eta_t = eta_min + (eta_max - eta_min) * sigmoid(a * z_t + b)

Comp-GAE over each row's policy tokens k = 0..K-1 (prompt, env tokens and padding skipped, as `credit.gae`),
``V_k = values[b, t_k]`` (the value *before* token t_k), ``V_K = 0``::

    delta_k = r_k + gamma V_{k+1} - V_k
    A_k     = delta_k + gamma eta_{k+1} A_{k+1},   A_K = 0     (kernel gamma^l prod_{j=k+1}^{k+l} eta_j)
    G_k     = A_k + V_k = r_k + gamma [(1 - eta_{k+1}) V_{k+1} + eta_{k+1} G_{k+1}]      (value targets)

then optionally whitened over the batch's policy tokens (as ``gae``). ``eta == lam`` constant gives GAE(gamma,
lam). Prior: ``a > 0`` (focused, retrieval-like tokens pass credit through; diffuse tokens fall back on the
critic); the sign of ``a`` is a hyperparameter to sweep.

Gate defaults (``eta_min=0.5, eta_max=1, a=4.4, b=3.4``), from a measurement: kappa over layers (-2, -1) of
the bundled tiny model on the chains (``creditgym/Math-v0``, ``difficulty=6``, 160 tokens; the probe's batch,
32 responses, 2175 policy tokens) is right-skewed: quantiles 5/25/50/75/95% = 0.10/0.15/0.25/0.43/0.66, so z
has quantiles -1.10/-0.83/-0.28/0.73/2.05. ``a, b`` put the median token at sigmoid 0.9 (eta 0.95) and the 5th
percentile at sigmoid 0.2 (eta 0.6): most tokens pass credit on, the most diffuse quarter (eta < 0.72) falls
back on the critic. On that batch eta has mean 0.864, sd 0.154, range [0.53, 1.00], within-response sd 0.153;
the old defaults (0.9, 1, a=1, b=0) gave mean 0.949, sd 0.021, range [0.92, 0.997], i.e. GAE(0.95) in all but
name. Reproduce: ``examples/results/probe/chains-compo-after/calibrate_gate.py``. Metrics
``credit/compo/eta_mean``, ``eta_sd``, ``eta_min``, ``eta_max`` log the gate's spread every step.

Controls (``gate``): ``"shuffled"`` permutes the attention gate values among each row's policy tokens (a
generator seeded from ``(seed, batch.step)``: same multiset per row, order destroyed); ``"position"`` replaces
kappa by the token's relative position among its row's policy tokens, ``k / (K - 1)`` (0 for a one-token row),
then the same z-score and squashing. Alternative position control (not implemented): the batch-mean attention
gate per relative-position bin. Gate-matched GAE (what the paper's "a constant gate recovers GAE" implies):
GAE at the gate's own mean, ``gae:lam=<credit/compo/eta_mean>`` (0.864 measured above; about 0.86), and, with
the same critic, ``compo:eta_min=0.86,eta_max=0.86`` (a constant gate is exactly GAE at that lambda): a
difference from ``compo`` is then the gate's, not lambda's or the critic's.

The critic (``critic``, the parameter of the ``values`` signal; ``creditgym.agents.critics``): ``"tac"``, the
transport-aligned critic, an MLP over ``[sg(h^L); sg(h^{l_m}); kappa; the attention concentration of every
layer]`` fitted by MSE to ``returns`` = G, computed with the same gates (so it is fitted to the gated returns,
not to R); ``"standard"``, a linear value head on ``sg(h^L)`` fitted the same way (the paper's weaker
ablation, what ``gae`` uses).

Non-finite signals: a policy token with a non-finite kappa gets ``z = 0``; one with a non-finite value gets
``eta = 1`` (the trace passes through it, so no neighbour bootstraps from that value) and advantage 0. Both are
counted in ``credit/compo/nonfinite_signal_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, advantage_metrics, register, require
from creditgym.credit.gae import masked_whiten

__all__ = [
    "CompPOConfig",
    "comp_gae_advantages",
    "compo",
    "compo_gate",
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
        a: slope of the gate in the z-scored concentration (sign: a hyperparameter; > 0 = focused tokens carry).
        b: offset of the gate. The defaults of ``eta_min, eta_max, a, b`` come from kappa's measured
            distribution on the chains (module docstring, "Gate defaults").
        gate: ``"attention"`` (the method), ``"shuffled"`` or ``"position"`` (the controls; module docstring).
        layers: the decoder layers (0-based, negative from the end) whose attention rows give kappa: the
            parameter of the ``attention_stats`` signal, and the TAC's ``kappa`` feature.
        critic: ``"tac"`` (the transport-aligned critic, ``creditgym.agents.critics``) or ``"standard"`` (a
            linear value head on the last hidden state, the paper's weaker ablation): the parameter of the
            ``values`` signal.
        whiten: whiten the advantages over all policy tokens of the batch.
        seed: base seed of the shuffled-gate control (combined with ``batch.step``).
    """

    gamma: float = 1.0
    eta_min: float = 0.5
    eta_max: float = 1.0
    a: float = 4.4
    b: float = 3.4
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
        if not isinstance(self.whiten, bool):
            raise TypeError(f"CompPOConfig.whiten: expected a bool, got {self.whiten!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"CompPOConfig.seed: expected an int >= 0, got {self.seed!r}")


def _zscore(x: Tensor, mask: Tensor) -> Tensor:
    """``(x - mean) / sqrt(var + 1e-8)`` over ``mask`` (unbiased var); 0 off the mask."""
    return masked_whiten(x, mask)


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


def compo_gate(kappa: Tensor, mask: Tensor, step: int, cfg: CompPOConfig) -> Tensor:
    """The retention gate eta (B, T) in ``[eta_min, eta_max]`` on ``mask`` (module docstring), 1 elsewhere.

    Args:
        kappa: (B, T) concentration; read only where ``mask`` and finite.
        mask: (B, T) bool, policy tokens.
        step: optimizer step (seeds the shuffled control).
        cfg: see `CompPOConfig`.
    """
    if cfg.gate == "position":
        idx = mask.cumsum(1) - 1  # (B, T) index among the row's policy tokens
        n = mask.sum(1, keepdim=True)
        x = (idx / (n - 1).clamp(min=1)).to(kappa.dtype)
        z = _zscore(x, mask)
    else:
        valid = mask & torch.isfinite(kappa)
        z = _zscore(torch.where(valid, kappa, 0.0), valid)
    eta = cfg.eta_min + (cfg.eta_max - cfg.eta_min) * torch.sigmoid(cfg.a * z + cfg.b)
    if cfg.gate == "shuffled":
        eta = _shuffle_rows(eta, mask, seed=(cfg.seed << 32) + step)
    return torch.where(mask, eta, 1.0)


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


@register(
    "compo",
    config=CompPOConfig,
    signals={"attention_stats": ("layers",), "values": ("critic", "layers")},
    critic=True,
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
        ``kappa_mean/std``, ``value_mean``, ``return_mean``, ``explained_var``, ``nonfinite_signal_tokens``).
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

    eta = compo_gate(kappa, mask, batch.step, cfg)  # (B, T)
    eta = torch.where(v_ok, eta, 1.0)  # never bootstrap from a non-finite value
    A = comp_gae_advantages(batch.token_rewards.to(dtype), V, eta, mask, gamma=cfg.gamma)  # (B, T)
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
        "credit/compo/kappa_mean": kv.mean().item() if kv.numel() else 0.0,
        "credit/compo/kappa_std": kv.std(correction=0).item() if kv.numel() else 0.0,
        "credit/compo/value_mean": (V.sum() / n).item(),
        "credit/compo/return_mean": ret_mean.item(),
        "credit/compo/explained_var": explained_var,
        "credit/compo/nonfinite_signal_tokens": float((mask & ~(v_ok & k_ok)).sum()),
    }
    return CreditOutput(advantages, returns, metrics=metrics)
