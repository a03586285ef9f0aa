"""Wrappers that adapt token-level envs to other libraries' expectations."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from creditgym.envs.core import TokenEnv


class FixedWindow(gym.ObservationWrapper):
    """The last ``window`` tokens of the context as a fixed-size array, left-padded: for stable-baselines3.

    SB3 needs numpy-array observations of a fixed shape, so the ``Dict`` of variable-length sequences becomes
    ``MultiDiscrete([V] * window)``. The action stays ``Discrete(V)``: one token per step.

    Args:
        env: A creditgym token-level env (possibly wrapped).
        window: Number of most recent tokens kept.
        pad_token_id: Fills the left of short contexts (default: the tokenizer's pad, else EOS, else 0).
    """

    def __init__(self, env: gym.Env, window: int = 64, pad_token_id: int | None = None) -> None:
        super().__init__(env)
        base = env.unwrapped
        if not isinstance(base, TokenEnv):
            raise TypeError(f"FixedWindow wraps creditgym token-level envs, got {type(base).__name__}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        tok = base.tokenizer
        if pad_token_id is None:
            pad_token_id = next((t for t in (tok.pad_token_id, tok.eos_token_id) if t is not None), 0)
        self.window = window
        self.pad_token_id = int(pad_token_id)
        self.observation_space = spaces.MultiDiscrete(np.full(window, base.vocab_size, dtype=np.int64))

    def observation(self, observation: dict[str, Any]) -> np.ndarray:
        tokens = observation["tokens"][-self.window :]
        out = np.full(self.window, self.pad_token_id, dtype=np.int64)
        out[self.window - len(tokens) :] = tokens
        return out
