"""A credit module of your own that needs a new signal: GRPO on the forking tokens only.

A minority of high-entropy "forking" tokens carry the learning signal of RL with verifiable rewards (Wang et al.,
arXiv 2506.01939): this module keeps GRPO's advantage on the ``keep`` share of the batch's policy tokens with the
highest entropy and zeroes the rest. It reads the policy's entropy at each token, which creditgym does not
compute, so it declares the signal ``token_entropy`` and names its provider (`custom_signal_provider.py`).

    python examples/custom_credit_module.py --steps 2                   # trains on the bundled tiny model
    PYTHONPATH=examples creditgym train --credit custom_credit_module:forking --steps 2 --out runs/forking
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from creditgym import credit
from creditgym.credit import CreditBatch, CreditOutput, ProvidedBy

credit.declare_signal("token_entropy", "(B, T) entropy of the policy's next-token distribution at each token")


@dataclass(frozen=True)
class ForkingConfig:
    keep: float = 0.2  # the share of policy tokens that keep their advantage (the paper's top 20%)

    def __post_init__(self) -> None:
        if not 0 < self.keep <= 1:
            raise ValueError(f"ForkingConfig.keep must be in (0, 1], got {self.keep!r}")


ENTROPY = ProvidedBy("custom_signal_provider:entropy")  # "module:name": the trainer imports the module first


@credit.register("forking", config=ForkingConfig, signals={"token_entropy": ENTROPY})
@torch.no_grad()
def forking(batch: CreditBatch, cfg: ForkingConfig) -> CreditOutput:
    """GRPO's advantages (B, T) on the ``keep`` share of policy tokens with the highest entropy, 0 elsewhere."""
    entropy = credit.require(batch, "token_entropy", module="forking")  # (B, T)
    grpo, mask = credit.get("grpo")(batch).advantages, batch.policy_mask  # (B, T), (B, T)
    threshold = torch.quantile(entropy[mask].float(), 1 - cfg.keep) if mask.any() else 0.0
    kept = mask & (entropy >= threshold)
    advantages = torch.where(kept, grpo, 0.0)
    metrics = credit.advantage_metrics("forking", advantages, mask)
    metrics["credit/forking/kept_frac"] = float(kept.sum() / mask.sum().clamp(min=1))
    return CreditOutput(advantages, metrics=metrics)


if __name__ == "__main__":
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.trainer import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (default: 2)")
    parser.add_argument("--out", default="runs/forking", help="run folder (default: runs/forking)")
    args = parser.parse_args()
    cfg = TrainConfig(credit="forking", steps=args.steps, prompts_per_step=2, group_size=4, eval_episodes=4)
    summary = train(cfg, args.out)
    print(f"forking: {summary['steps']} steps, held-out accuracy {summary['eval_after']:.3f}, in {args.out}")
