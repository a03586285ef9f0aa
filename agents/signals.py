"""The extra inputs credit modules declare, computed by the trainer in batched no-grad passes.

Each function returns a ``(B, T)`` tensor aligned with the rollout batch (index t describes token t, as in the
ledger), 0 off the policy mask. Only the signals the chosen module declares are ever computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from creditgym.agents.rollout import Batch, Episode
from creditgym.envs.core import Source


def check_env_provides(module_name: str, signals: Sequence[str], env: Any) -> None:
    """Fail at start-up, not at step 50, when the env cannot feed a signal the module needs."""
    if "counterfactual_logprobs" in signals:
        base = env.unwrapped
        provider = getattr(base, "counterfactual_prompt_tokens", None)
        has = getattr(base, "has_counterfactual", provider is not None)
        if provider is None or not has:
            spec = getattr(env, "spec", None)
            env_id = spec.id if spec is not None else type(base).__name__
            raise ValueError(
                f"credit module {module_name!r} needs a counterfactual prompt, but env {env_id!r} provides none "
                "(it has no counterfactual_prompt_tokens(), or its tasks carry no separate criteria block); "
                "use an env with one, such as creditgym/Rubric-v0 or creditgym/Math-v0"
            )


@torch.no_grad()
def counterfactual_logprobs(policy: Any, episodes: Sequence[Episode], batch: Batch) -> Tensor:
    """Log-probs of everything after each episode's prompt, replayed after its counterfactual prompt.

    One teacher-forced pass of the behaviour policy (CoRT, arXiv 2607.25659): the same response tokens, the
    prompt swapped for ``env.counterfactual_prompt_tokens()`` (the same task without its criteria).
    """
    contexts, continuations, starts = [], [], []
    for ep in episodes:
        led = ep.env.ledger
        start = int((led.source == Source.PROMPT).sum())
        contexts.append(ep.env.counterfactual_prompt_tokens())
        continuations.append(led.token_id[start:].tolist())
        starts.append(start)
    scored = policy.logprobs(contexts, continuations, return_entropy=False)
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for row, start in enumerate(starts):
        n = len(continuations[row])
        out[row, start : start + n] = scored.logprobs[row, :n].float().cpu()
    return out * batch.policy_mask


@torch.no_grad()
def sequence_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """``(B, T)`` log-probs of every token under ``model`` (a teacher or a reference copy); 0 at t = 0."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    )
    lp = torch.log_softmax(logits.logits[:, :-1].float(), -1)
    lp = lp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    return torch.nn.functional.pad(lp, (1, 0))
