"""A credit module of your own that needs a new signal: GRPO on the policy's least decided tokens only.

The built-in `forking` module keeps GRPO's advantage on the high-entropy tokens. This one asks a different
question of the same idea: it keeps the advantage on the ``keep`` share of the batch's policy tokens where the
policy was closest to choosing another token (the smallest gap between its top two log-probs) and zeroes the rest.
creditgym does not compute that gap, so the module declares the signal ``top2_margin`` and names its provider
(`custom_signal_provider.py`).

    python examples/custom_credit_module.py --steps 2                   # trains on the bundled tiny model
    PYTHONPATH=examples creditgym train --credit custom_credit_module:undecided --steps 2 --out runs/undecided
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from creditgym import credit
from creditgym.credit import CreditBatch, CreditOutput, ProvidedBy

credit.declare_signal(
    "top2_margin", "(B, T) log p(top-1) - log p(top-2) of the distribution each token came from"
)


@dataclass(frozen=True)
class UndecidedConfig:
    keep: float = 0.2  # the share of policy tokens that keep their advantage

    def __post_init__(self) -> None:
        if not 0 < self.keep <= 1:
            raise ValueError(f"UndecidedConfig.keep must be in (0, 1], got {self.keep!r}")


MARGIN = ProvidedBy("custom_signal_provider:margin")  # "module:name": the trainer imports the module first


@credit.register("undecided", config=UndecidedConfig, signals={"top2_margin": MARGIN})
@torch.no_grad()
def undecided(batch: CreditBatch, cfg: UndecidedConfig) -> CreditOutput:
    """GRPO's advantages (B, T) on the ``keep`` share of policy tokens with the smallest top-2 margin, 0 elsewhere."""
    margin = credit.require(batch, "top2_margin", module="undecided")  # (B, T)
    grpo, mask = credit.get("grpo")(batch).advantages, batch.policy_mask  # (B, T), (B, T)
    threshold = torch.quantile(margin[mask].float(), cfg.keep) if mask.any() else 0.0
    kept = mask & (margin <= threshold)
    advantages = torch.where(kept, grpo, 0.0)
    metrics = credit.advantage_metrics("undecided", advantages, mask)
    metrics["credit/undecided/kept_frac"] = float(kept.sum() / mask.sum().clamp(min=1))
    return CreditOutput(advantages, metrics=metrics)


if __name__ == "__main__":
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.trainer import train

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps (default: 2)")
    parser.add_argument("--out", default="runs/undecided", help="run folder (default: runs/undecided)")
    args = parser.parse_args()
    cfg = TrainConfig(credit="undecided", steps=args.steps, prompts_per_step=2, group_size=4, eval_episodes=4)
    summary = train(cfg, args.out)
    after, name = summary["eval_after"], summary["score_name"]
    print(f"undecided: {summary['steps']} steps, held-out {name} {after:.3f}, in {args.out}")
