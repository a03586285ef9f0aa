"""forking, ktae and prime: the properties each paper's method promises, on hand-built batches."""

from __future__ import annotations

import math

import pytest
import torch

from creditgym.credit import CreditBatch, ForkingConfig, GRPOConfig, KTAEConfig, PRIMEConfig, RLOOConfig
from creditgym.credit.forking import forking
from creditgym.credit.grpo import grpo
from creditgym.credit.ktae import key_token_scores, ktae
from creditgym.credit.prime import discounted_returns, prime
from creditgym.credit.rloo import rloo

EPS32 = torch.finfo(torch.float32).eps


def batch(
    rewards: list[float],
    groups: list[int],
    T: int = 8,
    signals: dict[str, torch.Tensor] | None = None,
    old_logprobs: torch.Tensor | None = None,
) -> CreditBatch:
    """One prompt token then T - 1 policy tokens per row, the reward on the last one."""
    B = len(rewards)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[:, 0] = False
    token_rewards = torch.zeros(B, T)
    token_rewards[:, -1] = torch.tensor(rewards)
    old = torch.zeros(B, T) if old_logprobs is None else old_logprobs
    return CreditBatch(token_rewards, mask, torch.tensor(groups), old, signals=signals or {})


# forking


@pytest.mark.parametrize("scope", ["batch", "response"])
def test_forking_keeps_the_top_entropy_share_at_the_outcome_advantage(scope: str) -> None:
    g = torch.Generator().manual_seed(0)
    B, T = 6, 11
    H = torch.rand(B, T, generator=g)
    b = batch([1, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1], T=T, signals={"token_entropy": H})
    out = forking(b, ForkingConfig(rho=0.2, scope=scope))
    ref = grpo(b, GRPOConfig()).advantages
    kept = out.advantages != 0
    mask = b.policy_mask
    if scope == "batch":
        k = math.ceil(0.2 * int(mask.sum()))
        assert int(kept.sum()) == k
        assert H[kept].min() >= H[mask & ~kept].max()
    else:
        for row in range(B):
            k = math.ceil(0.2 * int(mask[row].sum()))
            assert int(kept[row].sum()) == k
            assert H[row][kept[row]].min() >= H[row][mask[row] & ~kept[row]].max()
    assert torch.equal(out.advantages[kept], ref[kept])  # exactly the outcome advantage where kept
    assert not (out.advantages[mask & ~kept]).any()


def test_forking_with_rho_one_is_grpo() -> None:
    H = torch.rand(4, 8, generator=torch.Generator().manual_seed(1))
    b = batch([1, 0, 0.5, 0], [0, 0, 0, 0], signals={"token_entropy": H})
    assert torch.equal(forking(b, ForkingConfig(rho=1.0)).advantages, grpo(b, GRPOConfig()).advantages)


def test_forking_needs_the_entropy_signal_and_a_valid_share() -> None:
    with pytest.raises(ValueError, match="token_entropy"):
        forking(batch([1, 0], [0, 0]), ForkingConfig())
    with pytest.raises(ValueError, match="rho"):
        ForkingConfig(rho=0.0)
    with pytest.raises(ValueError, match="scope"):
        ForkingConfig(scope="group")


# ktae


def test_ktae_scores_a_token_of_the_correct_rollouts_only_positive_and_a_shared_token_zero() -> None:
    # vocabulary: 5 in every rollout, 7 only in the correct ones, 9 only in the wrong ones
    ids = torch.tensor(
        [
            [0, 5, 7, 1, 1, 1, 1, 1],
            [0, 5, 7, 2, 2, 2, 2, 2],
            [0, 5, 9, 3, 3, 3, 3, 3],
            [0, 5, 9, 4, 4, 4, 4, 4],
        ]
    )
    b = batch([1, 1, 0, 0], [0, 0, 0, 0], signals={"token_ids": ids})
    out = ktae(b, KTAEConfig(lam=1.0))
    K = out.diagnostics["credit"]
    assert K[0, 2] > 0 and K[2, 2] < 0 and K[0, 1] == 0
    assert K[0, 2] == pytest.approx(1.0, abs=1e-6)  # a perfect separator: phi2 = IG = 1
    A = grpo(b, GRPOConfig()).advantages
    assert out.advantages[0, 2] > A[0, 2] and out.advantages[2, 2] < A[2, 2]
    assert out.advantages[0, 1] == A[0, 1]  # the shared token gets the sequence advantage alone
    assert torch.equal(ktae(b, KTAEConfig(lam=0.0)).advantages, A)


def test_ktae_scores_are_antisymmetric_and_bounded() -> None:
    g = torch.Generator().manual_seed(2)
    present = torch.rand(8, 20, generator=g) < 0.5
    correct = torch.tensor([1, 1, 1, 0, 0, 0, 0, 1], dtype=torch.bool)
    K = key_token_scores(present, correct)
    assert torch.allclose(key_token_scores(present, ~correct), -K, atol=1e-12)
    assert (K.abs() <= 1).all()
    assert not key_token_scores(present, torch.ones(8, dtype=torch.bool)).any()


def test_ktae_gives_zero_to_a_group_of_equal_rewards() -> None:
    ids = torch.arange(32).reshape(4, 8)
    out = ktae(batch([1, 1, 0, 1], [0, 0, 1, 1], signals={"token_ids": ids}), KTAEConfig())
    assert not out.advantages[:2].any() and out.advantages[2:].any()


# prime


def test_prime_with_the_policy_equal_to_the_reference_is_rloo() -> None:
    lp = -torch.rand(4, 8, generator=torch.Generator().manual_seed(3))
    b = batch([1, 0, 0, 1], [0, 0, 0, 0], signals={"reference_logprobs": lp}, old_logprobs=lp)
    assert torch.equal(prime(b, PRIMEConfig()).advantages, rloo(b, RLOOConfig()).advantages)


def test_prime_adds_the_loo_baselined_implicit_returns_to_the_outcome_advantage() -> None:
    g = torch.Generator().manual_seed(4)
    B, T = 3, 6
    old, ref = -torch.rand(B, T, generator=g), -torch.rand(B, T, generator=g)
    b = batch([1, 0, 0], [0, 0, 0], T=T, signals={"reference_logprobs": ref}, old_logprobs=old)
    cfg = PRIMEConfig(beta=0.05)
    out = prime(b, cfg).advantages
    # loop reference of the module docstring
    r_phi = cfg.beta * (old - ref)
    m = [float(r_phi[i, 1:].mean()) for i in range(B)]
    outcome = [1.0 - 0.0, 0.0 - 0.5, 0.0 - 0.5]
    for i in range(B):
        base = sum(m[j] for j in range(B) if j != i) / (B - 1)
        for t in range(1, T):
            want = sum(float(r_phi[i, s]) - base for s in range(t, T)) + outcome[i]
            assert float(out[i, t]) == pytest.approx(want, abs=16 * EPS32 * T)
    assert not out[:, 0].any()


def test_prime_discounted_returns_skip_the_masked_tokens() -> None:
    x = torch.tensor([[1.0, 9.0, 2.0, 4.0]])
    mask = torch.tensor([[True, False, True, True]])
    assert discounted_returns(x, mask, 0.5).tolist() == [[1 + 0.5 * 2 + 0.25 * 4, 0.0, 2 + 0.5 * 4, 4.0]]
    assert discounted_returns(x, mask, 1.0).tolist() == [[7.0, 0.0, 6.0, 4.0]]


def test_prime_needs_reference_logprobs_and_a_positive_beta() -> None:
    with pytest.raises(ValueError, match="reference_logprobs"):
        prime(batch([1, 0], [0, 0]), PRIMEConfig())
    with pytest.raises(ValueError, match="beta"):
        PRIMEConfig(beta=0)
