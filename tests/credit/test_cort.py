"""CoRT (arXiv 2607.25659): hand-computed weights, GRPO total and sign kept, ramp, ablations, non-finite signals."""

from __future__ import annotations

import math

import pytest
import torch

from creditgym import credit
from creditgym.credit import CoRTConfig, CreditBatch, GRPOConfig
from creditgym.credit.cort import cort, cort_ramp, cort_weights
from creditgym.credit.grpo import grpo

ON = CoRTConfig(ramp_start=0.0, ramp_end=0.0)  # alpha = 1 from step 0


def make_batch(
    rewards: list[float],
    groups: list[int],
    mask: list[list[bool]],
    old: list[list[float]],
    cf: list[list[float]],
    *,
    step: int = 0,
    total_steps: int = 1,
) -> CreditBatch:
    m = torch.tensor(mask)
    last = torch.stack([row.nonzero().max() if row.any() else torch.tensor(0) for row in m])
    r = torch.zeros(m.shape)
    r[torch.arange(len(rewards)), last] = torch.tensor(rewards)
    r = torch.where(m, r, 0.0)
    return CreditBatch(
        r,
        m,
        torch.tensor(groups),
        torch.tensor(old),
        signals={"counterfactual_logprobs": torch.tensor(cf)},
        step=step,
        total_steps=total_steps,
    )


def random_batch(seed: int, *, step: int = 5, total_steps: int = 10) -> CreditBatch:
    gen = torch.Generator().manual_seed(seed)
    B, T = 8, 12
    mask = torch.rand(B, T, generator=gen) < 0.8
    mask[:, 0] = False  # a prompt token
    r = torch.zeros(B, T)
    for b in range(B):
        r[b, int(mask[b].nonzero().max())] = float(torch.randint(0, 2, (), generator=gen))
    old = -3 * torch.rand(B, T, generator=gen)
    cf = -3 * torch.rand(B, T, generator=gen)
    return CreditBatch(
        r,
        mask,
        torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        old,
        signals={"counterfactual_logprobs": cf},
        step=step,
        total_steps=total_steps,
    )


def test_registered_with_its_signal() -> None:
    module = credit.get("cort")
    assert module.signals == ("counterfactual_logprobs",) and not module.critic
    assert module.config is CoRTConfig


def test_hand_computed_weights() -> None:
    # one response of 3 policy tokens after a prompt token; delta = [ln 2, 0, 0] -> u = 3 * [2, 1, 1] / 4
    mask = [[False, True, True, True], [False, True, True, True]]
    old = [[0.0, math.log(2.0) - 1.0, -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    cf = [[0.0, -1.0, -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    batch = make_batch([1.0, 0.0], [0, 0], mask, old, cf)
    out = cort(batch, ON)
    # GRPO: r = [1, 0], mean 0.5, unbiased std = sqrt(0.5); A = +-0.5 / (sqrt(0.5) + 1e-6)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = torch.tensor([[0.0, 1.5 * a, 0.75 * a, 0.75 * a], [0.0, -a, -a, -a]])
    torch.testing.assert_close(out.advantages, expected)
    assert out.metrics["credit/cort/alpha"] == 1.0
    assert out.metrics["credit/cort/weight_max"] == pytest.approx(1.5)
    assert out.metrics["credit/cort/weight_min"] == pytest.approx(0.75)


def test_clip_then_renormalise_by_hand() -> None:
    # delta = [c, 0] with c = 5 -> u = 2 [e^5, 1] / (e^5 + 1) = [1.9866, 0.0134] -> clip [1.9866, 0.25]
    # -> renormalise to mean 1: [1.9866, 0.25] / 1.1183
    delta = torch.tensor([[9.0, 0.0]])
    valid = torch.tensor([[True, True]])
    u0 = 2 * math.exp(5) / (math.exp(5) + 1)
    raw = cort_weights(delta, valid, CoRTConfig(normalize=False))
    torch.testing.assert_close(raw, torch.tensor([[u0, 0.25]]))
    w = cort_weights(delta, valid, CoRTConfig())
    torch.testing.assert_close(w, torch.tensor([[u0, 0.25]]) * 2 / (u0 + 0.25))


@pytest.mark.parametrize("seed", range(5))
def test_keeps_the_grpo_total_and_sign(seed: int) -> None:
    batch = random_batch(seed)
    out = cort(batch, CoRTConfig())
    base = grpo(batch, GRPOConfig()).advantages
    n = batch.policy_mask.sum(-1)
    A_i = base.sum(-1) / n.clamp(min=1)
    torch.testing.assert_close(out.advantages.sum(-1), n * A_i, rtol=1e-5, atol=1e-5)
    on = batch.policy_mask
    assert (torch.sign(out.advantages[on]) == torch.sign(base[on])).all()
    assert out.metrics["credit/cort/alpha"] > 0


@pytest.mark.parametrize("sign_aware", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_weights_within_bounds(seed: int, sign_aware: bool) -> None:
    gen = torch.Generator().manual_seed(seed)
    delta = 8 * torch.randn(6, 20, generator=gen)
    valid = torch.rand(6, 20, generator=gen) < 0.7
    cfg = CoRTConfig(w_min=0.5, w_max=2.0, sign_aware=sign_aware)
    raw = cort_weights(delta, valid, CoRTConfig(w_min=0.5, w_max=2.0, sign_aware=sign_aware, normalize=False))
    assert (raw[valid] >= 0.5 - 1e-6).all() and (raw[valid] <= 2.0 + 1e-6).all()
    assert (raw[~valid] == 1).all()
    w = cort_weights(delta, valid, cfg)
    n = valid.sum(-1)
    torch.testing.assert_close(torch.where(valid, w, 0.0).sum(-1), n.float())  # mean 1 per row
    scale = n / torch.where(valid, raw, 0.0).sum(-1).clamp(min=1e-12)  # the renormalisation factor
    torch.testing.assert_close(w, torch.where(valid, raw * scale[:, None], 1.0))


def test_sign_aware_ignores_negative_contrasts() -> None:
    delta = torch.tensor([[-3.0, -1.0, 0.0, 0.0]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    torch.testing.assert_close(cort_weights(delta, valid, CoRTConfig(sign_aware=True)), torch.ones(1, 4))
    assert not torch.allclose(cort_weights(delta, valid, CoRTConfig()), torch.ones(1, 4))


@pytest.mark.parametrize("seed", range(3))
def test_ramp_at_zero_is_grpo_exactly(seed: int) -> None:
    batch = random_batch(seed, step=0, total_steps=100)  # k = 0 < k0 = 5
    out = cort(batch, CoRTConfig())
    assert out.metrics["credit/cort/alpha"] == 0.0
    assert torch.equal(out.advantages, grpo(batch, GRPOConfig()).advantages)


def test_smoothstep_ramp() -> None:
    cfg = CoRTConfig()  # k0 = 5, k1 = 30 of K = 100
    assert cort_ramp(0, 100, cfg) == 0.0 and cort_ramp(5, 100, cfg) == 0.0
    assert cort_ramp(30, 100, cfg) == 1.0 and cort_ramp(99, 100, cfg) == 1.0
    assert cort_ramp(17, 100, cfg) == pytest.approx(3 * 0.48**2 - 2 * 0.48**3)  # z = 12/25
    assert cort_ramp(3, 10, CoRTConfig(ramp_start=0.3, ramp_end=0.3)) == 1.0
    assert cort_ramp(2, 10, CoRTConfig(ramp_start=0.3, ramp_end=0.3)) == 0.0


def test_without_normalisation_the_total_drifts() -> None:
    batch = random_batch(0)
    cfg = CoRTConfig(normalize=False, ramp_start=0.0, ramp_end=0.0, w_min=0.9, w_max=1.1, delta_clip=3.0)
    out = cort(batch, cfg)
    n = batch.policy_mask.sum(-1)
    A_i = grpo(batch, GRPOConfig()).advantages.sum(-1) / n.clamp(min=1)
    assert not torch.allclose(out.advantages.sum(-1), n * A_i, atol=1e-4)


def test_nonfinite_counterfactual_is_neutral_and_counted() -> None:
    mask = [[False, True, True, True], [False, True, True, True]]
    old = [[0.0, -1.0, -0.5, -2.0], [0.0, -1.0, -1.0, -1.0]]
    cf = [[0.0, -float("inf"), -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    batch = make_batch([1.0, 0.0], [0, 0], mask, old, cf)
    out = cort(batch, ON)
    assert torch.isfinite(out.advantages).all()
    assert out.metrics["credit/cort/nonfinite_signal_tokens"] == 1.0
    a = out.advantages[0, 1:]
    A_i = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert a[0] == pytest.approx(A_i)  # weight 1
    w = cort_weights(torch.tensor([[0.5, -1.0]]), torch.ones(1, 2, dtype=torch.bool), CoRTConfig())
    torch.testing.assert_close(a[1:], A_i * w[0])
    assert float(a.sum()) == pytest.approx(3 * A_i, rel=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delta_clip": 0.0},
        {"tau": -1.0},
        {"w_min": 0.0},
        {"w_min": 1.5},
        {"w_max": 0.5},
        {"ramp_start": 0.5, "ramp_end": 0.2},
        {"ramp_end": 1.5},
        {"normalize": 1},
        {"grpo": None},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        CoRTConfig(**kwargs)  # type: ignore[arg-type]
