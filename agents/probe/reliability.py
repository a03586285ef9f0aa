"""How far A* can be trusted: its split-half reliability, the attainable correlation, and the K a target needs.

The ``K`` continuations of every probed prefix split into two halves; the two A* estimates they give are
correlated (within responses, Spearman; pooled, Pearson) and corrected to ``K`` with Spearman-Brown::

    reliability = 2 r / (1 + r)            attainable = sqrt(max(reliability, 0))

A module's correlation with a noisy A* is at most about the attainable correlation (the correlation of A* with
the value it estimates). Both come with 95% percentile bootstrap intervals over responses; a percentile interval
carries over any increasing transform, so the attainable interval is the reliability's, square-rooted.

The reported reliability is the pooled one (`RELIABILITY`, ``pearson``): the within-response form averages
Spearman correlations of step functions with few distinct values (2-9 segments) and corrects after averaging,
which overstates it against an independent full-K A*; the pooled split-half Pearson is one correlation over every
token, corrected once, and a simulation with a known truth checks it is not biased upward.

K grows until the pooled reliability's lower bound reaches ``target``: it doubles, or jumps to the K
that Spearman-Brown's prophecy ``n r / (1 + (n - 1) r)``, applied to the lower bound, projects (`needed_k`). When
that K exceeds ``max_k``, or the lower bound and the point estimate are both at or below 0, the probe stops with
`ProbeRefused`, saying which K it would need. The stopping rule is adaptive: the round that stops is one whose
lower bound cleared the target, so a reliability read at a grown K is biased upward by the selection (the more
rounds, the more); a figure meant to be unbiased is read at a K fixed before scoring (``target=None``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from creditgym.agents.probe.progress import say
from creditgym.agents.probe.report import bootstrap_figures, response_ingredients
from creditgym.agents.providers.mc import MCEstimate

__all__ = [
    "RELIABILITY",
    "ProbeRefused",
    "grow_until_reliable",
    "needed_k",
    "next_k",
    "refusal",
    "reliability",
]

CORRELATIONS = ("spearman", "pearson")
RELIABILITY = (
    "pearson"  # the reliability reported and grown against: pooled split-half, Spearman-Brown corrected
)


class ProbeRefused(ValueError):
    """A* cannot support the figures asked for (its reliability stays below the target within the budget)."""


def reliability(
    est: MCEstimate,
    *,
    n_boot: int,
    seed: int,
    groups: Sequence[int] | None = None,
    alpha: float = 0.05,
) -> dict[str, dict[str, Any]]:
    """A*'s split-half reliability, Spearman-Brown corrected to ``est.k``: ``{"spearman", "pearson"}``, each
    ``{"value", "ci"}`` (``1 - alpha`` intervals; bootstrap over responses, or prompts with ``groups``; the resamples of
    `bootstrap_figures` with this seed). ``pearson`` (`RELIABILITY`) is the one reported."""
    half_a, half_b = est.split_half()
    figs = bootstrap_figures(
        [response_ingredients(half_b, half_a)],
        n_boot=n_boot,
        seed=seed,
        split_half=True,
        groups=groups,
        alpha=alpha,
    )
    return {key: figs[0][key] for key in CORRELATIONS}


def needed_k(k: int, lower: float, target: float) -> int | None:
    """The even K whose Spearman-Brown projection of ``lower`` (a reliability at ``k``) reaches ``target``;
    None when ``lower <= 0`` (nothing to project)."""
    if lower <= 0:
        return None
    if lower >= target:
        return k
    n = target * (1 - lower) / (lower * (1 - target))
    return 2 * math.ceil(k * n / 2)


def projected(r: float, k_from: int, k_to: int) -> float:
    """Spearman-Brown: the reliability at ``k_to`` continuations of one that is ``r`` at ``k_from``."""
    m = k_to / k_from
    return m * r / (1 + (m - 1) * r)


def stalled(rounds: Sequence[Mapping[str, Any]], *, slack: float = 0.05) -> str:
    """A sentence when the last round's lower bound fell short of the previous round's Spearman-Brown projection
    by more than ``slack``: the interval is then set by the number of responses more than by K; else ``""``."""
    if len(rounds) < 2 or not rounds[-1]["reliability"]["ci"] or not rounds[-2]["reliability"]["ci"]:
        return ""
    (k0, low0), (k1, low1) = ((r["k"], r["reliability"]["ci"][0]) for r in rounds[-2:])
    if low0 <= 0 or k1 <= k0:
        return ""
    expect = projected(low0, k0, k1)
    if low1 >= expect - slack:
        return ""
    return (
        f" K {k0} -> {k1} moved the lower bound {low0:.3f} -> {low1:.3f} where Spearman-Brown projected "
        f"{expect:.3f}: the bound is set by the number of responses more than by K, so more responses "
        "(--prompts, --group) may reach the target where a larger K does not."
    )


def next_k(k: int, lower: float | None, value: float | None, target: float, max_k: int) -> int | None:
    """The K of the next round, at most ``max_k``: double, or the K projected from the lower bound when larger;
    with a lower bound at or below 0 and a positive point estimate (too few continuations to bound it), double.
    None when the projection exceeds ``max_k``, or nothing suggests any K reaches the target (`refusal`)."""
    if lower is None or value is None:
        return None
    need = needed_k(k, lower, target) if lower > 0 else (2 * k if value > 0 else None)
    if need is None or need > max_k:
        return None
    return min(max_k, max(2 * k, need))


def refusal(k: int, rel: Mapping[str, Any], target: float, max_k: int, *, rollouts_per_k: int) -> str:
    """Why the probe stops at ``k``: the reliability, and the K the target needs (or why none can be named)."""
    value, ci = rel["value"], rel["ci"]
    if value is None:
        return (
            "A* is constant within every response (each is one probed step: no response holds the step "
            "delimiter), so no within-response figure is defined: probe at positions the responses hold "
            "(--every N, or a --delimiter that ends their steps)"
        )
    got = f"A*'s pooled reliability at K = {k} is {value:.3f}" + (
        f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    )
    lower = ci[0] if ci else value
    need = needed_k(k, lower, target)
    if need is None:
        hint = needed_k(k, value, target)
        at_least = f"; from its point estimate, at least K = {hint}" if hint is not None else ""
        why = (
            f"its lower bound {lower:.3f} is at or below 0, so Spearman-Brown projects no K that reaches the "
            f"target {target:g}{at_least}. More responses (--prompts, --group) narrow the interval; a task or "
            "checkpoint where the model is middling gives A* more signal"
        )
    else:
        more = (need - k) * rollouts_per_k
        why = (
            f"its lower bound {lower:.3f} is below the target {target:g}, and Spearman-Brown projects K = {need} "
            f"to reach it, above --max-k {max_k}: raise --max-k to {need} (about {more} more rollouts)"
        )
    return (
        f"{got}: {why}, or lower --target. No figure is reported from an A* that cannot support it. Its "
        "probe.json keeps the continuations sampled: --reuse it with the same flags to go on from them."
    )


def grow_until_reliable(
    est: MCEstimate,
    sample: Callable[[MCEstimate, str], Any],
    rounds: list[dict[str, Any]],
    *,
    target: float | None,
    max_k: int,
    n_boot: int,
    seed: int,
    reused: bool = False,
) -> None:
    """Sample ``est`` (``sample(est, what)`` fills its missing columns), then double K (or jump to the projected
    K) until the pooled reliability's lower bound reaches ``target``; each round's K, rollouts and
    reliability appended to ``rounds``. ``reused``: ``est`` is complete and cannot grow (a reused A*).

    Raises:
        ProbeRefused: the target needs a K above ``max_k``, or none can be projected (`refusal` says which).
    """
    while True:
        if not reused:
            sample(est, f"K = {est.k}")
        both = reliability(est, n_boot=n_boot, seed=seed, groups=[ep.group for ep in est.episodes])
        # A* constant within every response: a pooled figure exists, but no within-response one can be scored
        rel = both[RELIABILITY] if both["spearman"]["value"] is not None else both["spearman"]
        rounds.append({"k": est.k, "rollouts": est.total, "reliability": rel})
        value, ci = rel["value"], rel["ci"]
        lower = ci[0] if ci else None
        shown = "n/a" if value is None else f"{value:.3f}" + (f" (lower bound {lower:.3f})" if ci else "")
        if target is None or (lower is not None and lower >= target):
            reached = "" if target is None else f", at or above the target {target:g}"
            say(f"K = {est.k}: A*'s pooled reliability {shown}{reached}")
            return
        k_next = None if reused else next_k(est.k, lower, value, target, max_k)
        if k_next is None:
            why = refusal(est.k, rel, target, max_k, rollouts_per_k=est.total // est.k) + stalled(rounds)
            raise ProbeRefused(why + (" (--reuse keeps the saved A*: its K cannot grow)" if reused else ""))
        say(f"K = {est.k}: A*'s pooled reliability {shown}, below the target {target:g}: K -> {k_next}")
        est.grow(k_next)
