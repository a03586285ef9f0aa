"""GRPO and RLOO: hand-computed cases and a loop reference in verl's style."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from creditgym.credit import CreditBatch, GRPOConfig, RLOOConfig
from creditgym.credit.grpo import grpo
from creditgym.credit.rloo import rloo


def outcome_batch(
    rewards: list[float], groups: list[int], lengths: list[int] | None = None, T: int = 6
) -> CreditBatch:
    """One prompt token, then ``lengths[i]`` policy tokens with the reward on the last one, then padding."""
    lengths = lengths or [3] * len(rewards)
    B = len(rewards)
    mask = torch.zeros(B, T, dtype=torch.bool)
    token_rewards = torch.zeros(B, T)
    for b, (r, n) in enumerate(zip(rewards, lengths, strict=True)):
        mask[b, 1 : 1 + n] = True
        if n:
            token_rewards[b, n] = r
    return CreditBatch(token_rewards, mask, torch.tensor(groups), torch.zeros(B, T))


def row_values(advantages: torch.Tensor, batch: CreditBatch) -> torch.Tensor:
    """The per-row advantage, checking it is broadcast over the policy tokens and 0 elsewhere."""
    first = advantages[:, 1]
    expected = torch.where(batch.policy_mask, first[:, None], 0.0)
    assert torch.equal(advantages, expected)
    return first


def test_grpo_hand_case_unbiased_std() -> None:
    batch = outcome_batch([1, 0, 0, 1], [0, 0, 0, 0])
    out = grpo(batch, GRPOConfig())
    std = math.sqrt(4 * 0.25 / 3)  # unbiased: sum of squared deviations / (n - 1)
    a = 0.5 / (std + 1e-6)  # = 0.866...
    torch.testing.assert_close(row_values(out.advantages, batch), torch.tensor([a, -a, -a, a]))
    assert out.returns is None
    assert out.metrics["credit/grpo/adv_abs_mean"] == pytest.approx(a)
    assert out.metrics["credit/grpo/reward_mean"] == pytest.approx(0.5)


def test_grpo_hand_case_biased_std_and_dr_grpo() -> None:
    batch = outcome_batch([1, 0, 0, 1], [0, 0, 0, 0])
    biased = row_values(grpo(batch, GRPOConfig(unbiased_std=False)).advantages, batch)
    torch.testing.assert_close(biased, torch.tensor([1.0, -1.0, -1.0, 1.0]) * 0.5 / (0.5 + 1e-6))
    dr = row_values(grpo(batch, GRPOConfig(norm_by_std=False)).advantages, batch)
    torch.testing.assert_close(dr, torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_grpo_groups_lengths_and_prompt_tokens() -> None:
    batch = outcome_batch([3, 1, 2, 0.5], [4, 9, 4, 9], lengths=[1, 4, 2, 3])
    out = grpo(batch, GRPOConfig(unbiased_std=False))
    assert (out.advantages[:, 0] == 0).all()  # the prompt token
    assert out.advantages.ne(0).sum(-1).tolist() == [1, 4, 2, 3]
    torch.testing.assert_close(
        row_values(out.advantages, batch),
        torch.tensor([0.5 / 0.5, 0.25 / 0.25, -0.5 / 0.5, -0.25 / 0.25]),
        atol=1e-5,
        rtol=0,
    )


def test_grpo_singleton_and_equal_groups_get_exactly_zero() -> None:
    batch = outcome_batch([1.0, 0.3, 0.3, 0.3, 0.7, 0.7], [0, 1, 1, 1, 2, 2])
    out = grpo(batch, GRPOConfig())
    assert (out.advantages == 0).all()
    assert out.metrics["credit/grpo/singleton_frac"] == pytest.approx(1 / 6)
    assert out.metrics["credit/grpo/zero_std_frac"] == pytest.approx(5 / 6)


def test_padding_rows_are_not_samples() -> None:
    with_pad = outcome_batch([1, 0, 0, 0], [0, 0, 0, 0], lengths=[3, 3, 3, 0])
    without = outcome_batch([1, 0, 0], [0, 0, 0])
    for fn, cfg in ((grpo, GRPOConfig()), (rloo, RLOOConfig())):
        a = fn(with_pad, cfg).advantages  # type: ignore[operator]
        assert (a[3] == 0).all()
        assert torch.equal(a[:3], fn(without, cfg).advantages)  # type: ignore[operator]


def test_multi_turn_rewards_are_summed() -> None:
    mask = torch.tensor([[True, True, False, True, True], [True, False, False, True, False]])
    rewards = torch.tensor([[0.0, 0.5, 0.0, 0.0, 1.0], [0.2, 0.0, 0.0, 0.0, 0.0]])  # outcomes 1.5 and 0.2
    batch = CreditBatch(rewards, mask, torch.tensor([0, 0]), torch.zeros(2, 5))
    a = grpo(batch, GRPOConfig(norm_by_std=False)).advantages
    torch.testing.assert_close(a, torch.tensor([[0.65, 0.65, 0, 0.65, 0.65], [-0.65, 0, 0, -0.65, 0]]))


def verl_grpo(scores: torch.Tensor, index: list[int], eps: float = 1e-6) -> torch.Tensor:
    """verl's ``compute_grpo_outcome_advantage`` loop (groups of >= 2 only)."""
    id2score: dict[int, list[torch.Tensor]] = defaultdict(list)
    for i, idx in enumerate(index):
        id2score[idx].append(scores[i])
    out = scores.clone()
    for i, idx in enumerate(index):
        group = torch.stack(id2score[idx])
        out[i] = (scores[i] - group.mean()) / (torch.std(group) + eps)
    return out


def test_grpo_matches_verl_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    groups = torch.randint(0, 5, (40,), generator=gen)
    groups[:10] = torch.arange(5).repeat(2)  # every group has >= 2 rows
    rewards = torch.rand(40, generator=gen).round(decimals=1)
    batch = outcome_batch(rewards.tolist(), groups.tolist())
    ours = row_values(grpo(batch, GRPOConfig()).advantages, batch)
    ref = verl_grpo(rewards, groups.tolist())
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_rloo_hand_case() -> None:
    batch = outcome_batch([1, 0, 0, 1, 3, 1, 5], [0, 0, 0, 0, 1, 1, 2])
    out = rloo(batch, RLOOConfig())
    expected = torch.tensor(
        [2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0, 0.0]
    )  # e.g. 1 - (0 + 0 + 1) / 3; singleton 0
    torch.testing.assert_close(row_values(out.advantages, batch), expected)
    assert out.returns is None and out.metrics["credit/rloo/singleton_frac"] == pytest.approx(1 / 7)


def test_rloo_is_scaled_dr_grpo() -> None:
    gen = torch.Generator().manual_seed(1)
    rewards = torch.rand(12, generator=gen)
    groups = [0] * 5 + [1] * 4 + [2] * 3
    batch = outcome_batch(rewards.tolist(), groups)
    n = torch.tensor(groups).bincount()[torch.tensor(groups)].float()
    dr = row_values(grpo(batch, GRPOConfig(norm_by_std=False)).advantages, batch)
    torch.testing.assert_close(row_values(rloo(batch, RLOOConfig()).advantages, batch), n / (n - 1) * dr)


def test_grpo_config_validation() -> None:
    with pytest.raises(ValueError, match=r"GRPOConfig.eps: expected a float > 0 .* got 0.0"):
        GRPOConfig(eps=0.0)
    with pytest.raises(TypeError, match=r"GRPOConfig.norm_by_std: expected a bool, got 'yes'"):
        GRPOConfig(norm_by_std="yes")  # type: ignore[arg-type]
