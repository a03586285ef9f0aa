"""PACT (arXiv 2609.26355): A = R - V(prefix), credits telescope, the IS critic targets and their mask."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from creditgym import credit
from creditgym.credit import CreditBatch, CreditOutput, PACTConfig, register
from creditgym.credit.pact import pact, pact_critic_targets, pact_targets, rho_metrics

MASK = [[False, True, True, False, False, True, True, False]]  # prompt, turn 1, env tokens, turn 2, padding


def make_batch(R: float, values: list[float], mask: list[list[bool]] = MASK) -> CreditBatch:
    m = torch.tensor(mask)
    r = torch.zeros(m.shape)
    r[0, int(m[0].nonzero().max())] = R
    return CreditBatch(r, m, torch.tensor([0]), torch.zeros(m.shape), values=torch.tensor([values]))


def random_batch(seed: int) -> CreditBatch:
    gen = torch.Generator().manual_seed(seed)
    B, T = 6, 12
    mask = torch.rand(B, T, generator=gen) < 0.7
    mask[:, 0], mask[:, -1] = False, True
    r = torch.zeros(B, T)
    r[:, -1] = torch.randint(0, 2, (B,), generator=gen).float()
    r[:, 5] = torch.where(mask[:, 5], 0.25 * torch.rand(B, generator=gen), 0.0)  # a turn reward on some rows
    return CreditBatch(
        r, mask, torch.arange(B), -torch.rand(B, T, generator=gen), values=torch.rand(B, T, generator=gen)
    )


def test_registered_with_its_critic_phase() -> None:
    module = credit.get("pact")
    assert module.signals == ("values",) and module.critic
    assert module.critic_signals == ("updated_logprobs",) and module.critic_targets is pact_targets
    assert (PACTConfig().rho_min, PACTConfig().rho_max) == (0.0, 6.0)
    # the critic's settings parameterise the values provider (agents/critic_model.py)
    assert module.signal_params["values"] == ("critic", "critic_lr_ratio", "critic_model")
    assert (PACTConfig().critic, PACTConfig().critic_lr_ratio, PACTConfig().critic_model) == (
        "model",
        5.0,
        None,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("critic", "mlp"), ("critic_lr_ratio", 0.0), ("critic_lr_ratio", True), ("critic_model", "")],
)
def test_critic_settings_are_checked(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"PACTConfig.{field}"):
        PACTConfig(**{field: value})  # type: ignore[arg-type]


def test_hand_case_with_env_tokens() -> None:
    batch = make_batch(1.0, [7.0, 0.5, 0.6, -3.0, 8.0, 0.7, 0.2, 5.0])
    out = pact(batch, PACTConfig())
    torch.testing.assert_close(out.advantages, torch.tensor([[0, 0.5, 0.4, 0, 0, 0.3, 0.8, 0]]))
    assert out.returns is not None and out.token_credit is not None
    torch.testing.assert_close(out.returns, torch.tensor([[0, 1.0, 1, 0, 0, 1, 1, 0]]))
    # C = V(next policy prefix) - V; the last one ends at R
    torch.testing.assert_close(out.token_credit, torch.tensor([[0, 0.1, 0.1, 0, 0, -0.5, 0.8, 0]]))
    assert float(out.token_credit.sum()) == pytest.approx(1.0 - 0.5)
    # the sparsity figure: mean |V_t - V_{t-1}| between consecutive policy tokens, env tokens skipped
    assert out.metrics["credit/pact/value_step_abs_mean"] == pytest.approx((0.1 + 0.1 + 0.5) / 3)
    assert out.metrics["credit/pact/credit_abs_mean"] == pytest.approx((0.1 + 0.1 + 0.5 + 0.8) / 4)


def test_rho_spread_by_hand() -> None:
    rho = [0.5, 2.0, 7.0, 1.0, 3.0]
    old = torch.full((1, 5), -1.0)
    new = old + torch.tensor([[math.log(x) for x in rho]])
    policy = torch.tensor([[True, True, True, True, False]])  # the 3.0 is not a policy token
    got = rho_metrics(old, new, policy, PACTConfig())
    kept = torch.tensor([0.5, 2.0, 7.0, 1.0], dtype=torch.float64)
    assert got["credit/pact/rho_mean"] == pytest.approx(kept.mean().item(), rel=1e-6)
    assert got["credit/pact/rho_sd"] == pytest.approx(kept.std(correction=0).item(), rel=1e-6)
    assert got["credit/pact/rho_abs_log_mean"] == pytest.approx(
        2 * math.log(2) / 4 + math.log(7) / 4, rel=1e-6
    )
    assert got["credit/pact/rho_masked_share"] == pytest.approx(1 / 4)  # 7.0 > rho_max
    assert rho_metrics(old, new, policy, PACTConfig(rho_min=0.6))["credit/pact/rho_masked_share"] == 0.5


@pytest.mark.parametrize("seed", range(5))
def test_advantage_is_R_minus_V_and_credits_telescope(seed: int) -> None:
    batch = random_batch(seed)
    out = credit.get("pact")(batch)  # through the registry wrapper and its contract checks
    assert batch.values is not None and out.token_credit is not None
    m = batch.policy_mask
    R = batch.token_rewards.sum(-1)
    torch.testing.assert_close(out.advantages, torch.where(m, R[:, None] - batch.values, 0.0))
    first = m.float().argmax(-1)
    V0 = batch.values.gather(1, first[:, None]).squeeze(1)
    torch.testing.assert_close(out.token_credit.sum(-1), R - V0)
    # the advantage is the credit-to-go: A_t = sum_{k >= t} C_k (GAE with gamma = lambda = 1)
    to_go = out.token_credit.flip(1).cumsum(1).flip(1)
    torch.testing.assert_close(torch.where(m, to_go, 0.0), out.advantages)


def test_reward_range_normalisation() -> None:
    batch = make_batch(-1.0, [0.0, 0.5, 0.6, 0.0, 0.0, 0.7, 0.2, 0.0])
    out = pact(batch, PACTConfig(reward_range=(-1.0, 1.0)))
    assert out.returns is not None
    assert float(out.returns[0, 1]) == 0.0 and float(out.advantages[0, 1]) == pytest.approx(-0.5)
    out = pact(batch, PACTConfig())
    assert out.metrics["credit/pact/reward_out_of_range_frac"] == 1.0


def test_is_targets_and_mask_by_hand() -> None:
    rho = [0.5, 7.0, 5.9, 6.1, 0.0, 1.0, 2.0]
    old = torch.full((1, 7), -2.0)
    new = old + torch.tensor([[math.log(x) if x > 0 else -math.inf for x in rho]])
    new[0, 5] = math.nan
    policy = torch.tensor([[True, True, True, True, True, True, False]])
    targets, mask = pact_critic_targets(torch.tensor([1.0]), old, new, policy, PACTConfig())
    assert mask.tolist() == [[True, False, True, False, True, False, False]]
    torch.testing.assert_close(targets, torch.tensor([[0.5, 0, 5.9, 0, 0, 0, 0]]))
    targets, mask = pact_critic_targets(torch.tensor([0.0]), old, new, policy, PACTConfig())
    assert (targets == 0).all() and mask.tolist() == [[True, False, True, False, True, False, False]]
    targets, mask = pact_critic_targets(torch.tensor([1.0]), old, new, policy, PACTConfig(without_is=True))
    assert torch.equal(mask, policy)
    torch.testing.assert_close(targets, policy.float())


@pytest.mark.parametrize("seed", range(3))
def test_is_mask_drops_exactly_the_out_of_range_ratios(seed: int) -> None:
    batch = random_batch(seed)
    gen = torch.Generator().manual_seed(seed + 10)
    updated = batch.old_logprobs + 2.5 * torch.randn(batch.shape, generator=gen)
    cfg = PACTConfig(rho_min=0.2, rho_max=3.0)
    rho = (updated - batch.old_logprobs).exp()
    targets, mask = pact_critic_targets(
        batch.token_rewards.sum(-1), batch.old_logprobs, updated, batch.policy_mask, cfg
    )
    keep = batch.policy_mask & (rho >= 0.2) & (rho <= 3.0)
    assert torch.equal(mask, keep)
    assert (keep != batch.policy_mask).any()
    torch.testing.assert_close(targets, torch.where(keep, rho * batch.token_rewards.sum(-1)[:, None], 0.0))
    # the registered hook reads the same from the batch
    module = credit.get("pact")
    assert module.critic_targets is not None
    with_updated = dataclasses.replace(batch, signals={"updated_logprobs": updated})
    t2, m2 = module.critic_targets(with_updated, cfg)
    assert torch.equal(t2, targets) and torch.equal(m2, mask)
    with pytest.raises(ValueError, match="updated_logprobs"):
        module.critic_targets(batch, cfg)


def test_nonfinite_value_is_masked_and_the_chain_skips_it() -> None:
    batch = make_batch(1.0, [0.0, 0.5, float("nan"), 0.0, 0.0, 0.7, 0.2, 0.0])
    out = pact(batch, PACTConfig())
    assert out.token_credit is not None
    assert torch.isfinite(out.advantages).all() and torch.isfinite(out.token_credit).all()
    assert out.metrics["credit/pact/nonfinite_signal_tokens"] == 1.0
    assert out.advantages[0, 2] == 0 and out.token_credit[0, 2] == 0
    torch.testing.assert_close(out.token_credit, torch.tensor([[0, 0.2, 0, 0, 0, -0.5, 0.8, 0]]))


def test_register_checks_the_critic_phase_declaration() -> None:
    @dataclasses.dataclass(frozen=True)
    class Cfg:
        pass

    def fn(batch: CreditBatch, cfg: Cfg) -> CreditOutput:
        return CreditOutput(torch.zeros(batch.shape))

    def targets(batch: CreditBatch, cfg: Cfg) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(batch.shape), batch.policy_mask

    with pytest.raises(ValueError, match="critic_signals"):
        register(
            "pact_dummy1", config=Cfg, signals=("values",), critic=True, critic_signals=("updated_logprobs",)
        )(fn)
    with pytest.raises(ValueError, match="critic_signals"):
        register("pact_dummy2", config=Cfg, critic_signals=("updated_logprobs",), critic_targets=targets)(fn)
    with pytest.raises(ValueError, match="unknown signals"):
        register(
            "pact_dummy3",
            config=Cfg,
            signals=("values",),
            critic=True,
            critic_signals=("new_logprobs",),
            critic_targets=targets,
        )(fn)
    assert not {"pact_dummy1", "pact_dummy2", "pact_dummy3"} & set(credit.available())


def test_output_contract_on_token_credit() -> None:
    with pytest.raises(TypeError, match="token_credit"):
        CreditOutput(torch.zeros(2, 3), token_credit=torch.zeros(2, 2))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reward_range": (1.0, 0.0)},
        {"reward_range": (0.0,)},
        {"rho_min": -0.1},
        {"rho_min": 6.0},
        {"without_is": 1},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        PACTConfig(**kwargs)  # type: ignore[arg-type]
