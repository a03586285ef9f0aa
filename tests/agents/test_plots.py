"""A run's pictures show what they claim: every token of the heatmap with its colour scale, and curves whose
legend hides no line."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from creditgym.agents.train.plots import credit_figure, credit_png, curves_figure, curves_png


def test_the_credit_heatmap_shows_every_token_with_a_colour_scale(tmp_path: Path) -> None:
    samples = [
        {
            "reward": 1.0,
            "tokens": [f" token_{i:02d}" for i in range(48)],
            "advantages": [i / 47 for i in range(48)],
        },
        {"reward": 0.0, "tokens": ["a\nb", "=", " 7"], "advantages": [-0.5, 0.0, 0.25]},
    ]
    fig = credit_figure(samples)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels == [f" token_{i:02d}" for i in range(48)] + ["a⏎b", "=", " 7"]  # all 48, whole, in order
    assert len(fig.axes) == 2 and fig.axes[1].get_ylabel() == "advantage"  # the colour bar
    lo, hi = fig.axes[1].get_ylim()
    assert (lo, hi) == (-1.0, 1.0)  # symmetric about 0 at the largest |advantage|
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["r=1.00", "r=0.00"]
    plt.close(fig)
    long = credit_figure([{"reward": 0.5, "tokens": ["x" * 30], "advantages": [0.1]}])
    assert (
        long.axes[0].texts[0].get_text() == "x" * 11 + "…"
    )  # a label longer than 12 characters is cut, marked
    plt.close(long)
    assert credit_png(samples, tmp_path / "credit.png").stat().st_size > 10_000


def test_the_curves_legend_sits_outside_the_lines(tmp_path: Path) -> None:
    history = [
        {"step": s, "rollout/reward": s / 10, **({"eval/accuracy": s / 20} if s % 2 == 0 else {})}
        for s in range(11)
    ]
    fig = curves_figure(history, score_name="mean score")
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend()
    box, area = legend.get_window_extent(), ax.get_window_extent()
    assert not box.overlaps(area), (box, area)  # beside the axes: no line under it
    assert fig.bbox.contains(box.x1 - 1, box.y0 + 1)  # and inside the saved picture
    assert [t.get_text() for t in legend.get_texts()] == [
        "training reward (sampled)",
        "held-out mean score (greedy)",
    ]
    plt.close(fig)
    assert curves_png(history, tmp_path / "curves.png").stat().st_size > 10_000
