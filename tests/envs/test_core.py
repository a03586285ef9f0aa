"""The token-level episode core: stepping rules, chunk equivalence, fork, seeding, bad input."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import creditgym  # noqa: F401
from creditgym.envs import Ledger, Source
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import MathTask


@pytest.fixture(scope="module")
def env() -> MathEnv:
    return MathEnv(max_new_tokens=24)


def encode(env: MathEnv, text: str) -> list[int]:
    return env.tokenizer(text, add_special_tokens=False)["input_ids"]


def eos(env: MathEnv) -> int:
    return env.tokenizer.eos_token_id


def play_one_by_one(env: MathEnv, tokens, seed: int):
    obs, _ = env.reset(seed=seed)
    total, flags, _info = 0.0, (False, False), {}
    for t in tokens:
        obs, r, term, trunc, _info = env.step(int(t))
        total += r
        flags = (term, trunc)
        if term or trunc:
            break
    return env.ledger.copy(), total, flags, obs


def play_chunked(env: MathEnv, tokens, cuts, seed: int):
    obs, _ = env.reset(seed=seed)
    total, flags, pos = 0.0, (False, False), 0
    bounds = [*sorted({c for c in cuts if 0 < c < len(tokens)}), len(tokens)]
    for end in bounds:
        if pos >= end:
            continue
        obs, r, term, trunc, info = env.step_chunk(np.asarray(tokens[pos:end], dtype=np.int64))
        assert 1 <= info["n_consumed"] <= end - pos
        total += r
        pos += info["n_consumed"]
        flags = (term, trunc)
        if term or trunc:
            break
    return env.ledger.copy(), total, flags, obs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.lists(st.integers(min_value=0, max_value=2047), min_size=1, max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
    seed=st.integers(min_value=0, max_value=10_000),
    correct=st.booleans(),
)
def test_chunked_stepping_gives_the_identical_episode(env: MathEnv, body, cuts, seed, correct) -> None:
    if correct:  # make some episodes earn reward, so reward placement is compared too
        env.reset(seed=seed)
        body = [*encode(env, env.oracle_response()), eos(env), *body]
    one = play_one_by_one(env, body, seed)
    chunk = play_chunked(env, body, cuts, seed)
    assert one[0] == chunk[0]  # ledgers: token ids, sources, turns, logprob slots, rewards
    assert one[1] == chunk[1] and one[2] == chunk[2]
    np.testing.assert_array_equal(one[3]["tokens"], chunk[3]["tokens"])
    np.testing.assert_array_equal(one[3]["sources"], chunk[3]["sources"])
    if correct:
        assert one[1] == 1.0 and one[2] == (True, False)


def test_reward_lands_on_the_last_policy_token(env: MathEnv) -> None:
    env.reset(seed=3)
    tokens = [*encode(env, env.oracle_response()), eos(env)]
    _, reward, terminated, truncated, info = env.step(np.asarray(tokens))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["verdict"].status == "correct" and info["infra_error"] is None
    led = env.ledger
    assert led.reward[-1] == 1.0 and led.reward[:-1].sum() == 0.0
    assert led.source[-1] == Source.POLICY and led.token_id[-1] == eos(env)
    assert (led.source == Source.POLICY).sum() == len(tokens)
    assert np.isnan(led.logprob).all()  # the agent's slot, empty until filled


def test_budget_truncates_and_still_verifies(env: MathEnv) -> None:
    env.reset(seed=4)
    wrong = encode(env, "I think it is \\boxed{-99999} ") * 10
    _, reward, terminated, truncated, info = env.step(np.asarray(wrong))
    assert (terminated, truncated) == (False, True)
    assert info["n_consumed"] == env.max_new_tokens
    assert info["verdict"].status in ("wrong", "unparseable") and reward == 0.0


def test_step_after_end_raises_reset_needed(env: MathEnv) -> None:
    env.reset(seed=5)
    env.step(eos(env))
    with pytest.raises(ResetNeeded, match="reset"):
        env.step(5)
    with pytest.raises(ResetNeeded):
        env.step_chunk(np.array([5, 6]))


@pytest.mark.parametrize("bad", [-1, 2048, 10**9])
def test_token_outside_vocabulary_is_rejected(env: MathEnv, bad: int) -> None:
    env.reset(seed=6)
    before = env.ledger.copy()
    with pytest.raises(ValueError, match=f"token id {bad} is outside the vocabulary"):
        env.step(bad)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        env.step(np.array([1, bad]))
    assert env.ledger == before  # nothing was appended


@pytest.mark.parametrize("bad", [3.7, True, "7", np.float32(5.0), np.bool_(True), None])
def test_a_non_integer_action_is_rejected(env: MathEnv, bad: object) -> None:
    env.reset(seed=0)
    n = env.ledger.n
    with pytest.raises(TypeError, match="expects a token id"):
        env.step(bad)
    assert env.ledger.n == n  # nothing was appended
    env.step(np.int64(5))  # NumPy integers and 0-d integer arrays are token ids
    env.step(np.array(6))
    assert env.ledger.token_id[-2:].tolist() == [5, 6]


@pytest.mark.parametrize("bad", [2.5, True, "48"])
def test_a_non_integer_budget_is_rejected(bad: object) -> None:
    with pytest.raises(TypeError, match="max_new_tokens must be an int"):
        MathEnv(max_new_tokens=bad)  # type: ignore[arg-type]


class _FailingMath(MathEnv):
    fail = True

    def grade(self, response: str):  # type: ignore[no-untyped-def]
        if self.fail:
            raise RuntimeError("verifier exploded")
        return super().grade(response)


@pytest.mark.parametrize("chunked", [False, True])
def test_an_exception_at_the_end_of_a_turn_leaves_the_episode_as_it_was(chunked: bool) -> None:
    env = _FailingMath(max_new_tokens=24)
    env.reset(seed=3)
    tokens = [*encode(env, "The answer is"), eos(env)]
    env.step(np.asarray(tokens[:2]))
    before, turn_tokens = env.ledger.copy(), env.turn_tokens_left
    with pytest.raises(RuntimeError, match="verifier exploded"):
        if chunked:
            env.step(np.asarray(tokens[2:]))
        else:
            for t in tokens[2:]:
                env.step(t)
    if chunked:
        assert env.ledger == before and env.turn_tokens_left == turn_tokens  # the whole chunk taken back
    else:  # token by token: only the failing (stop) token is taken back, the ones before it stay stepped
        assert env.ledger.token_id.tolist() == [*before.token_id.tolist(), *tokens[2:-1]]
    assert not env.done
    env.fail = False
    *_, terminated, _, info = env.step(np.asarray([eos(env)]))
    assert terminated and info["status"] in ("wrong", "unparseable")  # the episode goes on, consistently


def test_chunk_must_be_a_1d_integer_array(env: MathEnv) -> None:
    env.reset(seed=6)
    with pytest.raises(ValueError, match="1-D integer"):
        env.step_chunk(np.array([[1, 2]]))
    with pytest.raises(ValueError, match="1-D integer"):
        env.step_chunk(np.array([1.5]))


def test_seeding_is_deterministic_and_seeds_differ(env: MathEnv) -> None:
    a, _ = env.reset(seed=11)
    b, _ = env.reset(seed=11)
    c, _ = env.reset(seed=12)
    np.testing.assert_array_equal(a["tokens"], b["tokens"])
    assert not np.array_equal(a["tokens"], c["tokens"])


def test_fork_continues_the_same_episode_and_leaves_the_original_alone(env: MathEnv) -> None:
    env.reset(seed=7)
    answer = [*encode(env, env.oracle_response()), eos(env)]
    env.step(np.asarray(answer[:3]))
    snapshot = env.ledger.copy()
    child = env.fork()
    assert child.ledger == env.ledger and child.ledger is not env.ledger
    _, r_child, term, _, _ = child.step(np.asarray(answer[3:]))
    assert term and r_child == 1.0
    assert env.ledger == snapshot and not env.done  # the parent is untouched
    _, r_parent, *_ = env.step(np.asarray(answer[3:]))
    assert r_parent == 1.0 and env.ledger == child.ledger


def test_fork_at_a_prefix_and_its_limits(env: MathEnv) -> None:
    env.reset(seed=8)
    p = env.prompt_length
    env.step(np.asarray([*encode(env, "The answer is \\boxed{1}."), eos(env)]))
    child = env.fork(p + 2)
    assert len(child.ledger) == p + 2 and not child.done and child.ledger.reward.sum() == 0.0
    child.step(eos(env))
    assert child.done and (child.ledger.source == Source.POLICY).sum() == 3
    with pytest.raises(ValueError, match=r"inside the prompt|outside"):
        env.fork(p - 1)


def test_tokenizer_without_chat_template_gets_a_clear_error() -> None:
    from transformers import PreTrainedTokenizerFast

    from creditgym.envs.tokenizer import ASSETS

    tok = PreTrainedTokenizerFast.from_pretrained(str(ASSETS))
    tok.chat_template = None
    with pytest.raises(ValueError, match=r"no chat template.*CHATML_TEMPLATE"):
        MathEnv(tokenizer=tok)


def test_ledger_grows_and_copies() -> None:
    led = Ledger(capacity=16)
    led.extend(np.arange(10), Source.PROMPT, 0)
    for t in range(100):
        led.append(t, Source.POLICY, 1)
    assert len(led) == 110 and led.token_id[-1] == 99 and led.policy_mask.sum() == 100
    assert led.copy(10) == led.copy(10) and led.copy(10) != led
    with pytest.raises(ValueError):
        led.copy(111)


def test_options_task_pins_the_problem(env: MathEnv) -> None:
    task = MathTask(question="What is 2 + 2?", answer="4", task_id="t")
    _, info = env.reset(seed=0, options={"task": task})
    assert info["task_id"] == "t" and "2 + 2" in env.tokenizer.decode(env.ledger.token_id)
    with pytest.raises(TypeError, match="MathTask"):
        env.reset(options={"task": "What is 2 + 2?"})


def test_vector_env_steps_tokens_and_reports_verdicts() -> None:
    envs = gym.make_vec("creditgym/Math-v0", num_envs=2, vectorization_mode="sync", max_new_tokens=8)
    obs, _ = envs.reset(seed=0)
    lengths = [len(t) for t in obs["tokens"]]
    eos_id = envs.envs[0].unwrapped.tokenizer.eos_token_id
    obs, _, _, _, _ = envs.step(np.array([17, 17]))
    assert [len(t) for t in obs["tokens"]] == [n + 1 for n in lengths]
    _, rewards, terminated, _, info = envs.step(np.array([eos_id, eos_id]))
    assert terminated.tolist() == [True, True] and rewards.shape == (2,)
    assert list(info["status"]) == ["unparseable", "unparseable"]
    envs.close()
