"""Attention concentration: the ``attention_stats`` signal's provider (CompPO, arXiv 2608.21501).

``kappa[b, t] = 1 - mean over the layers of the head-averaged attention-row entropy, normalised by log(#keys)``,
read from the behaviour pass at the position that predicts token t; (B, T) in [0, 1], 0 off the policy mask.
Its parameter ``layers`` picks the decoder layers (0-based, negative from the end).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from creditgym.agents.providers.base import ForwardRequest, SignalProvider, StepContext, register_provider

__all__ = ["AttentionConcentration", "attention_concentration"]


def attention_concentration(entropies: Mapping[int, Tensor] | Sequence[Tensor]) -> Tensor:
    """kappa = 1 - the mean over layers of the normalised attention-row entropies, (B, T) in [0, 1].

    Args:
        entropies: layer -> (B, T) (``ForwardOutput.attention_entropy``) or a sequence of (B, T) tensors.
    """
    stats = list(entropies.values()) if isinstance(entropies, Mapping) else list(entropies)
    if not stats:
        raise ValueError("attention_concentration: expected at least one layer's (B, T) attention entropy")
    return 1.0 - torch.stack(stats, -1).mean(-1)


@register_provider("attention_concentration", signal="attention_stats", default=True)
class AttentionConcentration(SignalProvider):
    """Attention concentration kappa (B, T) of the behaviour pass over the decoder layers ``layers``."""

    params = ("layers",)

    def forward_request(self) -> ForwardRequest:
        return ForwardRequest(
            attention_layers=tuple(int(x) % self.run.policy.num_layers for x in self.layers)
        )

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(self.params["layers"])

    def check(self) -> None:
        n = self.run.policy.num_layers
        bad = [x for x in self.layers if not -n <= int(x) < n]
        if bad:
            raise ValueError(
                f"attention_stats: layers {bad} out of range for a model with {n} decoder layers"
            )

    def compute(self, step: StepContext) -> Tensor:
        entropy = step.behaviour().attention_entropy
        assert entropy is not None
        wanted = {int(x) % self.run.policy.num_layers for x in self.layers}
        return attention_concentration({k: v for k, v in entropy.items() if k in wanted}) * step.policy_mask
