"""The exact truth of a probe batch, where an env has one: on an env whose reward reads a known few response
positions and those positions lead the response (`DecisiveSlots`, ``creditgym/Planted-v0``), the true advantage
of every token follows from the policy's own probabilities there (`SlotValues`), with no Monte-Carlo noise. The probe scores
every entry against it, the sampled A* included: the instrument checked against the truth, not only against
itself (its split-half reliability)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from creditgym.agents.probe.report import bootstrap_figures, response_ingredients
from creditgym.agents.train.backends import cache_arg, cache_of, can_copy_rows
from creditgym.envs.core import DecisiveSlots, Source

if TYPE_CHECKING:
    from creditgym.agents.train.policy import Policy
    from creditgym.agents.train.rollout import Episode

__all__ = ["SlotValues", "exact_figures", "exact_truth", "leading"]


def leading(slots: Sequence[int]) -> bool:
    """Whether the decisive slots are the first response tokens ``0..K-1``: then no filler comes before a slot, so
    the truth below is exact for any policy (and every filler token's true advantage is 0: it comes after the
    reward is decided)."""
    return tuple(int(s) for s in slots) == tuple(range(len(slots)))


class SlotValues:
    """``V_k``, the policy's probability of filling decisive slots ``k..K-1`` after a prompt and the response's
    first ``k`` tokens (the slots before ``k``, all filled), by enumeration.

    The last slot's value is its accepted mass, read off one pass. An earlier slot's is ``sum_y p(y) V_{k+1}(y)``
    over the tokens ``y`` it accepts, taken in decreasing probability until the accepted mass left is below
    ``tol`` (or ``max_tokens`` were taken): the value is exact to within ``err``, the mass left out. The
    continuations of one context share its key-value cache, so each costs one token's forward pass.

    Args:
        policy: The policy whose truth this is (its model, on its device).
        masks: ``(K, V)`` bool, which token ids each slot accepts (`DecisiveSlots.decisive_masks`).
        tol: Accepted mass that may be left out of an earlier slot's sum.
        max_tokens: At most this many tokens enumerated per earlier slot.
        chunk: Continuations per forward pass.
    """

    def __init__(
        self,
        policy: Policy,
        masks: np.ndarray,
        *,
        tol: float = 1e-4,
        max_tokens: int = 8192,
        chunk: int = 256,
    ) -> None:
        self.policy, self.masks = policy, np.asarray(masks, dtype=bool)
        self.tol, self.max_tokens, self.chunk = tol, max_tokens, chunk

    @torch.no_grad()
    def _logp(self, context: Sequence[int], nexts: Sequence[int] | None = None) -> np.ndarray:
        """(V,) float64 next-token log-probs after ``context``, or (n, V) after ``context + [y]`` for each y."""
        model, device = self.policy.model, self.policy.device
        out = model(input_ids=torch.tensor([list(context)], device=device), use_cache=nexts is not None)
        if nexts is None:
            return torch.log_softmax(out.logits[0, -1].double(), -1).cpu().numpy()
        cache = cache_of(out)
        rows = []
        for i in range(0, len(nexts), self.chunk):
            part = torch.tensor(list(nexts[i : i + self.chunk]), device=device)[:, None]  # (n, 1)
            if can_copy_rows(cache):  # one token's pass per row on a copy of the context's cache
                copied = copy.deepcopy(cache)
                copied.batch_repeat_interleave(len(part))
                logits = model(input_ids=part, **{cache_arg(model): copied}).logits[:, -1]  # (n, V)
            else:  # a cache whose rows cannot be copied (sliding windows): whole rows
                ctx = torch.tensor([list(context)], device=device).expand(len(part), -1)
                logits = model(input_ids=torch.cat([ctx, part], dim=1)).logits[:, -1]
            rows.append(torch.log_softmax(logits.double(), -1).cpu().numpy())
        return np.concatenate(rows)

    def _mass(self, logp: np.ndarray, k: int) -> np.ndarray:
        return np.where(self.masks[k], np.exp(logp), 0.0).sum(-1)

    def value(self, context: Sequence[int], k: int) -> tuple[float, float]:
        """``(V_k, err)`` after ``context`` (the prompt and the response's first ``k`` tokens)."""
        logp = self._logp(context)
        if k == len(self.masks) - 1:
            return float(self._mass(logp, k)), 0.0
        p = np.where(self.masks[k], np.exp(logp), 0.0)
        order = np.argsort(-p)
        left = p.sum() - np.cumsum(p[order])  # accepted mass left after taking the first i + 1
        n = min(int(np.searchsorted(-left, -self.tol, side="right")) + 1, self.max_tokens, int((p > 0).sum()))
        ys = [int(y) for y in order[:n]]
        if k + 1 == len(self.masks) - 1:  # the children's values are masses: one cached token each
            children, errs = self._mass(self._logp(context, ys), k + 1), np.zeros(n)
        else:
            pairs = [self.value([*context, y], k + 1) for y in ys]
            children, errs = np.array([v for v, _ in pairs]), np.array([e for _, e in pairs])
        weights = p[ys]
        return float(weights @ children), float(weights @ errs + max(p.sum() - weights.sum(), 0.0))


def exact_truth(
    episodes: Sequence[Episode], policy: Policy, *, tol: float = 1e-4
) -> tuple[list[np.ndarray], float] | None:
    """Per episode, (L_i,) float64, the exact advantage ``V(prefix + y_t) - V(prefix)`` of each policy token, and
    the largest error bound of any of them (`SlotValues`); None when the batch's env has no `DecisiveSlots`
    leading the response (then there is no exact truth, only A*).

    With slots ``0..K-1`` and ``V_k`` along the response (0 once a slot is missed, ``V_K`` the reward), slot k's
    advantage is ``V_{k+1} - V_k`` and every later token's is 0; they sum to ``R - V_0``.
    """
    envs = [ep.env for ep in episodes]
    if not episodes or not all(isinstance(e, DecisiveSlots) and leading(e.decisive_slots) for e in envs):
        return None
    out, worst, first = [], 0.0, {}
    for ep in episodes:
        env, led = ep.env, ep.env.ledger
        source = np.asarray(led.source)
        if (source[source != Source.PROMPT] != Source.POLICY).any():
            raise ValueError(
                "exact_truth: a decisive-slot env must have one turn of policy tokens after its prompt"
            )
        start = int((source == Source.PROMPT).sum())
        ids = [int(t) for t in led.token_id]
        prompt, response = ids[:start], ids[start:]
        k_slots = len(env.decisive_slots)
        width = int(
            policy.model.get_output_embeddings().weight.shape[0]
        )  # the logits' width (may pad the vocab)
        values = SlotValues(policy, env.decisive_masks(width), tol=tol)
        if tuple(prompt) not in first:  # the responses of a prompt share V_0
            first[tuple(prompt)] = values.value(prompt, 0)
        v, err = [first[tuple(prompt)][0]], first[tuple(prompt)][1]
        hits = env.slot_hits(response)
        for k in range(1, k_slots + 1):
            if not all(hits[:k]):
                v.append(0.0)
            elif k == k_slots:
                v.append(1.0)
            else:
                vk, ek = values.value(prompt + response[:k], k)
                v.append(vk)
                err = max(err, ek)
        adv = np.zeros(len(response), dtype=np.float64)
        adv[:k_slots] = np.diff(v)
        out.append(adv)
        worst = max(worst, err)
    return out, worst


def exact_figures(
    truth: Sequence[np.ndarray],
    entries: Mapping[str, Sequence[np.ndarray]],
    *,
    groups: Sequence[int],
    n_boot: int,
    seed: int,
) -> dict[str, Any]:
    """Every entry's figures (`response_ingredients`: within-response Spearman, pooled Pearson, ...) against the
    exact truth, with the probe's paired, prompt-clustered bootstrap intervals, and what the truth looks like."""
    tables = [response_ingredients(list(adv), list(truth)) for adv in entries.values()]
    figs = bootstrap_figures(tables, n_boot=n_boot, seed=seed, groups=groups)
    flat = np.concatenate(list(truth)) if truth else np.zeros(0)
    return {
        "entries": dict(zip(entries, figs, strict=True)),
        "nonzero_frac": float((flat != 0).mean()) if flat.size else 0.0,
        "abs_mean": float(np.abs(flat).mean()) if flat.size else 0.0,
    }
