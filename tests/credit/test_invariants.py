"""Invariants every registered credit module satisfies (ARCHITECTURE.md, credit/; STYLE principle 7).

Parametrised over the whole registry, so a new module (cort, cast, compo, pact) is covered as soon as
``creditgym.credit`` imports it: its declared signals are filled with plausible random tensors.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from creditgym import credit
from creditgym.credit import CreditBatch, CreditModule

MODULES = credit.available()
SIGNAL_PAIRS = [(name, signal) for name in MODULES for signal in credit.get(name).signals]
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")],
    ),
]
B, T = 10, 16
GROUP_IDS = [
    7,
    7,
    7,
    7,
    3,
    3,
    3,
    3,
    5,
    3,
]  # two groups of 4, a singleton (row 8), a padding row (row 9) in group 3


#: trailing dimensions of signals that are more than (B, T): mc_values holds V at each step's start and end
EXTRA_DIMS = {"mc_values": (2,)}


def _signal(name: str, shape: tuple[int, int], gen: torch.Generator) -> torch.Tensor:
    """A plausible random value for a declared signal: log-probs negative, statistics and values in (0, 1)."""
    if name == "token_ids":  # a few ids, so tokens recur across the rows of a group
        return torch.randint(0, 6, shape, generator=gen)
    u = torch.rand((*shape, *EXTRA_DIMS.get(name, ())), generator=gen, dtype=torch.float64).float()
    return -(3.0 * u + 0.01) if name.endswith("logprobs") else u.clamp(1e-3, 1 - 1e-3)


def random_batch(module: CreditModule[object], *, seed: int = 0, equal_rewards: bool = False) -> CreditBatch:
    """Rows: prompt, a policy turn, env tokens, a second policy turn (maybe empty), padding; the last row is all
    padding. Rewards sit on the last policy token (and sometimes on the first turn's last token)."""
    gen = torch.Generator().manual_seed(seed)

    def randint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (), generator=gen))

    mask = torch.zeros(B, T, dtype=torch.bool)
    segments = torch.zeros(B, T, dtype=torch.long)
    rewards = torch.zeros(B, T)
    group_reward = {g: float(torch.rand((), generator=gen)) for g in set(GROUP_IDS)}
    for b in range(B - 1):
        prompt, turn1, env, turn2 = randint(1, 3), randint(1, 5), randint(0, 3), randint(0, 4)
        mask[b, prompt : prompt + turn1] = True
        mask[b, prompt + turn1 + env : prompt + turn1 + env + turn2] = True
        segments[b, prompt + turn1 :] = 1
        r = group_reward[GROUP_IDS[b]] if equal_rewards else float(randint(0, 1))
        last = int(mask[b].nonzero().max())
        rewards[b, last] = r
        if turn2 > 0 and not equal_rewards and randint(0, 1):
            rewards[b, prompt + turn1 - 1] = 0.5 * float(torch.rand((), generator=gen))
    signals = {name: _signal(name, (B, T), gen) for name in module.signals if name != "values"}
    return CreditBatch(
        token_rewards=rewards,
        policy_mask=mask,
        group_ids=torch.tensor(GROUP_IDS),
        old_logprobs=_signal("old_logprobs", (B, T), gen),
        segment_ids=segments,
        values=_signal("values", (B, T), gen) if "values" in module.signals else None,
        signals=signals,
        step=3,
        total_steps=10,
    )


def perturb_masked(batch: CreditBatch, seed: int = 1) -> CreditBatch:
    """The same batch with everything under the mask rewritten, and the padding row moved to another group."""
    gen = torch.Generator().manual_seed(seed)
    off = ~batch.policy_mask

    def rewrite(x: torch.Tensor) -> torch.Tensor:
        noise = (10.0 * torch.randn(x.shape, generator=gen, dtype=torch.float64)).to(x.dtype)
        index = off if x.dim() == 2 else off.unsqueeze(-1).expand_as(x)
        return torch.where(index, noise, x)

    group_ids = batch.group_ids.clone()
    group_ids[-1] = 99
    return dataclasses.replace(
        batch,
        old_logprobs=rewrite(batch.old_logprobs),
        values=None if batch.values is None else rewrite(batch.values),
        signals={k: rewrite(v) for k, v in batch.signals.items()},
        segment_ids=torch.where(off, 42, batch.segment_ids) if batch.segment_ids is not None else None,
        group_ids=group_ids,
    )


def to_device(batch: CreditBatch, device: str) -> CreditBatch:
    move = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    for k, v in move.items():
        if isinstance(v, torch.Tensor):
            move[k] = v.to(device)
    move["signals"] = {k: v.to(device) for k, v in batch.signals.items()}
    return CreditBatch(**move)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODULES)
def test_shape_mask_and_metrics(name: str, device: str) -> None:
    module = credit.get(name)
    for seed in range(5):
        batch = to_device(random_batch(module, seed=seed), device)
        out = module.fn(batch, module.config())
        assert out.advantages.shape == (B, T)
        assert out.advantages.is_floating_point()
        assert torch.isfinite(out.advantages).all()
        assert (out.advantages[~batch.policy_mask] == 0).all()
        assert (out.advantages[-1] == 0).all()  # the padding row
        assert out.advantages.requires_grad is False
        if module.critic:
            assert out.returns is not None
        if out.returns is not None:
            assert out.returns.shape == (B, T)
            assert (out.returns[~batch.policy_mask] == 0).all()
        for key, value in out.metrics.items():
            assert key.startswith(f"credit/{name}/"), key
            assert isinstance(value, float), (key, type(value))
        for key, x in out.diagnostics.items():  # named (B, T) diagnostics: "credit" or "mark/<name>"
            assert key == credit.CREDIT or key.startswith(credit.MARK), key
            assert x.shape == (B, T) and torch.isfinite(x).all() and (x[~batch.policy_mask] == 0).all()
        module(batch)  # the registry wrapper's contract checks pass too


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODULES)
def test_unchanged_by_anything_under_the_mask(name: str, device: str) -> None:
    module = credit.get(name)
    for seed in range(5):
        batch = to_device(random_batch(module, seed=seed), device)
        other = to_device(perturb_masked(random_batch(module, seed=seed), seed=seed + 100), device)
        assert not torch.equal(batch.old_logprobs, other.old_logprobs)
        out, out2 = module.fn(batch, module.config()), module.fn(other, module.config())
        assert torch.equal(out.advantages, out2.advantages)
        if out.returns is not None:
            assert out2.returns is not None
            assert torch.equal(out.returns, out2.returns)
        assert out.diagnostics.keys() == out2.diagnostics.keys()
        for key, x in out.diagnostics.items():
            assert torch.equal(x, out2.diagnostics[key]), key


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODULES)
def test_finite_when_group_rewards_are_equal(name: str, device: str) -> None:
    module = credit.get(name)
    for seed in range(5):
        batch = to_device(random_batch(module, seed=seed, equal_rewards=True), device)
        out = module.fn(batch, module.config())
        assert torch.isfinite(out.advantages).all()
        assert out.returns is None or torch.isfinite(out.returns).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODULES)
def test_deterministic(name: str, device: str) -> None:
    module = credit.get(name)
    batch = to_device(random_batch(module, seed=3), device)
    out, out2 = module.fn(batch, module.config()), module.fn(batch, module.config())
    assert torch.equal(out.advantages, out2.advantages)
    assert (out.returns is None) == (out2.returns is None)
    if out.returns is not None and out2.returns is not None:
        assert torch.equal(out.returns, out2.returns)
    assert out.metrics == out2.metrics


@pytest.mark.parametrize("name", MODULES)
def test_float64_inputs(name: str) -> None:
    module = credit.get(name)
    batch = random_batch(module, seed=4)
    wide = dataclasses.replace(
        batch,
        token_rewards=batch.token_rewards.double(),
        old_logprobs=batch.old_logprobs.double(),
        values=None if batch.values is None else batch.values.double(),
        signals={k: v.double() if v.is_floating_point() else v for k, v in batch.signals.items()},
    )
    out, out64 = module.fn(batch, module.config()), module.fn(wide, module.config())
    torch.testing.assert_close(out64.advantages.float(), out.advantages, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", MODULES)
def test_config_is_frozen_with_valid_defaults(name: str) -> None:
    module = credit.get(name)
    cfg = module.config()
    assert dataclasses.is_dataclass(cfg)
    assert module.config.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for f in dataclasses.fields(cfg):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(cfg, f.name, getattr(cfg, f.name))


@pytest.mark.parametrize(("name", "signal"), SIGNAL_PAIRS)
def test_missing_signal_raises_naming_it(name: str, signal: str) -> None:
    module = credit.get(name)
    batch = random_batch(module)
    if signal == "values":
        batch = dataclasses.replace(batch, values=None)
    else:
        batch = dataclasses.replace(batch, signals={k: v for k, v in batch.signals.items() if k != signal})
    with pytest.raises(ValueError, match=signal):
        module.fn(batch, module.config())
