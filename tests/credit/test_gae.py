"""GAE over policy tokens: hand-computed cases, env tokens skipped, vectorised vs a slow reference loop."""

from __future__ import annotations

import pytest
import torch

from creditgym.credit import CreditBatch, GAEConfig
from creditgym.credit.gae import gae, gae_advantages, masked_whiten

RAW = GAEConfig(gamma=1.0, lam=1.0, whiten=False)


def batch_of(rewards: list[list[float]], values: list[list[float]], mask: list[list[bool]]) -> CreditBatch:
    r = torch.tensor(rewards, dtype=torch.float32)
    return CreditBatch(
        r,
        torch.tensor(mask),
        torch.arange(r.shape[0]),
        torch.zeros_like(r),
        values=torch.tensor(values, dtype=torch.float32),
    )


def reference_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Textbook GAE on each row's policy tokens, compressed into a list, in Python floats."""
    adv, ret = torch.zeros_like(rewards, dtype=torch.float64), torch.zeros_like(rewards, dtype=torch.float64)
    for b in range(rewards.shape[0]):
        idx = mask[b].nonzero().flatten().tolist()
        r = [float(rewards[b, t]) for t in idx]
        v = [float(values[b, t]) for t in idx] + [0.0]
        a_next = 0.0
        for k in reversed(range(len(idx))):
            a_next = r[k] + gamma * v[k + 1] - v[k] + gamma * lam * a_next
            adv[b, idx[k]] = a_next
            ret[b, idx[k]] = a_next + v[k]
    return adv, ret


def test_hand_case() -> None:
    batch = batch_of([[0, 0, 1]], [[0.5, 0.6, 0.7]], [[True, True, True]])
    out = gae(batch, GAEConfig(gamma=0.9, lam=0.8, whiten=False))
    # delta = [0.9*0.6-0.5, 0.9*0.7-0.6, 1-0.7] = [0.04, 0.03, 0.3]; A_t = delta_t + 0.72 A_{t+1}
    torch.testing.assert_close(out.advantages, torch.tensor([[0.21712, 0.246, 0.3]]))
    assert out.returns is not None
    torch.testing.assert_close(out.returns, torch.tensor([[0.71712, 0.846, 1.0]]))


def test_lambda_one_is_return_minus_value_and_lambda_zero_is_td() -> None:
    batch = batch_of([[0, 0, 0, 1, 0]], [[0.5, 0.6, 0.7, 0.2, 9.0]], [[True, True, True, True, False]])
    out = gae(batch, RAW)
    torch.testing.assert_close(out.advantages, torch.tensor([[0.5, 0.4, 0.3, 0.8, 0.0]]))  # R - V_t (PACT)
    assert out.returns is not None
    torch.testing.assert_close(out.returns, torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]]))
    td = gae(batch, GAEConfig(gamma=1.0, lam=0.0, whiten=False)).advantages
    torch.testing.assert_close(td, torch.tensor([[0.1, 0.1, -0.5, 0.8, 0.0]]))  # r + V_next - V


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.9, 0.95), (1.0, 0.5), (0.5, 1.0)])
def test_env_tokens_are_skipped(gamma: float, lam: float) -> None:
    # prompt, 2 policy tokens, 2 env tokens (values there are garbage), 2 policy tokens, padding
    mask = [[False, True, True, False, False, True, True, False]]
    full = batch_of([[0, 0, 0.5, 0, 0, 0, 1, 0]], [[7, 0.1, 0.2, -5, 8, 0.3, 0.4, 3]], mask)
    packed = batch_of([[0, 0.5, 0, 1]], [[0.1, 0.2, 0.3, 0.4]], [[True] * 4])
    cfg = GAEConfig(gamma=gamma, lam=lam, whiten=False)
    out, ref = gae(full, cfg), gae(packed, cfg)
    policy = torch.tensor(mask)
    torch.testing.assert_close(out.advantages[policy], ref.advantages[0])
    assert out.returns is not None and ref.returns is not None
    torch.testing.assert_close(out.returns[policy], ref.returns[0])
    assert (out.advantages[~policy] == 0).all() and (out.returns[~policy] == 0).all()


@pytest.mark.parametrize(
    ("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (1.0, 0.95), (0.9, 1.0), (1.0, 0.0), (0.0, 1.0)]
)
def test_vectorised_matches_reference_loop(gamma: float, lam: float) -> None:
    gen = torch.Generator().manual_seed(0)
    B, T = 16, 40
    mask = torch.rand(B, T, generator=gen) < 0.6
    mask[3] = False  # a padding row
    rewards = torch.where(mask, torch.randn(B, T, generator=gen), 0.0) * (
        torch.rand(B, T, generator=gen) < 0.2
    )
    values = torch.randn(B, T, generator=gen)
    batch = CreditBatch(rewards, mask, torch.arange(B), torch.zeros(B, T), values=values)
    out = gae(batch, GAEConfig(gamma=gamma, lam=lam, whiten=False))
    ref_adv, ref_ret = reference_gae(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(out.advantages.double(), ref_adv, rtol=1e-5, atol=1e-5)
    assert out.returns is not None
    torch.testing.assert_close(out.returns.double(), ref_ret, rtol=1e-5, atol=1e-5)
    direct = gae_advantages(rewards, values, mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(direct, out.advantages)


def test_whitening() -> None:
    gen = torch.Generator().manual_seed(2)
    mask = torch.rand(6, 9, generator=gen) < 0.5
    rewards = torch.where(mask, torch.rand(6, 9, generator=gen), 0.0)
    batch = CreditBatch(
        rewards, mask, torch.arange(6), torch.zeros(6, 9), values=torch.rand(6, 9, generator=gen)
    )
    raw, white = (
        gae(batch, GAEConfig(gamma=0.9, lam=0.9, whiten=False)),
        gae(batch, GAEConfig(gamma=0.9, lam=0.9)),
    )
    a = white.advantages[mask]
    assert a.mean().abs() < 1e-5 and (a.std() - 1).abs() < 1e-4  # unbiased std, as verl's masked_whiten
    assert (white.advantages[~mask] == 0).all()
    raw_a = raw.advantages[mask]
    torch.testing.assert_close(a, (raw_a - raw_a.mean()) / raw_a.std())
    assert raw.returns is not None and white.returns is not None
    assert torch.equal(raw.returns, white.returns)  # value targets are never whitened


def test_masked_whiten_edge_cases() -> None:
    x = torch.tensor([[3.0, 5.0]])
    assert torch.equal(masked_whiten(x, torch.tensor([[True, False]])), torch.zeros(1, 2))
    assert torch.equal(masked_whiten(x, torch.tensor([[False, False]])), torch.zeros(1, 2))


def test_explained_variance_metric() -> None:
    batch = batch_of([[0, 1], [0, 0]], [[1.0, 1.0], [0.0, 0.0]], [[True, True], [True, True]])
    out = gae(batch, RAW)
    assert out.metrics["credit/gae/explained_var"] == pytest.approx(1.0)  # perfect critic
    assert out.metrics["credit/gae/value_mean"] == pytest.approx(0.5)


def test_missing_values_raise() -> None:
    batch = CreditBatch(
        torch.zeros(1, 2),
        torch.ones(1, 2, dtype=torch.bool),
        torch.zeros(1, dtype=torch.long),
        torch.zeros(1, 2),
    )
    with pytest.raises(
        ValueError, match=r"credit module 'gae' needs the signal 'values'.*CreditBatch.values is None"
    ):
        gae(batch, GAEConfig())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lam": 1.5}, r"GAEConfig.lam: expected a float in \[0, 1\], got 1.5"),
        ({"gamma": -0.1}, "GAEConfig.gamma"),
        ({"gamma": True}, "GAEConfig.gamma"),
    ],
)
def test_config_validation(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        GAEConfig(**kwargs)
