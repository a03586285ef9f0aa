"""Planted-v0: the reward reads the decisive slots only, and `exact_advantages` matches brute-force enumeration."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import creditgym  # noqa: F401
from creditgym.envs import registered_ids
from creditgym.envs.planted import PlantedEnv, PlantedTask, exact_advantages

L = 8


def _episode(env: PlantedEnv, response: list[int]) -> float:
    env.reset(seed=0, options={"task": env.current_task})
    _, reward, terminated, truncated, _ = env.step(np.asarray(response))
    assert terminated and not truncated
    return float(reward)


def _correct(env: PlantedEnv) -> list[int]:
    response = [int(env.digit_ids[0])] * env.max_new_tokens
    for s, r in zip(env.decisive_slots, env.required_tokens, strict=True):
        response[s] = r
    return response


def test_registered_and_the_task_follows_the_seed() -> None:
    assert "creditgym/Planted-v0" in registered_ids()
    env = gym.make("creditgym/Planted-v0", max_new_tokens=L).unwrapped
    env.reset(seed=5)
    first = env.current_task
    env.reset(seed=5)
    assert env.current_task == first
    assert len({(env.reset(seed=s), env.current_task)[1] for s in range(20)}) > 1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), filler=st.lists(st.integers(0, 2047), min_size=L, max_size=L))
def test_changing_filler_tokens_never_changes_the_reward(seed: int, filler: list[int]) -> None:
    env = PlantedEnv(max_new_tokens=L)
    env.reset(seed=seed)
    base = _correct(env)
    mixed = [b if i in env.decisive_slots else f for i, (b, f) in enumerate(zip(base, filler, strict=True))]
    assert _episode(env, base) == 1.0
    assert _episode(env, mixed) == 1.0  # every filler token replaced, EOS and chat markers included
    wrong = list(mixed)
    s = env.decisive_slots[0]
    wrong[s] = env.digit_ids[(env.current_task.digits[0] + 1) % 10]
    assert _episode(env, wrong) == 0.0
    wrong_filler = [
        f if i in env.decisive_slots else b for i, (b, f) in enumerate(zip(wrong, filler, strict=True))
    ]
    assert _episode(env, wrong_filler) == 0.0


def test_changing_a_decisive_token_changes_the_reward() -> None:
    env = PlantedEnv(max_new_tokens=L)
    env.reset(seed=1)
    for s in env.decisive_slots:
        response = _correct(env)
        response[s] = env.tokenizer.eos_token_id
        assert _episode(env, response) == 0.0


def test_stop_tokens_do_not_end_the_response_early() -> None:
    env = PlantedEnv(max_new_tokens=L)
    env.reset(seed=2)
    for _ in range(L - 1):
        _, _, terminated, _, _ = env.step(env.tokenizer.eos_token_id)
        assert not terminated
    assert env.step(env.tokenizer.eos_token_id)[2]


# -- exact truth against brute force ------------------------------------------------------------------------------

SUPPORT = 3  # the tiny policy's tokens: 0 = required digit at a slot, 1 = a wrong digit, 2 = filler "x"


def _policy(prefix: tuple[int, ...], slots: tuple[int, ...], p_hit: tuple[float, ...]) -> np.ndarray:
    """A policy satisfying the assumption: at slot k, P(required) = p_hit[k] when every earlier slot was hit (an
    arbitrary 0.3 otherwise); off the slots, a distribution that depends on the whole prefix."""
    t = len(prefix)
    if t in slots:
        k = slots.index(t)
        alive = all(prefix[s] == 0 for s in slots[:k])
        p = p_hit[k] if alive else 0.3
        return np.array([p, (1 - p) / 2, (1 - p) / 2])
    w = np.array([1.0 + (sum(prefix) % 3), 2.0, 1.0 + len(prefix)])
    return w / w.sum()


def _brute_value(env: PlantedEnv, prefix: tuple[int, ...], ids: dict[int, list[int]], slots, p_hit) -> float:
    """V(prefix): sum over every completion of its probability times the env's reward."""
    n = env.max_new_tokens - len(prefix)
    total = 0.0
    for rest in itertools.product(range(SUPPORT), repeat=n):
        seq, prob = prefix, 1.0
        for a in rest:
            prob *= _policy(seq, slots, p_hit)[a]
            seq = (*seq, a)
        response = [ids[a][i] for i, a in enumerate(seq)]
        total += prob * _episode(env, response)
    return total


@pytest.mark.parametrize("path", [(0, 2, 0, 0, 1), (2, 1, 2, 0, 0), (0, 0, 2, 0, 2), (1, 2, 2, 1, 0)])
def test_exact_advantages_match_brute_force_enumeration(path: tuple[int, ...]) -> None:
    n = len(path)
    env = PlantedEnv(max_new_tokens=n)
    task = PlantedTask(a=3, b=4, slots=(1, 3), digits=(2, 5))
    env.reset(seed=0, options={"task": task})
    p_hit = (0.7, 0.4)
    digit, x = env.digit_ids, int(env.tokenizer.encode("x", add_special_tokens=False)[0])
    # token of each support index at each position: the slot's digit / the next digit / "x"
    ids = {0: [], 1: [], 2: [x] * n}
    for i in range(n):
        d = task.digits[task.slots.index(i)] if i in task.slots else 0
        ids[0].append(digit[d])
        ids[1].append(digit[(d + 1) % 10])
    values = [_brute_value(env, path[:t], ids, task.slots, p_hit) for t in range(n + 1)]
    brute = np.diff(values)  # (n,) V(prefix + y_t) - V(prefix)
    hit = [path[s] == 0 for s in task.slots]
    exact = exact_advantages(n, task.slots, hit, p_hit)
    # each V sums 3**n products of n probabilities: float64 rounding scaled by the number of terms
    tol = 3**n * n * np.finfo(np.float64).eps
    np.testing.assert_allclose(exact, brute, atol=tol, rtol=0)
    filler = [t for t in range(n) if t not in task.slots]
    assert (exact[filler] == 0).all()
    assert exact.sum() == pytest.approx(float(all(hit)) - p_hit[0] * p_hit[1], abs=tol)


def test_exact_advantages_reject_bad_inputs() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        exact_advantages(4, [2, 1], [True, True], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        exact_advantages(4, [0, 1], [True, True], [1.5, 0.5])
    with pytest.raises(ValueError, match="one length"):
        exact_advantages(4, [0, 1], [True], [0.5, 0.5])


# -- options: what a slot accepts, where the slots are ---------------------------------------------------------


def test_the_default_layout_puts_the_slots_first_and_random_draws_them() -> None:
    lead, drawn = PlantedEnv(max_new_tokens=L), PlantedEnv(max_new_tokens=L, layout="random")
    seen = set()
    for seed in range(20):
        lead.reset(seed=seed)
        drawn.reset(seed=seed)
        assert lead.decisive_slots == (0, 1)
        assert (lead.current_task.a, lead.current_task.b) == (drawn.current_task.a, drawn.current_task.b)
        seen.add(drawn.decisive_slots)
    assert len(seen) > 3


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), response=st.lists(st.integers(0, 2047), min_size=L, max_size=L))
def test_a_parity_slot_accepts_any_token_of_its_parity(seed: int, response: list[int]) -> None:
    env = PlantedEnv(max_new_tokens=L, match="parity")
    env.reset(seed=seed)
    masks = env.decisive_masks(2048)
    hits = env.slot_hits(response)
    assert hits == [bool(masks[k, response[s]]) for k, s in enumerate(env.decisive_slots)]
    assert hits == [
        response[s] % 2 == r % 2 for s, r in zip(env.decisive_slots, env.required_tokens, strict=True)
    ]
    assert _episode(env, response) == float(all(hits))
    assert masks.sum(1).tolist() == [1024, 1024]  # half of every vocabulary
    digit = PlantedEnv(max_new_tokens=L)
    digit.reset(seed=seed)
    assert digit.decisive_masks(2048).sum(1).tolist() == [1, 1]


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"match": "odd"}, "match must be one of"), ({"layout": "x"}, "layout")]
)
def test_unknown_options_are_refused(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PlantedEnv(max_new_tokens=L, **kwargs)
