"""Teachers: the ``teacher`` provider of the ``teacher_logprobs`` signal (CAST's stop-gradient self-teacher,
arXiv 2606.00172).

``teacher_logprobs[i, t]`` is the log-prob of the sampled token ``t`` of row ``i`` under the teacher, teacher-forced,
without gradients, aligned with ``old_logprobs`` (0 off the policy mask). The teacher never sees the task's answer
(the paper's ablation: a teacher given the answer does worse). Which teacher is the module's ``teacher`` field:

* ``"context"`` (CAST's default): the behaviour policy's own weights, scoring each response after a fixed,
  answer-free block prepended to the prompt, for the teacher only. ``teacher_context`` picks the block:
  ``"examples:N"``, N worked examples of the task family (the env's `OracleResponse` to tasks it draws with the
  reset seeds ``EXAMPLE_SEED + j``, outside the ``[0, 2**31)`` range training resets use), each rendered as its
  prompt, its worked response and the end-of-turn token; or ``"check"``, the instruction `CHECK_INSTRUCTION`. The
  block is built once, from tasks that are not the batch's, so it holds none of the batch's answers; a row whose
  prompt equals an example's prompt is scored without the block (its gap is 0), counted in
  ``teacher/context_collisions``. Input of row i: ``block + prompt_i + response_i``; no state.
* ``"model:PATH"``: a separate model from a folder (or ``creditgym/tiny``), sharing the policy's tokenizer; fixed.
* ``"snapshot"`` (ablation): a copy of the policy refreshed to the current weights every ``teacher_refresh_every``
  optimizer steps. Right after a refresh the gap is exactly 0; in between, teacher-negative tokens are the ones
  the last updates reinforced (on the chains: the answer digits of correct rows).
* ``"ema"`` (ablation): a copy moved after every step as ``phi <- teacher_ema * phi + (1 - teacher_ema) theta``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from creditgym.agents.providers.base import (
    RunContext,
    SignalProvider,
    StepContext,
    register_provider,
    sequence_logprobs,
)
from creditgym.credit.cast import parse_context, parse_teacher
from creditgym.envs.core import Forkable, OracleResponse, Source

__all__ = ["CHECK_INSTRUCTION", "EXAMPLE_SEED", "Teacher", "context_block"]

#: First reset seed of the worked examples (training resets draw seeds in [0, 2**31)).
EXAMPLE_SEED = 2**31
#: The ``teacher_context="check"`` block.
CHECK_INSTRUCTION = (
    "Check each step: recompute every result before you write it, and carry it to the next step.\n"
)


def context_block(env: Any, tokenizer: Any, spec: str) -> tuple[list[int], list[list[int]]]:
    """The teacher's answer-free block (token ids) and the prompts of its worked examples (module docstring).

    Args:
        env: The run's env (unwrapped); ``examples:N`` needs `Forkable` and `OracleResponse`. It is not touched:
            the examples come from forks reset with their own seeds.
        tokenizer: The policy's tokenizer.
        spec: ``teacher_context``.

    Raises:
        ValueError: a malformed spec, or ``examples:N`` on an env without forks or oracle responses.
    """
    kind, n = parse_context(spec)
    if kind == "check":
        return list(tokenizer.encode(CHECK_INSTRUCTION, add_special_tokens=False)), []
    if n and not (isinstance(env, Forkable) and isinstance(env, OracleResponse)):
        raise ValueError(
            f"teacher_context={spec!r} needs worked examples, but env {type(env).__name__} cannot give them (it "
            "lacks fork() or oracle_response()); use teacher_context='check' or teacher='model:PATH'"
        )
    block: list[int] = []
    prompts: list[list[int]] = []
    for j in range(n):
        ex = env.fork()
        ex.reset(seed=EXAMPLE_SEED + j)
        prompt = ex.ledger.token_id.tolist()
        worked = tokenizer.encode(ex.oracle_response(), add_special_tokens=False)
        block += [*prompt, *worked, int(ex.end_of_turn_id)]
        prompts.append(prompt)
    return block, prompts


def _prompt_and_response(step: StepContext) -> tuple[list[list[int]], list[list[int]]]:
    prompts, responses = [], []
    for ep in step.episodes:
        led = ep.env.ledger
        start = int((led.source == Source.PROMPT).sum())
        prompts.append(led.token_id[:start].tolist())
        responses.append(led.token_id[start:].tolist())
    return prompts, responses


@register_provider("teacher", signal="teacher_logprobs", default=True)
class Teacher(SignalProvider):
    """Log-probs of the sampled tokens under CAST's teacher (``teacher``: context, model:PATH, snapshot, ema)."""

    params = ("teacher", "teacher_context", "teacher_refresh_every", "teacher_ema")

    def __init__(self, run: RunContext, params: Mapping[str, Any]) -> None:
        super().__init__(run, params)
        self.kind, path = parse_teacher(self.params["teacher"])
        self.model: torch.nn.Module | None = None
        self.teacher_policy: Any = None
        self.block: list[int] = []
        self.example_prompts: list[list[int]] = []
        self.collisions = 0
        if self.kind in ("snapshot", "ema"):
            self.model = copy.deepcopy(run.policy.model).eval().requires_grad_(False)
        elif self.kind == "model":
            self.teacher_policy = _load_teacher(path or "", run)
        else:
            self.block, self.example_prompts = context_block(
                run.env, run.policy.tokenizer, self.params["teacher_context"]
            )

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        if self.model is not None:
            return sequence_logprobs(self.model, step.input_ids, step.attention_mask) * step.policy_mask
        if self.teacher_policy is not None:
            fwd = self.teacher_policy.forward_logprobs(
                step.input_ids, step.attention_mask, return_entropy=False
            )
            return fwd.logprobs.to(step.policy_mask.device) * step.policy_mask
        return self._context_logprobs(step)

    @torch.no_grad()
    def _context_logprobs(self, step: StepContext) -> Tensor:
        """The behaviour policy's log-probs of each response after ``block + prompt`` (0 off the policy mask)."""
        prompts, responses = _prompt_and_response(step)
        clash = [p in self.example_prompts for p in prompts]
        self.collisions += sum(clash)
        contexts = [p if c else self.block + p for p, c in zip(prompts, clash, strict=True)]
        scored = step.policy.logprobs(contexts, responses, return_entropy=False)
        out = torch.zeros(step.batch.input_ids.shape, dtype=torch.float32)
        for row, prompt in enumerate(prompts):
            n = len(responses[row])
            out[row, len(prompt) : len(prompt) + n] = scored.logprobs[row, :n].float().cpu()
        return out.to(step.policy_mask.device) * step.policy_mask

    @torch.no_grad()
    def update(self, step: StepContext) -> dict[str, float]:
        policy = self.run.policy.model
        if self.kind == "ema" and self.model is not None:
            ema = float(self.params["teacher_ema"])
            for t, p in zip(self.model.parameters(), policy.parameters(), strict=True):
                t.mul_(ema).add_(p.detach(), alpha=1.0 - ema)
        elif (
            self.kind == "snapshot"
            and self.model is not None
            and (step.step + 1) % int(self.params["teacher_refresh_every"]) == 0
        ):
            self.model.load_state_dict(policy.state_dict())
        return {"teacher/context_collisions": float(self.collisions)} if self.kind == "context" else {}

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict()} if self.model is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.model is not None and "model" in state:
            self.model.load_state_dict(state["model"])


def _load_teacher(path: str, run: RunContext) -> Any:
    """A separate teacher `Policy` from ``path`` on the policy's device; its tokenizer must be the policy's."""
    from creditgym.agents.train.policy import load_policy

    teacher = load_policy(path, device=run.policy.device)
    teacher.model.eval().requires_grad_(False)
    ours, theirs = run.policy.tokenizer, teacher.tokenizer
    if len(ours) != len(theirs) or ours.get_vocab() != theirs.get_vocab():
        raise ValueError(
            f"teacher='model:{path}': its tokenizer ({len(theirs)} tokens) is not the policy's ({len(ours)} "
            "tokens); a CAST teacher scores the policy's own token ids, so it must share the tokenizer"
        )
    return teacher
