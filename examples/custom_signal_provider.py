"""A signal provider of your own: the entropy of the policy's next-token distribution at every token.

`custom_credit_module.py` declares the signal ``token_entropy`` and names this provider for it
(``ProvidedBy("custom_signal_provider:entropy")``): when a run starts, the trainer imports this file, builds the
provider once, and calls it every step after the rollouts. A provider with state (a critic, a teacher)
subclasses ``creditgym.agents.providers.SignalProvider`` instead: ``update`` runs after the actor update and
``state_dict`` goes into checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from creditgym.agents.providers import StepContext, signal_provider


@signal_provider("entropy", signal="token_entropy")
@torch.no_grad()
def entropy(step: StepContext, params: Mapping[str, Any]) -> torch.Tensor:
    """(B, T): the entropy of the distribution each policy token was sampled from, 0 elsewhere."""
    fwd = step.policy.forward_logprobs(step.input_ids, step.attention_mask)  # one no-grad pass, (B, T)
    return fwd.entropies * step.policy_mask
