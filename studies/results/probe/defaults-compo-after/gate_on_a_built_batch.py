"""CompPO's credit on a batch built here, the measurements quoted in docs/credit/compo.md (run it at the base commit
dc9fa02 for the "before" figures, at this folder's commit for the "after")::

    .venv/bin/python studies/results/probe/defaults-compo-after/gate_on_a_built_batch.py

8 responses of 68 policy tokens after a 2-token prompt, 4 right (reward 1) and 4 wrong, kappa uniform on [0, 1],
the critic V = 0 or uniform noise; the default config. Printed: the difference between the right and the wrong
responses' mean advantage on their first and last 10 tokens, the share of |A| on the last 10, the first 10
tokens' mean advantage of right and of wrong responses; and the gate's sd for a kappa of sd 0.001 around 0.3, and
how far adding 0.3 to every kappa moves its mean (from 0.3 and from 0.1).
"""

from __future__ import annotations

import torch

from creditgym.credit import CompPOConfig, CreditBatch, get
from creditgym.credit.compo import compo_gate


def batch(critic: str, seed: int = 0) -> CreditBatch:
    gen = torch.Generator().manual_seed(seed)
    B, T, P = 8, 70, 2
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[:, P:] = True
    rewards = torch.zeros(B, T)
    rewards[:, -1] = torch.tensor([1.0, 0.0] * 4)
    values = torch.zeros(B, T) if critic == "zero" else torch.rand(B, T, generator=gen)
    kappa = torch.rand(B, T, generator=gen)
    return CreditBatch(
        rewards, mask, torch.zeros(B, dtype=torch.long), torch.zeros(B, T), values=values,
        signals={"attention_stats": kappa},
    )  # fmt: skip


def gap(A: torch.Tensor, tokens: slice) -> float:
    return float(A[0::2, tokens].mean() - A[1::2, tokens].mean())


def main() -> None:
    cfg = CompPOConfig()
    for critic in ("zero", "noise"):
        out = get("compo")(batch(critic), cfg)
        A = out.advantages[:, 2:]  # (B, 68) the policy tokens
        print(
            f"V {critic}: right - wrong, first 10 tokens {gap(A, slice(0, 10)):.4f}, last 10 "
            f"{gap(A, slice(-10, None)):.4f}; share of |A| on the last 10 {float(A[:, -10:].abs().sum() / A.abs().sum()):.3f}; "
            f"first 10 tokens, right {float(A[0::2, :10].mean()):+.3f}, wrong {float(A[1::2, :10].mean()):+.3f}; "
            f"eta mean {out.metrics['credit/compo/eta_mean']:.3f}"
        )
    mask = torch.ones(8, 70, dtype=torch.bool)
    for base in (0.3, 0.1):
        kappa = base + 1e-3 * torch.randn(8, 70, generator=torch.Generator().manual_seed(1))
        gate = compo_gate(kappa, mask, 0, cfg)
        moved = compo_gate(kappa + 0.3, mask, 0, cfg)
        print(
            f"kappa {base} with sd 0.001: gate sd {float(gate.std()):.4f}; kappa + 0.3 moves its mean by "
            f"{float(moved.mean() - gate.mean()):.2e}"
        )


if __name__ == "__main__":
    main()
