"""Scripted agents for self-checks: an oracle that writes the known answer, an empty answer, random tokens."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np

from creditgym.agents.train.rollout import Agent
from creditgym.envs.core import EmptyResponse, OracleResponse, TokenEnv

__all__ = ["SCRIPTED", "Agent", "EmptyAgent", "OracleAgent", "RandomAgent"]


class _OneByOne(abc.ABC):
    """Scripted agents answer each env on its own."""

    @abc.abstractmethod
    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        """This env's turn tokens."""

    def respond_batch(
        self, envs: Sequence[TokenEnv], rng: np.random.Generator
    ) -> tuple[list[list[int]], None]:
        return [self.respond(env, rng).tolist() for env in envs], None


class OracleAgent(_OneByOne):
    """Writes the env's known-correct response (``env.oracle_response()``) followed by the stop token."""

    name = "oracle"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        if not isinstance(env, OracleResponse):
            raise TypeError(
                f"{type(env).__name__} has no oracle_response() (the OracleResponse capability); the oracle "
                "agent cannot play it"
            )
        ids = env.tokenizer(env.oracle_response(), add_special_tokens=False)["input_ids"]
        return np.asarray([*ids, env.end_of_turn_id], dtype=np.int64)


class EmptyAgent(_OneByOne):
    """Writes ``env.empty_response()`` (the SWE env: submit at once, the empty patch), or an empty turn."""

    name = "empty"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        text = env.empty_response() if isinstance(env, EmptyResponse) else ""
        ids = env.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        return np.asarray([*ids, env.end_of_turn_id], dtype=np.int64)


class RandomAgent(_OneByOne):
    """Uniformly random token ids until the stop token or the budget: the floor any learner must beat."""

    name = "random"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, env.vocab_size, size=env.max_new_tokens, dtype=np.int64)


SCRIPTED: dict[str, type[_OneByOne]] = {"oracle": OracleAgent, "empty": EmptyAgent, "random": RandomAgent}
