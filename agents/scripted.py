"""Scripted agents for self-checks: an oracle that writes the known answer, and uniformly random tokens."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from creditgym.envs.core import TokenEnv


class Agent(Protocol):
    """Writes the policy tokens of the current turn of a token-level env."""

    name: str

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray: ...


class OracleAgent:
    """Writes the env's known-correct response (``env.oracle_response()``) followed by the stop token."""

    name = "oracle"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        oracle = getattr(env, "oracle_response", None)
        if oracle is None:
            raise TypeError(f"{type(env).__name__} has no oracle_response(); the oracle agent cannot play it")
        ids = env.tokenizer(oracle(), add_special_tokens=False)["input_ids"]
        return np.asarray([*ids, min(env.stop_token_ids)], dtype=np.int64)


class RandomAgent:
    """Uniformly random token ids until the stop token or the budget: the floor any learner must beat."""

    name = "random"

    def respond(self, env: TokenEnv, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, env.vocab_size, size=env.max_new_tokens, dtype=np.int64)


SCRIPTED: dict[str, type[OracleAgent] | type[RandomAgent]] = {"oracle": OracleAgent, "random": RandomAgent}
