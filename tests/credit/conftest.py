"""The adapters' shared case: one batch of the bundled model's Math-v0 rollouts with every module's native signals.

Built once per session (about 8 s on the CPU) by the trainer's own machinery: `setup_probe` loads the model, the
env and each module's signal providers, `probe_batch` samples the responses, and each module's rollout-phase
signals are computed and put into a `CreditBatch` exactly as the trainer's credit step does. The adapter tests
feed the same responses and signals to TRL and verl in their own layouts and compare with the module run on it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from creditgym.credit import CreditBatch, CreditModule, CreditOutput, available

#: The modules' configs: each default, except vine's step boundaries (a step every 4 tokens, K = 2
#: continuations), so that its ``mc_values`` vary inside a response.
LABELS = tuple("vine:every=4;k=2" if name == "vine" else name for name in available())


@dataclass(frozen=True)
class AdapterCase:
    """B responses (P prompts x G) of the bundled model on Math-v0, with each module's native batch.

    Attributes:
        prompt_ids, response_ids: per row, the prompt's tokens and everything after it (the policy's tokens).
        logprobs: per row, the behaviour log-probs of the response tokens (the ledger's).
        rewards: (B,) the verdicts. group_ids: (B,) the prompt of each row, 0..P-1, G rows each, contiguous.
        modules: module name -> (module, config, the native `CreditBatch` with its signals), batch at step 0
            of 1; `native` runs it at any step.
    """

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    logprobs: list[list[float]]
    rewards: torch.Tensor
    group_ids: torch.Tensor
    modules: Mapping[str, tuple[CreditModule[Any], Any, CreditBatch]]

    @property
    def width(self) -> int:
        """C, the longest response."""
        return max(len(r) for r in self.response_ids)

    def responses(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) in the native layout (prompt first) -> (B, C, ...) response-only, right-padded with 0."""
        out = x.new_zeros((x.shape[0], self.width, *x.shape[2:]))
        for row, (p, r) in enumerate(zip(self.prompt_ids, self.response_ids, strict=True)):
            out[row, : len(r)] = x[row, len(p) : len(p) + len(r)]
        return out

    def signals(self, name: str) -> dict[str, torch.Tensor]:
        """The module's signals (``values`` included), response-only (B, C, ...)."""
        module, _, batch = self.modules[name]
        found = {**batch.signals, **({} if batch.values is None else {"values": batch.values})}
        return {k: self.responses(found[k]) for k in module.signals}

    def native(self, name: str, step: int, total_steps: int) -> CreditOutput:
        """The module run natively on its batch at ``step`` of ``total_steps``."""
        module, cfg, batch = self.modules[name]
        return module(dataclasses.replace(batch, step=step, total_steps=total_steps), cfg)


@pytest.fixture(scope="session")
def adapter_case() -> AdapterCase:
    from creditgym.agents.probe.run import ProbeConfig, probe_batch, setup_probe
    from creditgym.agents.providers.base import ForwardRequest, StepContext
    from creditgym.credit import get
    from creditgym.envs.core import Source

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = ProbeConfig(
            env_id="creditgym/Math-v0", credit=LABELS, prompts=3, group=4, max_new_tokens=48, seed=0
        )
        setup = setup_probe(cfg)
        episodes = probe_batch(setup, cfg)
        modules = {}
        for label, (module, credit_cfg, providers) in setup.modules.items():
            request = functools.reduce(
                operator.or_, (p.forward_request() for p in providers.values()), ForwardRequest()
            )
            ctx = StepContext.of(0, episodes, setup.policy, request, torch.Generator().manual_seed(0))
            signals = {name: p.compute(ctx) for name, p in providers.items()}
            modules[get(label.partition(":")[0]).name] = (
                module,
                credit_cfg,
                ctx.make_credit_batch(signals, total_steps=1),
            )
    finally:
        torch.set_num_threads(threads)
    prompts, responses, logprobs = [], [], []
    for ep in episodes:
        led = ep.env.ledger
        p = int((led.source == Source.PROMPT).sum())
        assert (led.source[:p] == Source.PROMPT).all() and (led.source[p:] == Source.POLICY).all()
        prompts.append(led.token_id[:p].tolist())
        responses.append(led.token_id[p:].tolist())
        logprobs.append(led.logprob[p:].tolist())
    batch = next(iter(modules.values()))[2]
    return AdapterCase(
        prompts,
        responses,
        logprobs,
        batch.token_rewards.sum(1).cpu(),
        batch.group_ids.cpu(),
        modules,
    )
