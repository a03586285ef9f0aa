"""The probe's positive control: ``oracle:noise=q``, a module that ranks tokens like A* by construction.

Its advantages are A*' of response ``i``, estimated exactly as A* but from an independent set of ``K``
continuations at the same probed positions, with a known share of noise: ``m_i`` (``q n_i`` rounded half up)
of its ``n_i`` tokens, drawn at random, have their values permuted among themselves (uniformly). The values, and
so their ranks, stay the same multiset, so for any correlation ``c`` (Pearson, or Spearman on the ranks)::

    E[c(A*, oracle)] = c(A*, A*') * f_i,     f_i = (n_i - m_i) / (n_i - 1)   (f_i = 1 when m_i <= 1)

(a permuted position pairs A*_t with a random one of the permuted values; averaged over the subset and the
permutation, the cross products keep that share). ``c(A*, A*')`` correlates two independent K-continuation
estimates: what the split-half reliability at K estimates. So the oracle's expected within-response Spearman is
the reliability times the mean ``f_i`` over the responses the figure counts (those whose A* varies), with the
reliability's interval scaled the same way; the measured figure must hold it within its interval. ``noise=0``
checks the Spearman-Brown step itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ORACLE", "control_figures", "oracle_advantages", "parse_control"]

ORACLE = "oracle"
DEFAULT_NOISE = 0.5


def parse_control(label: str) -> float | None:
    """The noise share of a positive-control entry (``oracle``, ``oracle:noise=0.5``); None for another entry.

    Raises:
        ValueError: another key than ``noise``, or a share outside [0, 1].
    """
    name, _, spec = label.strip().partition(":")
    if name != ORACLE:
        return None
    if not spec:
        return DEFAULT_NOISE
    key, sep, raw = spec.partition("=")
    try:
        noise = float(raw) if sep and key.strip() == "noise" else None
    except ValueError:
        noise = None
    if noise is None or not 0.0 <= noise <= 1.0:
        raise ValueError(
            f"entry {label!r}: the positive control takes one parameter, noise=q with q in [0, 1] (the share of "
            "each response's tokens whose values are permuted), e.g. oracle:noise=0.5"
        )
    return noise


def oracle_advantages(
    independent: Sequence[np.ndarray], noise: float, rng: np.random.Generator
) -> tuple[list[np.ndarray], np.ndarray]:
    """The oracle's advantages from the independent A*' (per response ``(n_i,)``), and each response's ``f_i``."""
    out, factors = [], np.ones(len(independent))
    for i, a in enumerate(independent):
        a, n = np.array(a, dtype=np.float64), len(a)
        m = int(np.floor(noise * n + 0.5))
        if m >= 2:
            idx = rng.choice(n, m, replace=False)
            a[idx] = a[rng.permutation(idx)]
            factors[i] = (n - m) / (n - 1)
        out.append(a)
    return out, factors


def control_figures(
    measured: Mapping[str, Any],
    rel: Mapping[str, Any],
    factors: np.ndarray,
    astar: Sequence[np.ndarray],
    noise: float,
) -> dict[str, Any]:
    """Expected (reliability x mean ``f_i``) and measured within-response Spearman of one control, and whether the
    expectation lies inside the measured interval."""
    counted = np.array([len(y) > 1 and np.ptp(y) > 0 for y in astar])
    factor = float(factors[counted].mean()) if counted.any() else float("nan")
    value, ci = rel["value"], rel["ci"]
    expected = {
        "value": None if value is None else value * factor,
        "ci": None if ci is None else [x * factor for x in ci],
    }
    got = measured["spearman"]
    inside = None
    if expected["value"] is not None and got["ci"] is not None:
        inside = bool(got["ci"][0] <= expected["value"] <= got["ci"][1])
    return {"noise": noise, "factor": factor, "expected": expected, "measured": got, "match": inside}
