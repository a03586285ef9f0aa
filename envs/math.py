"""``creditgym/Math-v0``: one-turn math problems with a ``\\boxed{}`` answer, one token per step."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from creditgym.envs.core import TokenEnv, TurnOutcome
from creditgym.envs.math_tasks import DEFAULT_LEVEL, MathTask, TaskSource, resolve_tasks
from creditgym.envs.tokenizer import BUNDLED, render_chat, render_prompt, resolve_tokenizer

INSTRUCTION = "Put your final answer within \\boxed{}."


class MathEnv(TokenEnv):
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
        difficulty: Level or levels of the procedural generator (1 = one-digit sums ... 5 = word problems).
        split: ``"train"`` or ``"test"`` (procedural problems are split by hash; datasets by split name).
        max_new_tokens: Token budget of the response.
        verifier_timeout: Hard deadline of one verification, in seconds.
        system_prompt: Optional system turn.
        stop_token_ids: Tokens that end the response (default: EOS and known end-of-turn markers).
    """

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
        tok = resolve_tokenizer(tokenizer)
        render_chat(
            tok, [{"role": "user", "content": "probe"}]
        )  # fail now, clearly, if there is no chat template
        super().__init__(
            tok, max_new_tokens=max_new_tokens, stop_token_ids=stop_token_ids, render_mode=render_mode
        )
        self.tasks = resolve_tasks(tasks, levels=difficulty, split=split)
        self.verifier_timeout = float(verifier_timeout)
        self.system_prompt = system_prompt
        self.task: MathTask | None = None

    def prompt_tokens(self, task: MathTask, *, counterfactual: bool = False) -> list[int]:
        """The prompt of ``task``; ``counterfactual=True`` drops the formatting instruction (for CoRT replays)."""
        content = task.question if counterfactual else f"{task.question}\n{INSTRUCTION}"
        return render_prompt(self.tokenizer, content, system_prompt=self.system_prompt)

    def counterfactual_prompt_tokens(self) -> list[int]:
        """The current task's prompt without its formatting instruction (the same question, same template)."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        return self.prompt_tokens(self.task, counterfactual=True)

    def oracle_response(self) -> str:
        """A correct response to the current task (for scripted self-checks)."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        return f"The answer is \\boxed{{{self.task.answer}}}."

    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        task = (options or {}).get("task")
        if task is None:
            task = self.tasks.sample(self.np_random)
        elif not isinstance(task, MathTask):
            raise TypeError(f"options['task'] must be a MathTask, got {type(task).__name__}")
        self.task = task
        return self.prompt_tokens(task), {"task_id": task.task_id, "question": task.question}

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        from creditgym.verifiers.math import verify

        assert self.task is not None
        response = self.response_text()
        verdict = verify(response, self.task.answer, timeout=self.verifier_timeout)
        info: dict[str, Any] = {
            "verdict": verdict,
            "status": verdict.status,
            "score": verdict.score,
            "response": response,
            "task_id": self.task.task_id,
            "gold": self.task.answer,
        }
        if verdict.infra_error:
            info["infra_error"] = f"math verifier: {verdict.details.get('error', 'failed')}"
            return TurnOutcome(reward=0.0, truncated=True, info=info)
        return TurnOutcome(
            reward=float(verdict.score or 0.0),
            terminated=not budget_exhausted,
            truncated=budget_exhausted,
            info=info,
        )
