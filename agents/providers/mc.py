"""Monte-Carlo values of response prefixes and the token advantages they define (``creditgym probe``, ``vine``).

For response ``i`` (``T_i`` policy tokens) and a probed position ``t`` (the prefix: prompt and first ``t`` response
tokens), ``V(i, t)`` is the mean reward of ``K`` continuations sampled from that prefix with the same policy and
temperature: each is a fork of the episode's env (``TokenEnv.fork``) played to its end by `play`, many forks per
batched generation. ``V(i, T_i) = R_i``, the response's own reward. The probed positions cut a response into
segments (every token, every ``k``-th, or steps that end with a delimiter, a newline by default); the segment
from ``p_s`` to ``p_{s+1}`` has the step advantage ``V(i, p_{s+1}) - V(i, p_s)``, and its tokens share it:

* `vine` (VinePPO, arXiv 2410.01679, Sec. 4) gives every token of a step the whole step advantage, the policy
  gradient of the step's log-probability;
* the probe's ground truth ``A*(i, t)`` spreads it evenly over the step's tokens, so that A* sums along a response
  to ``R_i - V(i, 0)`` whatever the positions.

With every token probed the two coincide: ``A*(i, t) = V(i, t+1) - V(i, t)``.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from creditgym.agents.providers.base import SignalProvider, StepContext, register_provider
from creditgym.agents.train.backends import GenerationBackend
from creditgym.agents.train.rollout import Episode, PolicyAgent, RolloutStats, play
from creditgym.agents.train.sampling import Sampling
from creditgym.credit.vine import NEWLINE
from creditgym.envs.core import Forkable, Source, TokenEnv

__all__ = [
    "MCEstimate",
    "MonteCarloValues",
    "check_forkable",
    "check_one_turn",
    "check_sampler",
    "delimiter_test",
    "plan",
    "reuse_rewards",
    "sample_continuations",
    "segment_starts",
]

#: Forks generated together (one batched generation of at most this many rows).
DEFAULT_ROWS = 256


def check_forkable(env: Any, env_id: str) -> None:
    """Raise a `ValueError` naming the env and what it lacks unless it can fork inside an episode (`Forkable`)."""
    if not isinstance(env, Forkable):
        raise ValueError(
            f"env {env_id!r} ({type(env).__name__}) cannot fork: Monte-Carlo values need the Forkable capability "
            "(creditgym.envs.Forkable: a fork(n) method continuing the episode from its first n tokens, and "
            "forks_mid_episode = True); subclass creditgym.envs.TokenEnv, whose fork copies the ledger prefix"
        )
    if not env.forks_mid_episode:
        raise ValueError(
            f"env {env_id!r} ({type(env).__name__}) cannot fork inside an episode (forks_mid_episode is False: "
            "part of its state lives outside the ledger, e.g. a sandbox), so fork(n) cannot continue a response "
            "from a prefix; Monte-Carlo values need an env such as creditgym/Math-v0 or creditgym/Rubric-v0"
        )


def check_sampler(policy: Any) -> None:
    """Raise a `ValueError` unless ``policy`` can sample continuations of token prefixes (a generation backend)."""
    if not isinstance(getattr(policy, "backend", None), GenerationBackend):
        raise ValueError(
            f"{type(policy).__name__} cannot sample continuations from a prefix: Monte-Carlo values need a "
            "creditgym.agents.train.policy.Policy (a model with a generation backend: backend.generate(prompts, ...)), "
            "not a scripted or remote agent"
        )


def check_one_turn(episodes: Sequence[Episode], env_id: str, turn_budget: int | None) -> None:
    """Refuse multi-turn episodes unless a turn budget bounds the continuations (their length is unbounded)."""
    if turn_budget is not None:
        return
    for ep in episodes:
        led = ep.env.ledger
        if int(np.count_nonzero(led.source == Source.ENV)) or len(np.unique(led.turn[led.policy_mask])) > 1:
            raise ValueError(
                f"env {env_id!r} is multi-turn (an episode has several policy turns or env tokens): each "
                "continuation would play every remaining turn, so give a turn budget (--max-turns N, passed to "
                "the env as max_turns) to bound them"
            )


def segment_starts(
    token_ids: np.ndarray,
    turns: np.ndarray,
    every: int | None,
    ends_step: Callable[[int], bool],
    max_step: int | None = None,
) -> np.ndarray:
    """Where a response's segments start, as indices into its ``n`` policy tokens (``0`` always first).

    Args:
        token_ids: ``(n,)`` the response's policy tokens.
        turns: ``(n,)`` their turns (a new turn always starts a segment).
        every: Start a segment every ``every`` tokens; None: after each token that ``ends_step``.
        ends_step: Whether a token id's text holds a step delimiter (`delimiter_test`).
        max_step: With ``every=None``, also start one after ``max_step`` tokens without a start; None: no limit.
    """
    n = len(token_ids)
    if every is not None:
        cut = np.arange(n) % every == 0
    else:
        cut = np.zeros(n, dtype=bool)
        cut[1:] = [ends_step(int(t)) for t in token_ids[:-1]]
    cut[1:] |= turns[1:] != turns[:-1]
    cut[:1] = True
    if every is None and max_step is not None:
        last = 0
        for i in range(1, n):
            if cut[i] or i - last >= max_step:
                cut[i], last = True, i
    return np.flatnonzero(cut)


@dataclass
class MCEstimate:
    """``K`` continuation rewards at each segment start of each response; NaN until sampled.

    Attributes:
        episodes: The responses; their envs hold the ledgers the continuations fork from.
        policy_index: Per response, the ledger index of each of its ``n_i`` policy tokens.
        starts: Per response, its segment starts ``(S_i,)`` as indices into its policy tokens (`segment_starts`).
        rewards: Per response, ``(S_i, K)`` rewards of the continuations from each start (NaN: not sampled yet,
            or an infrastructure fault; such a continuation is left out of the mean).
        sampled: Per response, ``(S_i,)`` how many of the ``K`` columns of each start were sampled (the rest are
            `sample_continuations`' to fill; `grow` adds columns).
    """

    episodes: list[Episode]
    policy_index: list[np.ndarray]
    starts: list[np.ndarray]
    rewards: list[np.ndarray]
    sampled: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.sampled:  # a new estimate: nothing sampled yet
            self.sampled = [np.zeros(len(r), dtype=np.int64) for r in self.rewards]

    def grow(self, k: int) -> None:
        """Widen every reward table to ``k`` columns (NaN, to sample); the columns sampled so far stay."""
        if k < self.k:
            raise ValueError(f"grow: K can only grow, from {self.k} to {k!r}")
        self.rewards = [
            np.pad(r, ((0, 0), (0, k - r.shape[1])), constant_values=np.nan) for r in self.rewards
        ]

    @property
    def k(self) -> int:
        return self.rewards[0].shape[1] if self.rewards else 0

    @property
    def total(self) -> int:
        """Continuations to sample."""
        return sum(r.size for r in self.rewards)

    @property
    def done(self) -> int:
        """Continuations sampled so far."""
        return sum(int(np.count_nonzero(~np.isnan(r))) for r in self.rewards)

    def values(self, columns: slice = slice(None)) -> list[np.ndarray]:
        """Per response ``(S_i + 1,)``: V at each segment start (mean over ``columns`` of K), then ``R_i``."""
        out = []
        for i, (ep, r) in enumerate(zip(self.episodes, self.rewards, strict=True)):
            part = r[:, columns]
            empty = np.isnan(part).all(1)
            if empty.any():
                raise RuntimeError(
                    f"response {i}: no continuation from segment {int(np.argmax(empty))} has a reward (not "
                    "sampled, or every one hit an infrastructure fault)"
                )
            out.append(np.append(np.nanmean(part, 1), ep.reward))
        return out

    def step_values(self, columns: slice = slice(None)) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per response and policy token: V at its segment's start, V at the next segment's start, segment length."""
        out = []
        for v, s, idx in zip(self.values(columns), self.starts, self.policy_index, strict=True):
            bounds = np.append(s, len(idx))
            lengths = np.diff(bounds)
            seg = np.repeat(np.arange(len(s)), lengths)  # (n,) the segment of each token
            out.append((v[seg], v[seg + 1], lengths[seg].astype(np.float64)))
        return out

    def token_advantages(self, columns: slice = slice(None)) -> list[np.ndarray]:
        """Per response ``(n_i,)``: A*, each segment's ``V(next) - V(start)`` spread evenly over its tokens."""
        return [(end - start) / length for start, end, length in self.step_values(columns)]

    def split_half(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """A* from the first ``K // 2`` continuations and from the rest: two independent estimates."""
        half = self.k // 2
        return self.token_advantages(slice(0, half)), self.token_advantages(slice(half, None))

    def signal(self, shape: tuple[int, int]) -> Tensor:
        """``(B, T, 2)`` float32 aligned with the rollout batch: V at the start and at the end of each policy
        token's step (the ``mc_values`` signal); 0 elsewhere."""
        out = torch.zeros((*shape, 2), dtype=torch.float32)
        for row, (idx, (start, end, _)) in enumerate(zip(self.policy_index, self.step_values(), strict=True)):
            out[row, torch.from_numpy(idx), 0] = torch.from_numpy(start).float()
            out[row, torch.from_numpy(idx), 1] = torch.from_numpy(end).float()
        return out


def delimiter_test(tokenizer: Any, delimiter: str | Sequence[str] = NEWLINE) -> Callable[[int], bool]:
    """Whether a token id's text (decoded alone) holds ``delimiter`` (or one of several), cached per id."""
    ends = (delimiter,) if isinstance(delimiter, str) else tuple(delimiter)
    cache: dict[int, bool] = {}

    def ends_step(token: int) -> bool:
        if token not in cache:
            text = tokenizer.decode([token])
            cache[token] = any(d in text for d in ends)
        return cache[token]

    return ends_step


def plan(
    episodes: Sequence[Episode],
    k: int,
    every: int | None,
    delimiter: str | Sequence[str] = NEWLINE,
    max_step: int | None = None,
) -> MCEstimate:
    """The segments of every response and an empty ``(S_i, k)`` reward table for each (`sample_continuations`).

    Segments start every ``every`` tokens, or (``every=None``) after each token whose text holds ``delimiter``
    (or one of several) and after ``max_step`` tokens without one.

    Raises:
        ValueError: ``k < 1``, ``every < 1``, ``max_step < 1``, an empty ``delimiter``, or a response without
            policy tokens.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"K (continuations per prefix) must be an int >= 1, got {k!r}")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ValueError(
            f"every must be an int >= 1 (1 = every token) or None (newline steps), got {every!r}"
        )
    if max_step is not None and (isinstance(max_step, bool) or not isinstance(max_step, int) or max_step < 1):
        raise ValueError(f"max_step must be an int >= 1 or None, got {max_step!r}")
    ends = (delimiter,) if isinstance(delimiter, str) else delimiter
    if not isinstance(ends, Sequence) or not ends or not all(isinstance(d, str) and d for d in ends):
        raise ValueError(
            f"delimiter must be a non-empty string (the text that ends a step) or a list of them, got "
            f"{delimiter!r}"
        )
    index, starts = [], []
    tests: dict[int, Callable[[int], bool]] = {}  # one cached test per tokenizer (a batch shares one)
    for i, ep in enumerate(episodes):
        led = ep.env.ledger
        idx = np.flatnonzero(led.policy_mask)
        if idx.size == 0:
            raise ValueError(f"response {i} has no policy token to probe")
        index.append(idx)
        tokenizer = ep.env.tokenizer
        ends_step = tests.setdefault(id(tokenizer), delimiter_test(tokenizer, delimiter))
        starts.append(segment_starts(led.token_id[idx], led.turn[idx], every, ends_step, max_step))
    rewards = [np.full((len(s), k), np.nan) for s in starts]
    return MCEstimate(list(episodes), index, starts, rewards)


class _Unscored:
    """``Policy.sample`` without its log-prob pass: a continuation only needs its reward."""

    def __init__(self, policy: Any) -> None:
        self.backend = policy.backend

    def sample(self, prompts: list[list[int]], **kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(tokens=self.backend.generate(prompts, **kwargs), logprobs=None)


def sample_continuations(
    est: MCEstimate,
    policy: Any,
    sampling: Sampling,
    *,
    rows: int = DEFAULT_ROWS,
    on_progress: Callable[[int], None] | None = None,
) -> RolloutStats:
    """Fill ``est.rewards`` in place: the columns of each segment start not sampled yet (all ``K`` of a new
    estimate, the new ones after `MCEstimate.grow`), forks of its prefix played to their ends, sampled with
    ``sampling`` (the run's temperature and top-p, and the generator the draws come from).

    Forks are played about ``rows`` at a time (one `play` call, batched generation; a start's forks are never
    split), longest remaining responses first so that a batch's rows finish together; ``on_progress(n)`` is
    called after each batch with the number of continuations it finished. Interrupted (Ctrl-C), ``est`` keeps every batch finished so far.
    """
    check_sampler(policy)
    k = est.k
    todo = [  # (response, start, first column to sample): every start with columns still to sample
        (i, s, int(n)) for i, done in enumerate(est.sampled) for s, n in enumerate(done) if n < k
    ]
    todo.sort(key=lambda item: -(len(est.policy_index[item[0]]) - est.starts[item[0]][item[1]]))
    agent_stats = RolloutStats()
    agent = PolicyAgent(_Unscored(policy), sampling, stats=agent_stats)
    while todo:
        items: list[tuple[int, int, int]] = []
        forks: list[TokenEnv] = []
        while todo and (not items or len(forks) + k - todo[0][2] <= rows):
            i, s, first = todo.pop(0)
            n = int(est.policy_index[i][est.starts[i][s]])
            forks += [est.episodes[i].env.fork(n) for _ in range(k - first)]
            items.append((i, s, first))
        played = play(agent, forks, [0] * len(forks), stats=agent_stats)
        got = iter([math.nan if ep.infra_error else ep.reward for ep in played])
        for i, s, first in items:
            est.rewards[i][s, first:] = [next(got) for _ in range(k - first)]
            est.sampled[i][s] = k
        if on_progress is not None:
            on_progress(len(forks))
    return agent_stats


@register_provider("mc_values", default=True)
class MonteCarloValues(SignalProvider):
    """``mc_values`` (B, T, 2): for each policy token, V at the start and at the end of its step, each the mean
    reward of ``k`` continuations sampled (at the run's temperature and top-p) from that prefix; the end of the
    last step is the response's reward. Steps start every ``every`` tokens, or, when ``every`` is None, after
    each token holding ``delimiter`` (one string or several) and after ``max_step`` tokens without one (module
    docstring). Its metric ``mc/steps_per_response`` is the batch's mean number of steps; with delimiter steps
    and a batch whose responses are all one step, it warns once."""

    params = ("k", "every", "delimiter", "max_step")
    _steps: float = 0.0  # mean steps per response of the last batch (the ``mc/steps_per_response`` metric)
    _warned: bool = False

    def check(self) -> None:
        check_forkable(self.run.env, self.run.env_id)
        check_sampler(self.run.policy)

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        delimiter = self.params["delimiter"]
        est = plan(step.episodes, self.params["k"], self.params["every"], delimiter, self.params["max_step"])
        self._steps = float(np.mean([len(s) for s in est.starts]))
        if self.params["every"] is None and self._steps == 1.0 and not self._warned:
            self._warned = True
            what = "a newline" if delimiter == NEWLINE else f"the delimiter {delimiter!r}"
            warnings.warn(
                f"mc_values: every response of step {step.step}'s batch is one step (none holds {what} before "
                "its end), so every token gets R - V(prompt): an outcome baseline, no step credit. Set step "
                "boundaries with every=N or the delimiter that ends a step (creditgym train --credit-kw "
                'every=16, or --credit-kw \'delimiter=";"\'; in a study, vine:every=16 or vine:delimiter=";").',
                stacklevel=3,  # the trainer's call, past torch.no_grad's wrapper
            )
        sample_continuations(est, step.policy, Sampling.of(self.run.cfg, step.generator))
        out = est.signal(tuple(step.batch.input_ids.shape))  # type: ignore[arg-type]
        return out.to(step.policy_mask.device) * step.policy_mask.unsqueeze(-1)

    def update(self, step: StepContext) -> dict[str, float]:
        return {"mc/steps_per_response": self._steps}


#: ``probe.json["config"]`` fields that fix the batch and its continuations: a reused A* must agree on all.
SAME_BATCH = (
    "env_id",
    "env_kwargs",
    "model",
    "checkpoint_step",
    "prompts",
    "group",
    "k",
    "every",
    "delimiter",
)
SAME_BATCH += ("seed", "temperature", "top_p", "max_new_tokens", "max_turns")


def reuse_rewards(est: MCEstimate, path: Path, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Fill ``est.rewards`` from the ``probe.json`` at ``path`` (``est`` grown to that probe's last K); returns
    the file's content (a complete probe's timing is the rollouts' cost).

    A complete probe gives every continuation. A refused one (its target needed a K above its budget) or an
    interrupted one gives those it sampled: ``est.sampled`` counts, per probed prefix, the leading columns it
    holds, so sampling goes on from there (a refusal resumed with a larger ``max_k``).

    Raises:
        ValueError: the file is neither a complete probe nor a refused or interrupted one with its continuations,
            its settings differ (named), or a response's tokens or probed positions differ from this batch's.
    """
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"reuse: cannot read {path} as a probe.json ({e})") from e
    if not old.get("complete") and "responses" not in old:
        raise ValueError(
            f"reuse: {path} is an incomplete probe that holds no continuations (complete: false, stage "
            f"{old.get('stage')!r}); rerun it without reuse"
        )
    differ = {
        k: (_batch_setting(old["config"], k), _batch_setting(settings, k))
        for k in SAME_BATCH
        if _batch_setting(old["config"], k) != _batch_setting(settings, k)
    }
    if differ:
        raise ValueError(f"reuse: {path} probed another batch; (saved, now) per differing setting: {differ}")
    rows = old["responses"]
    if len(rows) != len(est.episodes):
        raise ValueError(f"reuse: {path} has {len(rows)} responses, this batch {len(est.episodes)}")
    if old.get("complete"):
        est.grow(old["batch"].get("k", old["config"]["k"]))  # an adaptive probe's final K
    else:
        est.grow(max(len(r) for row in rows for r in row["continuation_rewards"]))
    for i, (row, ep) in enumerate(zip(rows, est.episodes, strict=True)):
        tokens = [ep.env.tokenizer.decode([t]) for t in ep.env.ledger.token_id[est.policy_index[i]].tolist()]
        if row["tokens"] != tokens or list(row["starts"]) != est.starts[i].tolist():
            raise ValueError(
                f"reuse: response {i} of {path} differs from this batch's (tokens or probed positions)"
            )
        est.rewards[i] = np.array(row["continuation_rewards"], dtype=np.float64).reshape(est.rewards[i].shape)
        if old.get("complete"):
            est.sampled[i][:] = est.k
        else:  # the leading columns sampled (a fault's NaN, like a column not sampled yet, is sampled again)
            est.sampled[i][:] = np.cumprod(~np.isnan(est.rewards[i]), axis=1).sum(axis=1)
    return old


def _batch_setting(config: Mapping[str, Any], key: str) -> Any:
    """A `SAME_BATCH` setting of a probe's config; a probe written before ``delimiter`` was recorded probed
    at newlines when ``every`` was None. A sequence is a tuple, whether it was read back from JSON or not."""
    value = config.get(key)
    if key == "delimiter" and config.get("every") is None:
        value = value or NEWLINE
    return tuple(value) if isinstance(value, list) else value
