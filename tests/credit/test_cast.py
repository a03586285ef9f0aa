"""CAST (arXiv 2606.00172): zero-variance bases (partial rewards too), asymmetric clip, flips, the final bound and
the zero sum it keeps, threshold, non-finite gaps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from creditgym import credit
from creditgym.credit import CASTConfig, CreditBatch, GRPOConfig
from creditgym.credit.cast import cast, cast_base_advantage, group_scale, masked_quantile
from creditgym.credit.grpo import grpo

A = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO advantage of a {1, 0} group


def make_batch(rewards: list[float], groups: list[int], gaps: list[list[float]]) -> CreditBatch:
    """One prompt token then len(gaps[b]) policy tokens per row; old log-probs -1, teacher -1 + gap."""
    B, n = len(rewards), len(gaps[0])
    mask = torch.ones(B, n + 1, dtype=torch.bool)
    mask[:, 0] = False
    r = torch.zeros(B, n + 1)
    r[:, -1] = torch.tensor(rewards)
    old = torch.full((B, n + 1), -1.0)
    teacher = old.clone()
    teacher[:, 1:] += torch.tensor(gaps)
    return CreditBatch(r, mask, torch.tensor(groups), old, signals={"teacher_logprobs": teacher})


def random_batch(seed: int) -> CreditBatch:
    gen = torch.Generator().manual_seed(seed)
    B, T = 12, 10
    mask = torch.rand(B, T, generator=gen) < 0.8
    mask[:, 0] = False
    mask[:, -1] = True
    r = torch.zeros(B, T)
    r[:, -1] = torch.randint(0, 2, (B,), generator=gen).float()
    r[8:10, -1] = 1.0  # an all-correct group
    r[10:12, -1] = 0.0  # an all-wrong group
    old = -3 * torch.rand(B, T, generator=gen)
    teacher = old + 0.5 * torch.randn(B, T, generator=gen)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3])
    return CreditBatch(r, mask, groups, old, signals={"teacher_logprobs": teacher})


HAND = make_batch(
    [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0],
    [0, 0, 1, 1, 2, 2, 3],
    [
        [0.0, 0.5, -0.5],  # mixed, correct (B = +A)
        [0.5, -0.5, 0.05],  # mixed, wrong (B = -A)
        [2.0, -2.0, 0.0],  # all-correct (B = +1)
        [0.0, 0.0, 0.0],
        [-1.0, 1.0, 0.0],  # all-wrong (B = -1)
        [0.0, 0.0, 0.0],
        [3.0, -3.0, 0.0],  # singleton (B = 0)
    ],
)


def test_registered_with_its_signal() -> None:
    module = credit.get("cast")
    assert module.signals == ("teacher_logprobs",) and not module.critic
    cfg = CASTConfig()
    assert (cfg.pos_clip, cfg.neg_clip, cfg.kappa_pos, cfg.kappa_neg, cfg.adv_clip) == (
        (0.8, 1.05),
        (0.95, 1.2),
        1.0,
        0.5,
        1.2,
    )
    assert cfg.teacher == "context" and cfg.teacher_context == "check" and cfg.delta == 1.0
    assert not cfg.flip and cfg.keep_zero_sum and cfg.reward_range == (0.0, 1.0)
    assert cfg.teacher_refresh_every >= 1 and 0 < cfg.teacher_ema < 1


def test_base_advantage_zero_variance_groups() -> None:
    B, *_ = cast_base_advantage(HAND, CASTConfig())
    torch.testing.assert_close(B, torch.tensor([A, -A, 1.0, 1.0, -1.0, -1.0, 0.0]))
    B2, *_ = cast_base_advantage(HAND, CASTConfig(b_correct=0.3, b_wrong=0.7))
    torch.testing.assert_close(B2[2:6], torch.tensor([0.3, 0.3, -0.7, -0.7]))
    # on a (0, 2) scale a common reward of 1 is halfway: base 0; of 0, all wrong
    B3, *_ = cast_base_advantage(HAND, CASTConfig(reward_range=(0.0, 2.0)))
    torch.testing.assert_close(B3[2:6], torch.tensor([0.0, 0.0, -1.0, -1.0]))


def test_partial_rewards_place_a_zero_variance_group_between_its_bounds() -> None:
    """Rubric-v0's partial rewards: a group whose rewards are all 0.75 did mostly right: +0.5 (not -1, as when
    only 1.0 counted as correct); all 0.25: -0.5; a mixed group of partial rewards: GRPO's advantage."""
    rewards = [0.75, 0.75, 0.25, 0.25, 1.0, 1.0, 0.0, 0.0, 0.5, 0.75]
    batch = make_batch(rewards, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4], [[0.0, 0.0]] * 10)
    B, *_ = cast_base_advantage(batch, CASTConfig())
    mixed = grpo(batch, GRPOConfig()).advantages[8:, 1]
    torch.testing.assert_close(B, torch.tensor([0.5, 0.5, -0.5, -0.5, 1.0, 1.0, -1.0, -1.0, *mixed.tolist()]))
    B2, *_ = cast_base_advantage(batch, CASTConfig(b_correct=1.0, b_wrong=0.0))
    torch.testing.assert_close(B2[:8], torch.tensor([0.75, 0.75, 0.25, 0.25, 1.0, 1.0, 0.0, 0.0]))
    out = cast(batch, CASTConfig())
    torch.testing.assert_close(out.advantages[:8, 1:], B[:8, None].expand(8, 2))  # g = 0: w = 1
    assert out.metrics["credit/cast/all_partial_frac"] == pytest.approx(4 / 10)
    assert out.metrics["credit/cast/all_correct_frac"] == pytest.approx(2 / 10)
    assert out.metrics["credit/cast/all_wrong_frac"] == pytest.approx(2 / 10)


def test_hand_computed_advantages() -> None:
    out = cast(HAND, CASTConfig(delta=0.1, flip=True))
    e = math.exp
    expected = torch.tensor(
        [
            [A, A * 1.05, -A * 0.8],  # w = [1, 1.05, 0.8]; g = -0.5 < -0.1 flips to -kappa_+ |A^|
            [0.5 * A * 0.95, -A * 1.2, -A * e(-0.05)],  # w = [0.95, 1.2, e^-0.05]; g = 0.5 flips to +0.5 |A^|
            [1.05, -0.8, 1.0],
            [1.0, 1.0, 1.0],
            [-1.2, 0.5 * 0.95, -1.0],  # w = [1.2, 0.95, 1]; g = 1 flips to +0.5 * 0.95
            [-1.0, -1.0, -1.0],
            [0.0, 0.0, 0.0],
        ]
    )
    torch.testing.assert_close(out.advantages[:, 1:], expected)
    assert (out.advantages[:, 0] == 0).all()
    assert out.metrics["credit/cast/delta"] == pytest.approx(0.1)
    assert out.metrics["credit/cast/all_correct_frac"] == pytest.approx(2 / 7)
    assert out.metrics["credit/cast/all_wrong_frac"] == pytest.approx(2 / 7)
    assert out.metrics["credit/cast/mixed_frac"] == pytest.approx(2 / 7)


def test_no_flip_keeps_the_base_sign() -> None:
    out = cast(HAND, CASTConfig(delta=0.1, flip=False))
    assert out.advantages[0, 3] == pytest.approx(A * 0.8)
    assert out.advantages[1, 1] == pytest.approx(-A * 0.95)
    for seed in range(5):
        batch = random_batch(seed)
        B, *_ = cast_base_advantage(batch, CASTConfig())
        out = cast(batch, CASTConfig(flip=False, delta=0.0))
        on = batch.policy_mask
        assert (torch.sign(out.advantages) == torch.where(on, torch.sign(B)[:, None], 0.0)).all()
        assert out.metrics["credit/cast/flip_pos_frac"] == 0.0 == out.metrics["credit/cast/flip_neg_frac"]


@pytest.mark.parametrize("seed", range(5))
def test_flipped_tokens_have_the_documented_sign(seed: int) -> None:
    batch = random_batch(seed)
    cfg = CASTConfig(delta=None, flip=True)  # the quantile threshold
    out = cast(batch, cfg)
    B, *_ = cast_base_advantage(batch, cfg)
    g = batch.signals["teacher_logprobs"] - batch.old_logprobs
    on = batch.policy_mask
    delta = masked_quantile(g.abs(), on, 0.75)
    assert out.metrics["credit/cast/delta"] == pytest.approx(float(delta))
    flip_pos = on & (B > 0)[:, None] & (g < -delta)
    flip_neg = on & (B < 0)[:, None] & (g > delta)
    assert flip_pos.any() and flip_neg.any()
    assert (out.advantages[flip_pos] < 0).all()
    assert (out.advantages[flip_neg] > 0).all()
    # a bounded positive advantage: kappa_- |A^| <= kappa_- |B| hi_-
    assert (out.advantages[flip_neg] <= 0.5 * B.abs()[:, None].expand_as(g)[flip_neg] * 1.2 + 1e-6).all()
    rest = on & ~flip_pos & ~flip_neg
    assert (torch.sign(out.advantages[rest]) == torch.sign(B)[:, None].expand_as(g)[rest]).all()


@pytest.mark.parametrize("seed", range(3))
def test_final_clip_holds(seed: int) -> None:
    batch = random_batch(seed)
    out = cast(batch, CASTConfig(b_correct=3.0, b_wrong=3.0, lam=4.0))
    assert out.advantages.abs().max() <= 1.2
    assert out.metrics["credit/cast/clip_frac"] > 0
    out = cast(batch, CASTConfig(b_correct=3.0, adv_clip=0.5))
    assert out.advantages.abs().max() <= 0.5


def test_masked_quantile_matches_torch() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(7, 9, generator=gen)
    mask = torch.rand(7, 9, generator=gen) < 0.6
    for q in (0.0, 0.25, 0.75, 0.8, 1.0):
        torch.testing.assert_close(masked_quantile(x, mask, q), torch.quantile(x[mask], q))
    assert masked_quantile(x, torch.zeros_like(mask), 0.5) == 0


def test_nonfinite_teacher_is_neutral_and_counted() -> None:
    batch = make_batch([1.0, 0.0], [0, 0], [[-float("inf"), 0.5, -0.5], [float("nan"), 0.5, 0.0]])
    out = cast(batch, CASTConfig(delta=0.1))
    assert torch.isfinite(out.advantages).all()
    assert out.metrics["credit/cast/nonfinite_signal_tokens"] == 2.0
    assert out.advantages[0, 1] == pytest.approx(A)  # w = 1, no flip
    assert out.advantages[1, 1] == pytest.approx(-A)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"pos_clip": (1.1, 1.2)},
        {"neg_clip": (0.9,)},
        {"delta": -0.1},
        {"delta_quantile": 1.5},
        {"kappa_neg": -1.0},
        {"adv_clip": 0.0},
        {"teacher_refresh_every": 0},
        {"teacher_ema": 1.0},
        {"flip": "yes"},
        {"lam": float("nan")},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        CASTConfig(**kwargs)  # type: ignore[arg-type]


def test_flip_marks_on_the_hand_batch() -> None:
    out = cast(HAND, CASTConfig(delta=0.1, flip=True))
    expected = torch.tensor(
        [[0, 0, -1], [1, 0, 0], [0, -1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.float32
    )
    torch.testing.assert_close(out.diagnostics["mark/flip"][:, 1:], expected)
    assert (out.diagnostics["mark/flip"][:, 0] == 0).all()
    flipped = out.diagnostics["mark/flip"] != 0
    # every flipped token's advantage has the mark's sign
    assert (torch.sign(out.advantages[flipped]) == out.diagnostics["mark/flip"][flipped]).all()
    assert not cast(HAND, CASTConfig(delta=0.1, flip=False)).diagnostics["mark/flip"].any()


def test_flipped_token_sign_share_on_a_hand_made_batch() -> None:
    """The probe's CAST figure: of the flipped tokens with A* != 0, the share whose A* has the flip's sign."""
    from creditgym.agents.probe.report import mark_figures

    marks = [np.array([0, 0, -1.0]), np.array([1.0, 0, 0]), np.zeros(3)]
    astar = [np.array([0.2, -0.1, -0.3]), np.array([-0.5, 0.0, 0.1]), np.full(3, 0.3)]
    f = mark_figures(marks, astar, n_boot=200, seed=0)
    assert f["share"]["value"] == pytest.approx(1 / 2)  # row 0 agrees (-, -), row 1 does not (+, -)
    assert f["chance"]["value"] == pytest.approx(
        3 / 5
    )  # row 0: 2 of 3 tokens negative; row 1: 1 of 2 positive
    assert f["marked"] == 2 and f["marked_frac"] == pytest.approx(2 / 9)
    lo, hi = f["share"]["ci"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0
    assert mark_figures([np.zeros(2)], [np.ones(2)], n_boot=10)["share"]["value"] is None


def test_clip_metrics_split_by_the_base_sign() -> None:
    # a {1, 0, 0, 0, 0, 0, 0, 0} group: B = +2.47 on the correct row, -0.35 on the wrong ones
    rewards = [1.0] + [0.0] * 7
    batch = make_batch(rewards, [0] * 8, [[0.0, 0.0]] * 8)
    top = 7 / 8 / (math.sqrt(1 / 8 * 7 / 8 * 8 / 7) + 1e-6)
    mass = 2 * top + 14 * top / 7
    out = cast(batch, CASTConfig(keep_zero_sum=False))  # the paper's clip: only the correct row is cut
    assert out.advantages[0, 1] == pytest.approx(1.2)
    assert out.metrics["credit/cast/clip_frac_pos"] == 1.0 and out.metrics["credit/cast/clip_frac_neg"] == 0.0
    assert out.metrics["credit/cast/clip_mass_frac"] == pytest.approx(2 * (top - 1.2) / mass, rel=1e-5)
    out = cast(batch, CASTConfig())  # one scale for the group: every row shrinks by 1.2 / 2.47
    torch.testing.assert_close(out.advantages[:, 1:], torch.tensor([[1.2, 1.2]] + [[-1.2 / 7] * 2] * 7))
    assert out.metrics["credit/cast/clip_frac_pos"] == 1.0 == out.metrics["credit/cast/clip_frac_neg"]
    assert out.metrics["credit/cast/clip_mass_frac"] == pytest.approx(1 - 1.2 / top, rel=1e-5)


@pytest.mark.parametrize("correct", range(1, 8))
def test_the_final_bound_keeps_a_mixed_group_s_zero_sum(correct: int) -> None:
    """GRPO's advantages of a mixed group sum to 0 at every token; the paper's final clip breaks it where one row
    passes 1.2 (1 correct of 8: -1.275 per token, every response pushed down on net), the group scale keeps it."""
    rewards = [1.0] * correct + [0.0] * (8 - correct)
    batch = make_batch(rewards, [0] * 8, [[0.0] * 3] * 8)  # g = 0: w = 1, CAST's base is GRPO's advantage
    kept = cast(batch, CASTConfig()).advantages[:, 1:]
    torch.testing.assert_close(kept.sum(0), torch.zeros(3), rtol=0, atol=1e-6)
    assert kept.abs().max() <= 1.2 + 1e-6
    clipped = cast(batch, CASTConfig(keep_zero_sum=False)).advantages[:, 1:].sum(0)
    if correct in (1, 7):  # |B| = 2.47 on the lone row: clipped to 1.2
        assert float(clipped.abs().min()) == pytest.approx(1.275, abs=1e-3)
    if correct == 1:
        assert (clipped < 0).all()


@pytest.mark.parametrize("seed", range(3))
def test_the_group_scale_keeps_the_ratios_within_each_group(seed: int) -> None:
    batch = random_batch(seed)
    cfg = CASTConfig(flip=True, delta=0.1, b_correct=3.0, b_wrong=3.0, adv_clip=1.0)
    free = cast(batch, CASTConfig(flip=True, delta=0.1, b_correct=3.0, b_wrong=3.0, adv_clip=1e9)).advantages
    out = cast(batch, cfg).advantages
    scale = group_scale(free, batch.policy_mask, batch.group_ids, 1.0)  # (B, 1)
    torch.testing.assert_close(out, free * scale)
    for g in batch.group_ids.unique():
        rows = batch.group_ids == g
        s = scale[rows]
        assert (s == s[0]).all() and float(s[0]) <= 1.0  # one scale per group
        assert float(out[rows].abs().max()) == pytest.approx(min(1.0, float(free[rows].abs().max())))


def test_the_probe_report_lists_the_flip_figure() -> None:
    from creditgym.agents.probe.report import mark_figures, probe_markdown

    fig = {"value": 0.1, "ci": [0.0, 0.2]}
    flip = mark_figures([np.array([0, 0, -1.0])], [np.array([0.2, -0.1, -0.3])], n_boot=10)
    result = {
        "config": {
            "env_id": "creditgym/Math-v0",
            "env_kwargs": {},
            "model": "creditgym/tiny",
            "checkpoint_step": None,
            "temperature": 1.0,
            "prompts": 1,
            "group": 1,
            "k": 2,
            "every": 2,
        },
        "batch": {"responses": 1, "reward_mean": 1.0, "v0_mean": 0.5, "probed_prefixes": 2, "rollouts": 4},
        "timing": {"rollouts_per_s": 1.0, "total_s": 1.0},
        "ceiling": {"spearman": fig, "pearson": fig},
        "modules": {"cast": dict.fromkeys(("spearman", "pearson", "decisive_share", "sign_agreement"), fig)},
        "marks": {"cast": {"flip": flip}},
    }
    md = probe_markdown(result)
    assert "| `cast` `flip` | 1 | 0.333 | 1.000 [1.000, 1.000] | 0.667 [0.667, 0.667] |" in md
    del result["marks"]
    assert "flip" not in probe_markdown(result)
