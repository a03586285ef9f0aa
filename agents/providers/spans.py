"""Verdict spans: the ``criterion_spans`` signal's provider (CoRT's span metrics), and the character offsets of
tokens it maps them with.

``criterion_spans[b, t] = 1.0`` on the last policy turn's tokens that overlap a character span the episode's
verdict rests on (``Verdict.spans``; for Rubric-v0 the union of its criteria's spans), 0 elsewhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from creditgym.agents.providers.base import StepContext, signal_provider
from creditgym.agents.train.rollout import Episode

__all__ = ["char_offsets", "criterion_spans", "verdict_span_mask"]


def char_offsets(tokenizer: Any, token_ids: Sequence[int]) -> list[tuple[int, int]]:
    """The ``(start, end)`` characters each token covers in ``tokenizer.decode(token_ids,
    skip_special_tokens=True)`` (the text verifiers grade). When the tokens decoded one by one concatenate to that
    text, their lengths give the offsets (O(T)); otherwise (a character split over tokens, decoding that joins
    tokens) a token ends where the decoded prefix through it ends, and one whose prefix is not a prefix of the
    text (half a multi-byte character) covers nothing, the next token covering those characters (O(T^2)). A
    special token covers nothing."""
    ids = [int(t) for t in token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    pieces = [tokenizer.decode([t], skip_special_tokens=True) for t in ids]
    if "".join(pieces) == text:
        ends = list(itertools.accumulate(len(p) for p in pieces))
        return list(zip([0, *ends[:-1]], ends, strict=True))
    out, prev = [], 0
    for k in range(len(ids)):
        prefix = tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        end = max(prev, len(prefix)) if text.startswith(prefix) else prev
        out.append((prev, end))
        prev = end
    return out


def verdict_span_mask(episodes: Sequence[Episode], width: int) -> Tensor:
    """(B, width) float: 1.0 on the last policy turn's tokens that overlap a character span of the episode's
    verdict (``info["verdict"].spans``; for Rubric-v0 the union of ``info["criteria"][i]["spans"]``), mapped to
    token positions by `char_offsets`; 0 elsewhere and for episodes whose verdict has no spans."""
    out = torch.zeros((len(episodes), width), dtype=torch.float32)
    for row, ep in enumerate(episodes):
        spans = getattr(ep.info.get("verdict"), "spans", ())
        led = ep.env.ledger
        turns = led.turn[led.policy_mask]
        if not spans or not turns.size:
            continue
        positions = (led.policy_mask & (led.turn == turns[-1])).nonzero()[0]
        offsets = char_offsets(ep.env.tokenizer, led.token_id[positions].tolist())
        for pos, (a, b) in zip(positions, offsets, strict=True):
            out[row, int(pos)] = float(any(a < end and start < b for start, end in spans))
    return out


@signal_provider("criterion_spans", default=True)
def criterion_spans(step: StepContext, params: Mapping[str, Any]) -> Tensor:
    """`verdict_span_mask` of the step's episodes, 0 off the policy mask."""
    mask = verdict_span_mask(step.episodes, step.batch.input_ids.shape[1])
    return mask.to(step.policy_mask.device) * step.policy_mask
