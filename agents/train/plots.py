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


def curves_png(
    history: Sequence[dict[str, Any]], path: str | Path, *, title: str = "", score_name: str = "accuracy"
) -> Path:
    """Training reward per step and the held-out score (named ``score_name``, the env's) at each evaluation."""
    train = [(m["step"], m["rollout/reward"]) for m in history if m.get("rollout/reward") is not None]
    evals = [(m["step"], m["eval/accuracy"]) for m in history if m.get("eval/accuracy") is not None]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if train:
        ax.plot(*zip(*train, strict=True), label="training reward (sampled)", alpha=0.7)
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label=f"held-out {score_name} (greedy)")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title)
    fig.tight_layout()
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


def credit_png(
    samples: Sequence[dict[str, Any]], path: str | Path, *, title: str = "", max_tokens: int = 40
) -> Path:
    """The same picture as :func:`credit_html` as a PNG: one row per response, one cell per token."""
    import numpy as np

    n = max(len(samples), 1)
    fig, ax = plt.subplots(figsize=(12, 0.6 * n + 1.2), dpi=110)
    scale = max((abs(a) for s in samples for a in s["advantages"]), default=1.0) or 1.0
    grid = np.full((n, max_tokens), np.nan)
    for i, s in enumerate(samples):
        adv = s["advantages"][:max_tokens]
        grid[i, : len(adv)] = adv
        for j, tok in enumerate(s["tokens"][:max_tokens]):
            label = "".join(c if c.isprintable() else "·" for c in tok.replace("\n", "⏎"))[:6]
            ax.text(j, i, label, ha="center", va="center", fontsize=6)
    ax.imshow(grid, cmap="RdYlGn", vmin=-scale, vmax=scale, aspect="auto")
    ax.set_yticks(range(n), [f"r={s['reward']:.2f}" for s in samples] if samples else [""])
    ax.set_xlabel("response token")
    ax.set_title(title)
    fig.tight_layout()
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
