"""`creditgym.agents.study.stats`: Student's t against scipy and the printed table, intervals on hand-computed numbers."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sp

from creditgym.agents.study.stats import (
    Pilot,
    binomial_sd,
    curve_stats,
    holm,
    mean,
    paired_difference,
    paired_t_pvalue,
    t_interval,
    t_pvalue,
    t_quantile,
    within_task_variance,
)

# Student's t, two-sided 95% (t_{0.975, df}), as printed in textbook tables (3 decimals)
TEXTBOOK = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    10: 2.228,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}


@pytest.mark.parametrize("df", sorted(TEXTBOOK))
def test_t_quantile_matches_the_printed_table(df: int) -> None:
    assert t_quantile(df) == pytest.approx(TEXTBOOK[df], abs=5e-4)


def test_t_quantile_matches_scipy_for_every_df_to_500() -> None:
    for df in range(1, 501):
        tol = 1e-8 if df <= 30 else 1e-5  # the table to 1e-8; the expansion beyond it
        assert t_quantile(df) == pytest.approx(sp.t.ppf(0.975, df), abs=tol), df
    with pytest.raises(ValueError, match="df"):
        t_quantile(0)


def test_t_interval_matches_scipy() -> None:
    samples = [[1.0, 2.0, 3.0], [0.61, 0.64, 0.7, 0.58], [0.2, 0.9, 0.5, 0.5, 0.1, 0.33, 0.47] * 6]
    for xs in samples:
        lo, hi = t_interval(xs)
        ref = sp.t.interval(0.95, len(xs) - 1, loc=sum(xs) / len(xs), scale=sp.sem(xs))
        assert (lo, hi) == pytest.approx(ref, abs=1e-5)
    # mean 2, s = 1, half-width = t_{0.975, 2} / sqrt(3) = 4.30265 / 1.73205 = 2.48414
    assert t_interval([1.0, 2.0, 3.0]) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-5)
    assert t_interval([0.5]) is None and t_interval([]) is None
    assert t_interval([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7))


def test_paired_difference_matches_scipys_paired_t_test() -> None:
    xs = {0: 0.6, 1: 0.8, 2: 0.7, 5: 0.4}
    base = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.9, 5: 0.45}  # seed 3 has no partner: ignored
    diff, ci, n = paired_difference(xs, base)
    shared = [0, 1, 2, 5]
    ref = sp.ttest_rel([xs[s] for s in shared], [base[s] for s in shared]).confidence_interval(0.95)
    assert n == 4 and diff == pytest.approx(0.0625)
    assert ci == pytest.approx((ref.low, ref.high), abs=1e-5)
    # by hand: diffs 0.1, 0.2, 0.0 -> mean 0.1, s = 0.1, half = 4.30265 * 0.1 / sqrt(3) = 0.248414
    diff, ci, n = paired_difference({0: 0.6, 1: 0.8, 2: 0.7}, {0: 0.5, 1: 0.6, 2: 0.7})
    assert (diff, n) == (pytest.approx(0.1), 3) and ci == pytest.approx((-0.148414, 0.348414), abs=1e-5)
    assert paired_difference({0: 1.0}, {1: 0.0}) == (None, None, 0)
    assert paired_difference({0: 1.0}, {0: 0.25}) == (0.75, None, 1)


def test_curve_stats_per_step() -> None:
    rows = curve_stats([[[0, 0.0], [10, 1.0]], [[0, 1.0], [10, 1.0]], [[0, 0.5], [10, None]]])
    assert [r[0] for r in rows] == [0, 10]
    _, m, _, hi = rows[0]
    assert m == pytest.approx(0.5) and hi - m == pytest.approx(4.302653 * 0.5 / math.sqrt(3), abs=1e-5)
    assert rows[1][1:] == pytest.approx((1.0, 1.0, 1.0))


def test_mean_sums_exactly_and_refuses_an_empty_sequence() -> None:
    assert mean([1e16, 1.0, -1e16]) == 1 / 3  # a naive float sum gives 0
    with pytest.raises(ValueError, match="empty"):
        mean([])


def test_t_quantile_at_80_percent_matches_scipy() -> None:
    for df in range(1, 501):
        tol = 1e-8 if df <= 30 else 1e-5
        assert t_quantile(df, 0.8) == pytest.approx(sp.t.ppf(0.8, df), abs=tol), df
    with pytest.raises(ValueError, match="q must be"):
        t_quantile(5, 0.9)


# -- the design of a study from a pilot ----------------------------------------------------------------------------

# A pilot by hand: finals 0.40, 0.46, 0.43 on 500 held-out tasks.
#   mean 0.43; seed sd: deviations -0.03, +0.03, 0 -> s^2 = 0.0018 / 2 = 0.0009, s = 0.03
#   binomial: 0.43 * 0.57 / 500 = 0.0004902 -> eval sd 0.0221405; training variance 0.0009 - 0.0004902 = 0.0004098
#   one seed's paired difference on 500 tasks: 2 * (0.0004098 + 0.0004902) = 0.0018 -> sd 0.0424264
#   5 seeds: half-width t(4) * 0.0424264 / sqrt(5) = 2.776445 * 0.0189737 = 0.0526790
#            MDE (t(4, .975) + t(4, .80)) * 0.0189737 = (2.776445 + 0.940965) * 0.0189737 = 0.0705334
#   on 2000 tasks: 2 * (0.0004098 + 0.2451 / 2000) = 0.0010647 -> sd 0.0326298; 5 seeds: 0.0405147
#   seeds for +-0.03 on 500 tasks: t(n-1) / sqrt(n) <= 0.03 / 0.0424264 = 0.707107: n = 10 gives 0.715355,
#   n = 11 gives 0.671819 -> 11
HAND = Pilot(finals=(0.40, 0.46, 0.43), eval_episodes=500)


def test_pilot_variance_parts_by_hand() -> None:
    assert HAND.score == pytest.approx(0.43)
    assert HAND.seed_sd == pytest.approx(0.03)
    assert HAND.eval_sd == pytest.approx(0.0221405, abs=1e-7)
    assert HAND.train_sd**2 == pytest.approx(0.0004098, abs=1e-10)
    assert HAND.diff_sd(500) == pytest.approx(0.0424264, abs=1e-7)
    assert binomial_sd(0.5, 100) == pytest.approx(0.05)


def test_half_width_and_mde_by_hand() -> None:
    assert HAND.half_width(5, 500) == pytest.approx(0.0526790, abs=1e-6)
    assert HAND.mde(5, 500) == pytest.approx(0.0705334, abs=1e-6)
    assert HAND.half_width(5, 2000) == pytest.approx(0.0405147, abs=1e-6)
    assert HAND.seeds_for(0.03, 500) == 11
    assert HAND.half_width(11, 500) <= 0.03 < HAND.half_width(10, 500)
    assert HAND.seeds_for(0.001, 500, max_seeds=50) is None


def test_half_width_matches_scipys_interval_on_a_difference_with_that_sd() -> None:
    """The half-width is the paired t-interval's, for differences whose sd is `diff_sd`."""
    diffs = [
        0.05 + HAND.diff_sd(500) * z for z in (-1.2649111, -0.6324555, 0.0, 0.6324555, 1.2649111)
    ]  # sd 1
    lo, hi = sp.t.interval(0.95, 4, loc=0.05, scale=sp.sem(diffs))
    assert HAND.half_width(5, 500) == pytest.approx((hi - lo) / 2, rel=1e-6)


def test_pilot_spread_below_the_binomial_is_all_evaluation_noise() -> None:
    pilot = Pilot(finals=(0.5, 0.5, 0.5), eval_episodes=100)
    assert pilot.train_sd == 0.0 and pilot.diff_sd(100) == pytest.approx(math.sqrt(2 * 0.25 / 100))


def test_pilot_refuses_what_it_cannot_size() -> None:
    with pytest.raises(ValueError, match="at least two seeds"):
        Pilot(finals=(0.5,), eval_episodes=500)
    with pytest.raises(ValueError, match="eval_episodes"):
        Pilot(finals=(0.5, 0.6), eval_episodes=0)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        HAND.half_width(1, 500)
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        binomial_sd(1.5, 10)


def test_within_task_variance_by_hand() -> None:
    # 3 seeds x 4 tasks; per task across seeds: [1,1,1] -> 0, [0,1,0] -> 1/3, [1,0,0] -> 1/3, [1,1,1] -> 0
    rewards = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0]]
    assert within_task_variance(rewards) == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="same >= 1 tasks"):
        within_task_variance([[1.0, 0.0], [1.0]])


def test_a_measured_within_task_variance_replaces_the_binomial() -> None:
    # w = 0.2: eval part 0.2 / 500 = 0.0004; training 0.0009 - 0.0004 = 0.0005
    # on 2000 tasks: 2 * (0.0005 + 0.2 / 2000) = 0.0012 -> sd 0.0346410
    pilot = Pilot(finals=(0.40, 0.46, 0.43), eval_episodes=500, within=0.2)
    assert pilot.eval_sd == pytest.approx(0.02) and pilot.train_sd**2 == pytest.approx(0.0005)
    assert pilot.diff_sd(2000) == pytest.approx(0.0346410, abs=1e-7)
    assert pilot.diff_sd(2000) > HAND.diff_sd(2000)  # the binomial bound projects more optimistically
    with pytest.raises(ValueError, match="within must be >= 0"):
        Pilot(finals=(0.4, 0.5), eval_episodes=10, within=-1.0)


def test_t_pvalue_matches_scipy_for_odd_and_even_df() -> None:
    for df in (1, 2, 3, 4, 5, 8, 19, 40):
        for t in (0.0, 0.3, 1.0, 2.5, -4.0, 12.0):
            assert t_pvalue(t, df) == pytest.approx(2 * sp.t.sf(abs(t), df), abs=1e-12), (t, df)
    with pytest.raises(ValueError, match="df must be >= 1"):
        t_pvalue(1.0, 0)


def test_paired_t_pvalue_is_scipys_one_sample_test() -> None:
    xs = [0.1, 0.12, 0.09, -0.01]
    assert paired_t_pvalue(xs) == pytest.approx(sp.ttest_1samp(xs, 0.0).pvalue, rel=1e-10)
    assert paired_t_pvalue([0.1]) is None
    assert (paired_t_pvalue([0.0, 0.0]), paired_t_pvalue([0.2, 0.2])) == (1.0, 0.0)


def test_holm_by_hand() -> None:
    # sorted 0.01, 0.02, 0.04, 0.30 times 4, 3, 2, 1 -> 0.04, 0.06, 0.08, 0.30, each at least the one before
    assert holm([0.04, 0.01, 0.30, 0.02]) == pytest.approx([0.08, 0.04, 0.30, 0.06])
    assert holm([0.5, 0.4]) == pytest.approx(
        [0.8, 0.8]
    )  # (2 x 0.4, max(0.8, 0.5)): never below an earlier one
    assert holm([0.9, 0.6]) == [1.0, 1.0] and holm([]) == []
