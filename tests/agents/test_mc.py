"""Monte-Carlo values and A* (``creditgym.agents.mc``) on real forks, the bundled tiny model and small test envs."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym import credit
from creditgym.agents.config import TrainConfig
from creditgym.agents.evaluate import make_envs
from creditgym.agents.mc import (
    check_forkable,
    check_one_turn,
    delimiter_test,
    plan,
    sample_continuations,
    segment_starts,
)
from creditgym.agents.policy import Policy, load_policy
from creditgym.agents.probe import module_advantages, sample_batch
from creditgym.agents.rollout import Episode
from creditgym.agents.scripted import SCRIPTED
from creditgym.agents.signals import RunContext, SignalProvider, build_providers
from creditgym.agents.trainer import Trainer
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
    sample_continuations(est, policy, generator=torch.Generator().manual_seed(0))
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
    sample_continuations(est, policy, generator=torch.Generator().manual_seed(1))
    astar = est.token_advantages()
    on_code = sum(float(np.abs(a[:CODE]).sum()) for a in astar)
    total = sum(float(np.abs(a).sum()) for a in astar)
    assert total > 0
    assert on_code / total >= 0.8
    for a, v, ep in zip(astar, est.values(), episodes, strict=True):
        assert np.all(a[CODE:] == 0)  # once the code is written the outcome is certain
        if len(v) > CODE + 1:
            assert np.all(v[CODE:] == ep.reward)  # V after the code (every continuation) is R exactly


def test_a_multi_turn_episode_forks_inside_its_second_turn(policy: Policy) -> None:
    episodes = _batch(policy, "probe_envs:ProbeTwoTurn-v0", prompts=1, group=2)
    assert all(len(set(ep.env.ledger.turn[ep.env.ledger.policy_mask])) == 2 for ep in episodes)
    with pytest.raises(ValueError, match=r"'ProbeTwoTurn-v0' is multi-turn .*give a turn budget"):
        check_one_turn(episodes, "ProbeTwoTurn-v0", None)  # the batch itself shows it, whatever the env says
    check_one_turn(episodes, "ProbeTwoTurn-v0", 2)
    est = plan(episodes, 2, 1)
    sample_continuations(est, policy, generator=torch.Generator().manual_seed(2))
    for ep, astar, v, starts in zip(episodes, est.token_advantages(), est.values(), est.starts, strict=True):
        assert abs(astar.sum() - (ep.reward - v[0])) < 1e-12
        assert len(starts) == len(astar)


def _vine_providers(policy: Policy, kwargs: dict[str, object]) -> dict[str, SignalProvider]:
    """The trainer's own signal providers of a ``vine`` run with these config fields."""
    cfg = TrainConfig(credit="vine", credit_kwargs=kwargs, max_new_tokens=24)
    module = credit.get("vine")
    credit_cfg = module.make_config(kwargs)
    env = make_envs(cfg)[0].unwrapped
    providers = build_providers(RunContext(cfg, policy, env, cfg.env_id, module, credit_cfg))
    expected = {"k": credit_cfg.k, "every": credit_cfg.every, "delimiter": credit_cfg.delimiter}
    assert providers["mc_values"].params == expected
    return providers


def _vine(
    policy: Policy,
    episodes: list[Episode],
    kwargs: dict[str, object],
    seed: int,
    providers: dict[str, SignalProvider] | None = None,
    step: int = 0,
) -> list[np.ndarray]:
    """The vine module's advantages through the trainer's own provider of ``mc_values`` (new providers unless
    given: a run's providers keep their state from step to step)."""
    module = credit.get("vine")
    providers = _vine_providers(policy, kwargs) if providers is None else providers
    # module_advantages seeds the step's generator with `seed`
    return module_advantages(
        module,
        module.make_config(kwargs),
        providers,
        episodes,
        policy,
        step=step,
        total_steps=step + 1,
        seed=seed,
    )


def test_vine_with_a_boundary_at_every_token_equals_astar(policy: Policy) -> None:
    """The vine module through the trainer's provider, and A* from the probe's machinery, on one batch and seed."""
    episodes = _batch(policy, "creditgym/Math-v0", max_new_tokens=24)
    est = plan(episodes, 3, 1)
    sample_continuations(est, policy, generator=torch.Generator().manual_seed(7))
    vine = _vine(policy, episodes, {"k": 3, "every": 1}, seed=7)
    assert any(np.ptp(a) > 0 for a in vine)
    for a, astar in zip(vine, est.token_advantages(), strict=True):
        np.testing.assert_allclose(a, astar, rtol=0, atol=1e-6)  # float32 signal vs float64 A*
    # with boundaries every 4 tokens, every token of a step gets the whole step advantage
    est = plan(episodes, 3, 4)
    sample_continuations(est, policy, generator=torch.Generator().manual_seed(7))
    for a, (start, end, _) in zip(
        _vine(policy, episodes, {"k": 3, "every": 4}, seed=7), est.step_values(), strict=True
    ):
        np.testing.assert_allclose(a, end - start, rtol=0, atol=1e-6)


def test_vine_steps_can_end_at_the_chains_semicolons(policy: Policy) -> None:
    """The chain tasks write ``a = 34 - 6 = 28; b = ...`` on one line: with ``delimiter=";"`` each step is one
    link of the chain (a step starts after each token holding ``;``), and every token of a step gets its advantage."""
    episodes = _batch(policy, "creditgym/Math-v0", difficulty=6, max_new_tokens=40)
    tokenizer = episodes[0].env.tokenizer
    ends_step = delimiter_test(tokenizer, ";")
    assert ends_step(tokenizer.encode(";")[-1]) and not ends_step(tokenizer.encode(" b")[-1])
    est = plan(episodes, 2, None, ";")
    for ep, starts in zip(episodes, est.starts, strict=True):
        tokens = ep.env.response_tokens()
        after = [i + 1 for i, t in enumerate(tokens[:-1]) if ";" in tokenizer.decode([int(t)])]
        assert starts.tolist() == [0, *after]
    assert np.mean([len(s) for s in est.starts]) >= 2  # the tiny model writes its chains from the start
    sample_continuations(est, policy, generator=torch.Generator().manual_seed(5))
    providers = _vine_providers(policy, {"k": 2, "delimiter": ";"})
    vine = _vine(policy, episodes, {"k": 2, "delimiter": ";"}, seed=5, providers=providers)
    for a, (start, end, _) in zip(vine, est.step_values(), strict=True):
        np.testing.assert_allclose(a, end - start, rtol=0, atol=1e-6)
    steps = providers["mc_values"].update(None)["mc/steps_per_response"]  # type: ignore[arg-type]
    assert steps == pytest.approx(np.mean([len(s) for s in est.starts]))


def test_vine_trains_end_to_end(tmp_path: Path) -> None:
    cfg = TrainConfig(
        credit="vine",
        credit_kwargs={"k": 2, "every": 4},
        steps=1,
        prompts_per_step=2,
        group_size=2,
        eval_every=1,
        eval_episodes=2,
        max_new_tokens=12,
    )
    summary = Trainer(cfg, tmp_path).run()
    assert summary["steps"] == 1
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert "credit/vine/adv_abs_mean" in rows[1]
    assert 1.0 <= rows[1]["mc/steps_per_response"] <= 3.0  # responses of 1-12 tokens, a step every 4


def test_newline_steps_on_responses_without_a_newline_warn_once(policy: Policy) -> None:
    """VinePPO's default steps end at newlines; a batch without any makes every response one step, so its
    advantage is R - V(prompt) on every token (no step credit): said once, and counted by the metric."""
    episodes = _batch(policy, "creditgym/Math-v0", max_new_tokens=24)
    tokenizer = episodes[0].env.tokenizer
    assert not any("\n" in tokenizer.decode(ep.env.response_tokens().tolist()) for ep in episodes)
    providers = _vine_providers(policy, {"k": 2})
    with pytest.warns(UserWarning, match=r"no response of step 0's batch holds a newline.*vine:every=16"):
        vine = _vine(policy, episodes, {"k": 2}, seed=1, providers=providers)
    assert all(np.ptp(a) == 0 for a in vine)  # one step: a constant advantage within each response
    assert providers["mc_values"].update(None) == {"mc/steps_per_response": 1.0}  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second batch does not warn again
        _vine(policy, episodes, {"k": 2}, seed=1, providers=providers, step=1)


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
        sample_continuations(est, SCRIPTED["oracle"]())


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
    with pytest.raises(ValueError, match=r"VineConfig.delimiter: expected a non-empty string.*got 7"):
        credit.get("vine").make_config({"delimiter": 7})
