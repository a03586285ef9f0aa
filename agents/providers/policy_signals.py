"""Providers of three signals read off the rollout batch and the policy: ``token_entropy`` (forking tokens, arXiv
2506.01939), ``token_ids`` (KTAE, arXiv 2505.16826) and ``reference_logprobs`` (PRIME, arXiv 2502.01456).

* ``behaviour_entropy``: the entropy of the distribution each sampled token was drawn from, read from the step's
  shared no-grad behaviour pass (it asks that pass for entropies, so it costs no extra forward).
* ``sampled_token_ids``: the sampled tokens' vocabulary ids, as they are in the batch; no model call.
* ``reference_model``: log-probs under a frozen copy of the policy taken when the run starts (the initial model),
  one no-grad pass per step; the copy is checkpointed so a resumed run keeps the same reference.

Each returns ``(B, T)`` aligned with ``old_logprobs``, 0 off the policy mask.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from creditgym.agents.providers.base import (
    ForwardRequest,
    RunContext,
    SignalProvider,
    StepContext,
    register_provider,
    sequence_logprobs,
)

__all__ = ["BehaviourEntropy", "ReferenceModel", "SampledTokenIds"]


@register_provider("behaviour_entropy", signal="token_entropy", default=True)
class BehaviourEntropy(SignalProvider):
    """Entropy (B, T) of the behaviour policy's next-token distribution at each sampled token."""

    def forward_request(self) -> ForwardRequest:
        return ForwardRequest(entropy=True)

    def compute(self, step: StepContext) -> Tensor:
        entropies = step.behaviour().entropies
        if entropies is None:
            raise RuntimeError(
                "behaviour_entropy: the step's behaviour pass returned no entropies; build the StepContext with "
                "the providers' ForwardRequest (it asks for entropy=True)"
            )
        return entropies.float() * step.policy_mask


@register_provider("sampled_token_ids", signal="token_ids", default=True)
class SampledTokenIds(SignalProvider):
    """The sampled tokens' ids (B, T), int64, 0 off the policy mask."""

    def compute(self, step: StepContext) -> Tensor:
        return step.input_ids.long() * step.policy_mask


@register_provider("reference_model", signal="reference_logprobs", default=True)
class ReferenceModel(SignalProvider):
    """Log-probs (B, T) of the sampled tokens under a frozen copy of the initial policy."""

    def __init__(self, run: RunContext, params: Mapping[str, Any]) -> None:
        super().__init__(run, params)
        self.model = copy.deepcopy(run.policy.model).eval().requires_grad_(False)

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        return sequence_logprobs(self.model, step.input_ids, step.attention_mask).float() * step.policy_mask

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "model" in state:
            self.model.load_state_dict(state["model"])
