"""Critics of the ``values`` signal: kappa from real attention rows by hand, CompPO's TAC (features, fit on the
gated returns, checkpoint), the standard critic kept as ``compo:critic=standard``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from creditgym import credit
from creditgym.agents.probe.run import sample_batch
from creditgym.agents.providers import RunContext, SignalProvider, StepContext, build_providers
from creditgym.agents.providers.critics import (
    VALUE_HEAD_FILE,
    CriticProvider,
    StandardCritic,
    TransportAlignedCritic,
    tac_features,
)
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.policy import Policy, bundled_model_path, load_policy
from creditgym.agents.train.run_folder import RunFolderError
from creditgym.agents.train.trainer import Trainer
from creditgym.credit import CompPOConfig
from creditgym.credit.compo import comp_gae_advantages, compo_gate
from creditgym.envs import make

SMALL = dict(
    steps=1,
    prompts_per_step=2,
    group_size=4,
    eval_every=1,
    eval_episodes=2,
    checkpoint_every=1,
    env_id="creditgym/Math-v0",
    max_new_tokens=32,
)


@pytest.fixture(scope="module")
def tiny() -> Policy:
    torch.manual_seed(0)
    return load_policy("creditgym/tiny", device="cpu")


def _providers(policy: Policy, **kwargs: Any) -> dict[str, SignalProvider]:
    """The trainer's providers of ``compo`` with ``kwargs``, on ``policy``."""
    cfg = TrainConfig(**{**SMALL, "credit": "compo", "credit_kwargs": kwargs})
    module = credit.get("compo")
    env = make(cfg.env_id, max_new_tokens=cfg.max_new_tokens).unwrapped
    return build_providers(RunContext(cfg, policy, env, cfg.env_id), module, module.make_config(kwargs))


def _step(policy: Policy, providers: dict[str, SignalProvider], *, seed: int = 3) -> StepContext:
    env = make("creditgym/Math-v0", max_new_tokens=32).unwrapped
    episodes = sample_batch(policy, env, 2, 3, seed=seed, temperature=1.0, top_p=1.0)
    request = providers["attention_stats"].forward_request()
    for p in providers.values():
        request = request | p.forward_request()
    return StepContext.of(0, episodes, policy, request)


# -- kappa on a one-layer model, by hand ----------------------------------------------------------------------------


def _one_layer_policy() -> Policy:
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_path(), local_files_only=True)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    torch.manual_seed(1)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # sharper queries than the 0.02 init, so rows range from focused to diffuse
        for proj in (model.model.layers[0].self_attn.q_proj, model.model.layers[0].self_attn.k_proj):
            proj.weight.mul_(30.0)
    return Policy(model, tokenizer)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, -1)
    return torch.cat([-x2, x1], -1)


def _kappa_by_hand(policy: Policy, ids: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
    """1 - head-mean entropy / log(#keys) of the row at position t - 1, from q and k: softmax(q k^T / sqrt(d))."""
    model = policy.model.model
    attn = model.layers[0].self_attn
    B, T = ids.shape
    nh, nkv = policy.model.config.num_attention_heads, policy.model.config.num_key_value_heads
    d = policy.model.config.hidden_size // nh
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        x = model.embed_tokens(ids)
        h = model.layers[0].input_layernorm(x)
        q = attn.q_proj(h).view(B, T, nh, d).transpose(1, 2)  # (B, nh, T, d)
        k = attn.k_proj(h).view(B, T, nkv, d).transpose(1, 2)  # (B, nkv, T, d)
        cos, sin = model.rotary_emb(x, pos)  # (B, T, d)
        cos, sin = cos[:, None], sin[:, None]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)  # (B, nh, T, T)
    kappa = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        for t in range(
            2, T
        ):  # the row at position t - 1 has t keys; one key (t = 1) has no entropy to speak of
            if not (att[b, t] and att[b, t - 1]):
                continue
            row = scores[b, :, t - 1, :t].double().softmax(-1)  # (nh, t)
            entropy = -(row * row.log()).sum(-1).mean()
            kappa[b, t] = 1.0 - entropy / math.log(t)
    return kappa


def test_kappa_from_real_attention_rows_equals_a_hand_computation_on_a_one_layer_model() -> None:
    policy = _one_layer_policy()
    providers = _providers(policy, layers=(0,))
    step = _step(policy, providers)
    kappa = providers["attention_stats"].compute(step)  # (B, T), through the trainer's provider
    by_hand = _kappa_by_hand(policy, step.input_ids, step.attention_mask)
    mask = step.policy_mask
    assert mask.sum() > 10
    torch.testing.assert_close(kappa[mask].double(), by_hand[mask], rtol=0, atol=1e-5)
    assert (kappa[~mask] == 0).all()
    assert kappa[mask].std() > 0.02  # the rows differ: the comparison is not of constants


# -- TAC ------------------------------------------------------------------------------------------------------------


def test_compo_chooses_its_critic_through_the_values_provider(tiny: Policy) -> None:
    tac = _providers(tiny)["values"]
    assert isinstance(tac, CriticProvider) and isinstance(tac.critic, TransportAlignedCritic)
    assert tac.params == {"critic": "tac", "layers": (-2, -1), "critic_loss": "mse"}
    assert tac.forward_request().attention_layers == (0, 1, 2, 3) and tac.forward_request().hidden
    standard = _providers(tiny, critic="standard")["values"]
    assert isinstance(standard, CriticProvider) and isinstance(standard.critic, StandardCritic)
    # a module that does not declare `critic` (gae) gets the standard head
    cfg = TrainConfig(**{**SMALL, "credit": "gae"})
    module = credit.get("gae")
    env = make(cfg.env_id, max_new_tokens=24).unwrapped
    gae = build_providers(RunContext(cfg, tiny, env, cfg.env_id), module, module.make_config({}))["values"]
    assert isinstance(gae, CriticProvider) and isinstance(gae.critic, StandardCritic)
    with pytest.raises(ValueError, match=r"CompPOConfig.critic: expected one of \('tac', 'standard'\)"):
        CompPOConfig(critic="model")  # type: ignore[arg-type]


def test_tac_features_are_hidden_states_kappa_and_routing(tiny: Policy) -> None:
    providers = _providers(tiny)
    step = _step(tiny, providers)
    fwd = step.behaviour()
    feats = tac_features(fwd, (-2, -1), tiny.num_layers)
    B, T = step.input_ids.shape
    H, L = 128, 4
    assert feats.shape == (B, T, 2 * H + 1 + L) and not feats.requires_grad
    mask = step.policy_mask
    kappa = providers["attention_stats"].compute(step)
    torch.testing.assert_close(feats[..., 2 * H][mask], kappa[mask])  # the statistic the gate reads
    assert fwd.attention_entropy is not None
    for layer in range(L):
        torch.testing.assert_close(
            feats[..., 2 * H + 1 + layer], (1 - fwd.attention_entropy[layer]) * fwd.mask
        )
    assert fwd.hidden is not None and fwd.middle_hidden is not None
    normed = torch.nn.functional.layer_norm(fwd.middle_hidden, (H,))
    torch.testing.assert_close(feats[..., H : 2 * H][mask], normed[mask])
    assert (feats[~fwd.mask] == 0).all()
    values = providers["values"].compute(step)
    assert values.shape == (B, T) and (values == 0).all()  # zero-initialised output layer


def _gated_targets(
    step: StepContext, providers: dict[str, SignalProvider], cfg: CompPOConfig
) -> torch.Tensor:
    """G_t by hand from the gate: Comp-GAE's advantages plus the values, on the policy tokens."""
    kappa = providers["attention_stats"].compute(step)
    values = providers["values"].compute(step)
    eta = compo_gate(kappa, step.policy_mask, step.step, cfg)
    rewards = step.batch.token_rewards.to(values.device)
    A = comp_gae_advantages(rewards, values, eta, step.policy_mask, gamma=cfg.gamma)
    return torch.where(step.policy_mask, A + values, 0.0)


def test_tac_is_fitted_to_the_gated_returns(tiny: Policy, tmp_path: Path) -> None:
    """The trainer's critic phase hands TAC compo's returns G_t (gated; the gate not scaled by the untrained
    critic's skill, which would make it 1); on a fixed batch its loss falls."""
    cfg = TrainConfig(**{**SMALL, "credit": "compo", "credit_kwargs": {"skill_scaled": False}})
    trainer = Trainer(cfg, tmp_path)
    provider = trainer.providers["values"]
    assert isinstance(provider, CriticProvider)
    seen: list[StepContext] = []
    before = [p.detach().clone() for p in provider.critic.parameters()]
    untouched: list[bool] = []  # the critic is fitted in its own phase only, not in the actor loop

    def record(step: StepContext) -> dict[str, float]:
        seen.append(step)
        untouched.append(
            all(torch.equal(a, b) for a, b in zip(before, provider.critic.parameters(), strict=True))
        )
        return fit(step)

    fit = provider.update
    provider.update = record  # type: ignore[method-assign]
    trainer.train_step()
    assert untouched == [True]
    (step,) = seen
    assert step.credit_out is not None and step.credit_batch is not None
    targets, mask = step.credit_out.returns, step.policy_mask  # what the value head is fitted on
    assert targets is not None
    batch = step.credit_batch
    assert batch.values is not None
    eta = compo_gate(batch.signals["attention_stats"], mask, batch.step, trainer.credit_cfg)  # type: ignore[arg-type]
    A = comp_gae_advantages(batch.token_rewards, batch.values, eta, mask, gamma=1.0)
    torch.testing.assert_close(targets, torch.where(mask, A + batch.values, 0.0))
    rewards = batch.token_rewards.sum(-1, keepdim=True).expand_as(targets)  # gamma = 1, eta = 1: G_t = R
    assert not torch.allclose(targets[mask], rewards[mask])  # the gate is not the identity here
    # a fixed batch: the loss against these targets falls with each fit
    losses = [provider.update(step)["critic/vf_loss"] for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_tac_state_is_checkpointed_resumed_and_saved(tmp_path: Path) -> None:
    cfg = TrainConfig(**{**SMALL, "credit": "compo"})
    trainer = Trainer(cfg, tmp_path)
    trainer.run()
    provider = trainer.providers["values"]
    assert isinstance(provider, CriticProvider)
    assert any(p.abs().sum() > 0 for p in provider.head.net[-1].parameters())  # it was fitted
    resumed = Trainer(cfg, tmp_path, resume=True)
    again = resumed.providers["values"]
    assert isinstance(again, CriticProvider) and isinstance(again.critic, TransportAlignedCritic)
    for a, b in zip(provider.critic.state_dict().values(), again.critic.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    step = _step(trainer.policy, trainer.providers)
    torch.testing.assert_close(again.compute(step), provider.compute(step))
    with safe_open(str(tmp_path / "final" / VALUE_HEAD_FILE), framework="pt") as f:
        meta = f.metadata()
    assert meta["critic"] == "tac" and meta["layers"] == "-2,-1" and meta["hidden_size"] == str(2 * 128 + 5)
    # resuming the TAC's run with the standard critic is refused before anything loads, naming the flag
    with pytest.raises(RunFolderError, match=r'--credit-kw: run has \{\}, given \{"critic": "standard"\}'):
        Trainer(
            TrainConfig(**{**SMALL, "credit": "compo", "credit_kwargs": {"critic": "standard"}}),
            tmp_path,
            resume=True,
        )
    # and a TAC checkpoint's state does not load into the standard critic: the error says which to choose
    standard = _providers(trainer.policy, critic="standard")["values"]
    with pytest.raises(ValueError, match=r"checkpoint's critic is 'tac' but this run's is 'standard'"):
        standard.load_state_dict(provider.state_dict())


def test_a_checkpoint_from_before_tac_loads_into_the_standard_critic(tiny: Policy) -> None:
    provider = _providers(tiny, critic="standard")["values"]
    assert isinstance(provider, CriticProvider)
    state = provider.state_dict()
    old = {"head": state["head"], "optimizer": state["optimizer"]}  # what the linear head's provider saved
    provider.load_state_dict(old)
    with pytest.raises(ValueError, match="critic='standard'"):
        _providers(tiny)["values"].load_state_dict(old)


def test_compo_with_the_standard_critic_still_trains(tmp_path: Path) -> None:
    kwargs = {
        "critic": "standard",
        "skill_scaled": False,
    }  # the gate itself (an untrained critic has skill 0)
    cfg = TrainConfig(**{**SMALL, "credit": "compo", "credit_kwargs": kwargs})
    trainer = Trainer(cfg, tmp_path)
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["critic/vf_loss"] is not None and rows[1]["credit/compo/eta_sd"] > 0
    provider = trainer.providers["values"]
    assert isinstance(provider, CriticProvider) and isinstance(provider.critic, StandardCritic)
    with safe_open(str(tmp_path / "final" / VALUE_HEAD_FILE), framework="pt") as f:
        assert f.metadata()["critic"] == "standard" and f.metadata()["hidden_size"] == "128"
