"""The token-level episode: a per-token ledger and the Gymnasium stepping rules shared by creditgym's envs.

One action is one token. The env, not the agent, appends every token it inserts (the prompt, chat-template glue,
tool output), so the sequence the policy sampled is the sequence it trains on. :meth:`TokenEnv.step_chunk`
advances by many tokens at once and builds exactly the episode that stepping them one by one would.
"""

from __future__ import annotations

import abc
import copy
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from creditgym.envs.tokenizer import default_stop_token_ids


class Source(IntEnum):
    """Who put a token into the episode."""

    PROMPT = 0
    POLICY = 1
    ENV = 2


class Ledger:
    """One row per token of an episode, stored column-wise and append-only.

    Columns (all length ``len(ledger)``): ``token_id`` (int64), ``source`` (int8, :class:`Source`), ``turn``
    (int32, the policy turn a token belongs to; prompt tokens are turn 0), ``logprob`` (float32, NaN until the
    agent fills it) and ``reward`` (float32; the verdict lands on the last policy token).

    Rows are never rewritten once appended, except ``logprob`` (filled by the agent) and ``reward``.
    """

    __slots__ = ("_logprob", "_reward", "_source", "_token_id", "_turn", "n")

    def __init__(self, capacity: int = 256) -> None:
        self.n = 0
        self._alloc(max(capacity, 16))

    def _alloc(self, capacity: int) -> None:
        old = None if not hasattr(self, "_token_id") else (self._token_id, self._source, self._turn)
        old_lp = None if old is None else (self._logprob, self._reward)
        self._token_id = np.zeros(capacity, dtype=np.int64)
        self._source = np.zeros(capacity, dtype=np.int8)
        self._turn = np.zeros(capacity, dtype=np.int32)
        self._logprob = np.full(capacity, np.nan, dtype=np.float32)
        self._reward = np.zeros(capacity, dtype=np.float32)
        if old is not None:
            n = self.n
            self._token_id[:n], self._source[:n], self._turn[:n] = old[0][:n], old[1][:n], old[2][:n]
            self._logprob[:n], self._reward[:n] = old_lp[0][:n], old_lp[1][:n]

    def __len__(self) -> int:
        return self.n

    def append(self, token: int, source: int, turn: int) -> None:
        n = self.n
        if n == len(self._token_id):
            self._alloc(2 * n)
        self._token_id[n] = token
        self._source[n] = source
        self._turn[n] = turn
        self.n = n + 1

    def extend(self, tokens: np.ndarray, source: int, turn: int) -> None:
        n, k = self.n, len(tokens)
        if n + k > len(self._token_id):
            self._alloc(max(2 * len(self._token_id), n + k))
        self._token_id[n : n + k] = tokens
        self._source[n : n + k] = source
        self._turn[n : n + k] = turn
        self.n = n + k

    @property
    def token_id(self) -> np.ndarray:
        return self._token_id[: self.n]

    @property
    def source(self) -> np.ndarray:
        return self._source[: self.n]

    @property
    def turn(self) -> np.ndarray:
        return self._turn[: self.n]

    @property
    def logprob(self) -> np.ndarray:
        """Writable: the agent fills the behaviour policy's log-probability of each policy token here."""
        return self._logprob[: self.n]

    @property
    def reward(self) -> np.ndarray:
        return self._reward[: self.n]

    @property
    def policy_mask(self) -> np.ndarray:
        return self.source == Source.POLICY

    def copy(self, n: int | None = None) -> Ledger:
        """A deep copy of the first ``n`` rows (all rows by default)."""
        n = self.n if n is None else n
        if not 0 <= n <= self.n:
            raise ValueError(f"prefix length {n} outside [0, {self.n}]")
        out = Ledger(capacity=max(2 * n, 16))
        out.n = n
        for name in self.__slots__[:-1]:
            getattr(out, name)[:n] = getattr(self, name)[:n]
        return out

    def as_dict(self) -> dict[str, np.ndarray]:
        """Trimmed copies of every column."""
        return {k: getattr(self, k).copy() for k in ("token_id", "source", "turn", "logprob", "reward")}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger) or other.n != self.n:
            return False
        a, b = self.as_dict(), other.as_dict()
        return all(np.array_equal(a[k], b[k], equal_nan=k == "logprob") for k in a)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        counts = np.bincount(self.source, minlength=3)
        return f"Ledger(n={self.n}, prompt={counts[0]}, policy={counts[1]}, env={counts[2]})"


@dataclass
class TurnOutcome:
    """What an env decides when a policy turn ends (stop token or budget).

    Attributes:
        reward: Reward placed on the turn's last policy token.
        terminated: The episode reached a verdict.
        truncated: A budget ran out, or an infrastructure fault ended the episode (``info["infra_error"]``).
        env_tokens: Tokens the env appends after the turn (tool output, the next user turn); multi-turn only.
        info: Merged into the step's info dict.
    """

    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    env_tokens: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


def _token_id(action: Any) -> int:
    """One token id from a ``step`` action: a Python or NumPy integer (not a bool, float or string)."""
    if isinstance(action, np.ndarray) and action.ndim == 0:
        action = action[()]
    if isinstance(action, (bool, np.bool_)) or not isinstance(action, numbers.Integral):
        raise TypeError(
            f"step() expects a token id (an int) or a 1-D integer array of ids, got {type(action).__name__} "
            f"{action!r}"
        )
    return int(action)


class TokenEnv(gym.Env[dict[str, np.ndarray], int], abc.ABC):
    """Token-level stepping shared by creditgym's envs (a ``gymnasium.Env``; subclasses add tasks and verdicts).

    Subclasses implement :meth:`_begin_episode` (draw a task, return the prompt tokens) and :meth:`_end_turn`
    (called when a policy turn ends; returns a :class:`TurnOutcome`).

    Action Space:
        ``Discrete(V)``, V = ``len(tokenizer)``: the next token id. ``step`` also accepts a 1-D integer array,
        which it hands to :meth:`step_chunk`.

    Observation Space:
        ``Dict(tokens=Sequence(Discrete(V), stack=True), sources=Sequence(Discrete(3), stack=True))``: every token
        of the context so far and who wrote it (:class:`Source`), copied from the ledger.

    Episode End:
        ``terminated`` when the episode reaches a verdict; ``truncated`` when a budget runs out or an
        infrastructure fault stops it (then ``info["infra_error"]`` says why and the episode must not be
        trained on). Stepping after the end raises :class:`gymnasium.error.ResetNeeded`.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012
    #: Whether `fork` may cut inside an episode (see `Forkable`): True when the ledger and the task are the whole
    #: state; an env with outside state (a sandbox) sets it to False.
    forks_mid_episode: bool = True
    #: What the mean reward over episodes is called wherever it is reported (training summary, evaluation, plots):
    #: "accuracy" when the reward is 0/1 correctness; an env with partial credit says "mean score".
    score_name: str = "accuracy"

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_new_tokens: int,
        stop_token_ids: Iterable[int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
            raise TypeError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}"
            )
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.max_new_tokens = int(max_new_tokens)
        if stop_token_ids is None:
            stop_token_ids = default_stop_token_ids(tokenizer)
        self.stop_token_ids = frozenset(int(t) for t in stop_token_ids)
        self._stop_array = np.fromiter(sorted(self.stop_token_ids), dtype=np.int64)
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(self.vocab_size)
        self.observation_space = spaces.Dict(
            {
                "tokens": spaces.Sequence(spaces.Discrete(self.vocab_size), stack=True),
                "sources": spaces.Sequence(spaces.Discrete(len(Source)), stack=True),
            }
        )
        self.ledger = Ledger()
        self._turn = 0
        self._turn_tokens = 0  # policy tokens in the current turn
        self._turn_ends: list[int] = []  # ledger index of the last policy token of each closed turn
        self._done = True

    # -- for subclasses -------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        """Draw a task with ``self.np_random``; return the prompt token ids and the reset info."""

    @abc.abstractmethod
    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        """Decide what happens after a policy turn; ``budget_exhausted`` if it ended by the token budget."""

    # -- gymnasium API --------------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        prompt, info = self._begin_episode(options)
        self.ledger = Ledger(capacity=len(prompt) + self.max_new_tokens + 1)
        self.ledger.extend(np.asarray(prompt, dtype=np.int64), Source.PROMPT, 0)
        self._turn, self._turn_tokens, self._done = 1, 0, False
        self._turn_ends = []
        return self._obs(), info

    def step(self, action):
        if isinstance(action, np.ndarray) and action.ndim == 1:
            return self.step_chunk(action)
        if self._done:
            raise ResetNeeded("the episode has ended (terminated or truncated): call reset() before step()")
        token = _token_id(action)
        if not 0 <= token < self.vocab_size:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {self.vocab_size})")
        self.ledger.append(token, Source.POLICY, self._turn)
        self._turn_tokens += 1
        if token in self.stop_token_ids or self._turn_tokens >= self.max_new_tokens:
            return self._close_turn(token not in self.stop_token_ids, self.ledger.n - 1)
        return self._obs(), 0.0, False, False, {}

    def step_chunk(self, tokens):
        """Append many policy tokens at once; identical to stepping them one by one.

        Consumes tokens up to and including the first stop token or the last one the turn's budget allows;
        ``info["n_consumed"]`` says how many. The rest of the chunk is ignored: the next turn must be generated
        after seeing what the env appends.

        Returns:
            The usual 5-tuple; the reward is the sum over the consumed tokens.
        """
        if self._done:
            raise ResetNeeded(
                "the episode has ended (terminated or truncated): call reset() before step_chunk()"
            )
        tokens = np.asarray(tokens)
        if tokens.ndim != 1 or tokens.size == 0 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(
                f"step_chunk expects a non-empty 1-D integer array, got shape {tokens.shape} {tokens.dtype}"
            )
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= self.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        k = min(len(tokens), self.max_new_tokens - self._turn_tokens)
        stops = np.flatnonzero(np.isin(tokens[:k], self._stop_array))
        hit_stop = stops.size > 0
        if hit_stop:
            k = int(stops[0]) + 1
        start = self.ledger.n
        self.ledger.extend(tokens[:k], Source.POLICY, self._turn)
        self._turn_tokens += k
        if hit_stop or self._turn_tokens >= self.max_new_tokens:
            obs, reward, terminated, truncated, info = self._close_turn(not hit_stop, start)
        else:
            obs, reward, terminated, truncated, info = self._obs(), 0.0, False, False, {}
        info["n_consumed"] = k
        return obs, reward, terminated, truncated, info

    def _close_turn(self, budget_exhausted: bool, call_start: int):
        """End the open turn. If the env's ``_end_turn`` raises, the tokens of this call (from ``call_start``)
        are taken back first, so the episode is as it was before the call."""
        last = self.ledger.n - 1
        self._turn_ends.append(last)
        try:
            outcome = self._end_turn(budget_exhausted)
        except BaseException:
            self._turn_ends.pop()
            self._turn_tokens -= self.ledger.n - call_start
            self.ledger.n = call_start
            raise
        self.ledger._reward[last] += outcome.reward
        if outcome.env_tokens:
            self.ledger.extend(np.asarray(outcome.env_tokens, dtype=np.int64), Source.ENV, self._turn)
        self._done = outcome.terminated or outcome.truncated
        self._turn += 1
        self._turn_tokens = 0
        info = dict(outcome.info)
        info.setdefault("infra_error", None)
        return self._obs(), float(outcome.reward), bool(outcome.terminated), bool(outcome.truncated), info

    def _obs(self) -> dict[str, np.ndarray]:
        # Copies, not views: callers keep observations, and Gymnasium asks that no two share memory.
        n = self.ledger.n
        return {"tokens": self.ledger._token_id[:n].copy(), "sources": self.ledger._source[:n].copy()}

    # -- extras ---------------------------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self._done

    @property
    def end_of_turn_id(self) -> int:
        """The token a scripted turn ends with: the tokenizer's EOS when it ends turns, else the lowest stop id."""
        eos = self.tokenizer.eos_token_id
        return int(eos) if eos is not None and int(eos) in self.stop_token_ids else min(self.stop_token_ids)

    @property
    def turn_tokens_left(self) -> int:
        """Policy tokens the open turn may still take before its budget closes it (the `TurnBudget` capability)."""
        return self.max_new_tokens - self._turn_tokens

    @property
    def prompt_length(self) -> int:
        return int(np.count_nonzero(self.ledger.source == Source.PROMPT))

    def response_tokens(self, turn: int | None = None) -> np.ndarray:
        """Policy token ids of one turn (default: the last policy turn), stop token included."""
        mask = self.ledger.policy_mask
        if turn is None:
            turns = self.ledger.turn[mask]
            turn = int(turns[-1]) if turns.size else 1
        return self.ledger.token_id[mask & (self.ledger.turn == turn)]

    def response_text(self, turn: int | None = None) -> str:
        """The decoded policy text of one turn, without special tokens."""
        return self.tokenizer.decode(self.response_tokens(turn).tolist(), skip_special_tokens=True)

    def fork(self, n: int | None = None) -> TokenEnv:
        """A new env continuing this episode from its first ``n`` tokens (all by default); this one is untouched.

        Cheap: the ledger prefix is copied, the task and tokenizer are shared, the RNG is copied. ``n`` must be the
        whole episode or a point where the policy is to write next: inside an open turn, or right after the prompt
        or a block of env tokens (not right after a turn's closing token, whose outcome would be lost).
        """
        total = self.ledger.n
        n = total if n is None else int(n)
        if not self.prompt_length <= n <= total:
            raise ValueError(
                f"fork point n={n} outside [prompt length {self.prompt_length}, episode length {total}]"
            )
        if n < total:
            src = self.ledger.source
            at_boundary = src[n] == Source.POLICY
            in_open_turn = src[n - 1] == Source.POLICY and (n - 1) not in self._turn_ends
            if not (at_boundary or in_open_turn):
                raise ValueError(
                    f"cannot fork at n={n}: it cuts a closed turn from the env tokens that answer it"
                )
        new = copy.copy(self)
        new.ledger = self.ledger.copy(n)
        new._np_random = copy.deepcopy(self._np_random)
        if n < total:
            new._turn_ends = [e for e in self._turn_ends if e < n]
            new._turn = len(new._turn_ends) + 1
            new._turn_tokens = int(np.count_nonzero(new.ledger.policy_mask & (new.ledger.turn == new._turn)))
            new._done = False
        else:
            new._turn_ends = list(self._turn_ends)
        return new

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        parts, start = [], 0
        src = self.ledger.source
        for i in range(1, len(src) + 1):
            if i == len(src) or src[i] != src[start]:
                text = self.tokenizer.decode(self.ledger.token_id[start:i].tolist())
                parts.append(f"[{Source(int(src[start])).name.lower()}]{text}")
                start = i
        return "\n".join(parts)


# -- optional capabilities ---------------------------------------------------------------------------------------
# Like the optional methods of ``gymnasium.Env``, each is documented once here and checked with ``isinstance``.


@runtime_checkable
class Forkable(Protocol):
    """Can continue an episode from any prefix: ``fork(n)`` returns a new env holding the first ``n`` tokens.

    Every `TokenEnv` forks a fresh episode (right after ``reset``, how a group of samples shares its task); an env
    that can also fork *inside* an episode (Math-v0, Rubric-v0: the ledger is the whole state) says so with
    ``forks_mid_episode = True``. Monte-Carlo values (``creditgym probe``, the ``vine`` module) need that.
    """

    forks_mid_episode: bool

    def fork(self, n: int | None = None) -> TokenEnv: ...


@runtime_checkable
class CounterfactualPrompt(Protocol):
    """Has a counterfactual prompt: the current task with its criteria removed, rendered the same way (CoRT).

    ``has_counterfactual`` is False when the current task has nothing to remove (then the two prompts are equal).
    """

    @property
    def has_counterfactual(self) -> bool: ...

    def counterfactual_prompt_tokens(self) -> list[int]: ...


@runtime_checkable
class DecisiveSlots(Protocol):
    """Its reward reads a known few response positions only (``creditgym/Planted-v0``), so the exact advantage
    of every token follows from the policy's probabilities there (`creditgym.agents.probe.exact`).

    ``decisive_slots``: the 0-based response positions the reward reads, increasing; ``decisive_masks(V)``:
    ``(K, V)`` bool, which token ids each slot accepts; ``slot_hits(response)``: which slots a response fills.
    The reward is 1 exactly when every slot is filled.
    """

    @property
    def decisive_slots(self) -> tuple[int, ...]: ...

    def decisive_masks(self, vocab_size: int) -> Any: ...

    def slot_hits(self, response: Sequence[int]) -> list[bool]: ...


@runtime_checkable
class OracleResponse(Protocol):
    """Knows a correct response to the current task (for scripted self-checks: the ``oracle`` agent)."""

    def oracle_response(self) -> str: ...


@runtime_checkable
class EmptyResponse(Protocol):
    """Knows the text of a do-nothing turn (the SWE env: submit at once, the empty patch): the ``empty`` agent."""

    def empty_response(self) -> str: ...


@runtime_checkable
class TurnBudget(Protocol):
    """Bounds each policy turn: ``turn_tokens_left`` tokens may still be written before the env closes the turn."""

    @property
    def turn_tokens_left(self) -> int: ...
