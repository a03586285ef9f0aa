"""``creditgym/SWEBench-v0``: fix a real bug in a Docker sandbox, through plain-text tool calls, one token per step."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from creditgym.envs.core import TokenEnv, TurnOutcome
from creditgym.envs.swe_tools import (
    PROTOCOL,
    Action,
    ToolParseError,
    apply_patch_command,
    apply_replace,
    bash_action,
    format_bash,
    format_view,
    parse_action,
)
from creditgym.envs.tasks import split_of
from creditgym.envs.tokenizer import BUNDLED, render_chat, resolve_tokenizer

if TYPE_CHECKING:
    from creditgym.verifiers.swe.docker_sandbox import DockerSandbox
    from creditgym.verifiers.swe.grading import SWETask
    from creditgym.verifiers.swe.sandbox import SandboxConfig
    from creditgym.verifiers.verdict import Verdict

REWARD_MODES = ("resolved", "partial")
_SENTINEL = "\x00creditgym-turn\x00"
_CHARS_PER_TOKEN = (
    16  # an observation is first cut to observation_tokens * this many characters, then tokenized
)
_LIFETIME_MARGIN_S = 600.0  # an episode's container outlives its time_limit by this much at most


class SWEEnv(TokenEnv):
    """Resolve a GitHub-style issue in a repository, as a multi-turn token-level episode.

    Description:
        Each episode draws one task (``options={"task_id": ...}`` picks one) and renders, with the tokenizer's
        chat template, a system turn documenting the tool protocol (:data:`creditgym.envs.swe_tools.PROTOCOL`)
        and a user turn holding the problem statement. The policy writes a turn one token at a time and ends it
        with one action (``bash``, ``view``, ``replace`` or ``submit``). When the turn ends, the env parses the
        action, runs it in the task's sandbox and appends the output, clipped to ``observation_tokens``, as a
        user turn of env tokens (source ``"env"``, the turn's index), followed by the assistant header. A turn
        that does not parse gets a short format-error observation. On ``submit``, or when the turn, token or
        wall-clock budget runs out, the env takes the repository's diff and grades it in a fresh container
        (:func:`creditgym.verifiers.swe.grading.grade`: test files reset, test patch applied, FAIL_TO_PASS and
        PASS_TO_PASS run).

    Action Space:
        ``Discrete(V)`` with V = ``len(tokenizer)`` (a 1-D array of ids steps a chunk, see ``step_chunk``).

    Observation Space:
        ``Dict(tokens=Sequence(Discrete(V)), sources=Sequence(Discrete(3)))``: the whole conversation so far.

    Rewards:
        0 on every step except the last policy token of the episode, which gets the grade: 1 if the issue is
        resolved (``reward_mode="resolved"``), or the fraction of FAIL_TO_PASS tests passing, 0 if any
        PASS_TO_PASS test breaks (``reward_mode="partial"``). ``info["verdict"]`` lists every test's outcome.

    Episode End:
        ``terminated`` on ``submit``. ``truncated`` when ``max_turns``, ``max_episode_tokens`` or ``time_limit``
        runs out (the diff so far is still graded), or on an infrastructure fault (engine down, image missing,
        container gone: ``info["infra_error"]`` says which, the reward is 0 and trainers drop the episode). Only
        faults the agent cannot cause are infrastructure faults: PID 1 is out of its reach, and whatever its own
        processes do (kill all they own, fill the pids table, memory or disk) is graded as its own failure.

    Sandbox:
        The task's image (built locally from a task repo, cached by content hash, or an official SWE-bench image
        that must already be present) runs as a :class:`~creditgym.verifiers.swe.docker_sandbox.DockerSandbox`: no
        network, no capabilities, memory / CPU / pids / disk limits, ``command_timeout`` per command (everything
        the command started is killed), output, file reads and the diff capped (``SandboxConfig``), symlinks
        out of the repository refused by the file tools. It starts at the first action, not at ``reset`` (so
        resets are cheap and a fresh episode can be forked into a group), and is removed at the episode's end, on
        ``reset``, on ``close``, on an exception, on SIGINT/SIGTERM, at interpreter exit, and by the engine
        ``time_limit`` + 10 minutes after it started. The first sandbox of a process removes the containers that
        dead processes left behind.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template, or a name/path (default: the bundled one).
        tasks: ``"bundled"`` (default), a task repo (a folder holding ``tasks/<id>/``), a JSON/JSONL/parquet file
            of SWE-bench instances, or a list of :class:`~creditgym.verifiers.swe.grading.SWETask`.
        split: ``None`` (every task), or ``"train"`` / ``"test"``: the tasks whose instance id hashes into that
            split (one in five is ``"test"``, as for Math-v0's problems).
        reward_mode: ``"resolved"`` or ``"partial"``.
        max_new_tokens: Token budget of one policy turn.
        max_turns: Policy turns before the episode is graded as it stands.
        max_episode_tokens: Token budget of the whole episode (prompt, turns and observations).
        observation_tokens: Most tokens one observation may add (head and tail kept, the cut marked).
        time_limit: Wall-clock seconds from ``reset`` before the episode is graded as it stands.
        command_timeout: Seconds a ``bash`` action may run before it is killed.
        sandbox: Limits of the episode's container (default: :class:`~creditgym.verifiers.swe.sandbox.SandboxConfig`
            with ``command_timeout`` and a ``max_lifetime`` of ``time_limit`` + 10 minutes).
        grade_timeout: Seconds the tests may run when grading.
        build_images: Build a missing task image (from its task folder) instead of reporting it missing.
        system_prompt: Replaces the protocol text (``{workdir}`` and ``{timeout}`` are filled in).
        stop_token_ids: Tokens that end a turn (default: EOS and known end-of-turn markers).
    """

    def __init__(
        self,
        tokenizer: Any = BUNDLED,
        tasks: str | os.PathLike[str] | Sequence[SWETask] = "bundled",
        *,
        split: str | None = None,
        reward_mode: str = "resolved",
        max_new_tokens: int = 1024,
        max_turns: int = 20,
        max_episode_tokens: int = 16_384,
        observation_tokens: int = 512,
        time_limit: float = 1800.0,
        command_timeout: float = 60.0,
        sandbox: SandboxConfig | None = None,
        grade_timeout: float = 300.0,
        build_images: bool = True,
        system_prompt: str | None = None,
        stop_token_ids: Sequence[int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        from creditgym.envs.swe_tasks import load_tasks
        from creditgym.verifiers.swe.sandbox import SandboxConfig, install_signal_handlers

        install_signal_handlers()  # no-op off the main thread; sandboxes of this env may start in other threads
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        for name, value in (("max_turns", max_turns), ("observation_tokens", observation_tokens)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if time_limit <= 0 or command_timeout <= 0 or grade_timeout <= 0:
            raise ValueError("time_limit, command_timeout and grade_timeout must be > 0 seconds")
        if max_episode_tokens <= max_new_tokens:
            raise ValueError(
                f"max_episode_tokens ({max_episode_tokens}) must exceed max_new_tokens ({max_new_tokens})"
            )
        super().__init__(
            resolve_tokenizer(tokenizer),
            max_new_tokens=max_new_tokens,
            stop_token_ids=stop_token_ids,
            render_mode=render_mode,
        )
        self.tasks = load_tasks(tasks)
        if split is not None:
            if split not in ("train", "test"):
                raise ValueError(f"split must be 'train', 'test' or None (every task), got {split!r}")
            self.tasks = [t for t in self.tasks if split_of(t.instance_id) == split]
        if not self.tasks:
            where = f"split {split!r} of " if split is not None else ""
            raise ValueError(f"no SWE tasks in {where}{tasks!r}" + (" (use split=None)" if split else ""))
        self.reward_mode = reward_mode
        self.score_name = "mean score" if reward_mode == "partial" else "resolve rate"
        self.max_turns = int(max_turns)
        self.max_episode_tokens = int(max_episode_tokens)
        self.observation_tokens = int(observation_tokens)
        self.time_limit = float(time_limit)
        self.command_timeout = float(command_timeout)
        self.sandbox_config = sandbox or SandboxConfig(
            command_timeout=self.command_timeout, max_lifetime=self.time_limit + _LIFETIME_MARGIN_S
        )
        self.grade_timeout = float(grade_timeout)
        self.build_images = build_images
        self.system_prompt = system_prompt
        self.task: SWETask | None = None
        self.messages: list[dict[str, str]] = []
        self.transcript: list[dict[str, Any]] = []
        self._sandbox: DockerSandbox | None = None
        self._t0 = 0.0

    # -- episode --------------------------------------------------------------------------------------------------

    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        self._close_sandbox()
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            by_id = {t.instance_id: t for t in self.tasks}
            if task_id not in by_id:
                raise ValueError(f"unknown task_id {task_id!r}; this env's tasks: {sorted(by_id)}")
            self.task = by_id[task_id]
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        system = (self.system_prompt or PROTOCOL).format(
            workdir=self.task.workdir, timeout=self.command_timeout
        )
        user = (
            f"Repository: {self.task.repo} (checked out at {self.task.workdir})\n\n"
            f"{self.task.problem_statement.strip()}"
        )
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.transcript = []
        prompt = render_chat(self.tokenizer, self.messages)
        if len(prompt) + self.max_new_tokens > self.max_episode_tokens:
            raise ValueError(
                f"task {self.task.instance_id}: the prompt ({len(prompt)} tokens) plus one turn "
                f"(max_new_tokens={self.max_new_tokens}) exceeds max_episode_tokens={self.max_episode_tokens}"
            )
        self._t0 = time.monotonic()
        return prompt, {"task_id": self.task.instance_id, "repo": self.task.repo}

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        from creditgym.verifiers.swe.sandbox import SandboxError

        assert self.task is not None
        t0 = time.monotonic()
        text = self.response_text()
        self.messages.append({"role": "assistant", "content": text})
        step: dict[str, Any] = {"turn": self._turn, "response": text, "action": None}
        self.transcript.append(step)
        try:
            action = parse_action(text)
            step["action"] = action.kind
            if action.kind == "submit":
                return self._finish("submit")
            observation = self._run(action)
        except ToolParseError as e:
            observation = f"Format error: {e}"
        except SandboxError as e:
            return self._infra_error(e)
        step["observation"], step["seconds"] = observation, round(time.monotonic() - t0, 3)
        if self._turn >= self.max_turns:
            return self._finish("max_turns")
        if time.monotonic() - self._t0 > self.time_limit:
            return self._finish("time_limit")
        observation = self._clip(observation)
        env_tokens = self._continuation(observation, ended_by_stop=not budget_exhausted)
        if self.ledger.n + len(env_tokens) + self.max_new_tokens > self.max_episode_tokens:
            return self._finish("max_episode_tokens")
        self.messages.append({"role": "user", "content": observation})
        return TurnOutcome(env_tokens=env_tokens, info={"action": step["action"], "observation": observation})

    def _run(self, action: Action) -> str:
        from creditgym.verifiers.swe.sandbox import resolve_path

        sandbox = self._ensure_sandbox()
        if action.kind == "bash":
            try:
                result = sandbox.exec(action.command, timeout=self.command_timeout)
            except ValueError as e:  # a NUL byte in the command
                return f"Error: {e}"
            return format_bash(
                result.exit_code,
                result.output,
                result.timed_out,
                self.command_timeout,
                disk=(
                    f"{self.sandbox_config.disk} or {self.sandbox_config.inodes} new files"
                    if result.disk_exceeded
                    else None
                ),
            )
        try:
            path = resolve_path(sandbox.workdir, action.path)
        except ValueError as e:
            return f"Error: {e}"
        try:
            raw = sandbox.read_file(path)
        except (OSError, ValueError) as e:
            return f"Error: cannot read {action.path}: {e}"
        text = raw.decode("utf-8", errors="replace")
        if action.kind == "view":
            return format_view(action.path, text, action.lines)
        try:
            sandbox.write_file(path, apply_replace(text, action))
        except ToolParseError as e:
            return f"Error: {e}"
        except (OSError, ValueError) as e:
            return f"Error: cannot write {action.path}: {e}"
        return f"Replaced 1 occurrence in {action.path}."

    def _finish(self, reason: str) -> TurnOutcome:
        from creditgym.verifiers.swe.grading import grade
        from creditgym.verifiers.swe.sandbox import DiffError, SandboxError
        from creditgym.verifiers.verdict import Verdict

        assert self.task is not None
        try:
            patch = self._sandbox.diff() if self._sandbox is not None else ""
        except SandboxError as e:
            return self._infra_error(e)
        except DiffError as e:  # the agent broke the repository (rm -rf .git) or grew the diff past its cap
            verdict = Verdict(
                0.0, "wrong", {"error": str(e), "error_kind": "diff", "resolution": "RESOLVED_NO"}
            )
            return self._outcome(verdict, reason, "")
        finally:
            self._close_sandbox()
        verdict = grade(self.task, patch, partial=self.reward_mode == "partial", timeout=self.grade_timeout)
        return self._outcome(verdict, reason, patch)

    def _outcome(self, verdict: Verdict, reason: str, patch: str) -> TurnOutcome:
        info = self._verdict_info(verdict, reason, patch)
        if verdict.infra_error:
            return TurnOutcome(truncated=True, info=info)
        return TurnOutcome(
            reward=float(verdict.score or 0.0),
            terminated=reason == "submit",
            truncated=reason != "submit",
            info=info,
        )

    def _verdict_info(self, verdict: Verdict, reason: str, patch: str) -> dict[str, Any]:
        details = dict(verdict.details)
        info: dict[str, Any] = {
            "verdict": verdict,
            "status": verdict.status,
            "resolved": details.get("resolution") == "RESOLVED_FULL",
            "tests": details.get("tests", {}),
            "end_reason": reason,
            "patch": patch,
            "tampered": details.get("error_kind") == "tampered",
            "turns": len(self.transcript),
        }
        if verdict.infra_error:
            info["infra_error"] = str(details.get("error", "grading failed"))
        return info

    def _infra_error(self, err: Exception) -> TurnOutcome:
        self._close_sandbox()
        kind = getattr(err, "kind", "engine")
        return TurnOutcome(
            truncated=True,
            info={"infra_error": f"{kind}: {err}", "status": "infra_error", "turns": len(self.transcript)},
        )

    # -- sandbox --------------------------------------------------------------------------------------------------

    def _ensure_sandbox(self) -> DockerSandbox:
        from creditgym.verifiers.swe.docker_sandbox import DockerSandbox
        from creditgym.verifiers.swe.images import ensure_image

        if self._sandbox is None:
            assert self.task is not None
            image = ensure_image(self.task, build=self.build_images)
            self._sandbox = DockerSandbox(
                image, self.sandbox_config, labels={"org.creditgym.role": "episode"}
            )
        return self._sandbox

    def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.close()

    def close(self) -> None:
        self._close_sandbox()
        super().close()

    # -- rendering observations -----------------------------------------------------------------------------------

    def _clip(self, observation: str) -> str:
        """At most ``observation_tokens`` tokens of ``observation``: head and tail kept, the cut marked.

        A long observation (a file of long lines) is first cut to a character budget, so tokenizing it costs
        no more than tokenizing ``observation_tokens * 16`` characters.
        """
        chars = self.observation_tokens * _CHARS_PER_TOKEN
        if len(observation) > chars:
            half = chars // 2
            cut = len(observation) - 2 * half
            observation = f"{observation[:half]}\n[... {cut} characters cut ...]\n{observation[-half:]}"
        ids = self.tokenizer(observation, add_special_tokens=False)["input_ids"]
        if len(ids) <= self.observation_tokens:
            return observation
        half = self.observation_tokens // 2
        head = self.tokenizer.decode(ids[:half])
        tail = self.tokenizer.decode(ids[len(ids) - half :])
        return f"{head}\n[... {len(ids) - 2 * half} tokens cut ...]\n{tail}"

    def _continuation(self, observation: str, *, ended_by_stop: bool) -> list[int]:
        """Tokens that close the assistant turn (unless its stop token did) and open the next one.

        Rendered with the tokenizer's own chat template: whatever follows an assistant turn's content in a
        conversation ``[..., assistant, user(observation)]`` with the generation prompt added.
        """
        messages = [
            {"role": "user", "content": "-"},
            {"role": "assistant", "content": _SENTINEL},
            {"role": "user", "content": observation},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        rest = text[text.index(_SENTINEL) + len(_SENTINEL) :]
        if ended_by_stop:
            stop_text = self.tokenizer.decode([int(self.ledger.token_id[-1])])
            if stop_text and rest.startswith(stop_text):
                rest = rest[len(stop_text) :]
        return list(self.tokenizer(rest, add_special_tokens=False)["input_ids"])

    # -- scripted play and forking --------------------------------------------------------------------------------

    def oracle_response(self) -> str:
        """The next turn of an agent that knows the fix: apply the gold patch with one command, then submit."""
        assert self.task is not None
        if not self.transcript:
            return bash_action(apply_patch_command(self.task.gold_patch))
        return "ACTION: submit"

    def empty_response(self) -> str:
        """A turn that submits at once (the empty patch): the floor every agent must beat."""
        return "ACTION: submit"

    def fork(self, n: int | None = None) -> SWEEnv:
        """A copy of a fresh episode (before its first action), e.g. to sample a group on one task.

        Raises:
            RuntimeError: the episode already acted: its sandbox holds state a copy cannot share.
        """
        if self._sandbox is not None or self.transcript:
            raise RuntimeError(
                "an SWEBench episode can only be forked before its first action (its sandbox has state); "
                "fork right after reset()"
            )
        new = super().fork(n)
        new.messages = [dict(m) for m in self.messages]
        new.transcript = []
        return new  # type: ignore[return-value]
