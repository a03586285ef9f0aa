"""What the one-turn task envs (``creditgym/Math-v0``, ``creditgym/Rubric-v0``) share: a task per episode, its
prompt rendered with the tokenizer's chat template, one policy turn graded once by a verifier."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar

from creditgym.envs.core import TokenEnv, TurnOutcome
from creditgym.envs.tokenizer import render_chat, render_prompt, resolve_tokenizer
from creditgym.verifiers.verdict import Verdict

TaskT = TypeVar("TaskT")


class OneTurnEnv(TokenEnv, Generic[TaskT]):
    """A `TokenEnv` whose episode is one task and one graded policy turn.

    Subclasses set ``task_type`` and ``verifier_name`` and implement `prompt_text` (the user turn, with or
    without the task's criteria), `reset_info` and `grade`. They get the `CounterfactualPrompt` capability (the
    prompt without its criteria) and the shared episode rules: ``options={"task": ...}`` plays a given task;
    the verdict's score lands on the last policy token; a verifier failure ends the episode truncated with
    ``info["infra_error"]`` and reward 0.
    """

    task_type: ClassVar[type]
    verifier_name: ClassVar[str]

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_new_tokens: int,
        system_prompt: str | None,
        stop_token_ids: Iterable[int] | None,
        render_mode: str | None,
    ) -> None:
        tok = resolve_tokenizer(tokenizer)
        render_chat(tok, [{"role": "user", "content": "probe"}])  # fail now, clearly, if there is no template
        super().__init__(
            tok, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids, render_mode=render_mode
        )
        self.system_prompt = system_prompt
        self.task: TaskT | None = None

    # -- for subclasses -----------------------------------------------------------------------------------------

    @abc.abstractmethod
    def prompt_text(self, task: TaskT, *, counterfactual: bool = False) -> str:
        """The user turn of ``task``; ``counterfactual=True`` leaves out what CoRT removes (its criteria)."""

    @abc.abstractmethod
    def reset_info(self, task: TaskT) -> dict[str, Any]:
        """The info dict ``reset`` returns for ``task``."""

    @abc.abstractmethod
    def grade(self, response: str) -> tuple[Verdict, dict[str, Any]]:
        """The verdict on ``response`` to the current task, and what to add to the last step's info."""

    # -- prompts --------------------------------------------------------------------------------------------------

    def prompt_tokens(self, task: TaskT, *, counterfactual: bool = False) -> list[int]:
        """The prompt of ``task`` (system turn, user turn, assistant header); see `prompt_text`."""
        content = self.prompt_text(task, counterfactual=counterfactual)
        return render_prompt(self.tokenizer, content, system_prompt=self.system_prompt)

    @property
    def messages(self) -> list[dict[str, str]]:
        """The current prompt as chat messages (what a chat endpoint is sent); [] before the first ``reset``."""
        if self.task is None:
            return []
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": self.prompt_text(self.task)}]

    @property
    def has_counterfactual(self) -> bool:
        """Whether the counterfactual prompt differs from the prompt (see `CounterfactualPrompt`)."""
        return True

    def counterfactual_prompt_tokens(self) -> list[int]:
        """The current task's prompt without its criteria (the same template and system turn)."""
        return self.prompt_tokens(self.current_task, counterfactual=True)

    @property
    def current_task(self) -> TaskT:
        """The task of the current episode; raises before the first ``reset``."""
        if self.task is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() first")
        return self.task

    # -- episode --------------------------------------------------------------------------------------------------

    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        task = (options or {}).get("task")
        if task is None:
            task = self.tasks.sample(self.np_random)  # type: ignore[attr-defined]
        elif not isinstance(task, self.task_type):
            raise TypeError(f"options['task'] must be a {self.task_type.__name__}, got {type(task).__name__}")
        self.task = task
        return self.prompt_tokens(task), self.reset_info(task)

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        response = self.response_text()
        verdict, extra = self.grade(response)
        info: dict[str, Any] = {
            "verdict": verdict,
            "status": verdict.status,
            "score": verdict.score,
            **extra,
            "response": response,
        }
        if verdict.infra_error:
            info["infra_error"] = f"{self.verifier_name}: {verdict.details.get('error', 'failed')}"
            return TurnOutcome(reward=0.0, truncated=True, info=info)
        return TurnOutcome(
            reward=float(verdict.score or 0.0),
            terminated=not budget_exhausted,
            truncated=budget_exhausted,
            info=info,
        )
