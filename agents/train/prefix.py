"""Shared prompts in a teacher-forced pass: each distinct prompt of a batch runs through the model once.

A GRPO-style batch holds ``G`` responses to each prompt, and a training pass over ``prompt + response`` rows
runs every prompt ``G`` times through every layer, forward and backward. Here each distinct prompt (the tokens
before a row's first scored token) runs once, its KV cache is copied to the rows that share it, and the rows'
remaining tokens run on top of that cache. Gradients flow through the copies back into the one prompt pass, so
the loss and its gradient are those of the plain pass (to float rounding); only the repeated prompt work is gone.

Shapes: ``B`` rows, ``T`` tokens, ``U`` distinct prompts, ``P`` the longest prompt, ``S`` the longest rest,
``H`` hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from creditgym.agents.train.backends import cache_arg, cache_of, can_copy_rows

__all__ = ["SharedPrefixPass", "shared_prefix_pass"]


@dataclass
class SharedPrefixPass:
    """A batch re-laid as ``[prompt, left-padded | rest, right-padded]`` and its last hidden states.

    The scored tokens keep their order (row by row, left to right), so values read at them here go back to the
    original layout with ``masked_scatter`` over its own mask.

    Attributes:
        input_ids: ``(B, P + S)`` token ids.
        attention_mask: ``(B, P + S)`` 1 = real token.
        score_mask: ``(B, P + S)`` bool, the scored tokens (all in the rest).
        hidden: ``(B, P + S, H)`` last hidden states (after the final norm), with the autograd graph.
    """

    input_ids: Tensor
    attention_mask: Tensor
    score_mask: Tensor
    hidden: Tensor


def _prompt_lengths(attention_mask: Tensor, score_mask: Tensor) -> list[int] | None:
    """Each row's prompt length (its first scored token's index, at least 1), or None when a row is not a
    right-padded run of real tokens with a scored token in it."""
    lengths = attention_mask.sum(-1)  # (B,)
    cols = torch.arange(attention_mask.shape[1], device=attention_mask.device)  # (T,)
    if not torch.equal(attention_mask.bool(), cols[None, :] < lengths[:, None]):
        return None
    scored = score_mask.bool() & attention_mask.bool()  # (B, T)
    if not scored.any(-1).all():
        return None
    return [max(int(i), 1) for i in scored.int().argmax(-1).tolist()]


def shared_prefix_pass(
    base_model: nn.Module, input_ids: Tensor, attention_mask: Tensor, score_mask: Tensor
) -> SharedPrefixPass | None:
    """Last hidden states of ``input_ids`` with each distinct prompt run once, or None where that saves nothing.

    Args:
        base_model: The decoder without its LM head (``model.base_model``), taking a KV cache.
        input_ids: ``(B, T)`` right-padded rows ``prompt + rest``.
        attention_mask: ``(B, T)`` 1 = real token.
        score_mask: ``(B, T)`` bool, the tokens whose log-probs are wanted; a row's prompt is everything before
            its first one.

    Returns:
        A :class:`SharedPrefixPass`, or None when no two rows share a prompt, a row is not right-padded, has no
        scored token, or the model's cache cannot copy rows (sliding-window or other non-plain caches).
    """
    starts = _prompt_lengths(attention_mask, score_mask)
    if starts is None:
        return None
    rows = input_ids.tolist()
    unique: dict[tuple[int, ...], int] = {}
    source = [unique.setdefault(tuple(row[:a]), len(unique)) for row, a in zip(rows, starts, strict=True)]
    if len(unique) == len(rows):
        return None
    device, pad = input_ids.device, 0  # padding is masked: any id will do
    lengths = attention_mask.sum(-1).tolist()
    width_p = max(len(p) for p in unique)
    width_s = max(n - a for n, a in zip(lengths, starts, strict=True))
    ids_p = torch.full((len(unique), width_p), pad, dtype=torch.long)  # (U, P) left-padded
    att_p = torch.zeros((len(unique), width_p), dtype=torch.long)  # (U, P)
    for i, p in enumerate(unique):
        ids_p[i, width_p - len(p) :] = torch.as_tensor(p, dtype=torch.long)
        att_p[i, width_p - len(p) :] = 1
    ids_p, att_p = ids_p.to(device), att_p.to(device)
    out_p = base_model(
        input_ids=ids_p,
        attention_mask=att_p,
        position_ids=(att_p.cumsum(-1) - 1).clamp_min(0),
        use_cache=True,
    )
    cache = cache_of(out_p)
    if not can_copy_rows(cache):
        return None
    src = torch.tensor(source, device=device)  # (B,) row -> its prompt
    cache.batch_select_indices(src)  # the prompt's keys and values, one copy per row (differentiable)
    ids_s = torch.full((len(rows), width_s), pad, dtype=torch.long, device=device)  # (B, S) right-padded
    att_s = torch.zeros((len(rows), width_s), dtype=torch.long, device=device)  # (B, S)
    score_s = torch.zeros((len(rows), width_s), dtype=torch.bool, device=device)  # (B, S)
    for r, (n, a) in enumerate(zip(lengths, starts, strict=True)):
        ids_s[r, : n - a] = input_ids[r, a:n]
        att_s[r, : n - a] = 1
        score_s[r, : n - a] = score_mask[r, a:n].bool()
    first = torch.tensor(starts, device=device)[:, None]  # (B, 1) the rest's first position id
    att = torch.cat([att_p[src], att_s], dim=1)  # (B, P + S)
    out_s = base_model(
        input_ids=ids_s,
        attention_mask=att,
        position_ids=first + torch.arange(width_s, device=device)[None, :],
        use_cache=True,
        **{cache_arg(base_model): cache},
    )
    return SharedPrefixPass(
        input_ids=torch.cat([ids_p[src], ids_s], dim=1),
        attention_mask=att,
        score_mask=torch.cat([torch.zeros_like(att_p[src], dtype=torch.bool), score_s], dim=1),
        hidden=torch.cat([out_p.last_hidden_state[src], out_s.last_hidden_state], dim=1),
    )
