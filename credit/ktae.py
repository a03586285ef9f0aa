"""KTAE: key-token advantage from group statistics of which tokens occur in correct and in wrong rollouts
(arXiv 2505.16826).

For each group, each vocabulary id v seen in it gets a 2x2 contingency table over the group's C correct and W wrong
rollouts (a rollout is correct when its outcome advantage is above the group's mean, ``A_i > 0``)::

    a = #correct containing v    b = #wrong containing v    c = C - a    d = W - b    N = C + W
    phi2(v) = (a d - b c)^2 / ((a + b)(c + d)(a + c)(b + d))          chi-square / N, in [0, 1]
    IG(v)   = (H(Y) - H(Y | v present or not)) / H(Y)                  information gain, normalised to [0, 1]
    K(v)    = sign(a / C - b / W) * (phi2(v) + IG(v)) / 2              key-token score, in [-1, 1]
    A[i, t] = (A_i + lam * K(y_{i,t})) * policy_mask[i, t]

``A_i`` is GRPO's group-relative outcome advantage (`creditgym.credit.grpo`). A token in every rollout of its group,
or in none, has ``K = 0`` (it tells correct from wrong nothing); a token only in the correct rollouts has ``K > 0``,
only in the wrong ones ``K < 0``. A group whose rewards are all equal has no correct/wrong split: ``K = 0`` and
``A_i = 0`` there, so its rows get 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from creditgym.credit.base import CreditBatch, CreditOutput, declare_signal, register, require
from creditgym.credit.grpo import GRPOConfig, group_metrics, grpo_advantage

__all__ = ["KTAEConfig", "key_token_scores", "ktae"]


@dataclass(frozen=True)
class KTAEConfig:
    """Config of `ktae`.

    Attributes:
        lam: weight of the key-token score added to the sequence advantage, >= 0 (0 gives `grpo`).
        norm_by_std: divide the group advantage by the group std (GRPO); False = Dr.GRPO's mean-only baseline.
        eps: std floor of the group advantage, > 0.
    """

    lam: float = 1.0
    norm_by_std: bool = True
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if not (isinstance(self.lam, (int, float)) and self.lam >= 0):
            raise ValueError(f"KTAEConfig.lam: expected a weight >= 0 such as 1.0, got {self.lam!r}")
        GRPOConfig(norm_by_std=self.norm_by_std, eps=self.eps)  # validates both


def _entropy2(p: Tensor) -> Tensor:
    """Binary entropy (nats) of ``p``, 0 at p in {0, 1}."""
    q = 1 - p
    return -(torch.xlogy(p, p) + torch.xlogy(q, q))


def key_token_scores(present: Tensor, correct: Tensor) -> Tensor:
    """K(v) for each column of ``present`` (n, U) bool (rollout contains v), given ``correct`` (n,) bool.

    Returns (U,) float64 in [-1, 1] (module docstring); all 0 when every rollout is correct or every one wrong.
    """
    x = present.double()
    y = correct.double()
    C, N = y.sum(), torch.tensor(float(len(y)), dtype=torch.float64)
    W = N - C
    if C == 0 or W == 0:
        return torch.zeros(present.shape[1], dtype=torch.float64)
    a = (x * y[:, None]).sum(0)  # (U,)
    b = x.sum(0) - a
    c, d = C - a, W - b
    denom = (a + b) * (c + d) * (a + c) * (b + d)
    phi2 = torch.where(denom > 0, (a * d - b * c) ** 2 / denom.clamp(min=1), 0.0)
    hy = _entropy2(C / N)
    n_in = a + b
    n_out = N - n_in
    h_in = _entropy2(torch.where(n_in > 0, a / n_in.clamp(min=1), 0.0))
    h_out = _entropy2(torch.where(n_out > 0, c / n_out.clamp(min=1), 0.0))
    ig = ((hy - (n_in / N) * h_in - (n_out / N) * h_out) / hy).clamp(0, 1)
    return torch.sign(a / C - b / W) * (phi2 + ig) / 2


declare_signal(
    "token_ids",
    "(B, T) integer vocabulary ids of the sampled tokens",
)


@register("ktae", config=KTAEConfig, signals=("token_ids",), group_relative=True)
@torch.no_grad()
def ktae(batch: CreditBatch, cfg: KTAEConfig) -> CreditOutput:
    """GRPO's advantage plus ``lam`` times each token's key-token score in its group (module docstring).

    Args:
        batch: token_rewards, policy_mask, group_ids and the signal ``token_ids`` (B, T) integer are read.
        cfg: see `KTAEConfig`.

    Returns:
        advantages (B, T); diagnostics ``credit`` (the key-token score K per token); metrics ``credit/ktae/*``.
    """
    ids = require(batch, "token_ids", module="ktae")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"ktae: the signal 'token_ids' must hold integer token ids, got dtype {ids.dtype}")
    A, r, is_sample, g = grpo_advantage(batch, GRPOConfig(norm_by_std=cfg.norm_by_std, eps=cfg.eps))  # (B,)
    mask = batch.policy_mask
    K = torch.zeros(mask.shape, dtype=torch.float64, device=mask.device)  # (B, T)
    for gid in torch.unique(batch.group_ids[is_sample]):
        rows = ((batch.group_ids == gid) & is_sample).nonzero().squeeze(-1)  # (n,)
        vocab, local = torch.unique(ids[rows][mask[rows]], return_inverse=True)  # (U,), (M,)
        present = torch.zeros((len(rows), len(vocab)), dtype=torch.bool, device=mask.device)  # (n, U)
        row_of = torch.arange(len(rows), device=mask.device)[:, None].expand(-1, mask.shape[1])[mask[rows]]
        present[row_of, local] = True
        scores = key_token_scores(present, A[rows] > 0)  # (U,)
        k_rows = torch.zeros((len(rows), mask.shape[1]), dtype=torch.float64, device=mask.device)
        k_rows[mask[rows]] = scores[local]
        K[rows] = k_rows
    K = K.to(A.dtype)
    advantages = torch.where(mask, A[:, None] + cfg.lam * K, 0.0)  # (B, T)
    metrics = group_metrics("ktae", r, g, is_sample, advantages, mask)
    metrics["credit/ktae/key_abs_mean"] = float(K[mask].abs().mean()) if mask.any() else 0.0
    return CreditOutput(advantages, metrics=metrics, diagnostics={"credit": torch.where(mask, K, 0.0)})
