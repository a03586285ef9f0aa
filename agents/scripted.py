"""Scripted agents for self-checks: an oracle that writes the known answer, an empty answer, random tokens."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from creditgym.envs.core import TokenEnv

if TYPE_CHECKING:
    from torch import Tensor


class Agent(Protocol):
    """Writes the next turn of several token-level episodes at once.

    ``respond_batch`` returns each env's turn tokens and, for a sampling policy, their behaviour log-probs
    (``None`` for scripted agents).
    """

    name: str

    def respond_batch(
        self, envs: Sequence[TokenEnv], rng: np.random.Generator
    ) -> tuple[list[list[int]], list[Tensor] | None]: ...


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
        oracle = getattr(env, "oracle_response", None)
        if oracle is None:
            raise TypeError(f"{type(env).__name__} has no oracle_response(); the oracle agent cannot play it")
        ids = env.tokenizer(oracle(), add_special_tokens=False)["input_ids"]
        return np.asarray([*ids, env.end_of_turn_id], dtype=np.int64)


class EmptyAgent(_OneByOne):
    """Writes ``env.empty_response()`` (the SWE env: submit at once, the empty patch), or an empty turn."""

    name = "empty"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        empty = getattr(env, "empty_response", None)
        text = empty() if empty is not None else ""
        ids = env.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        return np.asarray([*ids, env.end_of_turn_id], dtype=np.int64)


class RandomAgent(_OneByOne):
    """Uniformly random token ids until the stop token or the budget: the floor any learner must beat."""

    name = "random"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, env.vocab_size, size=env.max_new_tokens, dtype=np.int64)


SCRIPTED: dict[str, type[_OneByOne]] = {"oracle": OracleAgent, "empty": EmptyAgent, "random": RandomAgent}
