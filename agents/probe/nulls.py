"""Null baselines: trivial per-token rules scored against A* beside every module, and the rule a module must pass
to be said to find credit.

Each rule needs only what every response already has: its reward and group (the sign ``s`` of its advantage,
``sign(R - mean R of its group)``, what `grpo` pushes every token by), its length, and the starts of its probed
segments:

* ``null:position``: ``-t * s`` at token position ``t`` (credit falls with position): A* sitting in the first
  segment scores high on it.
* ``null:last``: ``s`` on the last probed segment's tokens, 0 elsewhere (the step nearest the outcome decided it).
* ``null:uniform``: ``s`` on every token. Constant within a response, so its within-response Spearman is 0 by
  the report's rule for a constant module (as `grpo`'s); its pooled Pearson is the figure it is a baseline for.
* ``null:entropy``: ``-H_t * s`` from the policy's per-token entropy, only where the responses carry
  ``entropies``; absent otherwise (it is never made up).

A module *beats credit* (`beats_credit`) on a figure when its value is above the best null's and its interval's
lower end is above that null's value too. Below `min_prompts` prompts nothing is called: a bootstrap clustered
by prompt over P prompts draws a single prompt P times with probability ``P ** (1 - P)`` (25% at 2, 3.7% at 3,
1.6% at 4, 0.16% at 5, 0.013% at 6), and where that exceeds an interval's tail ``alpha / 2`` the interval's ends
are single-prompt figures, not a statement about the prompts' population. At 95% (`MIN_PROMPTS`) that is 4; at a
Bonferroni-corrected ``0.05 / m`` it is more (6 for m = 26).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "MIN_PROMPTS",
    "NULLS",
    "beats_credit",
    "best_null",
    "few_prompts_note",
    "min_prompts",
    "null_advantages",
    "response_signs",
]

NULLS = ("null:position", "null:last", "null:uniform", "null:entropy")


def min_prompts(alpha: float = 0.05) -> int:
    """The fewest prompts P whose clustered bootstrap draws a single prompt less often than ``alpha / 2``."""
    p = 2
    while p ** (1 - p) >= alpha / 2:
        p += 1
    return p


MIN_PROMPTS = min_prompts()


def few_prompts_note(prompts: int, responses: int, alpha: float = 0.05) -> str | None:
    """One line warning that ``prompts`` below `min_prompts` cannot support the probe's figures (A*'s
    reliability and every interval: their clustered bootstrap mostly redraws a single prompt); None from there."""
    if prompts >= min_prompts(alpha):
        return None
    return (
        f"**Too few to rely on:** {responses} responses from {prompts} prompt(s), fewer than "
        f"{min_prompts(alpha)}: A*'s reliability and every interval below rest on so few prompts that they say "
        f"little beyond this batch; probe at least {min_prompts(alpha)} (--prompts)."
    )


def response_signs(rewards: Sequence[float], groups: Sequence[int]) -> np.ndarray:
    """Per response, the sign of its reward minus its group's mean reward (-1, 0 or +1)."""
    r, g = np.asarray(rewards, dtype=np.float64), np.asarray(groups)
    means = {k: r[g == k].mean() for k in np.unique(g)}
    return np.sign(r - np.array([means[k] for k in g]))


def null_advantages(
    rewards: Sequence[float],
    groups: Sequence[int],
    lengths: Sequence[int],
    starts: Sequence[Sequence[int]],
    entropies: Sequence[Sequence[float]] | None = None,
) -> dict[str, list[np.ndarray]]:
    """Each null rule's per-token advantages (module docstring), one ``(n_i,)`` array per response;
    ``null:entropy`` only when ``entropies`` is given."""
    signs = response_signs(rewards, groups)
    out: dict[str, list[np.ndarray]] = {name: [] for name in NULLS[:3]}
    for s, n, st in zip(signs, lengths, starts, strict=True):
        t = np.arange(n, dtype=np.float64)
        last = np.zeros(n)
        last[int(st[-1]) if len(st) else 0 :] = s
        out["null:position"].append(-t * s)
        out["null:last"].append(last)
        out["null:uniform"].append(np.full(n, s))
    if entropies is not None:
        out["null:entropy"] = [
            -np.asarray(h, dtype=np.float64) * s for h, s in zip(entropies, signs, strict=True)
        ]
    return out


def best_null(nulls: Mapping[str, Mapping[str, Any]], key: str) -> tuple[str, float] | None:
    """The null with the highest value on figure ``key`` and that value; None when no null has one."""
    scored = [(name, f[key]["value"]) for name, f in nulls.items() if f[key]["value"] is not None]
    return max(scored, key=lambda x: x[1]) if scored else None


def beats_credit(
    fig: Mapping[str, Any],
    nulls: Mapping[str, Mapping[str, Any]],
    key: str,
    *,
    prompts: int,
    alpha: float = 0.05,
) -> bool:
    """Whether a module's figure ``fig[key]`` (``{"value", "ci"}``, a ``1 - alpha`` interval) beats the best
    null: a value above the best null's, and the interval's lower end above it too. False below
    ``min_prompts(alpha)`` prompts (nothing is called)."""
    best, f = best_null(nulls, key), fig[key]
    if prompts < min_prompts(alpha) or best is None or f["value"] is None or f["ci"] is None:
        return False
    return f["value"] > best[1] and f["ci"][0] > best[1]
