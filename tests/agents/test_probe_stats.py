"""The probe's statistics: the null baselines and the rule a module must pass against them, the bootstrap clustered
by prompt, and the reported (pooled split-half) reliability checked by simulation against a known truth."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from creditgym.agents.probe.nulls import (
    MIN_PROMPTS,
    beats_credit,
    best_null,
    min_prompts,
    null_advantages,
    response_signs,
)
from creditgym.agents.probe.reliability import RELIABILITY, reliability
from creditgym.agents.probe.report import (
    bootstrap_figures,
    figures,
    probe_markdown,
    resample_weights,
    response_ingredients,
)
from creditgym.agents.providers.mc import MCEstimate


def test_each_null_rule_follows_the_sign_of_the_response_advantage() -> None:
    rewards, groups = [1.0, 0.0, 0.5, 0.5], [0, 0, 1, 1]
    assert response_signs(rewards, groups).tolist() == [1.0, -1.0, 0.0, 0.0]
    nulls = null_advantages(rewards, groups, [4, 3, 2, 2], [[0, 2], [0], [0, 1], [0]])
    assert set(nulls) == {"null:position", "null:last", "null:uniform"}  # no entropies: no entropy rule
    assert nulls["null:position"][0].tolist() == [0.0, -1.0, -2.0, -3.0]
    assert nulls["null:position"][1].tolist() == [0.0, 1.0, 2.0]
    assert nulls["null:last"][0].tolist() == [0.0, 0.0, 1.0, 1.0]  # the last segment starts at token 2
    assert nulls["null:last"][1].tolist() == [-1.0, -1.0, -1.0]  # one segment: the whole response
    assert nulls["null:uniform"][0].tolist() == [1.0] * 4 and nulls["null:uniform"][2].tolist() == [0.0, 0.0]
    with_h = null_advantages(
        rewards, groups, [4, 3, 2, 2], [[0]] * 4, [[1, 2, 3, 4], [1, 0, 1], [1, 1], [2, 2]]
    )
    assert with_h["null:entropy"][0].tolist() == [-1.0, -2.0, -3.0, -4.0]
    assert with_h["null:entropy"][1].tolist() == [1.0, 0.0, 1.0]


def test_a_position_rule_scores_where_a_star_sits_in_the_first_segment() -> None:
    """A* all in the first segment, of the response's sign: the position rule ranks it within each response;
    the uniform rule, constant within a response, scores 0 there, as a constant module does."""
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, 16).astype(float)
    groups = np.repeat(np.arange(4), 4)
    signs = response_signs(rewards, groups)
    astar = [np.r_[np.full(3, s * 0.3), np.zeros(5)] for s in signs]
    nulls = null_advantages(rewards, groups, [8] * 16, [[0, 3]] * 16)
    scored = [figures(response_ingredients(nulls[k], astar)) for k in ("null:position", "null:uniform")]
    assert scored[0]["spearman"] > 0.8 and scored[1]["spearman"] == 0.0


def _fig(value: float | None, low: float, high: float) -> dict[str, dict[str, object]]:
    return {"spearman": {"value": value, "ci": None if value is None else [low, high]}}


def test_beating_credit_needs_the_best_null_cleared_and_enough_prompts() -> None:
    nulls = {
        "null:position": _fig(0.30, 0.1, 0.5),
        "null:last": _fig(0.10, 0.0, 0.2),
        "null:x": _fig(None, 0, 0),
    }
    assert best_null(nulls, "spearman") == ("null:position", 0.30)
    assert beats_credit(_fig(0.45, 0.31, 0.6), nulls, "spearman", prompts=MIN_PROMPTS)
    assert not beats_credit(_fig(0.45, 0.29, 0.6), nulls, "spearman", prompts=8)  # interval not clear of it
    assert not beats_credit(_fig(0.25, 0.15, 0.4), nulls, "spearman", prompts=8)  # above 0, below the null
    assert not beats_credit(_fig(0.45, 0.31, 0.6), nulls, "spearman", prompts=MIN_PROMPTS - 1)  # too few
    assert MIN_PROMPTS == min_prompts(0.05) == 4 and min_prompts(0.05 / 26) == 6  # P ** (1 - P) < alpha / 2
    assert not beats_credit(_fig(0.45, 0.31, 0.6), nulls, "spearman", prompts=5, alpha=0.05 / 26)
    assert beats_credit(_fig(0.45, 0.31, 0.6), nulls, "spearman", prompts=6, alpha=0.05 / 26)


def test_clustered_weights_move_each_prompt_as_one() -> None:
    groups = [0, 0, 0, 1, 1, 2, 2, 2, 3]
    w = resample_weights(9, n_boot=200, seed=1, groups=groups)
    assert w.shape == (201, 9) and (w[0] == 1).all()
    for row in w[1:]:
        assert row[0] == row[1] == row[2] and row[3] == row[4] and row[5] == row[6] == row[7]
        assert row[[0, 3, 5, 8]].sum() == 4  # four prompts drawn with replacement
    with pytest.raises(ValueError, match="one group"):
        resample_weights(9, n_boot=2, seed=1, groups=[0, 1])


def test_a_figure_carried_by_one_prompt_gets_a_wider_clustered_interval() -> None:
    """One prompt's responses agree with A*, the other three's do not: resampling responses treats 16 of them
    as independent; resampling prompts sees the figure rests on one prompt. A Bonferroni alpha widens it more."""
    rng = np.random.default_rng(2)
    astar = [rng.normal(size=6) for _ in range(16)]
    adv = [a + rng.normal(scale=0.3, size=6) if i < 4 else rng.normal(size=6) for i, a in enumerate(astar)]
    table = [response_ingredients(adv, astar)]
    groups = np.repeat(np.arange(4), 4)
    (flat,) = bootstrap_figures(table, n_boot=2000, seed=0)
    (clustered,) = bootstrap_figures(table, n_boot=2000, seed=0, groups=groups)
    (strict,) = bootstrap_figures(table, n_boot=2000, seed=0, groups=groups, alpha=0.05 / 24)
    width = [f["spearman"]["ci"][1] - f["spearman"]["ci"][0] for f in (flat, clustered, strict)]
    assert flat["spearman"]["value"] == clustered["spearman"]["value"]
    assert width[1] > 1.3 * width[0] and width[2] > width[1]


def test_the_report_shows_the_nulls_and_refuses_to_call_below_the_minimum_prompts() -> None:
    fig = {"value": 0.5, "ci": [0.4, 0.6]}
    entry = {k: fig for k in ("spearman", "pearson", "decisive_share", "sign_agreement")}
    low = {k: {"value": 0.1, "ci": [0.0, 0.2]} for k in entry}
    result = {
        "config": {
            "env_id": "e",
            "env_kwargs": {},
            "model": "m",
            "checkpoint_step": None,
            "temperature": 1.0,
            "prompts": 8,
            "group": 4,
            "k": 8,
            "every": None,
            "delimiter": "\n",
            "target": None,
        },
        "batch": {
            "responses": 32,
            "reward_mean": 0.5,
            "v0_mean": 0.5,
            "probed_prefixes": 64,
            "rollouts": 512,
        },
        "timing": {"rollouts_per_s": 10.0, "total_s": 60.0},
        "reliability": {"spearman": fig, "pearson": fig},
        "modules": {"vine": entry},
        "nulls": {"null:position": low, "null:last": low},
        "prompts": 8,
    }
    md = probe_markdown(result)
    assert "| `null:position` | 0.100 [0.000, 0.200]" in md and "over prompts (clustered)" in md
    assert "beating it with the interval clear: `vine`." in md
    md = probe_markdown({**result, "prompts": 3})
    assert "3 prompts, fewer than 4" in md and "`vine`." not in md


# -- the reliability against a known truth --------------------------------------------------------------------------


def _world(
    rng: np.random.Generator, prompts: int = 8, group: int = 4
) -> list[tuple[int, float, np.ndarray, np.ndarray, int]]:
    """Responses with known values: 2-6 segments of 1-6 tokens, V a clipped random walk, R ~ Bernoulli(V_last)."""
    out = []
    for p in range(prompts):
        for _ in range(group):
            s = int(rng.integers(2, 7))
            lengths = rng.integers(1, 7, s)
            v = np.clip(np.cumsum(rng.normal(0, 0.2, s)) + rng.uniform(0.3, 0.7), 0.02, 0.98)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            out.append((p, float(rng.random() < v[-1]), v, starts, int(lengths.sum())))
    return out


def _estimate(
    rng: np.random.Generator, world: list[tuple[int, float, np.ndarray, np.ndarray, int]], k: int
) -> MCEstimate:
    """A* from ``k`` Bernoulli(V) continuation rewards at each segment start of each response."""
    episodes = [SimpleNamespace(reward=r, group=p) for p, r, *_ in world]
    rewards = [(rng.random((len(v), k)) < v[:, None]).astype(np.float64) for _, _, v, _, _ in world]
    return MCEstimate(episodes, [np.arange(n) for *_, n in world], [st for *_, st, _ in world], rewards)  # type: ignore[arg-type]


@pytest.mark.parametrize("k", [8, 32])
def test_the_pooled_reliability_is_not_biased_upward_against_an_independent_full_k_estimate(k: int) -> None:
    """The reliability at K is the correlation of two independent full-K A* estimates of the same responses. Over
    300 simulated batches the pooled split-half estimate (the one reported) exceeds it by less than 3 standard
    errors of the mean difference; the within-response form, against its own independent-estimate counterpart,
    exceeds it by more (the bias the pooled form removes)."""
    assert RELIABILITY == "pearson"
    rng = np.random.default_rng(k)
    diff: dict[str, list[float]] = {"pearson": [], "spearman": []}
    for _ in range(300):
        world = _world(rng)
        est, again = _estimate(rng, world, k), _estimate(rng, world, k)
        rel = reliability(est, n_boot=0, seed=0)
        direct = figures(response_ingredients(est.token_advantages(), again.token_advantages()))
        for key in diff:
            diff[key].append(rel[key]["value"] - direct[key])
    mean = {key: float(np.mean(d)) for key, d in diff.items()}
    se = {key: float(np.std(d, ddof=1) / np.sqrt(len(d))) for key, d in diff.items()}
    assert mean["pearson"] < 3 * se["pearson"], (mean, se)
    assert abs(mean["pearson"]) < 0.02  # and small: a hundredth-scale bias at most
    if k == 32:
        assert mean["spearman"] > 3 * se["spearman"], (mean, se)
