"""Pictures of a run (reward and held-out score per step; responses with each token shaded by its advantage) and
of a study (held-out score per entry across seeds)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from creditgym.agents.study.stats import curve_stats


def credit_samples(
    rewards: Sequence[float],
    input_ids: Any,
    policy_mask: Any,
    advantages: Any,
    decode: Any,
    n: int = 6,
) -> list[dict[str, Any]]:
    """The ``n // 2`` best and ``n // 2`` worst rows of a batch as ``{reward, tokens, advantages}`` (policy tokens
    only), for `credit_html` / `credit_png`. Tensors are ``(B, T)``; ``decode`` maps a token id list to text."""
    order = sorted(range(len(rewards)), key=lambda i: -rewards[i])
    picks = [*order[: n // 2], *sorted(range(len(rewards)), key=lambda i: rewards[i])[: n // 2]]
    out = []
    for row in dict.fromkeys(picks):
        m = policy_mask[row]
        out.append(
            {
                "reward": float(rewards[row]),
                "tokens": [decode([t]) for t in input_ids[row][m].tolist()],
                "advantages": advantages[row][m.to(advantages.device)].float().cpu().tolist(),
            }
        )
    return out


def curves_figure(
    history: Sequence[dict[str, Any]], *, title: str = "", score_name: str = "accuracy"
) -> Figure:
    """Training reward per step and the held-out score (named ``score_name``, the env's) at each evaluation; the
    legend beside the axes, where it hides no line."""
    train = [(m["step"], m["rollout/reward"]) for m in history if m.get("rollout/reward") is not None]
    evals = [(m["step"], m["eval/accuracy"]) for m in history if m.get("eval/accuracy") is not None]
    fig, ax = plt.subplots(figsize=(8.5, 4), dpi=110)
    if train:
        ax.plot(*zip(*train, strict=True), label="training reward (sampled)", alpha=0.7)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label=f"held-out {score_name} (greedy)")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def curves_png(
    history: Sequence[dict[str, Any]], path: str | Path, *, title: str = "", score_name: str = "accuracy"
) -> Path:
    """:func:`curves_figure` written to ``path`` as a PNG."""
    fig = curves_figure(history, title=title, score_name=score_name)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _shade(adv: float, scale: float) -> str:
    a = max(-1.0, min(1.0, adv / scale)) if scale > 0 else 0.0
    return f"rgba(0, 160, 60, {a:.2f})" if a >= 0 else f"rgba(220, 40, 40, {-a:.2f})"


def credit_html(samples: Sequence[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """An HTML page: each sampled response, each token's background green (positive) or red by its advantage."""
    scale = max((abs(a) for s in samples for a in s["advantages"]), default=1.0)
    rows = []
    for s in samples:
        spans = "".join(
            f'<span title="{a:+.4f}" style="background:{_shade(a, scale)}">{html.escape(t)}</span>'
            for t, a in zip(s["tokens"], s["advantages"], strict=True)
        )
        rows.append(f"<div class='r'><b>reward {s['reward']:.2f}</b><pre>{spans}</pre></div>")
    page = (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:60em}pre{white-space:pre-wrap;font-size:14px}</style>"
        f"<h2>{html.escape(title)}</h2><p>Green: positive advantage, red: negative; hover a token for its value "
        f"(max |advantage| {scale:.4f}).</p>" + "".join(rows)
    )
    Path(path).write_text(page, encoding="utf-8")
    return Path(path)


def credit_figure(
    samples: Sequence[dict[str, Any]], *, title: str = "", per_row: int = 16, label_chars: int = 12
) -> Figure:
    """The picture of :func:`credit_html` as a figure: each response a band of rows of ``per_row`` token cells
    (every token shown, wrapped), each cell labelled with its token (``label_chars`` characters at most) and
    coloured by its advantage on the colour bar's scale."""
    import numpy as np

    bands = [range(0, max(len(s["tokens"]), 1), per_row) for s in samples]
    n = max(sum(len(b) for b in bands), 1)
    scale = max((abs(a) for s in samples for a in s["advantages"]), default=1.0) or 1.0
    grid = np.full((n, per_row), np.nan)
    fig, ax = plt.subplots(figsize=(0.8 * per_row + 2.5, 0.32 * n + 1.4), dpi=110)
    row, ticks = 0, []
    for s, band in zip(samples, bands, strict=True):
        ticks.append((row, f"r={s['reward']:.2f}"))
        for lo in band:
            grid[row, : len(s["advantages"][lo : lo + per_row])] = s["advantages"][lo : lo + per_row]
            for j, tok in enumerate(s["tokens"][lo : lo + per_row]):
                label = "".join(c if c.isprintable() else "·" for c in tok.replace("\n", "⏎"))
                label = label if len(label) <= label_chars else label[: label_chars - 1] + "…"
                ax.text(j, row, label, ha="center", va="center", fontsize=6)
            row += 1
        if row < n:
            ax.axhline(row - 0.5, color="black", lw=0.8)  # between two responses
    image = ax.imshow(grid, cmap="RdYlGn", vmin=-scale, vmax=scale, aspect="auto")
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01, label="advantage")
    ax.set_yticks([t for t, _ in ticks] or [0], [lab for _, lab in ticks] or [""])
    ax.set_xticks([])
    ax.set_xlabel(f"response tokens, {per_row} a row")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def credit_png(samples: Sequence[dict[str, Any]], path: str | Path, *, title: str = "") -> Path:
    """:func:`credit_figure` written to ``path`` as a PNG."""
    fig = credit_figure(samples, title=title)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def study_png(
    runs: Sequence[Mapping[str, Any]],
    labels: Sequence[str],
    baseline: str,
    path: str | Path,
    *,
    title: str = "",
) -> Path:
    """Held-out score over steps of a study (``results.json["runs"]``): per entry the mean across its finished
    runs' curves and a shaded 95% t-interval, ``baseline`` first and in black."""
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    colors = iter(list(plt.get_cmap("tab20").colors) * 2)  # 20 distinct colours: a study has many variants
    for label in [baseline, *(x for x in labels if x != baseline)]:
        curves = [r["curve"] for r in runs if r["entry"] == label and r["status"] in ("ok", "finished")]
        stats = curve_stats(curves)
        if not stats:
            continue
        steps, m, lo, hi = (list(col) for col in zip(*stats, strict=True))
        color = "black" if label == baseline else next(colors)
        width, z = (2.2, 3) if label == baseline else (1.4, 2)
        ax.plot(steps, m, "o-", color=color, lw=width, ms=3, zorder=z, label=f"{label} (n={len(curves)})")
        ax.fill_between(steps, lo, hi, color=color, alpha=0.15 if label == baseline else 0.12, lw=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("held-out score")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
