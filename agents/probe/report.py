"""The credit probe's figures and report: how well a module's per-token advantages match the Monte-Carlo ground
truth A* (``creditgym probe``), and the table and picture drawn from ``probe.json``.

Pure NumPy functions of per-response arrays (``adv[i]``, ``astar[i]``: one value per policy token of response i).
Every figure is computed from per-response ingredients (`response_ingredients`), so the bootstrap over responses
(`bootstrap_figures`) reweights rows instead of recomputing them:

* ``spearman``: within-response Spearman correlation of the module's advantages with A*, averaged over the
  responses whose A* is not constant; a module constant within a response (``grpo``) scores 0 there.
* ``pearson``: Pearson correlation pooled over every policy token of the batch (0 when either side is constant).
* ``decisive_share``: per response, the fraction of the module's |A| mass on the 10% of its tokens with the
  largest |A*| (ties at the cut shared evenly, so a module flat within a response scores exactly 0.10),
  averaged over responses with a non-constant A* and some |A| mass.
* ``sign_agreement``: over the tokens with |A*| >= 0.25 (pooled), the fraction where the module's advantage has
  A*'s sign (an advantage of exactly 0 agrees with nothing).

A*'s reliability: the same correlations between two independent halves of the K continuations, corrected to the
full K with Spearman-Brown, ``2 r / (1 + r)``; its square root is the attainable correlation
(``creditgym.agents.probe.reliability``).

Marks (`mark_figures`): a module may name tokens it treats apart, signed by the direction it pushes them
(``CreditOutput.diagnostics["mark/<name>"]``, e.g. CAST's ``flip``). Per mark: ``share``, the fraction of marked tokens with
A* != 0 whose A* has the mark's sign; ``chance``, the same fraction over every token (A* != 0) of the rows that
carry marks, each row's tokens compared with its marks' sign (what marks placed at random in those rows would
score); ``marked_frac``, marked tokens over all policy tokens.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FIGURES",
    "attainable",
    "bootstrap_figures",
    "decisive_share",
    "figures",
    "mark_figures",
    "pearson",
    "probe_markdown",
    "probe_png",
    "rankdata",
    "resample_weights",
    "response_ingredients",
    "spearman",
    "spearman_brown",
]

FIGURES = ("spearman", "pearson", "decisive_share", "sign_agreement")
# columns of the per-response ingredient table
_SPEARMAN, _DECISIVE, _N, _SX, _SY, _SXX, _SYY, _SXY, _DEC_N, _AGREE_N = range(10)


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of ``x``, ties given their average rank (``scipy.stats.rankdata(x) - 1``)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x))
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two equal-length arrays; 0 when either is constant (it ranks nothing)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx, dy = x - x.mean(), y - y.mean()
    den = np.sqrt((dx * dx).sum() * (dy * dy).sum())
    return float((dx * dy).sum() / den) if den > 0 else 0.0


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (Pearson of the average ranks); 0 when either is constant."""
    return pearson(rankdata(x), rankdata(y))


def spearman_brown(r: float) -> float:
    """The reliability of a test twice as long as one with split-half correlation ``r``: ``2 r / (1 + r)``."""
    return 2.0 * r / (1.0 + r) if r > -1.0 else float("nan")


def decisive_share(adv: np.ndarray, astar: np.ndarray, frac: float = 0.1) -> float:
    """Fraction of ``|adv|`` mass on the ``frac * n`` tokens with the largest ``|astar|`` (ties at the cut share
    the remaining weight evenly); NaN when ``adv`` has no mass."""
    a, mass = np.abs(np.asarray(astar, dtype=np.float64)), np.abs(np.asarray(adv, dtype=np.float64))
    total = mass.sum()
    if total <= 0 or len(a) == 0:
        return float("nan")
    q = frac * len(a)
    cut = np.sort(a)[::-1][int(np.ceil(q)) - 1]
    above, tied = a > cut, a == cut
    weight = above.astype(np.float64)
    weight[tied] = (q - above.sum()) / tied.sum()
    return float((weight * mass).sum() / total)


def response_ingredients(
    adv: Sequence[np.ndarray], astar: Sequence[np.ndarray], *, top: float = 0.1, threshold: float = 0.25
) -> np.ndarray:
    """``(B, 10)`` float64: per response, what every figure is built from (Spearman, decisive share, Pearson sums,
    counts of decisive tokens and of sign agreements); NaN marks a response a figure leaves out."""
    rows = np.zeros((len(adv), 10))
    for i, (x, y) in enumerate(zip(adv, astar, strict=True)):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        if x.shape != y.shape:
            raise ValueError(f"response {i}: {x.shape[0]} advantages but {y.shape[0]} A* values")
        varies = len(y) > 1 and np.ptp(y) > 0
        rows[i, _SPEARMAN] = spearman(x, y) if varies else np.nan
        rows[i, _DECISIVE] = decisive_share(x, y, top) if varies else np.nan
        rows[i, _N : _SXY + 1] = (len(x), x.sum(), y.sum(), (x * x).sum(), (y * y).sum(), (x * y).sum())
        decisive = np.abs(y) >= threshold
        rows[i, _DEC_N] = decisive.sum()
        rows[i, _AGREE_N] = (np.sign(x[decisive]) == np.sign(y[decisive])).sum()
    return rows


def _weighted_mean(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mean of ``values`` (B,) under each row of weights ``w`` (R, B), NaN entries left out."""
    ok = ~np.isnan(values)
    den = w[:, ok].sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, w[:, ok] @ values[ok] / np.where(den > 0, den, 1), np.nan)


def _figures(rows: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    """Every figure under each row of response weights ``w`` (R, B): arrays of R."""
    n, sx, sy, sxx, syy, sxy = (w @ rows[:, c] for c in range(_N, _SXY + 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = sxy / n - sx * sy / n**2
        vx, vy = sxx / n - (sx / n) ** 2, syy / n - (sy / n) ** 2
        ok = (vx > 1e-15 * np.maximum(sxx / n, 1e-300)) & (vy > 1e-15 * np.maximum(syy / n, 1e-300))
        r = np.where(ok, cov / np.sqrt(np.where(ok, vx * vy, 1.0)), 0.0)
        dec_n = w @ rows[:, _DEC_N]
        sign = np.where(dec_n > 0, (w @ rows[:, _AGREE_N]) / np.where(dec_n > 0, dec_n, 1), np.nan)
    return {
        "spearman": _weighted_mean(rows[:, _SPEARMAN], w),
        "pearson": np.clip(r, -1.0, 1.0),
        "decisive_share": _weighted_mean(rows[:, _DECISIVE], w),
        "sign_agreement": sign,
    }


def figures(rows: np.ndarray) -> dict[str, float]:
    """The four figures of one module from its `response_ingredients`."""
    return {k: float(v[0]) for k, v in _figures(rows, np.ones((1, len(rows)))).items()}


def resample_weights(b: int, *, n_boot: int, seed: int, groups: Sequence[int] | None = None) -> np.ndarray:
    """``(1 + n_boot, b)`` bootstrap weights: a first row of ones (the point estimate), then one row per resample.
    Without ``groups`` each row counts how often a response was drawn; with ``groups`` (each response's prompt)
    the prompts are drawn with replacement and every response gets its prompt's count, so responses of one
    prompt, which are not independent, move together (a bootstrap clustered by prompt)."""
    rng = np.random.default_rng(seed)
    if groups is None:
        return np.vstack([np.ones(b), rng.multinomial(b, np.full(b, 1.0 / max(b, 1)), n_boot)])
    g = np.asarray(groups)
    if g.shape != (b,):
        raise ValueError(f"{g.shape[0]} groups for {b} responses: give one group (prompt) per response")
    labels, index = np.unique(g, return_inverse=True)
    n = len(labels)
    counts = rng.multinomial(n, np.full(n, 1.0 / max(n, 1)), n_boot)
    return np.vstack([np.ones(b), counts[:, index]]).astype(np.float64)


def bootstrap_figures(
    rows: Sequence[np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    split_half: bool = False,
    groups: Sequence[int] | None = None,
    alpha: float = 0.05,
) -> list[dict[str, dict[str, float | list[float] | None]]]:
    """Each table's figures with ``1 - alpha`` percentile bootstrap intervals, resampling responses, or prompts
    with ``groups`` (`resample_weights`; the same resamples for every table, so their intervals are paired).

    Args:
        rows: One `response_ingredients` table per module (same responses, same order).
        n_boot: Resamples (0: no intervals).
        seed: Seeds the resampling.
        split_half: The tables are split-half estimates: Spearman-Brown correct the two correlations.
        groups: Each response's prompt: resample prompts (clustered), not responses.
        alpha: One minus the intervals' coverage (0.05 / m for a Bonferroni correction over m intervals).

    Returns:
        Per table, ``figure -> {"value": float | None, "ci": [low, high] | None}`` (None for NaN).
    """
    w = resample_weights(len(rows[0]) if rows else 0, n_boot=n_boot, seed=seed, groups=groups)
    low, high = 50 * alpha, 100 - 50 * alpha
    out = []
    for table in rows:
        figs = _figures(table, w)
        if split_half:
            for key in ("spearman", "pearson"):
                figs[key] = np.array([spearman_brown(r) for r in figs[key]])
        entry: dict[str, dict[str, float | list[float] | None]] = {}
        for key in FIGURES:
            point, draws = figs[key][0], figs[key][1:]
            draws = draws[~np.isnan(draws)]
            ci = [float(np.percentile(draws, low)), float(np.percentile(draws, high))] if draws.size else None
            entry[key] = {"value": None if np.isnan(point) else float(point), "ci": ci}
        out.append(entry)
    return out


def mark_figures(
    marks: Sequence[np.ndarray],
    astar: Sequence[np.ndarray],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    groups: Sequence[int] | None = None,
) -> dict[str, Any]:
    """``share``, ``chance`` (each ``{"value", "ci"}``, bootstrap over responses, or prompts with ``groups``) and
    ``marked_frac`` of one mark (module docstring); ``marks[i]``, ``astar[i]``: one value per policy token of
    response i."""
    rows = np.zeros((len(marks), 5))  # marked (A* != 0), agreeing, row tokens (A* != 0), agreeing, all marked
    for i, (m, y) in enumerate(zip(marks, astar, strict=True)):
        m, y = np.sign(np.asarray(m, dtype=np.float64)), np.sign(np.asarray(y, dtype=np.float64))
        if m.shape != y.shape:
            raise ValueError(f"response {i}: {m.shape[0]} marks but {y.shape[0]} A* values")
        on, row_sign = (m != 0) & (y != 0), np.sign(m.sum())
        rows[i] = (on.sum(), (m[on] == y[on]).sum(), (y != 0).sum() * (row_sign != 0), 0.0, (m != 0).sum())
        rows[i, 3] = (y[y != 0] == row_sign).sum() if row_sign != 0 else 0.0
    w = resample_weights(len(rows), n_boot=n_boot, seed=seed, groups=groups)
    out: dict[str, Any] = {"marked_frac": float(rows[:, 4].sum() / max(sum(len(y) for y in astar), 1))}
    for key, (n_col, agree_col) in (("share", (0, 1)), ("chance", (2, 3))):
        n, agree = w @ rows[:, n_col], w @ rows[:, agree_col]
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.where(n > 0, agree / np.where(n > 0, n, 1), np.nan)
        draws = r[1:][~np.isnan(r[1:])]
        ci = [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))] if draws.size else None
        out[key] = {"value": None if np.isnan(r[0]) else float(r[0]), "ci": ci}
    out["marked"] = int(rows[:, 4].sum())
    return out


# -- the report from probe.json -------------------------------------------------------------------------------------------------


def _cell(fig: Mapping[str, Any] | None) -> str:
    if fig is None or fig.get("value") is None:
        return "n/a"
    ci = fig.get("ci")
    return f"{fig['value']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def attainable(rel: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The attainable correlations of reliabilities ``{name: {"value", "ci"}}``: the square root of each value
    and of its interval's ends (0 below 0; a percentile interval carries over an increasing transform)."""

    def root(x: float | None) -> float | None:
        return None if x is None else float(np.sqrt(max(x, 0.0)))

    return {
        key: {"value": root(fig["value"]), "ci": None if fig["ci"] is None else [root(x) for x in fig["ci"]]}
        for key, fig in rel.items()
    }


def _where(c: Mapping[str, Any]) -> str:
    """Where A* was probed, in words."""
    if c["every"] == 1:
        return "every token"
    if c["every"] is not None:
        return f"every {c['every']} tokens"
    delimiter = c.get("delimiter") or "\n"
    return "each newline" if delimiter == "\n" else f"each `{delimiter}`"


def _k_text(c: Mapping[str, Any], b: Mapping[str, Any], rounds: Sequence[Mapping[str, Any]]) -> str:
    """K, and how it was chosen (fixed; or grown until the reliability's lower bound reached the target)."""
    k = b.get("k", c["k"])
    if c.get("target") is None or not rounds:
        return f"K = {k} continuations (fixed)"
    grown = " -> ".join(str(r["k"]) for r in rounds)
    how = f"grown {grown}" if len(rounds) > 1 else "its first K"
    return f"K = {k} continuations ({how}: the reliability's lower bound reached the target {c['target']:g})"


def _verdict(modules: Mapping[str, Any], nulls: Mapping[str, Any], prompts: int) -> str:
    """The sentence naming the modules that beat credit (`beats_credit`) on each correlation."""
    from creditgym.agents.probe.nulls import MIN_PROMPTS, beats_credit, best_null

    if prompts < MIN_PROMPTS:
        return (
            f"{prompts} prompts, fewer than {MIN_PROMPTS}: the intervals cannot support a call, so no module is "
            "said to beat the null baselines (probe more prompts: --prompts)."
        )
    parts = []
    for key, label in (("spearman", "within-response Spearman"), ("pearson", "pooled Pearson")):
        best = best_null(nulls, key)
        won = [
            f"`{m}`"
            for m, f in modules.items()
            if not m.startswith("oracle:") and beats_credit(f, nulls, key, prompts=prompts)
        ]
        head = (
            f"On {label} the best null is `{best[0]}` ({best[1]:.3f})"
            if best
            else f"On {label} no null scores"
        )
        parts.append(f"{head}; beating it with the interval clear: {', '.join(won) or 'no module'}.")
    return " ".join(parts)


def probe_markdown(result: Mapping[str, Any]) -> str:
    """The probe's table (and the line saying what was measured) from ``probe.json``'s content."""
    c, b, t = result["config"], result["batch"], result["timing"]
    source = (
        f"checkpoint step {c['checkpoint_step']}" if c.get("checkpoint_step") is not None else "no checkpoint"
    )
    rel = result.get("reliability", result.get("ceiling"))  # "ceiling": probes written before the rename
    new = "nulls" in result  # scored with nulls, a clustered bootstrap and the pooled reliability
    root = attainable(rel)
    control = f" and {b['control_rollouts']} for the positive control" if b.get("control_rollouts") else ""
    lines = [
        f"`{c['env_id']}`{' ' + json.dumps(c['env_kwargs']) if c['env_kwargs'] else ''}, model `{c['model']}` "
        f"({source}), temperature {c['temperature']:g}: {b['responses']} responses ({c['prompts']} prompts x "
        f"{c['group']}), mean reward {b['reward_mean']:.3f}, mean V(prefix 0) {b['v0_mean']:.3f}; A* from "
        f"{_k_text(c, b, result.get('rounds', []))} at {_where(c)} ({b['probed_prefixes']} prefixes, "
        f"{b['rollouts']} rollouts{control}, {t['rollouts_per_s']:.0f}/s, {t['total_s']:.0f} s in all). Each figure with "
        f"its 95% bootstrap interval over {'prompts (clustered)' if new else 'responses'}. The first row is A*'s "
        f"split-half reliability (Spearman-Brown corrected to K{'; the pooled one is reported' if new else ''}); "
        "the second, its square root, is the attainable correlation: about the highest "
        "correlation a module can reach against this noisy A*.",
        "",
        "| module | within-response Spearman | pooled Pearson | decisive-token share | sign agreement (abs(A*) >= 0.25) |",
        "|---|---:|---:|---:|---:|",
        f"| A* reliability (split-half) | {_cell(rel['spearman'])} | {_cell(rel['pearson'])} | | |",
        f"| attainable correlation | {_cell(root['spearman'])} | {_cell(root['pearson'])} | | |",
    ]
    from creditgym.agents.probe.nulls import few_prompts_note

    if few := few_prompts_note(result.get("prompts", c["prompts"]), b["responses"]):
        lines[1:1] = ["", few]  # under the line saying what was measured, above the figures it qualifies
    nulls = result.get("nulls", {})
    for name, figs in {**result["modules"], **nulls}.items():
        cells = " | ".join(
            _cell(figs[k]) for k in ("spearman", "pearson", "decisive_share", "sign_agreement")
        )
        lines.append(f"| `{name}` | {cells} |")
    if nulls:
        lines += ["", _verdict(result["modules"], nulls, result.get("prompts", c["prompts"]))]
    exact = result.get("exact")
    if exact:
        lines += [
            "",
            f"Against the exact truth (the env's reward reads known leading slots; {exact['nonzero_frac']:.3f} of "
            f"tokens carry a nonzero true advantage, each exact to {exact.get('error_bound', 0):.0e}): the same "
            "figures with the truth in A*'s place, the sampled A* itself first.",
            "",
            "| entry | within-response Spearman | pooled Pearson | decisive-token share | sign agreement |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, figs in exact["entries"].items():
            cells = " | ".join(_cell(figs[k]) for k in FIGURES)
            lines.append(f"| {name if name.startswith('A*') else f'`{name}`'} | {cells} |")
    controls = result.get("control", {})
    if controls:
        lines += [
            "",
            "| positive control | share of tokens permuted | expected within-response Spearman (reliability x "
            "factor) | measured | expected inside the measured interval |",
            "|---|---:|---:|---:|---|",
        ]
        lines += [
            f"| `{name}` | {f['noise']:g} (factor {f['factor']:.3f}) | {_cell(f['expected'])} | "
            f"{_cell(f['measured'])} | {'n/a' if f['match'] is None else 'yes' if f['match'] else 'no'} |"
            for name, f in controls.items()
        ]
    marks = [(name, mark, f) for name, ms in result.get("marks", {}).items() for mark, f in ms.items()]
    if marks:
        lines += [
            "",
            "| module | marked tokens | share of all tokens | share whose A* has the mark's sign | chance (the "
            "marked rows' tokens) |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| `{name}` `{mark}` | {f['marked']} | {f['marked_frac']:.3f} | {_cell(f['share'])} | "
            f"{_cell(f['chance'])} |"
            for name, mark, f in marks
        ]
    return "\n".join(lines) + "\n"


def _shown(responses: Sequence[Mapping[str, Any]], shown: int) -> list[Mapping[str, Any]]:
    """The responses with the most |A*| mass, alternating between rewards above and at or below the mean."""
    ranked = sorted(responses, key=lambda r: -float(np.abs(np.asarray(r["astar"])).sum()))
    mean = float(np.mean([r["reward"] for r in responses])) if responses else 0.0
    high = [r for r in ranked if r["reward"] > mean]
    low = [r for r in ranked if r["reward"] <= mean]
    first, second = (high, low) if ranked and ranked[0]["reward"] > mean else (low, high)
    out = [r for pair in zip(first, second, strict=False) for r in pair]
    rest = first[len(second) :] + second[len(first) :]
    return (out + rest)[:shown]


def probe_png(result: Mapping[str, Any], path: str | os.PathLike[str], *, shown: int = 3) -> Path:
    """For ``shown`` responses with much |A*| mass (correct and wrong ones alternating): a row of tokens shaded by
    A*, then one row per module shaded by its advantages (each row scaled to its own largest |value|; green +,
    red -)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    picks = _shown([r for r in result["responses"] if r.get("astar")], shown)
    names = list(result["modules"])
    block = len(names) + 2  # A*, the modules, a blank row
    width = max((len(r["tokens"]) for r in picks), default=1)
    n_rows = max(len(picks) * block - 1, 1)
    fig, ax = plt.subplots(figsize=(max(8, 0.3 * width + 2), 0.28 * n_rows + 1.0), dpi=110)
    grid = np.full((n_rows, width), np.nan)
    ticks: dict[int, str] = {}
    for p, r in enumerate(picks):
        top = p * block
        for j, series in enumerate([r["astar"], *(r["advantages"][m] for m in names)]):
            x = np.asarray(series, dtype=np.float64)
            scale = np.abs(x).max()
            grid[top + j, : len(x)] = x / scale if scale > 0 else 0.0
            ticks[top + j] = f"A* (R={r['reward']:.2f})" if j == 0 else names[j - 1]
        for col, tok in enumerate(r["tokens"]):
            text = "".join(ch if ch.isprintable() else "·" for ch in tok.replace("\n", "⏎"))[:5]
            ax.text(col, top, text, ha="center", va="center", fontsize=5)
    ax.imshow(grid, cmap="RdYlGn", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_yticks(list(ticks), list(ticks.values()), fontsize=6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("response token")
    ax.set_title(
        f"{result['config']['env_id']}: A* (Monte-Carlo, top row of each block) and each module's advantages, "
        "each row scaled to its largest |value|",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
