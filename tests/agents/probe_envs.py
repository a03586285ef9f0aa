"""Small token-level envs for the Monte-Carlo and probe tests, registered on import (``probe_envs:ProbeParity-v0``).

* ``ProbeParity-v0``: the reward depends only on the first ``CODE`` response tokens (``1/CODE`` for each whose id
  is even); everything after them is free filler, so the value of a prefix is known exactly once they are written.
* ``ProbeNoFork-v0``: the same, declaring that it cannot fork inside an episode.
* ``ProbeTwoTurn-v0``: two policy turns (the env appends a user turn between them), ``max_turns`` a constructor
  argument; the reward is the mean parity of each turn's first token.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from creditgym.envs import TokenEnv, TurnOutcome
from creditgym.envs.tokenizer import BUNDLED, render_chat, render_prompt, resolve_tokenizer

CODE = 3


class ParityEnv(TokenEnv):
    """One turn; reward = the share of the first ``CODE`` policy tokens with an even id."""

    def __init__(self, max_new_tokens: int = 12, render_mode: str | None = None) -> None:
        super().__init__(resolve_tokenizer(BUNDLED), max_new_tokens=max_new_tokens, render_mode=render_mode)

    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        a, b = (int(x) for x in self.np_random.integers(10, 90, size=2))
        return render_prompt(self.tokenizer, f"What is {a} + {b}?"), {}

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        first = self.ledger.token_id[self.ledger.policy_mask][:CODE]
        return TurnOutcome(reward=float(np.count_nonzero(first % 2 == 0)) / CODE, terminated=True)


class NoForkEnv(ParityEnv):
    """`ParityEnv` whose state would live outside the ledger (as a sandbox's does)."""

    forks_mid_episode = False


class TwoTurnEnv(ParityEnv):
    """Two policy turns; the env writes a user turn between them; reward: mean parity of each turn's first token."""

    def __init__(self, max_new_tokens: int = 8, max_turns: int = 2, render_mode: str | None = None) -> None:
        super().__init__(max_new_tokens=max_new_tokens, render_mode=render_mode)
        self.max_turns = int(max_turns)
        self._between = render_chat(self.tokenizer, [{"role": "user", "content": "And again?"}])

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        if self._turn < self.max_turns:
            return TurnOutcome(env_tokens=list(self._between))
        led = self.ledger
        firsts = [led.token_id[led.policy_mask & (led.turn == t)][0] for t in range(1, self._turn + 1)]
        return TurnOutcome(reward=float(np.mean([f % 2 == 0 for f in firsts])), terminated=True)


for _id, _cls in (
    ("ProbeParity-v0", ParityEnv),
    ("ProbeNoFork-v0", NoForkEnv),
    ("ProbeTwoTurn-v0", TwoTurnEnv),
):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_cls)
