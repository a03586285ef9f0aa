"""The statistics of a study: means, 95% t-intervals, paired differences over shared seeds, per-step curves, and
the design of a study from a pilot (`Pilot`: the half-width and minimum detectable effect of a paired difference).

Pure functions of plain numbers (no numpy, no scipy), so ``results.json`` figures do not depend on what is
installed; ``tests/agents/test_stats.py`` checks them against scipy and Student's table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Two-sided 95% quantiles t_{0.975, df} of Student's t for df = 1..30 (checked against mpmath to 1e-9).
_T975 = (
    12.70620474, 4.30265273, 3.18244631, 2.77644511, 2.57058184, 2.44691185, 2.36462425, 2.30600414,
    2.26215716, 2.22813885, 2.20098516, 2.17881283, 2.16036866, 2.14478669, 2.13144955, 2.11990530,
    2.10981558, 2.10092204, 2.09302405, 2.08596345, 2.07961384, 2.07387307, 2.06865761, 2.06389856,
    2.05953855, 2.05552944, 2.05183052, 2.04840714, 2.04522964, 2.04227246,
)  # fmt: skip
# One-sided 80% quantiles t_{0.80, df} for df = 1..30 (checked against scipy to 1e-8): the power term of an MDE.
_T80 = (
    1.37638192, 1.06066017, 0.97847231, 0.94096458, 0.91954378, 0.90570329, 0.89602964, 0.88888952,
    0.88340386, 0.87905783, 0.87552998, 0.87260929, 0.87015153, 0.86805478, 0.86624497, 0.86466700,
    0.86327902, 0.86204867, 0.86095055, 0.85996444, 0.85907404, 0.85826605, 0.85752955, 0.85685546,
    0.85623616, 0.85566523, 0.85513723, 0.85464749, 0.85419199, 0.85376726,
)  # fmt: skip
_Z975 = 1.959963984540054  # the standard normal's 0.975 quantile
_Z80 = 0.8416212335729143  # the standard normal's 0.80 quantile
_TABLES = {0.975: (_T975, _Z975), 0.8: (_T80, _Z80)}


def t_quantile(df: int, q: float = 0.975) -> float:
    """``t_{q, df}`` for ``q`` 0.975 (two-sided 95%) or 0.8 (80% power): the table for ``df <= 30``, a
    Cornish-Fisher expansion beyond (error < 1e-5).

    Raises:
        ValueError: ``df < 1``, or a ``q`` without a table.
    """
    if df < 1:
        raise ValueError(f"t_quantile: df must be >= 1, got {df}")
    if q not in _TABLES:
        raise ValueError(f"t_quantile: q must be one of {sorted(_TABLES)}, got {q}")
    table, z = _TABLES[q]
    if df <= len(table):
        return table[df - 1]
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean(xs: Sequence[float]) -> float:
    """The arithmetic mean of a non-empty sequence (``math.fsum``, so the order of ``xs`` does not matter)."""
    if not xs:
        raise ValueError("mean of an empty sequence")
    return math.fsum(xs) / len(xs)


def t_interval(xs: Sequence[float]) -> tuple[float, float] | None:
    """95% t-interval of the mean, ``mean -/+ t_{0.975, n-1} * s / sqrt(n)``; None when ``n < 2``."""
    n = len(xs)
    if n < 2:
        return None
    m = mean(xs)
    s = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))
    half = t_quantile(n - 1) * s / math.sqrt(n)
    return (m - half, m + half)


def t_pvalue(t: float, df: int) -> float:
    """The two-sided p-value ``P(|T| >= |t|)`` of Student's t with integer ``df`` (the closed series of Abramowitz
    and Stegun 26.7.3-4, exact for integer ``df``).

    Raises:
        ValueError: ``df < 1``.
    """
    if df < 1:
        raise ValueError(f"t_pvalue: df must be >= 1, got {df}")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...)), the sum empty at df = 1
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        inside = 2.0 / math.pi * (theta + s * math.cos(theta) * total)
    else:  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        inside = s * total
    return min(1.0, max(0.0, 1.0 - inside))


def paired_t_pvalue(xs: Sequence[float]) -> float | None:
    """The two-sided p-value of a one-sample t-test of ``mean(xs) = 0`` (``xs``: paired differences); 0 for
    differences all equal and non-zero, 1 for all zero, None for fewer than 2."""
    if len(xs) < 2:
        return None
    m, s = mean(xs), sample_sd(xs)
    if s == 0.0:
        return 1.0 if m == 0.0 else 0.0
    return t_pvalue(m / (s / math.sqrt(len(xs))), len(xs) - 1)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: for the ``i``-th smallest of ``m``,
    ``max over j <= i of min(1, (m - j + 1) p_(j))``. A hypothesis is rejected at familywise level ``a`` when its
    adjusted p-value is below ``a``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def paired_difference(
    xs: Mapping[int, float], base: Mapping[int, float]
) -> tuple[float | None, tuple[float, float] | None, int]:
    """Mean of ``xs[s] - base[s]`` over the seeds ``s`` both have, its 95% t-interval, and the number of pairs."""
    shared = sorted(set(xs) & set(base))
    diffs = [xs[s] - base[s] for s in shared]
    return (mean(diffs) if diffs else None), t_interval(diffs), len(diffs)


def curve_stats(curves: Sequence[Sequence[Sequence[float]]]) -> list[tuple[int, float, float, float]]:
    """Per evaluation step over several runs' ``[[step, score], ...]``: ``(step, mean, lo, hi)`` (lo = hi = mean
    where fewer than two runs have that step)."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, score in curve:
            if score is not None:
                by_step.setdefault(int(step), []).append(float(score))
    rows = []
    for step in sorted(by_step):
        m = mean(by_step[step])
        lo, hi = t_interval(by_step[step]) or (m, m)
        rows.append((step, m, lo, hi))
    return rows


# -- the design of a study from a pilot ----------------------------------------------------------------------------


def binomial_sd(p: float, n: int) -> float:
    """The standard deviation of a mean of ``n`` 0/1 rewards with success rate ``p``: ``sqrt(p (1 - p) / n)``."""
    if n < 1 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_sd: need n >= 1 and 0 <= p <= 1, got n={n}, p={p}")
    return math.sqrt(p * (1.0 - p) / n)


def sample_sd(xs: Sequence[float]) -> float:
    """The sample standard deviation (``n - 1`` in the denominator) of at least two numbers."""
    if len(xs) < 2:
        raise ValueError(f"sample_sd needs at least two numbers, got {len(xs)}")
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def within_task_variance(rewards: Sequence[Sequence[float]]) -> float:
    """The per-task variance across seeds, averaged over tasks: ``rewards[seed][task]`` (every seed on the same
    tasks, in the same order). Over ``N`` tasks it adds ``within / N`` to the variance of a seed's mean score.

    Raises:
        ValueError: fewer than two seeds, no tasks, or seeds scored on different numbers of tasks.
    """
    if len(rewards) < 2 or not rewards[0] or len({len(r) for r in rewards}) != 1:
        raise ValueError(
            f"within_task_variance: need >= 2 seeds scored on the same >= 1 tasks, got {[len(r) for r in rewards]}"
        )
    return mean([sample_sd([r[t] for r in rewards]) ** 2 for t in range(len(rewards[0]))])


@dataclass(frozen=True)
class Pilot:
    """What a pilot of the baseline measured: its per-seed final held-out scores on ``eval_episodes`` tasks, and
    (when measured) ``within``, the per-task variance of a reward across seeds (`within_task_variance`).

    The model of one run's final score on a fixed held-out set of ``N`` tasks: the module's true score, plus
    training noise (sd `train_sd`), plus evaluation noise of variance ``w / N`` (``w``: ``within`` when measured,
    else its upper bound ``p (1 - p)``, the binomial). The seed-to-seed variance the pilot sees is the sum of the
    two, so the training part is what is left once the evaluation part is taken out (0 when the pilot's spread
    is all evaluation noise). With the binomial bound the training part is a lower bound, so projecting to more
    held-out tasks is optimistic; a measured ``within`` removes that.

    A paired difference (module - baseline, same seed, same held-out tasks) is taken as the difference of two
    independent runs: variance ``2 (train_sd^2 + w / N)``. That is conservative: a shared seed (the same first
    rollouts) makes the two runs' scores move together, which only shrinks it.
    """

    finals: tuple[float, ...]
    eval_episodes: int
    within: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "finals", tuple(float(x) for x in self.finals))
        if self.within is not None and self.within < 0:
            raise ValueError(f"Pilot: within must be >= 0, got {self.within}")
        if len(self.finals) < 2 or self.eval_episodes < 1:
            raise ValueError(
                f"Pilot: need at least two seeds' finals and eval_episodes >= 1, got {list(self.finals)} and "
                f"{self.eval_episodes}"
            )

    @property
    def score(self) -> float:
        return mean(self.finals)

    @property
    def seed_sd(self) -> float:
        """The seed-to-seed sd of the final score (training and evaluation noise together)."""
        return sample_sd(self.finals)

    @property
    def per_task_var(self) -> float:
        """``w``: the measured per-task variance across seeds, else the binomial ``p (1 - p)``."""
        return self.within if self.within is not None else self.score * (1.0 - self.score)

    def eval_var(self, eval_episodes: int) -> float:
        """The evaluation part of one run's score variance on ``eval_episodes`` held-out tasks: ``w / N``."""
        return self.per_task_var / eval_episodes

    @property
    def eval_sd(self) -> float:
        """The sd of one run's score on the pilot's held-out set from evaluation alone."""
        return math.sqrt(self.eval_var(self.eval_episodes))

    @property
    def train_sd(self) -> float:
        """The part of `seed_sd` that evaluating on more tasks would not remove."""
        return math.sqrt(max(0.0, self.seed_sd**2 - self.eval_sd**2))

    def diff_sd(self, eval_episodes: int) -> float:
        """The sd of one seed's paired difference to the baseline on ``eval_episodes`` held-out tasks."""
        return math.sqrt(2.0 * (self.train_sd**2 + self.eval_var(eval_episodes)))

    def half_width(self, seeds: int, eval_episodes: int) -> float:
        """The expected 95% half-width of a paired difference over ``seeds`` seeds: ``t_{.975,n-1} sd / sqrt(n)``."""
        _check_seeds(seeds)
        return t_quantile(seeds - 1) * self.diff_sd(eval_episodes) / math.sqrt(seeds)

    def mde(self, seeds: int, eval_episodes: int) -> float:
        """`min_detectable_effect` of a paired difference over ``seeds`` seeds with this pilot's `diff_sd`."""
        return min_detectable_effect(self.diff_sd(eval_episodes), seeds)

    def seeds_for(self, half_width: float, eval_episodes: int, max_seeds: int = 1000) -> int | None:
        """The fewest seeds whose 95% half-width is at most ``half_width`` (None: more than ``max_seeds``)."""
        for seeds in range(2, max_seeds + 1):
            if self.half_width(seeds, eval_episodes) <= half_width:
                return seeds
        return None


def min_detectable_effect(sd: float, seeds: int) -> float:
    """The minimum detectable effect: the true mean difference a paired t-test at 5% (two-sided) finds 80% of the
    time over ``seeds`` pairs whose differences have standard deviation ``sd``:
    ``(t_{.975,n-1} + t_{.80,n-1}) sd / sqrt(n)``."""
    _check_seeds(seeds)
    return (t_quantile(seeds - 1) + t_quantile(seeds - 1, 0.8)) * sd / math.sqrt(seeds)


def _check_seeds(seeds: int) -> None:
    if seeds < 2:
        raise ValueError(f"a paired difference needs at least 2 seeds, got {seeds}")
