"""``creditgym/Rubric-v0``: one-turn instructions graded against a rubric of criteria, one token per step."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from creditgym.envs.one_turn import OneTurnEnv
from creditgym.envs.rubric_tasks import RubricTask, RubricTaskSource, get_preset, resolve_tasks
from creditgym.envs.tokenizer import BUNDLED
from creditgym.verifiers.rubric import REWARD_MODES, Criterion, describe
from creditgym.verifiers.verdict import Verdict

CRITERIA_HEADER = "Your response must meet these criteria:"


def criteria_block(task: RubricTask) -> str:
    """The text the prompt adds after the instruction: a blank line, a header and a numbered list of criteria.

    Empty when the task does not render its criteria (IFEval data, whose prompt already states them).
    """
    return listed_criteria(task.criteria) if task.render_criteria else ""


def listed_criteria(criteria: Sequence[Criterion]) -> str:
    """A blank line, the criteria header and ``criteria`` as a numbered list, each in its own words."""
    items = "\n".join(f"{i}. {describe(c)}" for i, c in enumerate(criteria, start=1))
    return f"\n\n{CRITERIA_HEADER}\n{items}"


class RubricEnv(OneTurnEnv[RubricTask]):
    """Instruction following against a rubric, as a token-level episode.

    Description:
        Each episode draws one task (an instruction plus 1-4 criteria for the bundled generator, 4-8 with
        ``preset="hard"``) and renders it with the tokenizer's chat template as one user turn: the instruction, a
        blank line, then ``"Your response must meet these criteria:"`` and the criteria as a numbered list, each in
        IFEval's own words (``build_description``). The policy writes the response one token at a time; at the
        end-of-turn token (or the budget) it is graded once by :func:`creditgym.verifiers.rubric.grade`.

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
        preset: The procedural tasks' family (:data:`~creditgym.envs.rubric_tasks.PRESETS`): ``"default"`` (1-4
            criteria of 16 kinds, 256-token budget) or ``"hard"`` (4-8 criteria, 2-5 of them localized: an end
            phrase, a P.S., a keyword in the first sentence, a bullet count, a title; 192-token budget).
        min_criteria: Fewest criteria per procedural task (default: the preset's).
        max_criteria: Most criteria per procedural task (default and cap: the preset's, 4 or 8).
        split: ``"train"`` or ``"test"`` (procedural tasks are split by hash).
        max_new_tokens: Token budget of the response (default: the preset's).
        grade_timeout: Deadline in seconds for the checks of a very long response.
        system_prompt: Optional system turn (kept in the counterfactual prompt too).
        stop_token_ids: Tokens that end the response (default: EOS and known end-of-turn markers).
    """

    task_type = RubricTask
    verifier_name = "rubric grader"

    def __init__(
        self,
        tokenizer: Any = BUNDLED,
        tasks: str | os.PathLike[str] | RubricTaskSource | Sequence[RubricTask] | None = "procedural",
        *,
        reward_mode: str = "partial",
        preset: str = "default",
        min_criteria: int | None = None,
        max_criteria: int | None = None,
        split: str = "train",
        max_new_tokens: int | None = None,
        grade_timeout: float = 5.0,
        system_prompt: str | None = None,
        stop_token_ids: Sequence[int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        budget = get_preset(preset).max_new_tokens if max_new_tokens is None else max_new_tokens
        super().__init__(
            tokenizer,
            max_new_tokens=budget,
            system_prompt=system_prompt,
            stop_token_ids=stop_token_ids,
            render_mode=render_mode,
        )
        self.tasks = resolve_tasks(
            tasks, min_criteria=min_criteria, max_criteria=max_criteria, split=split, preset=preset
        )
        self.reward_mode = reward_mode
        self.score_name = "mean score" if reward_mode == "partial" else "accuracy"
        self.grade_timeout = float(grade_timeout)

    @property
    def has_counterfactual(self) -> bool:
        """Whether the counterfactual prompt differs from the prompt (False for IFEval-format data)."""
        if self.task is not None:
            return self.task.render_criteria
        return bool(getattr(self.tasks, "has_counterfactual", True))

    def prompt_text(self, task: RubricTask, *, counterfactual: bool = False) -> str:
        """The user turn's text: the instruction, plus the criteria block unless ``counterfactual``."""
        return task.instruction if counterfactual else task.instruction + criteria_block(task)

    def oracle_response(self) -> str:
        """A response that passes every criterion of the current task (procedural tasks only)."""
        task = self.current_task
        if task.oracle is None:
            raise ValueError(
                f"task {task.task_id!r} ({task.source}) has no oracle response; only procedural tasks do"
            )
        return task.oracle

    def reset_info(self, task: RubricTask) -> dict[str, Any]:
        return {
            "task_id": task.task_id,
            "instruction": task.instruction,
            "criteria_ids": [c.id for c in task.criteria],
        }

    def grade(self, response: str) -> tuple[Verdict, dict[str, Any]]:
        from creditgym.verifiers.rubric import grade

        task = self.current_task
        verdict = grade(response, task.criteria, mode=self.reward_mode, timeout=self.grade_timeout)  # type: ignore[arg-type]
        extra = {
            "criteria": list(verdict.details["criteria"]),
            "reward_mode": self.reward_mode,
            "task_id": task.task_id,
        }
        return verdict, extra
