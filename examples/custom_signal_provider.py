"""A signal provider of your own: the gap between the policy's top two log-probs at every token.

`custom_credit_module.py` declares the signal ``top2_margin`` and names this provider for it
(``ProvidedBy("custom_signal_provider:margin")``): when a run starts, the trainer imports this file, builds the
provider once, and calls it every step after the rollouts. A provider with state (a critic, a teacher)
subclasses ``creditgym.agents.providers.SignalProvider`` instead: ``update`` runs after the actor update and
``state_dict`` goes into checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from creditgym.agents.providers import StepContext, signal_provider


@signal_provider("margin", signal="top2_margin")
@torch.no_grad()
def margin(step: StepContext, params: Mapping[str, Any]) -> torch.Tensor:
    """(B, T): log p(top-1) - log p(top-2) of the distribution each policy token was sampled from, 0 elsewhere."""
    logits = step.policy.model(
        input_ids=step.input_ids, attention_mask=step.attention_mask
    ).logits  # (B, T, V)
    top2 = torch.log_softmax(logits[:, :-1].float(), dim=-1).topk(2, dim=-1).values  # (B, T-1, 2)
    gap = torch.zeros(step.input_ids.shape, device=logits.device)  # token t is read off the logits at t - 1
    gap[:, 1:] = top2[..., 0] - top2[..., 1]
    return gap * step.policy_mask
