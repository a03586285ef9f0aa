"""CompPO / Comp-GAE (arXiv 2608.21501): hand case, constant gate = GAE, shuffled and position controls; what the
method relies on: credit reaches the first tokens while the critic knows little, and the gate moves only as much as
the attention statistic does."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from creditgym import credit
from creditgym.credit import CompPOConfig, CreditBatch
from creditgym.credit.compo import comp_gae_advantages, compo, compo_gate, critic_skill
from creditgym.credit.gae import gae_advantages

#: the gate of the hand cases below, not scaled by the critic's skill (arXiv 2608.21501 gives no default)
RAW = CompPOConfig(eta_min=0.9, eta_max=1.0, a=1.0, b=0.0, whiten=False, skill_scaled=False)


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def random_batch(seed: int, *, step: int = 0) -> CreditBatch:
    """Rows with a prompt, two policy turns separated by env tokens, per-turn and terminal rewards."""
    gen = torch.Generator().manual_seed(seed)
    B, T = 6, 14
    mask = torch.zeros(B, T, dtype=torch.bool)
    r = torch.zeros(B, T)
    for b in range(B):
        mask[b, 1:6] = True
        mask[b, 8 : 9 + b] = True
        r[b, 5] = float(torch.rand((), generator=gen))
        r[b, 8 + b] = float(torch.randint(0, 2, (), generator=gen))
    return CreditBatch(
        r,
        mask,
        torch.zeros(B, dtype=torch.long),
        -torch.rand(B, T, generator=gen),
        values=torch.rand(B, T, generator=gen),
        signals={"attention_stats": torch.rand(B, T, generator=gen)},
        step=step,
        total_steps=10,
    )


def hand_batch() -> CreditBatch:
    """One row: a prompt token, then three policy tokens with kappa 0.2, 0.5, 0.8 and reward 1."""
    return CreditBatch(
        torch.tensor([[0.0, 0.0, 0.0, 1.0]]),
        torch.tensor([[False, True, True, True]]),
        torch.tensor([0]),
        torch.zeros(1, 4),
        values=torch.tensor([[9.0, 0.5, 0.6, 0.7]]),
        signals={"attention_stats": torch.tensor([[0.9, 0.2, 0.5, 0.8]])},
    )


def test_registered_with_its_signals() -> None:
    module = credit.get("compo")
    assert module.signals == ("attention_stats", "values") and module.critic
    assert CompPOConfig().layers == (-2, -1) and CompPOConfig().critic == "tac"
    # the critic is chosen through the values provider's parameters; TAC's kappa reads the gate's layers
    assert module.signal_params == {"attention_stats": ("layers",), "values": ("critic", "layers")}


def test_hand_case() -> None:
    batch = hand_batch()
    out = compo(batch, RAW)
    # eta = 0.9 + 0.1 sigmoid(kappa) (a = 1, b = 0); delta = [0.1, 0.1, 0.3]
    eta1, eta2 = 0.9 + 0.1 * sigmoid(0.5), 0.9 + 0.1 * sigmoid(0.8)
    a2 = 0.3
    a1 = 0.1 + eta2 * a2
    a0 = 0.1 + eta1 * a1
    torch.testing.assert_close(out.advantages, torch.tensor([[0.0, a0, a1, a2]]))
    assert out.returns is not None
    torch.testing.assert_close(out.returns, torch.tensor([[0.0, a0 + 0.5, a1 + 0.6, 1.0]]))
    assert out.metrics["credit/compo/eta_min"] == pytest.approx(0.9 + 0.1 * sigmoid(0.2))
    assert out.metrics["credit/compo/critic_skill"] == 1.0  # not skill-scaled


def test_the_gates_spread_is_logged() -> None:
    """eta_mean / eta_sd / eta_min / eta_max over the batch's policy tokens (the gate-matched GAE control reads
    eta_mean), by hand on the hand case's three tokens."""
    batch = hand_batch()
    cfg = CompPOConfig(eta_min=0.5, eta_max=1.0, a=2.0, b=1.0, skill_scaled=False)
    eta = [0.5 + 0.5 * sigmoid(2.0 * kappa + 1.0) for kappa in (0.2, 0.5, 0.8)]
    mean = sum(eta) / 3
    sd = math.sqrt(sum((e - mean) ** 2 for e in eta) / 3)
    m = compo(batch, cfg).metrics
    assert m["credit/compo/eta_mean"] == pytest.approx(mean)
    assert m["credit/compo/eta_sd"] == pytest.approx(sd)
    assert (m["credit/compo/eta_min"], m["credit/compo/eta_max"]) == pytest.approx((eta[0], eta[2]))
    # a constant gate has no spread
    flat = compo(batch, CompPOConfig(eta_min=0.9, eta_max=0.9, skill_scaled=False)).metrics
    assert flat["credit/compo/eta_sd"] == pytest.approx(0.0, abs=1e-7)
    assert flat["credit/compo/eta_mean"] == pytest.approx(0.9)


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (1.0, 0.95), (0.99, 0.9), (0.9, 0.0), (0.5, 1.0)])
@pytest.mark.parametrize("seed", range(3))
def test_constant_gate_equals_gae(seed: int, gamma: float, lam: float) -> None:
    batch = random_batch(seed)
    cfg = CompPOConfig(gamma=gamma, eta_min=lam, eta_max=lam, whiten=False, skill_scaled=False)
    out = compo(batch, cfg)
    assert batch.values is not None and out.returns is not None
    ref = gae_advantages(batch.token_rewards, batch.values, batch.policy_mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(out.advantages, ref, rtol=0, atol=1e-6)
    V = torch.where(batch.policy_mask, batch.values, 0.0)
    torch.testing.assert_close(out.returns, torch.where(batch.policy_mask, ref + V, 0.0), rtol=0, atol=1e-6)


def test_scan_matches_a_loop_over_the_policy_tokens() -> None:
    batch = random_batch(4)
    eta = 0.5 + 0.5 * torch.rand(batch.shape, generator=torch.Generator().manual_seed(0))
    assert batch.values is not None
    A = comp_gae_advantages(batch.token_rewards, batch.values, eta, batch.policy_mask, gamma=0.97)
    for b in range(batch.shape[0]):
        idx = batch.policy_mask[b].nonzero().flatten().tolist()
        v = [float(batch.values[b, t]) for t in idx] + [0.0]
        a_next, e_next = 0.0, 1.0
        for k in reversed(range(len(idx))):
            t = idx[k]
            a_next = float(batch.token_rewards[b, t]) + 0.97 * v[k + 1] - v[k] + 0.97 * e_next * a_next
            e_next = float(eta[b, t])
            assert float(A[b, t]) == pytest.approx(a_next, abs=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_shuffled_gate_permutes_each_row(seed: int) -> None:
    batch = random_batch(seed, step=seed)
    kappa, mask = batch.signals["attention_stats"], batch.policy_mask
    eta = compo_gate(kappa, mask, batch.step, CompPOConfig())
    shuffled = compo_gate(kappa, mask, batch.step, CompPOConfig(gate="shuffled"))
    assert (shuffled[~mask] == 1).all()
    moved = 0
    for b in range(mask.shape[0]):
        x, y = eta[b][mask[b]], shuffled[b][mask[b]]
        assert torch.equal(x.sort().values, y.sort().values)  # the same multiset
        moved += int(not torch.equal(x, y))
    assert moved == mask.shape[0]  # every row's order changed (rows have >= 6 distinct values)
    # seeded from the step: reproducible, and another step gives another permutation
    assert torch.equal(shuffled, compo_gate(kappa, mask, batch.step, CompPOConfig(gate="shuffled")))
    other = compo_gate(kappa, mask, batch.step + 1, CompPOConfig(gate="shuffled"))
    assert not torch.equal(shuffled, other)
    out = compo(batch, CompPOConfig(gate="shuffled", skill_scaled=False))
    assert not torch.equal(out.advantages, compo(batch, CompPOConfig(skill_scaled=False)).advantages)


def test_position_gate_depends_on_position_only() -> None:
    """The position control reads kappa only through the batch's mean and sd (the gate's scale): which token has
    which kappa does not matter."""
    batch = random_batch(0)
    mask = batch.policy_mask
    cfg = CompPOConfig(gate="position", a=2.0)
    kappa = batch.signals["attention_stats"]
    eta = compo_gate(kappa, mask, 0, cfg)
    moved = kappa.clone()
    moved[mask] = kappa[mask][torch.randperm(int(mask.sum()), generator=torch.Generator().manual_seed(1))]
    torch.testing.assert_close(compo_gate(moved, mask, 0, cfg), eta)
    for b in range(mask.shape[0]):
        row = eta[b][mask[b]]
        assert (row[1:] > row[:-1]).all()  # a > 0: later tokens retain more
    assert torch.allclose(eta[mask][0], eta[mask][mask[0].sum()])  # the first token of every row alike
    # its statistic has the batch's kappa mean and sd, so the gate's scale matches the attention gate's
    g = (eta[mask] - cfg.eta_min) / (cfg.eta_max - cfg.eta_min)
    x = (torch.logit(g.double()) - cfg.b) / cfg.a
    k = kappa[mask].double()
    assert float(x.mean()) == pytest.approx(float(k.mean()), abs=1e-5)
    assert float(x.std(correction=0)) == pytest.approx(float(k.std(correction=0)), abs=1e-5)


def test_gate_bounds_and_direction() -> None:
    kappa = torch.tensor([[0.1, 0.2, 0.3, 0.9]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    eta = compo_gate(kappa, mask, 0, CompPOConfig(eta_min=0.8, eta_max=0.95, a=3.0))
    assert (eta >= 0.8).all() and (eta <= 0.95).all()
    assert (eta[0, 1:] > eta[0, :-1]).all()
    neg = compo_gate(kappa, mask, 0, CompPOConfig(eta_min=0.8, eta_max=0.95, a=-3.0))
    assert (neg[0, 1:] < neg[0, :-1]).all()


def chain_batch(critic: str, seed: int = 0) -> CreditBatch:
    """8 responses of 68 policy tokens after a 2-token prompt, 4 correct (reward 1) and 4 wrong, kappa uniform on
    [0, 1]. ``critic``: ``"zero"`` (V = 0), ``"noise"`` (V uniform on [0, 1], unrelated to the reward),
    ``"half"`` (V = R from the 35th token on, 0.5 before: it knows the outcome halfway) or ``"perfect"`` (V = R)."""
    gen = torch.Generator().manual_seed(seed)
    B, T, P = 8, 70, 2
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[:, P:] = True
    R = torch.tensor([1.0, 0.0] * 4)
    rewards = torch.zeros(B, T)
    rewards[:, -1] = R
    full = R[:, None].expand(B, T)
    values = {
        "zero": torch.zeros(B, T),
        "noise": torch.rand(B, T, generator=gen),
        "half": torch.where(torch.arange(T) >= P + 34, full, 0.5),
        "perfect": full.clone(),
    }[critic]
    kappa = torch.rand(B, T, generator=gen)
    return CreditBatch(
        rewards,
        mask,
        torch.zeros(B, dtype=torch.long),
        torch.zeros(B, T),
        values=values,
        signals={"attention_stats": kappa},
    )


def gap(advantages: torch.Tensor, tokens: slice) -> float:
    """Mean advantage of the correct rows minus the wrong rows' (`chain_batch`) on the policy tokens ``tokens``."""
    policy = advantages[:, 2:]
    return float(policy[0::2, tokens].mean() - policy[1::2, tokens].mean())


@pytest.mark.parametrize("critic", ["zero", "noise"])
def test_credit_reaches_the_first_tokens_while_the_critic_knows_little(critic: str) -> None:
    """A critic that explains none of the return (skill 0) gets lambda = 1: the first 10 tokens of a correct
    response are told apart from a wrong one's as much as the last 10 (whitened: +1 and -1). At V = 0 the same
    gate without the skill scaling carries almost nothing back 58 tokens (the truncation it replaces)."""
    batch = chain_batch(critic)
    out = compo(batch, CompPOConfig())
    assert out.metrics["credit/compo/critic_skill"] == 0.0
    first, last = gap(out.advantages, slice(0, 10)), gap(out.advantages, slice(-10, None))
    assert first > 1.5 and first >= 0.9 * last
    if critic == "zero":  # V = 0: the gate's product alone carries the reward back
        fixed = compo(batch, CompPOConfig(skill_scaled=False))
        assert gap(fixed.advantages, slice(0, 10)) < 0.01 * gap(fixed.advantages, slice(-10, None))


def test_the_gate_takes_effect_as_the_critic_learns() -> None:
    """eta = 1 - s (1 - g) with s the critic's skill on the batch (by hand: a critic that knows the outcome from
    halfway explains half the return's variance); a perfect critic gets the gate itself."""
    batch = chain_batch("half")
    assert batch.values is not None
    mask = batch.policy_mask
    # G1 = R on every token; (R - V)^2 = 0.25 on the first 34 of 68 tokens, 0 after; Var(R) = 0.25
    s = critic_skill(batch.token_rewards, batch.values, mask, gamma=1.0)
    assert s == pytest.approx(0.5)
    cfg = CompPOConfig(whiten=False)
    out = compo(batch, cfg)
    assert out.metrics["credit/compo/critic_skill"] == pytest.approx(0.5)
    g = compo_gate(batch.signals["attention_stats"], mask, 0, cfg)
    A = comp_gae_advantages(batch.token_rewards, batch.values, 1 - 0.5 * (1 - g), mask, gamma=1.0)
    torch.testing.assert_close(out.advantages, A)
    perfect = chain_batch("perfect")
    assert compo(perfect, cfg).metrics["credit/compo/critic_skill"] == 1.0
    torch.testing.assert_close(
        compo(perfect, cfg).advantages,
        compo(perfect, CompPOConfig(whiten=False, skill_scaled=False)).advantages,
    )


def test_the_gate_varies_only_as_much_as_the_statistic_does() -> None:
    """The gate is a function of each token's own kappa: a constant kappa gives a constant gate, kappa with sd
    1e-3 moves it by at most slope x 1e-3, and shifting kappa moves it (a z-score would undo both)."""
    cfg = CompPOConfig()
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(4, 50, dtype=torch.bool)
    const = compo_gate(torch.full((4, 50), 0.3), mask, 0, cfg)
    assert float(const.max() - const.min()) == 0.0
    slope = (cfg.eta_max - cfg.eta_min) * abs(cfg.a) / 4  # the largest slope of the sigmoid map
    kappa = 0.1 + 1e-3 * torch.randn(4, 50, generator=gen)
    eta = compo_gate(kappa, mask, 0, cfg)
    assert 0 < float(eta.std()) <= 1.01 * slope * float(kappa.std())  # about 0.003, not 0.17
    shifted = compo_gate(kappa + 0.3, mask, 0, cfg)
    assert float(shifted.mean() - eta.mean()) > 0.3  # 0.6 -> 1.0: a more focused batch carries more
    k1, k2 = torch.rand(2, 4, 50, generator=gen)
    assert (
        (compo_gate(k1, mask, 0, cfg) - compo_gate(k2, mask, 0, cfg)).abs() <= slope * (k1 - k2).abs() + 1e-7
    ).all()
    # through the module: a constant statistic has no gate spread, with any critic
    batch = chain_batch("perfect")
    flat = dataclasses.replace(batch, signals={"attention_stats": torch.full(batch.shape, 0.2)})
    assert compo(flat, cfg).metrics["credit/compo/eta_sd"] == pytest.approx(0.0, abs=1e-7)


def test_per_layer_stats_are_averaged() -> None:
    batch = random_batch(1)
    layers = torch.stack([batch.signals["attention_stats"], 1 - batch.signals["attention_stats"] ** 2], -1)
    per_layer = CreditBatch(
        batch.token_rewards,
        batch.policy_mask,
        batch.group_ids,
        batch.old_logprobs,
        values=batch.values,
        signals={"attention_stats": layers},
    )
    mean = CreditBatch(
        batch.token_rewards,
        batch.policy_mask,
        batch.group_ids,
        batch.old_logprobs,
        values=batch.values,
        signals={"attention_stats": layers.mean(-1)},
    )
    torch.testing.assert_close(compo(per_layer, RAW).advantages, compo(mean, RAW).advantages)


def test_nonfinite_signals_are_masked_and_counted() -> None:
    batch = random_batch(2)
    assert batch.values is not None
    kappa = batch.signals["attention_stats"].clone()
    kappa[0, 2] = float("nan")
    values = batch.values.clone()
    values[1, 3] = float("inf")
    bad = CreditBatch(
        batch.token_rewards,
        batch.policy_mask,
        batch.group_ids,
        batch.old_logprobs,
        values=values,
        signals={"attention_stats": kappa},
    )
    out = compo(bad, RAW)
    assert torch.isfinite(out.advantages).all()
    assert out.returns is not None and torch.isfinite(out.returns).all()
    assert out.metrics["credit/compo/nonfinite_signal_tokens"] == 2.0
    assert out.advantages[1, 3] == 0
    # the trace passes through the bad value: the token before it sees G at the token after, not the value
    eta = compo_gate(kappa, bad.policy_mask, 0, RAW)
    v = torch.where(bad.policy_mask, values, 0.0)
    g4 = float(out.returns[1, 4])
    expected = float(bad.token_rewards[1, 2]) - float(v[1, 2]) + float(out.returns[1, 3])
    assert float(out.returns[1, 3]) == pytest.approx(
        float(bad.token_rewards[1, 3]) + float((1 - eta[1, 4]) * v[1, 4] + eta[1, 4] * g4), abs=1e-5
    )
    assert float(out.advantages[1, 2]) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"eta_min": 0.95, "eta_max": 0.9},
        {"eta_max": 1.1},
        {"gamma": -0.1},
        {"gate": "random"},
        {"layers": ()},
        {"layers": (1.5,)},
        {"a": float("inf")},
        {"whiten": 0},
        {"seed": -1},
        {"critic": "model"},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        CompPOConfig(**kwargs)  # type: ignore[arg-type]
