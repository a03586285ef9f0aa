"""PACT's critic (arXiv 2609.26355): the ``critic_model`` provider of ``values``, which ``pact`` names.

The paper trains **a critic model** beside the actor (the extra cost it names): here the decoder of a causal LM
(a copy of the actor's initial weights, or of ``PACTConfig.critic_model``) with a linear head on its last hidden
state giving a logit ``z``; ``V = sigmoid(z)``. ``values[b, t] = V(prefix before token t)`` is read at position
``t - 1``, as for every critic (``creditgym.credit.CreditBatch.values``). It has its own AdamW optimizer at
``PACTConfig.critic_lr_ratio x TrainConfig.lr`` (the paper: critic 5e-6 = 5 x actor 1e-6), and is fitted only in
its ``update``, after the actor update: one no-grad pass of the updated actor gives ``updated_logprobs``, then
`creditgym.credit.pact.pact_critic_targets` PACT's targets, IS weights and mask, and the critic is fitted on them
with soft BCE (``rho BCE(V, R)`` by default): ``epochs x minibatches`` steps over the rollout batch, gradients
clipped at ``TrainConfig.max_grad_norm``. The actor's optimizer never sees its parameters, and its loss never
reaches the actor (separate weights).

``pact:critic=probe`` keeps the cheap critic: a linear value head on the actor's detached hidden state
(`creditgym.agents.providers.critics.CriticProvider`, its standard critic, fitted with BCE on the same targets),
at ``TrainConfig.critic_lr``.

Its parameters are `PACTConfig`'s fields (``pact`` declares them: ``ProvidedBy("critic_model", ...)``). Its state
(the critic's weights and optimizer) is checkpointed with the run, resumed by ``--resume``, and loaded by
``creditgym probe --checkpoint``; the final folder gets ``critic_model.safetensors``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from creditgym.agents.providers.base import (
    ForwardRequest,
    RunContext,
    SignalProvider,
    StepContext,
    average_gradients,
    register_provider,
)
from creditgym.agents.providers.critics import CriticProvider, target_mask_frac
from creditgym.agents.train.loss import value_loss
from creditgym.credit.grpo import outcome_rewards
from creditgym.credit.pact import CRITIC_FIELDS, CriticTargets, PACTConfig, pact_critic_targets, rho_metrics

__all__ = ["CRITIC_MODEL_FILE", "CriticModel", "PolicyAlignedCritic"]

CRITIC_MODEL_FILE = "critic_model.safetensors"


class CriticModel(nn.Module):
    """A causal LM's decoder and a linear value head: ``logits(input_ids, attention_mask) -> (B, T)``.

    Index ``t`` of the output is the logit of ``V(prefix before token t)``, read from the hidden state at
    position ``t - 1`` (0 at ``t = 0``). The head starts at zero, so every initial value is ``sigmoid(0) = 0.5``.

    Args:
        decoder: The decoder of a Hugging Face causal LM (``model.base_model``), returning ``last_hidden_state``.
        hidden_size: Its hidden size ``H``.
    """

    def __init__(self, decoder: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.decoder = decoder
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_causal_lm(cls, model: nn.Module) -> CriticModel:
        """A critic whose decoder is a copy of ``model``'s (the LM head is left out)."""
        hidden = int(model.config.get_text_config().hidden_size)  # type: ignore[union-attr,operator]
        decoder = copy.deepcopy(model.base_model).train(model.training)  # type: ignore[arg-type]
        return cls(decoder.requires_grad_(True), hidden)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)  # (B, T), padding on either side
        out = self.decoder(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )
        hidden = out.last_hidden_state[:, :-1]  # (B, T-1, H): the prefixes ending at positions 0..T-2
        z = self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).float()  # (B, T-1)
        return F.pad(z, (1, 0))  # (B, T), index t = V(prefix before token t)


def _critic_decoder_source(run: RunContext, path: str | None) -> nn.Module:
    """The causal LM whose decoder initialises the critic: the actor, or the model folder ``path``."""
    if path is None:
        return run.policy.model
    from creditgym.agents.train.policy import load_policy

    other = load_policy(path, device=run.policy.device)
    if other.tokenizer.get_vocab() != run.policy.tokenizer.get_vocab():
        raise ValueError(
            f"pact:critic_model={path!r} has another tokenizer than the actor ({run.cfg.model!r}): the critic "
            "reads the actor's token ids, so it needs the same vocabulary; pick a model of the same family"
        )
    return other.model


@register_provider("critic_model", signal="values")
class PolicyAlignedCritic(SignalProvider):
    """``values`` for PACT: ``sigmoid`` of a critic model's logits (``critic="model"``) or of a probe on the
    actor's hidden state (``critic="probe"``), fitted after the actor update on PACT's IS targets (module
    docstring)."""

    params = CRITIC_FIELDS

    def __init__(self, run: RunContext, params: Mapping[str, Any]) -> None:
        super().__init__(run, params)
        self.pact = PACTConfig(**self.params)  # the targets' settings: reward_range, rho range, without_is
        sigmoid_head = {**CriticProvider.optional_params, "critic_loss": "bce"}  # on the actor's hidden state
        self.probe = CriticProvider(run, sigmoid_head) if self.pact.critic == "probe" else None
        self.critic: CriticModel | None = None
        if self.probe is None:
            source = _critic_decoder_source(run, self.pact.critic_model)
            self.critic = CriticModel.from_causal_lm(source).to(run.policy.device)
            lr = float(self.pact.critic_lr_ratio) * run.cfg.lr
            self.optimizer = torch.optim.AdamW(self.critic.parameters(), lr=lr, weight_decay=0.0)

    def forward_request(self) -> ForwardRequest:
        return self.probe.forward_request() if self.probe is not None else ForwardRequest()

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        if self.probe is not None:
            return self.probe.compute(step)
        assert self.critic is not None
        return torch.sigmoid(self.critic(step.input_ids, step.attention_mask)) * step.policy_mask

    @torch.no_grad()
    def critic_targets(self, step: StepContext) -> tuple[CriticTargets, Tensor]:
        """PACT's targets, IS weights and mask (`CriticTargets`) from the actor as it is now (the updated one), and
        its log-probs of the sampled tokens ``updated_logprobs`` (B, T), 0 off the policy mask."""
        assert step.credit_batch is not None
        fwd = step.policy.forward_logprobs(step.input_ids, step.attention_mask, return_entropy=False)
        updated = fwd.logprobs * step.policy_mask
        rewards, _ = outcome_rewards(step.credit_batch)
        return pact_critic_targets(rewards, step.old_logprobs, updated, step.policy_mask, self.pact), updated

    def update(self, step: StepContext) -> dict[str, float]:
        """PACT's critic phase: the targets from the updated actor, then ``epochs x minibatches`` BCE steps in
        row order; logs rho's spread."""
        (targets, weights, mask), updated = self.critic_targets(step)
        metrics = rho_metrics(step.old_logprobs, updated, step.policy_mask, self.pact)
        if self.probe is not None:
            return {**metrics, **self.probe.fit(step, targets, mask, weights)}
        assert self.critic is not None
        cfg, params = self.run.cfg, list(self.critic.parameters())
        rows_all = torch.arange(step.input_ids.shape[0], device=step.input_ids.device)
        out: dict[str, list[float]] = {}
        for _ in range(cfg.epochs):
            for rows in torch.tensor_split(rows_all, min(cfg.minibatches, len(rows_all))):
                z = self.critic(step.input_ids[rows], step.attention_mask[rows])  # (b, T) logits
                loss, m = value_loss(z, targets[rows], mask[rows], kind="bce", weights=weights[rows])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                average_gradients(params, self.run.accelerator)
                m["critic/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
                self.optimizer.step()
                for k, v in m.items():
                    out.setdefault(k, []).append(float(v))
        metrics["critic/target_mask_frac"] = target_mask_frac(mask, step.policy_mask)
        return {**metrics, **{k: float(np.mean(v)) for k, v in out.items()}}

    def state_dict(self) -> dict[str, Any]:
        if self.probe is not None:
            return {"probe": self.probe.state_dict()}
        assert self.critic is not None
        return {"critic_model": self.critic.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        want = "probe" if self.probe is not None else "critic_model"
        if want not in state:
            raise ValueError(
                f"PACT's critic: the saved state holds {sorted(state)}, not the {want!r} this run's "
                f"pact:critic={self.pact.critic!r} needs; resume or probe with the run's own critic setting"
            )
        if self.probe is not None:
            self.probe.load_state_dict(state["probe"])
            return
        assert self.critic is not None
        self.critic.load_state_dict(state["critic_model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def save(self, folder: Path) -> None:
        if self.probe is not None:
            self.probe.save(folder)
            return
        from safetensors.torch import save_file

        assert self.critic is not None
        state = {k: v.detach().contiguous().cpu() for k, v in self.critic.state_dict().items()}
        save_file(state, str(folder / CRITIC_MODEL_FILE))
