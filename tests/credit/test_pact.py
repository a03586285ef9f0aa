"""PACT (arXiv 2609.26355): A = R - V(prefix), credits telescope, the IS critic targets and their mask; what the
method relies on: a critic loss bounded below whose minimiser is the IS-corrected value, and DIS as its actor loss."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from creditgym import credit
from creditgym.agents.train.loss import value_loss
from creditgym.credit import CreditBatch, CreditOutput, PACTConfig
from creditgym.credit.pact import CRITIC_FIELDS, CriticTargets, pact, pact_critic_targets, rho_metrics

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


def test_registered_with_its_critic_provider() -> None:
    module = credit.get("pact")
    assert module.signals == ("values",) and module.critic
    assert (PACTConfig().rho_min, PACTConfig().rho_max) == (0.0, 6.0)
    # values come from its critic model's provider (agents/providers/critic_model.py), which takes the critic's
    # settings and the IS targets' (its critic phase)
    assert module.provided_by["values"] == credit.ProvidedBy("critic_model", CRITIC_FIELDS)
    assert set(CRITIC_FIELDS) == {f.name for f in dataclasses.fields(PACTConfig)}
    assert (PACTConfig().critic, PACTConfig().critic_lr_ratio, PACTConfig().critic_model) == (
        "model",
        5.0,
        None,
    )
    assert module.actor_loss == "dis"  # the paper's actor update on math (the others: ppo)
    assert {credit.get(name).actor_loss for name in credit.available() if name != "pact"} == {"ppo"}


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
    assert out.returns is not None and "credit" in out.diagnostics
    torch.testing.assert_close(out.returns, torch.tensor([[0, 1.0, 1, 0, 0, 1, 1, 0]]))
    # C = V(next policy prefix) - V; the last one ends at R
    torch.testing.assert_close(out.diagnostics["credit"], torch.tensor([[0, 0.1, 0.1, 0, 0, -0.5, 0.8, 0]]))
    assert float(out.diagnostics["credit"].sum()) == pytest.approx(1.0 - 0.5)
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
    assert batch.values is not None and "credit" in out.diagnostics
    m = batch.policy_mask
    R = batch.token_rewards.sum(-1)
    torch.testing.assert_close(out.advantages, torch.where(m, R[:, None] - batch.values, 0.0))
    first = m.float().argmax(-1)
    V0 = batch.values.gather(1, first[:, None]).squeeze(1)
    torch.testing.assert_close(out.diagnostics["credit"].sum(-1), R - V0)
    # the advantage is the credit-to-go: A_t = sum_{k >= t} C_k (GAE with gamma = lambda = 1)
    to_go = out.diagnostics["credit"].flip(1).cumsum(1).flip(1)
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
    kept = [[True, False, True, False, True, False, False]]
    # the default: target R, weight rho
    targets, weights, mask = pact_critic_targets(torch.tensor([1.0]), old, new, policy, PACTConfig())
    assert mask.tolist() == kept
    torch.testing.assert_close(targets, torch.tensor([[1.0, 0, 1, 0, 1, 0, 0]]))
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0, 5.9, 0, 0, 0, 0]]))
    targets, weights, mask = pact_critic_targets(torch.tensor([0.0]), old, new, policy, PACTConfig())
    assert (targets == 0).all() and mask.tolist() == kept
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0, 5.9, 0, 0, 0, 0]]))
    # the paper's form: target rho R, weight 1
    paper = PACTConfig(rho_in="target")
    targets, weights, mask = pact_critic_targets(torch.tensor([1.0]), old, new, policy, paper)
    assert mask.tolist() == kept
    torch.testing.assert_close(targets, torch.tensor([[0.5, 0, 5.9, 0, 0, 0, 0]]))
    torch.testing.assert_close(weights, mask.float())
    targets, weights, mask = pact_critic_targets(
        torch.tensor([1.0]), old, new, policy, PACTConfig(without_is=True)
    )
    assert torch.equal(mask, policy)
    torch.testing.assert_close(targets, policy.float())
    torch.testing.assert_close(weights, policy.float())


@pytest.mark.parametrize("seed", range(3))
def test_is_mask_drops_exactly_the_out_of_range_ratios(seed: int) -> None:
    batch = random_batch(seed)
    gen = torch.Generator().manual_seed(seed + 10)
    updated = batch.old_logprobs + 2.5 * torch.randn(batch.shape, generator=gen)
    rho = (updated - batch.old_logprobs).exp()
    keep = batch.policy_mask & (rho >= 0.2) & (rho <= 3.0)
    assert (keep != batch.policy_mask).any()
    R = batch.token_rewards.sum(-1)[:, None]
    for rho_in in ("weight", "target"):
        cfg = PACTConfig(rho_min=0.2, rho_max=3.0, rho_in=rho_in)
        targets, weights, mask = pact_critic_targets(
            batch.token_rewards.sum(-1), batch.old_logprobs, updated, batch.policy_mask, cfg
        )
        assert torch.equal(mask, keep)
        torch.testing.assert_close(targets * weights, torch.where(keep, rho * R, 0.0))  # rho R either way


def test_the_critic_loss_is_bounded_with_the_paper_s_minimiser() -> None:
    """Targets rho R above 1: the paper's BCE(V, rho R) falls without bound as V -> 1 (no minimiser); PACT's
    weighted rho BCE(V, R) stays >= 0, and the value minimising it over the tokens of one prefix is
    sum rho R / sum rho, the paper's target E[rho R] (where E[rho] = 1, as under the behaviour policy)."""
    rho = torch.tensor(
        [[1.5, 0.5], [1.2, 0.8]]
    )  # mean 1: an IS ratio's expectation under the behaviour policy
    rewards = torch.tensor([1.0, 0.0])  # one correct row, one wrong
    old, mask = torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool)
    weighted = pact_critic_targets(rewards, old, rho.log(), mask, PACTConfig())
    paper = pact_critic_targets(rewards, old, rho.log(), mask, PACTConfig(rho_in="target"))
    assert float(paper.targets.max()) == pytest.approx(1.5)  # a target above 1

    def loss(t: CriticTargets, z: torch.Tensor) -> torch.Tensor:
        return value_loss(z.expand(2, 2), t.targets, t.mask, kind="bce", weights=t.weights)[0]

    def one_token(
        z: float,
    ) -> torch.Tensor:  # the logit of the token with target 1.5 moves, the others stay 0
        return torch.tensor([[z, 0.0], [0.0, 0.0]])

    zs = [-40.0, -10.0, -1.0, 0.0, 1.0, 10.0, 40.0]
    assert min(float(loss(weighted, one_token(z))) for z in zs) >= 0
    assert min(float(loss(weighted, torch.tensor(z))) for z in zs) >= 0
    # the paper's falls by (1.5 - 1) / 4 per unit of that logit, without end
    paper_at = [float(loss(paper, one_token(z))) for z in (10.0, 40.0, 160.0)]
    assert paper_at[0] > paper_at[1] > paper_at[2] < -15
    # the minimiser over one shared logit: sigmoid(z*) = sum rho R / sum rho = (1.5 + 0.5) / 4 = 0.5
    z = torch.zeros((), requires_grad=True)
    opt = torch.optim.LBFGS([z], lr=0.5, max_iter=200)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        out = loss(weighted, z)
        out.backward()
        return out

    opt.step(closure)
    assert float(torch.sigmoid(z.detach())) == pytest.approx(0.5, abs=1e-4)
    assert float((paper.targets).mean()) == pytest.approx(0.5)  # the paper's mean target: the same value


def test_nonfinite_value_is_masked_and_the_chain_skips_it() -> None:
    batch = make_batch(1.0, [0.0, 0.5, float("nan"), 0.0, 0.0, 0.7, 0.2, 0.0])
    out = pact(batch, PACTConfig())
    assert torch.isfinite(out.advantages).all() and torch.isfinite(out.diagnostics["credit"]).all()
    assert out.metrics["credit/pact/nonfinite_signal_tokens"] == 1.0
    assert out.advantages[0, 2] == 0 and out.diagnostics["credit"][0, 2] == 0
    torch.testing.assert_close(out.diagnostics["credit"], torch.tensor([[0, 0.2, 0, 0, 0, -0.5, 0.8, 0]]))


def test_output_contract_on_the_credit_diagnostic() -> None:
    with pytest.raises(TypeError, match=r"diagnostics\['credit'\]"):
        CreditOutput(torch.zeros(2, 3), diagnostics={"credit": torch.zeros(2, 2)})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"reward_range": (1.0, 0.0)},
        {"reward_range": (0.0,)},
        {"rho_min": -0.1},
        {"rho_min": 6.0},
        {"without_is": 1},
        {"rho_in": "loss"},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        PACTConfig(**kwargs)  # type: ignore[arg-type]
