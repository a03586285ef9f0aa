"""Counterfactual replay: the ``counterfactual_logprobs`` signal's provider (CoRT, arXiv 2607.25659).

``counterfactual_logprobs[b, t]`` is the log-prob of the sampled token ``t`` of row ``b`` under the behaviour
policy, teacher-forced after the episode's counterfactual prompt instead of its own (the `CounterfactualPrompt`
capability: the same task without its criteria); one no-grad pass, 0 off the policy mask.
"""

from __future__ import annotations

import torch
from torch import Tensor

from creditgym.agents.providers.base import SignalProvider, StepContext, register_provider
from creditgym.envs.core import CounterfactualPrompt, Source

__all__ = ["CounterfactualReplay"]


@register_provider("counterfactual_replay", signal="counterfactual_logprobs", default=True)
class CounterfactualReplay(SignalProvider):
    """Log-probs of everything after each episode's prompt, replayed after its counterfactual prompt."""

    def check(self) -> None:
        env = self.run.env
        if not isinstance(env, CounterfactualPrompt) or not env.has_counterfactual:
            raise ValueError(
                f"this signal needs a counterfactual prompt, but env {self.run.env_id!r} provides none (it lacks "
                "the CounterfactualPrompt capability, counterfactual_prompt_tokens(), or its tasks carry no "
                "separate criteria block); use an env with one, such as creditgym/Rubric-v0 or creditgym/Math-v0"
            )

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        contexts, continuations, starts = [], [], []
        for ep in step.episodes:
            led = ep.env.ledger
            start = int((led.source == Source.PROMPT).sum())
            contexts.append(ep.env.counterfactual_prompt_tokens())  # type: ignore[attr-defined]
            continuations.append(led.token_id[start:].tolist())
            starts.append(start)
        scored = step.policy.logprobs(contexts, continuations, return_entropy=False)
        out = torch.zeros(step.batch.input_ids.shape, dtype=torch.float32)
        for row, start in enumerate(starts):
            n = len(continuations[row])
            out[row, start : start + n] = scored.logprobs[row, :n].float().cpu()
        return out.to(step.policy_mask.device) * step.policy_mask
