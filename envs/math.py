"""``creditgym/Math-v0``: one-turn math problems with a ``\\boxed{}`` answer, one token per step."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from creditgym.envs.math_tasks import DEFAULT_LEVEL, MathTask, TaskSource, resolve_tasks
from creditgym.envs.one_turn import OneTurnEnv
from creditgym.envs.tokenizer import BUNDLED
from creditgym.verifiers.verdict import Verdict

INSTRUCTION = "Put your final answer within \\boxed{}."


class MathEnv(OneTurnEnv[MathTask]):
    """Math reasoning as a token-level episode.

    Description:
        Each episode draws one problem from the task source and renders it with the tokenizer's chat template as a
        user turn asking for a ``\\boxed{}`` final answer. The policy writes the answer one token at a time; the
        episode ends at the first end-of-turn token (EOS) or when ``max_new_tokens`` is spent. The response is then
        checked once by :func:`creditgym.verifiers.math.verify` (math-verify, in a process pool with a hard
        deadline).

    Action Space:
        ``Discrete(V)`` with V = ``len(tokenizer)`` (a 1-D array of ids steps a chunk, see ``step_chunk``).

    Observation Space:
        ``Dict(tokens=Sequence(Discrete(V)), sources=Sequence(Discrete(3)))``: the whole context so far.

    Rewards:
        0 on every step except the last policy token, which gets the verdict's score (1 correct, 0 otherwise).
        ``info["verdict"]`` holds the :class:`~creditgym.verifiers.Verdict` (status, extracted answer, span).

    Episode End:
        ``terminated`` at EOS; ``truncated`` when ``max_new_tokens`` is reached (the truncated response is still
        verified) or when the verifier fails (``info["infra_error"]`` set, reward 0, not to be trained on).

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template, or a name/path (default: the bundled one).
        tasks: ``"procedural"`` (default), a GSM8K/MATH-style ``.jsonl`` path, a folder saved with ``datasets``,
            a list of :class:`MathTask`, or any :class:`TaskSource`.
        difficulty: Level or levels of the procedural generator (1 = one-digit sums ... 5 = word problems,
            6 = worked chains of 3-6 steps, whose responses run 40-150 tokens: give ``max_new_tokens`` >= 160;
            7 = grade-school word problems in plain words, sized for a 135M instruct model).
        split: ``"train"`` or ``"test"`` (procedural problems are split by hash; datasets by split name).
        max_new_tokens: Token budget of the response.
        verifier_timeout: Hard deadline of one verification, in seconds.
        system_prompt: Optional system turn.
        stop_token_ids: Tokens that end the response (default: EOS and known end-of-turn markers).
    """

    task_type = MathTask
    verifier_name = "math verifier"

    def __init__(
        self,
        tokenizer: Any = BUNDLED,
        tasks: str | os.PathLike[str] | TaskSource | Sequence[MathTask] | None = "procedural",
        *,
        difficulty: int | Sequence[int] = DEFAULT_LEVEL,
        split: str = "train",
        max_new_tokens: int = 256,
        verifier_timeout: float = 2.0,
        system_prompt: str | None = None,
        stop_token_ids: Sequence[int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            tokenizer,
            max_new_tokens=max_new_tokens,
            system_prompt=system_prompt,
            stop_token_ids=stop_token_ids,
            render_mode=render_mode,
        )
        self.tasks = resolve_tasks(tasks, levels=difficulty, split=split)
        self.verifier_timeout = float(verifier_timeout)

    def prompt_text(self, task: MathTask, *, counterfactual: bool = False) -> str:
        """The question and, unless ``counterfactual`` (CoRT's replay), the ``\\boxed{}`` instruction."""
        return task.question if counterfactual else f"{task.question}\n{INSTRUCTION}"

    def oracle_response(self) -> str:
        """A correct response to the current task (for self-checks); for a chain, the worked chain first."""
        task = self.current_task
        worked = f"{task.solution} " if task.solution else ""
        return f"{worked}The answer is \\boxed{{{task.answer}}}."

    def reset_info(self, task: MathTask) -> dict[str, Any]:
        return {"task_id": task.task_id, "question": task.question}

    def grade(self, response: str) -> tuple[Verdict, dict[str, Any]]:
        from creditgym.verifiers.math import verify

        task = self.current_task
        verdict = verify(response, task.answer, timeout=self.verifier_timeout)
        return verdict, {"task_id": task.task_id, "gold": task.answer}
