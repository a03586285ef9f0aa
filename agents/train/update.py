"""The update's teacher-forced pass, with no autograd graph for rows whose gradient is exactly zero.

The policy losses (PPO's clipped surrogate, DIS, and any registered with ``proportional_to_advantage``,
`creditgym.agents.train.loss.ActorLoss`) are a sum over tokens of a term proportional to the token's advantage,
so a row whose advantage is 0 at every policy token (a GRPO group whose responses all scored the same) adds
exactly nothing to the gradient, however its log-probs move. Unless an entropy bonus, a KL penalty or a loss
registered otherwise reads its log-probs with a gradient, such a row runs forward without a graph: its log-probs
and entropies are still computed, so the loss value and every logged metric are those of one pass over the
batch, and the backward pass runs over the other rows only.

Shapes: ``b`` rows of a minibatch, ``T`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from creditgym.agents.train.policy import ForwardOutput, Policy

__all__ = ["adamw", "backward", "rows_with_gradient", "update_pass"]


def adamw(params: Iterable[nn.Parameter], *, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """The actor's AdamW, with its fused kernel (the same update in one pass per tensor; TRL's default
    optimizer) where every parameter is a floating-point CPU or CUDA tensor."""
    params = list(params)
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True if fused else None)


def backward(loss: Tensor, params: Iterable[nn.Parameter]) -> None:
    """``loss.backward()``; a loss without a graph (no row of the minibatch had an advantage) leaves a zero
    gradient on every parameter instead, so AdamW still steps as it would after a pass whose gradient is 0."""
    if loss.requires_grad:
        loss.backward()
        return
    for p in params:
        p.grad = torch.zeros_like(p)


def rows_with_gradient(advantages: Tensor, mask: Tensor) -> Tensor:
    """``(b,)`` bool: the rows with a non-zero advantage at some policy token (``(b, T)`` inputs)."""
    return ((advantages != 0) & mask.bool()).any(-1)


def update_pass(
    policy: Policy,
    input_ids: Tensor,
    attention_mask: Tensor,
    mask: Tensor,
    advantages: Tensor,
    *,
    module: nn.Module | None,
    entropy_grad: bool,
    graph_for_all: bool,
) -> ForwardOutput:
    """`Policy.forward_logprobs` over a minibatch (the LM head on ``mask``'s tokens), with a graph only where
    the loss can have a gradient.

    Args:
        policy: The policy being updated.
        input_ids: ``(b, T)`` token ids.
        attention_mask: ``(b, T)`` 1 = real token.
        mask: ``(b, T)`` bool, the policy tokens.
        advantages: ``(b, T)`` the credit module's advantages.
        module: The wrapper to run (a multi-process run's DDP module) or None.
        entropy_grad: Whether the entropies keep their graph (an entropy bonus).
        graph_for_all: Keep every row's graph (an entropy bonus, a KL penalty, or processes that must all run
            the same backward pass).

    Returns:
        A :class:`ForwardOutput` with ``logprobs``, ``entropies`` and ``mask`` for all ``b`` rows, in order.
    """

    def run(rows: Tensor | None) -> ForwardOutput:
        picked = (lambda x: x) if rows is None else (lambda x: x[rows])
        return policy.forward_logprobs(
            picked(input_ids),
            picked(attention_mask),
            module=module,
            score_mask=picked(mask),
            entropy_grad=entropy_grad,
        )

    live = rows_with_gradient(advantages, mask)  # (b,)
    if graph_for_all or bool(live.all()):
        return run(None)  # the minibatch as it is: no copy
    live_rows, dead_rows = live.nonzero()[:, 0], (~live).nonzero()[:, 0]
    parts: list[tuple[Tensor, ForwardOutput]] = []
    if len(live_rows):
        parts.append((live_rows, run(live_rows)))
    with torch.no_grad():
        parts.append((dead_rows, run(dead_rows)))
    first = parts[0][1]
    out = ForwardOutput(
        logprobs=first.logprobs.new_zeros(input_ids.shape),
        mask=torch.zeros(input_ids.shape, dtype=torch.bool, device=first.mask.device),
        entropies=first.logprobs.new_zeros(input_ids.shape),
    )
    for rows, part in parts:  # out-of-place copies: the live rows' graph goes through
        rows = rows.to(out.mask.device)
        out.logprobs = out.logprobs.index_copy(0, rows, part.logprobs)
        out.mask = out.mask.index_copy(0, rows, part.mask)
        assert part.entropies is not None
        out.entropies = out.entropies.index_copy(0, rows, part.entropies)
    return out
