"""VinePPO (arXiv 2410.01679): the step advantage by hand; the default steps exist in every shipped task's responses
(lines, the chains' links, sentences, or a stride); against an A* computed independently of the Monte-Carlo
machinery (exact values from the model's own next-token probabilities); trained end to end by the trainer."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym import credit
from creditgym.agents.eval.evaluate import make_envs
from creditgym.agents.probe.run import module_advantages, sample_batch
from creditgym.agents.providers import RunContext, SignalProvider, build_providers
from creditgym.agents.providers.mc import plan, segment_starts
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.agents.train.rollout import Episode
from creditgym.agents.train.trainer import Trainer
from creditgym.credit import CreditBatch
from creditgym.credit.vine import STEP_ENDS, VineConfig
from creditgym.envs import make

PROBE_ENVS = Path(__file__).resolve().parents[1] / "agents"  # probe_envs.py: ProbeParity-v0


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return load_policy("creditgym/tiny", device="cpu")


@pytest.fixture
def probe_envs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(PROBE_ENVS))
    yield


def _batch(policy: Policy, env_id: str, prompts: int = 2, group: int = 2, **kwargs: object) -> list[Episode]:
    env = make(env_id, **kwargs).unwrapped
    return sample_batch(policy, env, prompts, group, seed=3, temperature=1.0, top_p=1.0)


def _providers(policy: Policy, kwargs: dict[str, object], env_id: str = "creditgym/Math-v0") -> dict:
    """The trainer's own signal providers of a ``vine`` run with these config fields."""
    cfg = TrainConfig(env_id=env_id, credit="vine", credit_kwargs=kwargs, max_new_tokens=24)
    module = credit.get("vine")
    return build_providers(
        RunContext(cfg, policy, make_envs(cfg, policy.tokenizer)[0].unwrapped, env_id),
        module,
        module.make_config(kwargs),
    )


def _vine(
    policy: Policy,
    episodes: list[Episode],
    kwargs: dict[str, object],
    seed: int,
    providers: dict[str, SignalProvider] | None = None,
    step: int = 0,
) -> list[np.ndarray]:
    """The vine module's advantages per response, through the trainer's provider of ``mc_values``."""
    module = credit.get("vine")
    providers = _providers(policy, kwargs) if providers is None else providers
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


def expected_starts(
    texts: Sequence[str], ends: Sequence[str] = STEP_ENDS, max_step: int | None = 32
) -> list[int]:
    """Step starts read off the decoded tokens: after a token holding a delimiter, or ``max_step`` tokens on."""
    starts, last = [0], 0
    for i in range(1, len(texts)):
        if any(d in texts[i - 1] for d in ends) or (max_step is not None and i - last >= max_step):
            starts.append(i)
            last = i
    return starts


# -- the module on a batch built here ----------------------------------------------------------------------------


def test_registered_with_its_signal_and_default_steps() -> None:
    module = credit.get("vine")
    assert module.signals == ("mc_values",) and not module.critic and module.actor_loss == "ppo"
    assert module.signal_params == {"mc_values": ("k", "every", "delimiter", "max_step")}
    cfg = VineConfig()
    assert (cfg.k, cfg.every, cfg.delimiter, cfg.max_step) == (8, None, ("\n", ";", "."), 32)
    assert VineConfig(delimiter=[";", "\n"]).delimiter == (";", "\n")  # a JSON list from the command line


def test_every_token_of_a_step_gets_the_step_advantage_by_hand() -> None:
    """Row 0: a prompt token, then steps [1, 2] and [3] with V = 0.5 -> 0.75 -> R = 1; row 1: one step 0.4 -> 0."""
    mask = torch.tensor([[False, True, True, True, False], [False, True, True, False, False]])
    mc = torch.zeros(2, 5, 2)
    mc[0, 1:3] = torch.tensor([0.5, 0.75])
    mc[0, 3] = torch.tensor([0.75, 1.0])
    mc[1, 1:3] = torch.tensor([0.4, 0.0])
    mc[0, 0] = torch.tensor([9.0, -9.0])  # under the mask: ignored
    rewards = torch.zeros(2, 5)
    rewards[0, 3] = 1.0
    batch = CreditBatch(rewards, mask, torch.tensor([0, 0]), torch.zeros(2, 5), signals={"mc_values": mc})
    out = credit.get("vine")(batch)
    torch.testing.assert_close(
        out.advantages, torch.tensor([[0, 0.25, 0.25, 0.25, 0], [0, -0.4, -0.4, 0, 0]])
    )
    assert out.metrics["credit/vine/value_mean"] == pytest.approx((0.5 + 0.5 + 0.75 + 0.4 + 0.4) / 5)
    bad = CreditBatch(
        rewards, mask, torch.tensor([0, 0]), torch.zeros(2, 5), signals={"mc_values": mc[..., :1]}
    )
    with pytest.raises(ValueError, match=r"vine: signal 'mc_values' must have shape \(B, T, 2\)"):
        credit.get("vine")(bad)


def test_max_step_cuts_a_response_without_delimiters() -> None:
    ids, one_turn = np.arange(100, 170), np.ones(70, int)
    never = lambda t: False  # noqa: E731
    assert segment_starts(ids, one_turn, None, never, 32).tolist() == [0, 32, 64]
    assert segment_starts(ids, one_turn, None, never, None).tolist() == [0]
    at_110 = lambda t: t == 110  # noqa: E731  a delimiter at index 10: the stride restarts after it
    assert segment_starts(ids, one_turn, None, at_110, 32).tolist() == [0, 11, 43]
    assert segment_starts(ids, one_turn, 20, never, 32).tolist() == [
        0,
        20,
        40,
        60,
    ]  # every=N: the stride alone


# -- the default steps on the shipped tasks ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "kwargs", "min_steps"),
    [
        ("creditgym/Math-v0", {"difficulty": 6, "max_new_tokens": 80}, 4),  # the chains: a step per link
        # "65 - 42 = 23. The answer is \boxed{23}." in 2 steps; the untrained model often answers "\boxed{49}" at
        # once, one step with nothing to cut
        ("creditgym/Math-v0", {}, 1.25),
        ("creditgym/Rubric-v0", {"preset": "hard", "max_new_tokens": 80}, 4),  # sentences and lines
    ],
)
def test_the_default_steps_exist_in_the_shipped_tasks_responses(
    policy: Policy, env_id: str, kwargs: dict[str, object], min_steps: float
) -> None:
    """With VineConfig's defaults every shipped task's responses are cut into several steps, at the places their
    text says (with newline steps, the default before, every math answer was one step: an outcome baseline)."""
    episodes = _batch(policy, env_id, **kwargs)
    cfg = VineConfig()
    est = plan(episodes, 2, cfg.every, cfg.delimiter, cfg.max_step)
    tokenizer = episodes[0].env.tokenizer
    for ep, starts in zip(episodes, est.starts, strict=True):
        texts = [tokenizer.decode([int(t)]) for t in ep.env.response_tokens()]
        assert starts.tolist() == expected_starts(texts)
    assert np.mean([len(s) for s in est.starts]) >= min_steps
    if env_id == "creditgym/Math-v0":  # no answer holds a newline: each was one step under the old default
        assert all(len(s) == 1 for s in plan(episodes, 2, None, "\n").starts)


def test_steps_can_end_at_one_delimiter_the_chains_semicolons(policy: Policy) -> None:
    """``delimiter=";"`` (the study's vine:delimiter=";"): a step starts after each token holding ``;``, and every
    token of a step gets its advantage through the trainer's provider."""
    episodes = _batch(policy, "creditgym/Math-v0", difficulty=6, max_new_tokens=40)
    tokenizer = episodes[0].env.tokenizer
    est = plan(episodes, 2, None, ";")
    for ep, starts in zip(episodes, est.starts, strict=True):
        texts = [tokenizer.decode([int(t)]) for t in ep.env.response_tokens()]
        assert starts.tolist() == expected_starts(texts, (";",), None)
    kwargs = {"k": 2, "delimiter": ";", "max_step": None}
    providers = _providers(policy, kwargs)
    vine = _vine(policy, episodes, kwargs, seed=5, providers=providers)
    for a, starts in zip(vine, est.starts, strict=True):
        for lo, hi in zip(starts, [*starts[1:], len(a)], strict=True):
            assert np.ptp(a[lo:hi]) == 0  # one advantage per step
    steps = providers["mc_values"].update(None)["mc/steps_per_response"]  # type: ignore[arg-type]
    assert steps == pytest.approx(np.mean([len(s) for s in est.starts])) and steps >= 2


def test_a_batch_of_one_step_responses_warns_once(policy: Policy) -> None:
    """Newline steps on responses without a newline: each response is one step, so its advantage is
    R - V(prompt) on every token (no step credit): said once, and counted by the metric."""
    episodes = _batch(policy, "creditgym/Math-v0", max_new_tokens=24)
    kwargs = {"k": 2, "delimiter": "\n", "max_step": None}
    providers = _providers(policy, kwargs)
    with pytest.warns(UserWarning, match=r"every response of step 0's batch is one step.*vine:every=16"):
        vine = _vine(policy, episodes, kwargs, seed=1, providers=providers)
    assert all(np.ptp(a) == 0 for a in vine)
    assert providers["mc_values"].update(None) == {"mc/steps_per_response": 1.0}  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second batch does not warn again
        _vine(policy, episodes, kwargs, seed=1, providers=providers, step=1)


# -- against an independent A* -----------------------------------------------------------------------------------


@torch.no_grad()
def test_vine_matches_an_exact_astar_on_the_parity_task(policy: Policy, probe_envs: None) -> None:
    """ProbeParity-v0 scores the parity of the first 3 response tokens, so the value of a prefix is exact without
    any sampling: after 3 tokens V = R, and after 2 tokens V = (even(x1) + even(x2) + P(x3 even)) / 3 with P from
    the model's own next-token distribution (temperature 1, no top-k or top-p). vine's advantages (every token a
    step, K = 64 continuations) must match: 0 after the third token, and R - V(2 tokens) on it within Monte-Carlo
    error (sd at most 0.5 / 3 / sqrt(64) = 0.021)."""
    from probe_envs import CODE

    env_id = "probe_envs:ProbeParity-v0"
    episodes = _batch(policy, env_id, prompts=3, group=2, max_new_tokens=6)
    kwargs = {"k": 64, "every": 1}
    vine = _vine(policy, episodes, kwargs, seed=11, providers=_providers(policy, kwargs, env_id))
    vocab = policy.model.get_output_embeddings().weight.shape[0]
    even = torch.arange(vocab) % 2 == 0
    errors = []
    for ep, a in zip(episodes, vine, strict=True):
        led = ep.env.ledger
        idx = np.flatnonzero(led.policy_mask)
        assert np.all(a[CODE:] == 0)  # once the code is written every continuation's reward is R
        if len(idx) < CODE:
            continue
        prefix = torch.as_tensor(led.token_id[: idx[CODE - 1]], dtype=torch.long)[None]
        p = torch.softmax(policy.model(prefix).logits[0, -1].double(), -1)
        first = led.token_id[idx[: CODE - 1]]
        v2 = (float(np.sum(first % 2 == 0)) + float(p[even].sum())) / CODE
        errors.append(a[CODE - 1] - (ep.reward - v2))
    assert len(errors) >= 4
    assert np.max(np.abs(errors)) < 0.1  # under 5 sd
    assert abs(np.mean(errors)) < 0.05


# -- end to end ----------------------------------------------------------------------------------------------------


def test_vine_trains_end_to_end_with_its_default_steps(tmp_path: Path) -> None:
    """A trainer step of ``vine`` with its defaults on the chains: the advantages it computes are one per step,
    the steps those of the responses' text (several per response), and the actor update moves the log-probs
    along them (sum of A times the change of log-prob > 0)."""
    cfg = TrainConfig(
        env_kwargs={"difficulty": 6},
        max_new_tokens=60,
        credit="vine",
        credit_kwargs={"k": 2},
        steps=1,
        prompts_per_step=2,
        group_size=2,
        minibatches=1,
        lr=1e-3,
        eval_episodes=2,
    )
    trainer = Trainer(cfg, tmp_path)
    rng = np.random.default_rng(0)
    step, _ = trainer._rollouts(rng)
    assert step is not None
    signals = {name: p.compute(step) for name, p in trainer.providers.items()}
    out = trainer._credit(step, signals)
    mask, decode = step.policy_mask, trainer.policy.tokenizer.decode
    n_steps = []
    for row in range(mask.shape[0]):
        tokens = step.input_ids[row][mask[row]].tolist()
        a = out.advantages[row][mask[row]]
        starts = expected_starts([decode([t]) for t in tokens])
        n_steps.append(len(starts))
        for lo, hi in zip(starts, [*starts[1:], len(tokens)], strict=True):
            assert (a[lo:hi] == a[lo]).all()
    assert np.mean(n_steps) >= 3
    assert trainer.providers["mc_values"].update(step)["mc/steps_per_response"] == pytest.approx(
        np.mean(n_steps)
    )
    before = trainer.policy.forward_logprobs(
        step.input_ids, step.attention_mask, return_entropy=False
    ).logprobs
    metrics = trainer._update_actor(step, out.advantages, rng)
    after = trainer.policy.forward_logprobs(
        step.input_ids, step.attention_mask, return_entropy=False
    ).logprobs
    assert np.isfinite(metrics["actor/pg_loss"])
    assert float((out.advantages * (after - before).detach())[mask].sum()) > 0
