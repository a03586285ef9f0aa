"""``creditgym/Rubric-v0``: one-turn instructions graded against a rubric of criteria, one token per step."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from creditgym.envs.core import TokenEnv, TurnOutcome
from creditgym.envs.rubric_tasks import RubricTask, RubricTaskSource, resolve_tasks
from creditgym.envs.tokenizer import BUNDLED, render_chat, render_prompt, resolve_tokenizer
from creditgym.verifiers.rubric import REWARD_MODES, describe

CRITERIA_HEADER = "Your response must meet these criteria:"


def criteria_block(task: RubricTask) -> str:
    """The text the prompt adds after the instruction: a blank line, a header and a numbered list of criteria.

    Empty when the task does not render its criteria (IFEval data, whose prompt already states them).
    """
    if not task.render_criteria:
        return ""
    items = "\n".join(f"{i}. {describe(c)}" for i, c in enumerate(task.criteria, start=1))
    return f"\n\n{CRITERIA_HEADER}\n{items}"


class RubricEnv(TokenEnv):
    """Instruction following against a rubric, as a token-level episode.

    Description:
        Each episode draws one task (an instruction plus 1-4 criteria for the bundled generator) and renders it
        with the tokenizer's chat template as one user turn: the instruction, a blank line, then
        ``"Your response must meet these criteria:"`` and the criteria as a numbered list, each in IFEval's own
        words (``build_description``). The policy writes the response one token at a time; at the end-of-turn
        token (or the budget) it is graded once by :func:`creditgym.verifiers.rubric.grade`.

        **Counterfactual prompt** (for CoRT): :meth:`counterfactual_prompt_tokens` is the same instruction,
        rendered with the same template and system turn, with the whole criteria block removed. Removing
        :func:`criteria_block` from the prompt text gives the counterfactual text exactly. Tasks loaded from
        IFEval-format data state their instructions inside the prompt, so nothing can be removed: their criteria
        block is empty, the counterfactual equals the prompt, and :attr:`has_counterfactual` is False.

    Action Space:
        ``Discrete(V)`` with V = ``len(tokenizer)`` (a 1-D array of ids steps a chunk, see ``step_chunk``).

    Observation Space:
        ``Dict(tokens=Sequence(Discrete(V)), sources=Sequence(Discrete(3)))``: the whole context so far.

    Rewards:
        0 on every step except the last policy token, which gets the rubric score: the weighted mean of the
        criterion scores (``reward_mode="partial"``) or 1 only if every criterion passed
        (``reward_mode="all_or_nothing"``). ``info["criteria"]`` lists each criterion's ``id``, ``score``,
        ``passed`` and ``span``; ``info["verdict"]`` holds the whole :class:`~creditgym.verifiers.Verdict`.

    Episode End:
        ``terminated`` at the end-of-turn token; ``truncated`` when ``max_new_tokens`` is reached (the truncated
        response is still graded) or when grading fails (an LLM-judge endpoint down: ``info["infra_error"]`` set,
        reward 0, not to be trained on).

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template, or a name/path (default: the bundled one).
        tasks: ``"procedural"`` (default), an IFEval-format ``.jsonl`` path, a list of :class:`RubricTask`, or any
            task source with ``sample(rng)``.
        reward_mode: ``"partial"`` or ``"all_or_nothing"``.
        min_criteria: Fewest criteria per procedural task.
        max_criteria: Most criteria per procedural task (at most 4).
        split: ``"train"`` or ``"test"`` (procedural tasks are split by hash).
        max_new_tokens: Token budget of the response.
        grade_timeout: Deadline in seconds for the checks of a very long response.
        system_prompt: Optional system turn (kept in the counterfactual prompt too).
        stop_token_ids: Tokens that end the response (default: EOS and known end-of-turn markers).
    """

    def __init__(
        self,
        tokenizer: Any = BUNDLED,
        tasks: str | os.PathLike[str] | RubricTaskSource | Sequence[RubricTask] | None = "procedural",
        *,
        reward_mode: str = "partial",
        min_criteria: int = 1,
        max_criteria: int = 4,
        split: str = "train",
        max_new_tokens: int = 256,
        grade_timeout: float = 5.0,
        system_prompt: str | None = None,
        stop_token_ids: Sequence[int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        tok = resolve_tokenizer(tokenizer)
        render_chat(tok, [{"role": "user", "content": "probe"}])  # fail now, clearly, if there is no template
        super().__init__(
            tok, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids, render_mode=render_mode
        )
        self.tasks = resolve_tasks(tasks, min_criteria=min_criteria, max_criteria=max_criteria, split=split)
        self.reward_mode = reward_mode
        self.grade_timeout = float(grade_timeout)
        self.system_prompt = system_prompt
        self.task: RubricTask | None = None

    @property
    def has_counterfactual(self) -> bool:
        """Whether the counterfactual prompt differs from the prompt (False for IFEval-format data)."""
        if self.task is not None:
            return self.task.render_criteria
        return bool(getattr(self.tasks, "has_counterfactual", True))

    def prompt_text(self, task: RubricTask, *, counterfactual: bool = False) -> str:
        """The user turn's text: the instruction, plus the criteria block unless ``counterfactual``."""
        return task.instruction if counterfactual else task.instruction + criteria_block(task)

    def prompt_tokens(self, task: RubricTask, *, counterfactual: bool = False) -> list[int]:
        """The prompt of ``task``; ``counterfactual=True`` drops every criterion (for CoRT replays)."""
        content = self.prompt_text(task, counterfactual=counterfactual)
        return render_prompt(self.tokenizer, content, system_prompt=self.system_prompt)

    def counterfactual_prompt_tokens(self) -> list[int]:
        """The current task's prompt without its criteria (the same instruction, same template)."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        return self.prompt_tokens(self.task, counterfactual=True)

    def oracle_response(self) -> str:
        """A response that passes every criterion of the current task (procedural tasks only)."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        if self.task.oracle is None:
            raise ValueError(
                f"task {self.task.task_id!r} ({self.task.source}) has no oracle response; only procedural tasks do"
            )
        return self.task.oracle

    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        task = (options or {}).get("task")
        if task is None:
            task = self.tasks.sample(self.np_random)
        elif not isinstance(task, RubricTask):
            raise TypeError(f"options['task'] must be a RubricTask, got {type(task).__name__}")
        self.task = task
        info = {
            "task_id": task.task_id,
            "instruction": task.instruction,
            "criteria_ids": [c.id for c in task.criteria],
        }
        return self.prompt_tokens(task), info

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        from creditgym.verifiers.rubric import grade

        assert self.task is not None
        response = self.response_text()
        verdict = grade(response, self.task.criteria, mode=self.reward_mode, timeout=self.grade_timeout)  # type: ignore[arg-type]
        info: dict[str, Any] = {
            "verdict": verdict,
            "status": verdict.status,
            "score": verdict.score,
            "criteria": list(verdict.details["criteria"]),
            "reward_mode": self.reward_mode,
            "response": response,
            "task_id": self.task.task_id,
        }
        if verdict.infra_error:
            info["infra_error"] = f"rubric grader: {verdict.details.get('error', 'failed')}"
            return TurnOutcome(reward=0.0, truncated=True, info=info)
        return TurnOutcome(
            reward=float(verdict.score or 0.0),
            terminated=not budget_exhausted,
            truncated=budget_exhausted,
            info=info,
        )
