"""PACT's critic model (arXiv 2609.26355): a separate LM fitted after the actor update on the IS targets.

One step of a real run with the bundled model, taken phase by phase (rollouts, signals, credit, actor update,
the providers' updates: PACT's critic phase), so each test can look between the phases.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym.agents.probe.run import ProbeConfig, setup_probe
from creditgym.agents.providers import StepContext
from creditgym.agents.providers.critic_model import CRITIC_MODEL_FILE, CriticModel, PolicyAlignedCritic
from creditgym.agents.providers.critics import CriticProvider
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import Trainer
from creditgym.credit import PACTConfig
from creditgym.credit.grpo import outcome_rewards
from creditgym.credit.pact import CriticTargets, pact_critic_targets

SMALL = dict(
    credit="pact",
    steps=2,
    prompts_per_step=2,
    group_size=4,
    eval_every=2,
    eval_episodes=4,
    checkpoint_every=1,
    env_kwargs={"max_new_tokens": 24},
    minibatches=2,
    epochs=2,
    lr=1e-3,  # large enough that two epochs of two minibatches move the ratio visibly
)


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _phases(
    trainer: Trainer,
) -> tuple[StepContext, dict[str, list[torch.Tensor]], dict[str, float], tuple[torch.Tensor, ...]]:
    """One training step phase by phase; the actor's and the critic's weights before, between and after, and
    the ((targets, weights, mask), updated log-probs) the provider's update fitted the critic on."""
    rng = np.random.default_rng(0)
    step, _ = trainer._rollouts(rng)
    assert step is not None
    signals = {n: p.compute(step) for n, p in trainer.providers.items()}
    out = trainer._credit(step, signals)
    provider = trainer.providers["values"]
    assert isinstance(provider, PolicyAlignedCritic) and provider.critic is not None
    snaps = {"actor0": _params(trainer.policy.model), "critic0": _params(provider.critic)}
    trainer._update_actor(step, out.advantages.detach(), rng)
    snaps |= {"actor1": _params(trainer.policy.model), "critic1": _params(provider.critic)}
    seen: list[tuple[torch.Tensor, ...]] = []
    targets = provider.critic_targets

    def spy(s: StepContext) -> tuple[CriticTargets, torch.Tensor]:
        seen.append(targets(s))
        return seen[-1]  # type: ignore[return-value]

    provider.critic_targets = spy  # type: ignore[method-assign]
    metrics = trainer._update_providers(step)
    snaps |= {"actor2": _params(trainer.policy.model), "critic2": _params(provider.critic)}
    (fitted,) = seen
    return step, snaps, metrics, fitted


@pytest.fixture(scope="module")
def phased(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trainer, StepContext, dict, dict, tuple]:
    trainer = Trainer(TrainConfig(**SMALL), tmp_path_factory.mktemp("phased"))
    return trainer, *_phases(trainer)


def test_pact_defaults_to_a_critic_model_copied_from_the_actor(tmp_path: Path) -> None:
    assert PACTConfig().critic == "model" and PACTConfig().critic_lr_ratio == 5.0
    trainer = Trainer(TrainConfig(**SMALL), tmp_path)
    provider = trainer.providers["values"]
    assert isinstance(provider, PolicyAlignedCritic) and isinstance(provider.critic, CriticModel)
    actor = dict(trainer.policy.model.base_model.named_parameters())
    for name, p in provider.critic.decoder.named_parameters():  # same values, separate storage
        assert torch.equal(p, actor[name]) and p.data_ptr() != actor[name].data_ptr()
    assert provider.optimizer.param_groups[0]["lr"] == pytest.approx(5 * SMALL["lr"])
    actor_params = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert not actor_params & {id(p) for p in provider.critic.parameters()}
    # its actor loss is the paper's DIS unless the run names one; the run's config.json records it
    assert trainer.cfg.loss == "dis" and json.loads((tmp_path / "config.json").read_text())["loss"] == "dis"
    ppo = Trainer(TrainConfig(**{**SMALL, "loss": "ppo"}), tmp_path / "ppo")
    assert ppo.cfg.loss == "ppo"
    # gae keeps the value head on the actor's hidden state (and PPO); pact:critic=probe gets the same head
    gae = Trainer(TrainConfig(**{**SMALL, "credit": "gae"}), tmp_path / "gae")
    assert type(gae.providers["values"]) is CriticProvider and gae.cfg.loss == "ppo"
    probe = Trainer(TrainConfig(**{**SMALL, "credit_kwargs": {"critic": "probe"}}), tmp_path / "probe")
    assert isinstance(probe.providers["values"].probe, CriticProvider)  # type: ignore[attr-defined]
    assert probe.providers["values"].critic is None  # type: ignore[attr-defined]


def test_values_are_read_before_each_token_and_start_at_one_half(phased) -> None:
    trainer, step, _, _, _ = phased
    values = step.credit_batch.values
    assert torch.all(values[step.policy_mask] == 0.5)  # zero-initialised head
    critic = trainer.providers["values"].critic
    # index t is the value of the prefix before token t: it does not change when token t does
    ids = step.input_ids[:1].clone()
    t = int(step.policy_mask[0].nonzero()[-1])
    with torch.no_grad():
        torch.nn.init.normal_(critic.head.weight, std=0.5)
        z = critic(ids, step.attention_mask[:1])
        ids[0, t] = (ids[0, t] + 1) % 2048
        z2 = critic(ids, step.attention_mask[:1])
        torch.nn.init.zeros_(critic.head.weight)
    assert torch.equal(z[0, : t + 1], z2[0, : t + 1]) and z.shape == ids.shape


def test_the_critic_is_fitted_only_in_the_critic_phase(phased) -> None:
    _, _, snaps, metrics, _ = phased
    assert not _same(snaps["actor0"], snaps["actor1"])  # the actor moved in the actor loop ...
    assert _same(snaps["critic0"], snaps["critic1"])  # ... and the critic did not
    assert _same(snaps["actor1"], snaps["actor2"])  # the critic phase leaves the actor alone ...
    assert not _same(snaps["critic1"], snaps["critic2"])  # ... and fits the critic
    assert metrics["critic/vf_loss"] > 0 and "critic/grad_norm" in metrics


def test_updated_logprobs_come_from_the_updated_actor(phased) -> None:
    trainer, step, _, _, (_, updated) = phased
    m = step.policy_mask
    fresh = trainer.policy.forward_logprobs(step.input_ids, step.attention_mask, return_entropy=False)
    torch.testing.assert_close(updated[m], fresh.logprobs.detach()[m])  # the weights after the update
    assert (updated[m] - step.old_logprobs[m]).abs().max() > 1e-3  # not the behaviour policy's


def test_with_several_minibatches_and_epochs_rho_leaves_one_and_the_targets_use_it(phased) -> None:
    trainer, step, _, metrics, ((targets, weights, mask), updated) = phased
    m = step.policy_mask
    rho = (updated - step.old_logprobs).exp()
    assert ((rho[m] - 1).abs() > 1e-2).float().mean() > 0.1  # rho != 1 on a good share of the tokens
    R, _ = outcome_rewards(step.credit_batch)
    assert R.min() == 0 and R.max() == 1  # both kinds of rows in the batch
    want = pact_critic_targets(R, step.old_logprobs, updated, m, trainer.credit_cfg)
    assert torch.equal(targets, want.targets) and torch.equal(weights, want.weights)
    assert torch.equal(mask, want.mask)
    torch.testing.assert_close(weights[mask], rho[mask])  # the loss is rho BCE(V, R) ...
    torch.testing.assert_close(targets[mask], R[:, None].expand_as(mask)[mask])  # ... with R as the target
    assert (weights[mask] != 1).any()
    assert metrics["credit/pact/rho_sd"] > 0.01 and metrics["credit/pact/rho_mean"] != 1.0
    assert 0 <= metrics["credit/pact/rho_masked_share"] < 1
    assert metrics["critic/target_mask_frac"] == pytest.approx(float(mask.sum() / m.sum()))


@pytest.mark.parametrize("without_is", [False, True])
def test_the_critic_targets_are_zero_and_blind_off_the_policy_mask(without_is: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(6, 9, generator=gen) < 0.6
    rewards = torch.randint(0, 2, (6,), generator=gen).float()
    old, new = -3 * torch.rand(6, 9, generator=gen), -3 * torch.rand(6, 9, generator=gen)
    cfg = PACTConfig(without_is=without_is)
    targets, weights, keep = pact_critic_targets(rewards, old, new, mask, cfg)
    assert torch.isfinite(targets).all() and not (keep & ~mask).any() and (targets[~keep] == 0).all()
    assert torch.isfinite(weights).all() and (weights[~keep] == 0).all()
    noise = 10 * torch.randn(6, 9, generator=gen)
    again = pact_critic_targets(
        rewards, torch.where(mask, old, noise), torch.where(mask, new, -noise), mask, cfg
    )
    assert torch.equal(targets, again.targets) and torch.equal(weights, again.weights)
    assert torch.equal(keep, again.mask)


def test_checkpoint_resume_final_folder_and_probe_load_the_critic(tmp_path: Path) -> None:
    cfg = TrainConfig(**{**SMALL, "steps": 1, "eval_every": 1})
    Trainer(cfg, tmp_path).run()
    trained = Trainer(dataclasses.replace(cfg, steps=2), tmp_path, resume=True)
    critic = trained.providers["values"].critic
    assert trained.step == 1
    fresh = Trainer(cfg, tmp_path / "fresh").providers["values"].critic
    assert not _same(_params(critic), _params(fresh))  # the resumed critic is the trained one
    assert torch.any(critic.head.weight != 0)
    assert (tmp_path / "final" / CRITIC_MODEL_FILE).is_file()
    setup = setup_probe(ProbeConfig(checkpoint=str(tmp_path), credit=("pact", "grpo"), prompts=1, group=2))
    probed = setup.modules["pact"][2]["values"].critic  # type: ignore[attr-defined]
    assert _same(_params(probed), _params(critic))


def test_a_critic_model_from_a_folder_and_bad_settings(tmp_path: Path) -> None:
    trainer = Trainer(TrainConfig(**SMALL), tmp_path / "a")
    with torch.no_grad():
        for p in trainer.policy.model.parameters():
            p.add_(0.01)
    folder = trainer.policy.save(tmp_path / "critic-init")
    other = Trainer(TrainConfig(**{**SMALL, "credit_kwargs": {"critic_model": str(folder)}}), tmp_path / "b")
    got = dict(other.providers["values"].critic.decoder.named_parameters())
    for name, p in trainer.policy.model.base_model.named_parameters():
        assert torch.equal(got[name], p)
    with pytest.raises(ValueError, match="critic"):
        PACTConfig(critic="mlp")
    with pytest.raises(ValueError, match="critic_lr_ratio"):
        PACTConfig(critic_lr_ratio=0)
