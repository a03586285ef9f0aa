"""Rollouts: play token-level episodes with a policy, in batches, and turn the ledgers into training tensors."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from creditgym.agents.train.sampling import Sampling
from creditgym.envs.core import Source, TokenEnv


class Agent(Protocol):
    """Writes the next turn of several token-level episodes at once (what `play` drives).

    ``respond_batch`` returns each env's turn tokens and, for a sampling policy, their behaviour log-probs
    (``None`` for scripted agents). ``name`` labels reports.
    """

    name: str

    def respond_batch(
        self, envs: Sequence[TokenEnv], rng: np.random.Generator
    ) -> tuple[list[list[int]], list[torch.Tensor] | None]: ...


@dataclass
class Episode:
    """One finished episode: its env (holding the ledger), the group it belongs to, and the last step's info."""

    env: TokenEnv
    group: int
    info: dict[str, Any]
    terminated: bool
    truncated: bool

    @property
    def infra_error(self) -> str | None:
        return self.info.get("infra_error")

    @property
    def reward(self) -> float:
        return float(self.env.ledger.reward.sum())


def truncated_share(episodes: Sequence[Episode]) -> float:
    """The share of ``episodes`` that ended at a budget (``truncated``) rather than by finishing: their rewards score
    unfinished answers. NaN for no episodes."""
    return float(np.mean([ep.truncated for ep in episodes])) if episodes else float("nan")


@dataclass
class RolloutStats:
    generate_s: float = 0.0
    env_s: float = 0.0  # stepping and verification
    policy_tokens: int = 0
    halved_batch: list[int] = field(
        default_factory=list
    )  # generation batch sizes after an out-of-memory halving


def _is_oom(err: BaseException) -> bool:
    return (
        isinstance(err, torch.OutOfMemoryError)
        or "out of memory" in str(err).lower()
        or ("can't allocate memory" in str(err).lower())
    )


def sample_with_oom_backoff(policy: Any, prompts: list[list[int]], stats: RolloutStats, **kwargs: Any) -> Any:
    """``policy.sample`` that halves the backend's generation batch on out-of-memory and says so."""
    backend = policy.backend
    while True:
        try:
            return policy.sample(prompts, **kwargs)
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not _is_oom(err):
                raise
            current = getattr(backend, "max_batch_size", None) or len(prompts)
            if current <= 1:
                raise RuntimeError(
                    "out of memory while generating one sequence at a time; lower max_new_tokens"
                ) from err
            backend.max_batch_size = current // 2
            stats.halved_batch.append(backend.max_batch_size)
            print(
                f"[creditgym] out of memory during generation: halving the generation batch to {current // 2}"
            )
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


class PolicyAgent:
    """Samples every active episode's next turn from a :class:`~creditgym.agents.train.policy.Policy`, in one batch.

    Args:
        policy: The policy.
        sampling: Temperature, top-p and seeded generator (`Sampling.of` a run's config; `Sampling.greedy`).
        stats: Where generation time and out-of-memory halvings are counted.
    """

    def __init__(self, policy: Any, sampling: Sampling, *, stats: RolloutStats | None = None) -> None:
        self.name = "policy"
        self.policy, self.sampling = policy, sampling
        self.stats = stats or RolloutStats()

    def respond_batch(
        self, envs: Sequence[TokenEnv], rng: np.random.Generator
    ) -> tuple[list[list[int]], list[torch.Tensor] | None]:
        t0 = time.perf_counter()
        out = sample_with_oom_backoff(
            self.policy,
            [env.ledger.token_id.tolist() for env in envs],
            self.stats,
            max_new_tokens=max(env.turn_tokens_left for env in envs),
            stop_token_ids=envs[0].stop_token_ids,
            **self.sampling.kwargs(),
        )
        self.stats.generate_s += time.perf_counter() - t0
        return out.tokens, out.logprobs


def play(
    agent: Agent,
    envs: Sequence[TokenEnv],
    groups: Sequence[int],
    *,
    rng: np.random.Generator | None = None,
    stats: RolloutStats | None = None,
) -> list[Episode]:
    """Play every (already reset) env to its end, all turns; each turn of all active envs is one agent call.

    ``agent.respond_batch(envs, rng)`` returns each env's turn tokens and, for a policy, their behaviour
    log-probs, which are written into the ledgers (``ledger.logprob``).
    """
    stats = stats if stats is not None else RolloutStats()
    rng = rng if rng is not None else np.random.default_rng(0)
    done: dict[int, Episode] = {}
    active = [i for i, env in enumerate(envs) if not env.done]
    while active:
        tokens, logprobs = agent.respond_batch([envs[i] for i in active], rng)
        t0 = time.perf_counter()
        still = []
        for j, i in enumerate(active):
            env = envs[i]
            start = env.ledger.n
            _, _, term, trunc, info = env.step_chunk(np.asarray(tokens[j], dtype=np.int64))
            k = info["n_consumed"]
            if logprobs is not None:
                env.ledger.logprob[start : start + k] = logprobs[j][:k].numpy()
            stats.policy_tokens += k
            if term or trunc:
                done[i] = Episode(env, int(groups[i]), info, bool(term), bool(trunc))
            else:
                still.append(i)
        stats.env_s += time.perf_counter() - t0
        active = still
    return [done[i] for i in range(len(envs))]


@dataclass
class Batch:
    """Right-padded training tensors of a list of episodes (``B`` episodes, ``T`` = longest episode)."""

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long, 1 = real token
    policy_mask: torch.Tensor  # (B, T) bool, token sampled by the policy
    token_rewards: torch.Tensor  # (B, T) float
    old_logprobs: torch.Tensor  # (B, T) float, 0 off the policy mask
    segment_ids: torch.Tensor  # (B, T) long, the turn of each token
    group_ids: torch.Tensor  # (B,) long


def to_batch(episodes: Sequence[Episode], pad_token_id: int) -> Batch:
    lengths = [ep.env.ledger.n for ep in episodes]
    b, t = len(episodes), max(lengths)
    input_ids = torch.full((b, t), pad_token_id, dtype=torch.long)
    attention = torch.zeros((b, t), dtype=torch.long)
    policy = torch.zeros((b, t), dtype=torch.bool)
    rewards = torch.zeros((b, t), dtype=torch.float32)
    old = torch.zeros((b, t), dtype=torch.float32)
    segments = torch.zeros((b, t), dtype=torch.long)
    for row, ep in enumerate(episodes):
        led, n = ep.env.ledger, lengths[row]
        input_ids[row, :n] = torch.from_numpy(led.token_id.copy())
        attention[row, :n] = 1
        mask = torch.from_numpy(led.source == Source.POLICY)
        policy[row, :n] = mask
        rewards[row, :n] = torch.from_numpy(led.reward.copy()) * mask
        old[row, :n] = torch.from_numpy(np.nan_to_num(led.logprob, nan=0.0)) * mask
        segments[row, :n] = torch.from_numpy(led.turn.astype(np.int64))
    group_ids = torch.tensor([ep.group for ep in episodes], dtype=torch.long)
    return Batch(input_ids, attention, policy, rewards, old, segments, group_ids)
