"""Monte-Carlo values and A* (``creditgym.agents.providers.mc``) on real forks, the bundled tiny model and small test envs
(the vine module built on them: tests/credit/test_vine.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym import credit
from creditgym.agents.eval.scripted import SCRIPTED
from creditgym.agents.probe.run import sample_batch
from creditgym.agents.providers.mc import (
    check_forkable,
    check_one_turn,
    plan,
    sample_continuations,
    segment_starts,
)
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.agents.train.rollout import Episode
from creditgym.agents.train.sampling import Sampling
from creditgym.agents.train.trainer import Trainer
from creditgym.envs import make

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return load_policy("creditgym/tiny", device="cpu")


@pytest.fixture(autouse=True)
def probe_envs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``probe_envs:ProbeParity-v0`` and friends resolve (the module is imported by its ``module:EnvId``)."""
    monkeypatch.syspath_prepend(str(HERE))
    yield


def _sampling(seed: int) -> Sampling:
    """The run's default sampling, drawing from a generator seeded with ``seed``."""
    return Sampling.of(TrainConfig(), torch.Generator().manual_seed(seed))


def _batch(policy: Policy, env_id: str, prompts: int = 2, group: int = 2, **kwargs: object) -> list[Episode]:
    env = make(env_id, **kwargs).unwrapped
    return sample_batch(policy, env, prompts, group, seed=3, temperature=1.0, top_p=1.0)


def test_segment_starts_every_token_every_k_and_newlines() -> None:
    ids = np.array([5, 7, 10, 8, 10, 9])  # token 10 is the newline
    turns = np.array([1, 1, 1, 1, 2, 2])
    newline = lambda t: t == 10  # noqa: E731
    assert segment_starts(ids, np.ones(6, int), 1, newline).tolist() == [0, 1, 2, 3, 4, 5]
    assert segment_starts(ids, np.ones(6, int), 4, newline).tolist() == [0, 4]
    assert segment_starts(ids, np.ones(6, int), None, newline).tolist() == [0, 3, 5]  # after each newline
    assert segment_starts(ids, turns, 4, newline).tolist() == [0, 4]  # turn 2 starts at 4 anyway
    assert segment_starts(ids, turns, 5, newline).tolist() == [0, 4, 5]  # a new turn starts a segment


@pytest.mark.parametrize("every", [1, 3, None])
def test_astar_sums_along_a_response_to_its_reward_minus_v0(policy: Policy, every: int | None) -> None:
    episodes = _batch(policy, "creditgym/Math-v0", max_new_tokens=24)
    est = plan(episodes, 2, every)
    sample_continuations(est, policy, _sampling(0))
    assert est.done == est.total
    for ep, astar, v in zip(episodes, est.token_advantages(), est.values(), strict=True):
        assert len(astar) == int(ep.env.ledger.policy_mask.sum())
        assert v[-1] == ep.reward
        assert abs(astar.sum() - (ep.reward - v[0])) < 1e-12
    if every == 1:  # every token probed: A*(t) = V(t+1) - V(t)
        for astar, v in zip(est.token_advantages(), est.values(), strict=True):
            np.testing.assert_array_equal(astar, np.diff(v))


def test_the_astar_mass_lies_on_the_tokens_the_reward_depends_on(policy: Policy) -> None:
    """ProbeParity-v0 scores only the first 3 response tokens; the filler after them carries no credit."""
    from probe_envs import CODE

    episodes = _batch(policy, "probe_envs:ProbeParity-v0", prompts=3, group=2)
    est = plan(episodes, 4, 1)
    sample_continuations(est, policy, _sampling(1))
    astar = est.token_advantages()
    on_code = sum(float(np.abs(a[:CODE]).sum()) for a in astar)
    total = sum(float(np.abs(a).sum()) for a in astar)
    assert total > 0
    assert on_code / total >= 0.8
    for a, v, ep in zip(astar, est.values(), episodes, strict=True):
        assert np.all(a[CODE:] == 0)  # once the code is written the outcome is certain
        if len(v) > CODE + 1:
            assert np.all(v[CODE:] == ep.reward)  # V after the code (every continuation) is R exactly


def test_growing_k_samples_only_the_new_columns(policy: Policy) -> None:
    """The probe's adaptive K: `grow` widens every table, `sample_continuations` fills only the new columns,
    and the columns sampled before stay as they were."""
    episodes = _batch(policy, "creditgym/Math-v0", max_new_tokens=12)
    est = plan(episodes, 2, 4)
    counted: list[int] = []
    sample_continuations(est, policy, _sampling(0), rows=6, on_progress=counted.append)
    first = [r.copy() for r in est.rewards]
    assert sum(counted) == est.total == 2 * sum(len(s) for s in est.starts) and max(counted) <= 6
    est.grow(6)
    assert est.k == 6 and est.done == sum(r.size for r in first)  # the new columns are still to sample
    counted.clear()
    sample_continuations(est, policy, _sampling(1), rows=6, on_progress=counted.append)
    assert sum(counted) == 4 * sum(len(s) for s in est.starts) and est.done == est.total
    for old, new in zip(first, est.rewards, strict=True):
        np.testing.assert_array_equal(new[:, :2], old)
        assert not np.isnan(new).any()
    with pytest.raises(ValueError, match="K can only grow, from 6 to 4"):
        est.grow(4)


def test_a_multi_turn_episode_forks_inside_its_second_turn(policy: Policy) -> None:
    episodes = _batch(policy, "probe_envs:ProbeTwoTurn-v0", prompts=1, group=2)
    assert all(len(set(ep.env.ledger.turn[ep.env.ledger.policy_mask])) == 2 for ep in episodes)
    with pytest.raises(ValueError, match=r"'ProbeTwoTurn-v0' is multi-turn .*give a turn budget"):
        check_one_turn(episodes, "ProbeTwoTurn-v0", None)  # the batch itself shows it, whatever the env says
    check_one_turn(episodes, "ProbeTwoTurn-v0", 2)
    est = plan(episodes, 2, 1)
    sample_continuations(est, policy, _sampling(2))
    for ep, astar, v, starts in zip(episodes, est.token_advantages(), est.values(), est.starts, strict=True):
        assert abs(astar.sum() - (ep.reward - v[0])) < 1e-12
        assert len(starts) == len(astar)


# -- bad input ---------------------------------------------------------------------------------------------------


def test_an_env_that_cannot_fork_is_named_with_what_it_lacks(tmp_path: Path) -> None:
    import gymnasium as gym

    with pytest.raises(ValueError, match=r"env 'CartPole-v1' \(CartPoleEnv\) cannot fork.*fork\(n\)"):
        check_forkable(gym.make("CartPole-v1").unwrapped, "CartPole-v1")
    with pytest.raises(
        ValueError, match=r"'probe_envs:ProbeNoFork-v0' \(NoForkEnv\).*forks_mid_episode is False"
    ):
        Trainer(
            TrainConfig(
                env_id="probe_envs:ProbeNoFork-v0", credit="vine", max_new_tokens=None, eval_episodes=2
            ),
            tmp_path,
        )


def test_a_model_that_cannot_sample_continuations_is_refused(policy: Policy) -> None:
    est = plan(_batch(policy, "creditgym/Math-v0", max_new_tokens=8), 2, 1)
    with pytest.raises(
        ValueError, match=r"OracleAgent cannot sample continuations from a prefix.*generation backend"
    ):
        sample_continuations(est, SCRIPTED["oracle"](), Sampling.greedy())


def test_k_and_every_are_checked(policy: Policy) -> None:
    episodes = _batch(policy, "creditgym/Math-v0", prompts=1, group=1, max_new_tokens=8)
    with pytest.raises(ValueError, match=r"K \(continuations per prefix\) must be an int >= 1, got 0"):
        plan(episodes, 0, 1)
    with pytest.raises(ValueError, match="every must be an int >= 1"):
        plan(episodes, 2, 0)
    with pytest.raises(ValueError, match=r"VineConfig.k: expected an int >= 1"):
        credit.get("vine").make_config({"k": 0})
    with pytest.raises(ValueError, match=r"delimiter must be a non-empty string.*got ''"):
        plan(episodes, 2, None, "")
    with pytest.raises(ValueError, match=r"max_step must be an int >= 1 or None, got 0"):
        plan(episodes, 2, None, ";", 0)
    with pytest.raises(ValueError, match=r"VineConfig.max_step: expected an int >= 1 or None, got 0"):
        credit.get("vine").make_config({"max_step": 0})
    with pytest.raises(ValueError, match=r"VineConfig.delimiter: expected a non-empty string.*got 7"):
        credit.get("vine").make_config({"delimiter": 7})
