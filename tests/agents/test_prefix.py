"""Shared prompts in the training pass: each distinct prompt runs once, and nothing the loss sees changes."""

from __future__ import annotations

import functools

import pytest
import torch

from creditgym.agents.train import prefix
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import ProceduralMath


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return load_policy("creditgym/tiny", device="cpu")


@pytest.fixture(scope="module")
def policy64() -> Policy:
    """The same model in float64, to compare two summation orders where their rounding is far below any bug."""
    return load_policy("creditgym/tiny", device="cpu", dtype=torch.float64)


@pytest.fixture(scope="module")
def grouped(policy: Policy) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three prompts of different lengths x three sampled responses each, right-padded as the trainer pads, with
    a hole in one row's scored tokens (an observation inside a multi-turn response)."""
    env = MathEnv(policy.tokenizer)
    prompts = [env.prompt_tokens(t) for t in ProceduralMath(levels=(1, 2, 3), split="test").take(3, seed=5)]
    assert len({len(p) for p in prompts}) > 1
    ctx = [p for p in prompts for _ in range(3)]
    out = policy.sample(ctx, max_new_tokens=12, generator=torch.Generator().manual_seed(2))
    rows = [c + t for c, t in zip(ctx, out.tokens, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    att = torch.zeros_like(ids)
    scored = torch.zeros_like(ids, dtype=torch.bool)
    for i, (c, r) in enumerate(zip(ctx, rows, strict=True)):
        ids[i, : len(r)], att[i, : len(r)], scored[i, len(c) : len(r)] = torch.tensor(r), 1, True
    longest = int(att.sum(-1).argmax())
    start = len(ctx[longest])
    scored[longest, start + 1 : start + 3] = False  # tokens the policy did not choose, between its own
    return ids, att, scored


def _pass(policy: Policy, ids, att, scored, share: bool, monkeypatch: pytest.MonkeyPatch):
    """Log-probs, entropies and every parameter's gradient of a loss over the scored tokens."""
    import creditgym.agents.train.policy as policy_module

    calls: list[bool] = []

    def spy(*args, **kwargs):
        result = prefix.shared_prefix_pass(*args, **kwargs) if share else None
        calls.append(result is not None)
        return result

    monkeypatch.setattr(policy_module, "shared_prefix_pass", spy)
    policy.model.zero_grad(set_to_none=True)
    out = policy.forward_logprobs(ids, att, score_mask=scored)
    weights = torch.linspace(-1.0, 1.0, ids.shape[0])[:, None]  # advantages of both signs
    (-(out.logprobs * weights * out.mask).sum() - out.entropies.sum()).backward()
    grads = [p.grad.clone() for p in policy.model.parameters()]
    policy.model.zero_grad(set_to_none=True)
    return out, grads, calls


def test_sharing_the_prompts_gives_the_plain_passs_values_and_gradients(
    policy64: Policy, grouped, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids, att, scored = grouped
    plain, plain_grads, calls = _pass(policy64, ids, att, scored, False, monkeypatch)
    assert calls == [False]
    shared, shared_grads, calls = _pass(policy64, ids, att, scored, True, monkeypatch)
    assert calls == [True]  # the shared path ran
    assert torch.equal(shared.mask, plain.mask) and shared.mask.any()
    assert not shared.mask[
        ids.shape[0] - 1, : int(scored[-1].int().argmax())
    ].any()  # the prompt is not scored

    # The two layouts sum in different orders (attention over left-padded prompts, gradients gathered from one
    # prompt pass), which in float32 differs by CPU. In float64 that reordering costs ~eps64; what is left is
    # the head's log-softmax, which the policy runs in float32 on the same rows in the same order: a float64
    # difference can flip the rounding of a logit, one ulp per float32 op (cast, max, exp, sum, log and their
    # backward), so each tensor differs by at most a few eps32 of its largest entry; 16 allows 2 ulps x 8 ops.
    def bound(x: torch.Tensor) -> float:
        return 16 * torch.finfo(torch.float32).eps * float(x.detach().abs().max())

    torch.testing.assert_close(shared.logprobs, plain.logprobs, atol=bound(plain.logprobs), rtol=0)
    torch.testing.assert_close(shared.entropies, plain.entropies, atol=bound(plain.entropies), rtol=0)
    for a, b in zip(shared_grads, plain_grads, strict=True):
        assert a.dtype == torch.float64
        torch.testing.assert_close(a, b, atol=bound(b), rtol=0)


def test_each_distinct_prompt_runs_once(policy: Policy, grouped, monkeypatch: pytest.MonkeyPatch) -> None:
    ids, att, scored = grouped
    widths: list[tuple[int, int]] = []
    base = policy.model.base_model
    forward = base.forward

    @functools.wraps(forward)  # the same signature, so the cache goes in under the name forward takes
    def counted(*args, **kwargs):
        widths.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(base, "forward", counted)
    shared = prefix.shared_prefix_pass(base, ids, att, scored)
    assert shared is not None
    prompts, rest = widths
    assert prompts[0] == 3 and rest[0] == ids.shape[0]  # 3 prompts once, then 9 responses on their caches
    assert prompts[1] + rest[1] == shared.input_ids.shape[1] and rest[1] < ids.shape[1]
    assert int(shared.score_mask.sum()) == int(scored.sum())


def test_nothing_shared_or_unusual_layouts_take_the_plain_pass(policy: Policy, grouped) -> None:
    ids, att, scored = grouped
    base = policy.model.base_model
    distinct = [0, 3, 6]  # one row of each prompt
    assert prefix.shared_prefix_pass(base, ids[distinct], att[distinct], scored[distinct]) is None
    no_scored = scored.clone()
    no_scored[4] = False  # a row without a scored token
    assert prefix.shared_prefix_pass(base, ids, att, no_scored) is None
    left = torch.flip(att, dims=[1])  # left padding
    assert prefix.shared_prefix_pass(base, ids, left, scored) is None
