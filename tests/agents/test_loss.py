"""Loss functions: aggregation modes, asymmetric clipping, DIS, gradients, KL estimators, value loss (hand cases);
the actor-loss registry."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from creditgym.agents.train import loss as loss_module
from creditgym.agents.train.config import TrainConfig, resolve
from creditgym.agents.train.loss import (
    AGG_MODES,
    DIS_RANGE,
    actor_loss,
    aggregate,
    available_losses,
    dis_loss,
    get_loss,
    kl_penalty,
    policy_loss,
    register_loss,
    value_loss,
)

# two sequences of 3 and 1 policy tokens, and a padding row
LOSS = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[True, True, True, False], [True, False, False, False], [False] * 4])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),  # 2.5: every token weighs the same
        ("seq-mean-token-mean", (2 + 4) / 2),  # 3.0: the short sequence's token weighs 3x more
        ("seq-mean-token-sum", (6 + 4) / 2),  # 5.0
    ],
)
def test_aggregation_modes(mode: str, expected: float) -> None:
    assert aggregate(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_aggregation_ignores_masked_garbage_and_empty_masks() -> None:
    garbage = LOSS.clone()
    garbage[~MASK] = float("nan")
    for mode in AGG_MODES:
        assert aggregate(garbage, MASK, mode).item() == aggregate(LOSS, MASK, mode).item()
        x = torch.full((2, 3), float("inf"), requires_grad=True)
        out = aggregate(x, torch.zeros(2, 3, dtype=torch.bool), mode)
        out.backward()
        assert out.item() == 0.0 and x.grad is not None and (x.grad == 0).all()


def test_aggregation_errors() -> None:
    with pytest.raises(
        ValueError, match=r"unknown loss aggregation mode 'mean'; expected one of \['token-mean'"
    ):
        aggregate(LOSS, MASK, "mean")
    with pytest.raises(ValueError, match="bool mask of the same shape"):
        aggregate(LOSS, MASK.float(), "token-mean")


def clip_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rho = torch.tensor([[1.5, 0.5, 1.5, 0.5, 1.25, 3.0]])
    A = torch.tensor([[1.0, -1.0, -1.0, 1.0, 1.0, 5.0]])
    mask = torch.tensor([[True, True, True, True, True, False]])
    old = torch.full((1, 6), -2.0)
    logprobs = (old + rho.log()).requires_grad_()
    return logprobs, old, A, mask


def test_asymmetric_clipping_hand_case() -> None:
    logprobs, old, A, mask = clip_case()
    loss, metrics = policy_loss(logprobs, old, A, mask, clip_low=0.2, clip_high=0.28)
    # per token -min(rho A, clip(rho, 0.8, 1.28) A):
    #   rho 1.5,  A +1 -> clipped high: -1.28      rho 0.5, A -1 -> clipped low: +0.8
    #   rho 1.5,  A -1 -> not clipped:  +1.5       rho 0.5, A +1 -> not clipped: -0.5
    #   rho 1.25, A +1 -> inside [0.8, 1.28] (clipped under a symmetric 0.2): -1.25
    expected = [-1.28, 0.8, 1.5, -0.5, -1.25]
    assert loss.item() == pytest.approx(sum(expected) / 5)
    assert metrics["actor/clip_frac_low"] == pytest.approx(1 / 5)
    assert metrics["actor/clip_frac_high"] == pytest.approx(1 / 5)
    assert metrics["actor/ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.5 + 0.5 + 1.25) / 5)
    loss.backward()
    assert logprobs.grad is not None
    # d/dlogp of -rho A / 5 = -rho A / 5 where unclipped; exactly 0 where clipped or masked
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, 0.0, 1.5 / 5, -0.5 / 5, -1.25 / 5, 0.0]]))
    symmetric, _ = policy_loss(logprobs, old, A, mask, clip_low=0.2, clip_high=0.2)
    assert symmetric.item() == pytest.approx((-1.2 + 0.8 + 1.5 - 0.5 - 1.2) / 5)


def test_gradients_flow_only_through_logprobs() -> None:
    gen = torch.Generator().manual_seed(0)
    mask = torch.rand(4, 7, generator=gen) < 0.6
    logprobs = (-torch.rand(4, 7, generator=gen)).requires_grad_()
    old = (-torch.rand(4, 7, generator=gen)).requires_grad_()
    A = torch.randn(4, 7, generator=gen).requires_grad_()
    with torch.no_grad():  # garbage under the mask (padding log-probs can be -inf)
        logprobs[~mask] = -float("inf")
        old[~mask] = float("nan")
    for agg in AGG_MODES:
        logprobs.grad = None
        loss, metrics = policy_loss(logprobs, old, A, mask, clip_low=0.2, clip_high=0.28, agg=agg)
        loss.backward()
        assert torch.isfinite(loss) and all(math.isfinite(v) for v in metrics.values())
        assert logprobs.grad is not None and torch.isfinite(logprobs.grad).all()
        assert (logprobs.grad[~mask] == 0).all() and (logprobs.grad[mask] != 0).any()
        assert old.grad is None and A.grad is None


def test_on_policy_ratio_is_one() -> None:
    logprobs = -torch.rand(3, 5)
    loss, metrics = policy_loss(
        logprobs, logprobs.clone(), torch.ones(3, 5), torch.ones(3, 5, dtype=torch.bool)
    )
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["actor/approx_kl"] == 0.0 and metrics["actor/ratio_mean"] == pytest.approx(1.0)
    assert metrics["actor/clip_frac_low"] == 0.0 and metrics["actor/clip_frac_high"] == 0.0


def test_policy_loss_validation() -> None:
    x, mask = torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="clip_low < 1"):
        policy_loss(x, x, x, mask, clip_low=1.0)
    with pytest.raises(ValueError, match=r"same shape .*'advantages': \(2, 2\)"):
        policy_loss(x, x, torch.zeros(2, 2), mask)
    with pytest.raises(TypeError, match=r"mask: expected a bool tensor.*\.bool\(\)"):
        policy_loss(x, x, x, mask.float())


def dis_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ratios on both sides of and exactly at DIS's range [0.7, 6.0], both signs of A, a masked token."""
    rho = [1.5, 0.5, 0.7, 6.0, 7.0, 3.0, 0.69, 2.0]
    A = [1.0, -1.0, 2.0, -0.5, 1.0, -1.0, 1.0, 9.0]
    old = torch.full((1, 8), -1.0, dtype=torch.float64)
    logprobs = (old + torch.tensor([[math.log(r) for r in rho]], dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[True] * 7 + [False]])
    return logprobs, old, torch.tensor([A], dtype=torch.float64), mask


def test_dis_gradient_and_range_mask_by_hand() -> None:
    logprobs, old, A, mask = dis_case()
    assert DIS_RANGE == (0.7, 6.0)
    loss, metrics = dis_loss(logprobs, old, A, mask)
    # kept: 0.7 <= rho <= 6.0 (ends included) -> tokens 0, 2, 3, 5; masked: 0.5, 7.0, 0.69 and the padding
    # l_t = -m rho A: -1.5, 0, -1.4, +3.0, 0, +3.0, 0 over 7 policy tokens (token-mean)
    assert loss.item() == pytest.approx((-1.5 - 1.4 + 3.0 + 3.0) / 7)
    loss.backward()
    assert logprobs.grad is not None
    # d l_t / d logp_t = -m_t rho_t A_t / 7: the stop-gradient weight times the score function
    expected = torch.tensor([[-1.5, 0.0, -1.4, 3.0, 0.0, 3.0, 0.0, 0.0]], dtype=torch.float64) / 7
    torch.testing.assert_close(logprobs.grad, expected)
    assert metrics["actor/is_mask_frac_low"] == pytest.approx(2 / 7)
    assert metrics["actor/is_mask_frac_high"] == pytest.approx(1 / 7)
    # PPO clips where DIS keeps the gradient: rho 1.5 with A > 0 (and rho 3.0 with A < 0 stays in both)
    logprobs.grad = None
    policy_loss(logprobs, old, A, mask, clip_low=0.2, clip_high=0.28)[0].backward()
    assert logprobs.grad is not None and logprobs.grad[0, 0] == 0 and expected[0, 0] != 0


def test_dis_is_the_gradient_of_the_stop_gradient_weighted_log_likelihood() -> None:
    gen = torch.Generator().manual_seed(1)
    mask = torch.rand(3, 6, generator=gen) < 0.8
    old = -torch.rand(3, 6, generator=gen, dtype=torch.float64)
    logprobs = (old + 0.8 * torch.randn(3, 6, generator=gen, dtype=torch.float64)).requires_grad_()
    A = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    for agg in AGG_MODES:
        loss, _ = dis_loss(logprobs, old, A, mask, is_range=(0.5, 2.0), agg=agg)
        (grad,) = torch.autograd.grad(loss, logprobs)
        w = (logprobs - old).exp().detach()
        keep = (w >= 0.5) & (w <= 2.0)
        reference = aggregate(-torch.where(keep, w, 0.0) * A * logprobs, mask, agg)  # -sg(m rho) A log pi
        (want,) = torch.autograd.grad(reference, logprobs)
        torch.testing.assert_close(grad, want)
        assert ((w < 0.5) | (w > 2.0)).any() and (grad[mask & ~keep] == 0).all()


def test_dis_on_policy_is_reinforce_and_validation() -> None:
    logprobs = (-torch.rand(2, 4)).requires_grad_()
    A, mask = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, 1.0, -1.0]]), torch.ones(2, 4, dtype=torch.bool)
    loss, metrics = dis_loss(logprobs, logprobs.detach().clone(), A, mask)
    loss.backward()
    assert logprobs.grad is not None
    torch.testing.assert_close(logprobs.grad, -A / 8)  # rho = 1: plain REINFORCE, token-mean
    assert metrics["actor/ratio_mean"] == pytest.approx(1.0) and metrics["actor/is_mask_frac_low"] == 0.0
    with pytest.raises(ValueError, match="0 <= lo <= 1 <= hi"):
        dis_loss(logprobs, logprobs, A, mask, is_range=(1.2, 6.0))


def test_actor_loss_follows_the_config() -> None:
    logprobs, old, A, mask = dis_case()
    for name, fn in (("ppo", policy_loss), ("dis", dis_loss)):
        cfg = TrainConfig(loss=name, clip_low=0.1, clip_high=0.3, loss_agg="seq-mean-token-sum")
        kwargs = {"clip_low": 0.1, "clip_high": 0.3} if name == "ppo" else {}
        got, _ = actor_loss(logprobs, old, A, mask, cfg)
        want, _ = fn(logprobs, old, A, mask, agg="seq-mean-token-sum", **kwargs)  # type: ignore[operator]
        assert got.item() == want.item()
    assert TrainConfig().loss is None  # the credit module's own: the trainer resolves it (pact: dis)
    with pytest.raises(ValueError, match=r"unknown actor loss None"):
        actor_loss(logprobs, old, A, mask, TrainConfig())
    with pytest.raises(ValueError, match=r"unknown actor loss 'grpo'; known losses: \['dis', 'ppo'\]"):
        resolve(TrainConfig(loss="grpo"))
    with pytest.raises(ValueError, match=r"TrainConfig\.loss must be an actor loss name"):
        TrainConfig(loss="no such loss")


@pytest.fixture
def scratch_losses(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the loss registry for one test: what it registers is gone after it."""
    monkeypatch.setattr(loss_module, "_LOSSES", dict(loss_module._LOSSES))


def test_a_registered_loss_is_found_by_name_and_runs_with_the_shared_signature(scratch_losses: None) -> None:
    logprobs, old, A, mask = dis_case()

    @register_loss("half_ppo", proportional_to_advantage=True)
    def half_ppo(
        logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, cfg: TrainConfig
    ) -> tuple[Tensor, dict[str, float]]:
        loss, metrics = policy_loss(logprobs, old_logprobs, advantages / 2, mask, agg=cfg.loss_agg)
        return loss, {**metrics, "actor/half": 1.0}

    assert "half_ppo" in available_losses() and get_loss("half_ppo").fn is half_ppo
    assert resolve(TrainConfig(loss="half_ppo")).loss == "half_ppo"
    got, metrics = actor_loss(logprobs, old, A, mask, TrainConfig(loss="half_ppo"))
    want, _ = policy_loss(logprobs, old, A / 2, mask)
    assert got.item() == want.item() and metrics["actor/half"] == 1.0


def test_unknown_and_duplicate_losses_say_what_is_known(scratch_losses: None) -> None:
    with pytest.raises(ValueError, match=r"unknown actor loss 'sgd'; known losses: \['dis', 'ppo'\]"):
        get_loss("sgd")
    with pytest.raises(ValueError, match=r"importing module 'no_such_module' failed.*ModuleNotFoundError"):
        get_loss("no_such_module:sgd")
    with pytest.raises(ValueError, match=r"module 'math' imported, but it registers no actor loss 'sgd'"):
        get_loss("math:sgd")
    with pytest.raises(ValueError, match=r"actor loss 'ppo' is already registered"):
        register_loss("ppo")(lambda *args: (torch.zeros(()), {}))
    with pytest.raises(ValueError, match=r"a Python identifier like 'ppo', got 'my loss'"):
        register_loss("my loss")
    assert available_losses() == ["dis", "ppo"]  # the failed registrations left nothing behind


def test_kl_penalty_hand_values() -> None:
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]])
    ref = torch.tensor([[-2.0, -1.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    # log r = ref - logp = [-1, +1, (masked)]
    torch.testing.assert_close(kl_penalty(logprobs, ref, mask, "k1"), torch.tensor([[1.0, -1.0, 0.0]]))
    torch.testing.assert_close(kl_penalty(logprobs, ref, mask, "k2"), torch.tensor([[0.5, 0.5, 0.0]]))
    k3 = torch.tensor([[math.exp(-1) - 1 + 1, math.exp(1) - 1 - 1, 0.0]])
    torch.testing.assert_close(kl_penalty(logprobs, ref, mask), k3)
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k4'; expected one of \['k1', 'k2', 'k3'\]"):
        kl_penalty(logprobs, ref, mask, "k4")


def test_kl_penalty_k3_nonnegative_and_unbiased() -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5, generator=gen), 0)
    q = torch.softmax(torch.randn(5, generator=gen), 0)
    tokens = torch.multinomial(p, 200_000, replacement=True, generator=gen)[None]
    mask = torch.ones_like(tokens, dtype=torch.bool)
    k3 = kl_penalty(p.log()[tokens], q.log()[tokens], mask, "k3")
    k1 = kl_penalty(p.log()[tokens], q.log()[tokens], mask, "k1")
    exact = (p * (p.log() - q.log())).sum()
    assert (k3 >= 0).all()
    assert k3.mean().item() == pytest.approx(exact.item(), rel=0.05)
    assert k1.mean().item() == pytest.approx(exact.item(), rel=0.05)


def test_value_loss_mse_and_clip() -> None:
    values = torch.tensor([[0.5, 7.0]], requires_grad=True)
    returns, mask = torch.tensor([[1.0, 0.0]]), torch.tensor([[True, False]])
    loss, metrics = value_loss(values, returns, mask)
    assert loss.item() == pytest.approx(0.5 * 0.25)
    assert metrics["critic/value_mean"] == pytest.approx(0.5)
    # clipped: V_old = 0, clip 0.2 -> V_clip = 0.2, (0.2 - 1)^2 = 0.64 > 0.25, so the clipped term is taken
    loss, metrics = value_loss(values, returns, mask, clip=0.2, old_values=torch.zeros(1, 2))
    assert loss.item() == pytest.approx(0.5 * 0.64)
    assert metrics["critic/vf_clip_frac"] == 1.0
    loss.backward()
    assert values.grad is not None and (values.grad == 0).all()  # the clipped branch has no gradient
    with pytest.raises(ValueError, match="value clipping needs kind='mse', a clip > 0 and old_values"):
        value_loss(values, returns, mask, clip=0.2)
    with pytest.raises(ValueError, match="unknown value loss kind 'huber'"):
        value_loss(values, returns, mask, kind="huber")


def test_value_loss_bce_takes_logits_and_soft_targets() -> None:
    logits = torch.tensor([[0.0, 2.0, -1.0]], requires_grad=True)
    returns = torch.tensor([[1.0, 1.5, 0.0]])  # PACT's IS targets rho * R may exceed 1
    mask = torch.tensor([[True, True, False]])
    loss, metrics = value_loss(logits, returns, mask, kind="bce")
    sig = torch.sigmoid(torch.tensor(2.0))
    expected = (math.log(2) + (-1.5 * sig.log() + 0.5 * (1 - sig).log()).item()) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert metrics["critic/value_mean"] == pytest.approx((0.5 + sig.item()) / 2)
    loss.backward()
    assert logits.grad is not None
    # gradient in logit space is (sigmoid(z) - R) / n
    torch.testing.assert_close(logits.grad, torch.tensor([[(0.5 - 1.0) / 2, (sig.item() - 1.5) / 2, 0.0]]))
