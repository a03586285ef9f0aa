"""CoRT (arXiv 2607.25659): hand-computed weights, the exact projection onto [w_min, w_max] with mean 1 (adversarial
inputs, against a per-row loop), the standardised contrast, span metrics, GRPO total and sign kept, ramp,
ablations, non-finite signals."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from creditgym import credit
from creditgym.credit import CoRTConfig, CreditBatch, GRPOConfig
from creditgym.credit.cort import cort, cort_logits, cort_ramp, cort_weights, project_weights, span_metrics
from creditgym.credit.grpo import grpo

ON = CoRTConfig(ramp_start=0.0, ramp_end=0.0)  # alpha = 1 from step 0
RAW = CoRTConfig(ramp_start=0.0, ramp_end=0.0, standardize=False, tau=1.0)  # the raw contrast, tau = 1


def make_batch(
    rewards: list[float],
    groups: list[int],
    mask: list[list[bool]],
    old: list[list[float]],
    cf: list[list[float]],
    *,
    spans: list[list[float]] | None = None,
    step: int = 0,
    total_steps: int = 1,
) -> CreditBatch:
    m = torch.tensor(mask)
    last = torch.stack([row.nonzero().max() if row.any() else torch.tensor(0) for row in m])
    r = torch.zeros(m.shape)
    r[torch.arange(len(rewards)), last] = torch.tensor(rewards)
    r = torch.where(m, r, 0.0)
    return CreditBatch(
        r,
        m,
        torch.tensor(groups),
        torch.tensor(old),
        signals={
            "counterfactual_logprobs": torch.tensor(cf),
            "criterion_spans": torch.zeros(m.shape) if spans is None else torch.tensor(spans),
        },
        step=step,
        total_steps=total_steps,
    )


def random_batch(seed: int, *, step: int = 5, total_steps: int = 10) -> CreditBatch:
    gen = torch.Generator().manual_seed(seed)
    B, T = 8, 12
    mask = torch.rand(B, T, generator=gen) < 0.8
    mask[:, 0] = False  # a prompt token
    r = torch.zeros(B, T)
    for b in range(B):
        r[b, int(mask[b].nonzero().max())] = float(torch.randint(0, 2, (), generator=gen))
    old = -3 * torch.rand(B, T, generator=gen)
    cf = -3 * torch.rand(B, T, generator=gen)
    return CreditBatch(
        r,
        mask,
        torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
        old,
        signals={
            "counterfactual_logprobs": cf,
            "criterion_spans": (torch.rand(B, T, generator=gen) < 0.3).float(),
        },
        step=step,
        total_steps=total_steps,
    )


def test_registered_with_its_signal() -> None:
    module = credit.get("cort")
    assert module.signals == ("counterfactual_logprobs", "criterion_spans") and not module.critic
    assert module.config is CoRTConfig


def test_hand_computed_weights() -> None:
    # one response of 3 policy tokens after a prompt token; delta = [ln 2, 0, 0] -> u = 3 * [2, 1, 1] / 4
    mask = [[False, True, True, True], [False, True, True, True]]
    old = [[0.0, math.log(2.0) - 1.0, -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    cf = [[0.0, -1.0, -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    batch = make_batch([1.0, 0.0], [0, 0], mask, old, cf)
    out = cort(batch, RAW)
    # GRPO: r = [1, 0], mean 0.5, unbiased std = sqrt(0.5); A = +-0.5 / (sqrt(0.5) + 1e-6)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    expected = torch.tensor([[0.0, 1.5 * a, 0.75 * a, 0.75 * a], [0.0, -a, -a, -a]])
    torch.testing.assert_close(out.advantages, expected)
    assert out.metrics["credit/cort/alpha"] == 1.0
    assert out.metrics["credit/cort/weight_max"] == pytest.approx(1.5)
    assert out.metrics["credit/cort/weight_min"] == pytest.approx(0.75)


def test_projection_by_hand_keeps_the_lower_bound() -> None:
    # delta = [9, 0] -> s = [5, 0]: w = clip(exp(s - m)) with mean 1. w_1 at w_min = 0.25 forces w_0 = 1.75 (free:
    # exp(5 - m) = 1.75 gives exp(-m) = 0.0118 < 0.25, so w_1 is indeed clipped). 4d4ca92 renormalised the
    # clipped [1.9866, 0.25] once, to [1.7764, 0.2236]: below w_min.
    delta = torch.tensor([[9.0, 0.0]])
    valid = torch.tensor([[True, True]])
    u0 = 2 * math.exp(5) / (math.exp(5) + 1)
    raw = cort_weights(delta, valid, dataclasses.replace(RAW, normalize=False))
    torch.testing.assert_close(raw, torch.tensor([[u0, 0.25]]))  # the ablation: clip(T * softmax), unchanged
    torch.testing.assert_close(cort_weights(delta, valid, RAW), torch.tensor([[1.75, 0.25]]))


def test_projection_by_hand_keeps_the_upper_bound() -> None:
    # delta = [5, 0, 0], w_max = 2: w_0 = 2 (clipped) and w_1 = w_2 = exp(-m) = 0.5 (free, exp(5 - m) = 74 > 2).
    # 4d4ca92: u = 3 [e^5, 1, 1] / (e^5 + 2) -> clip [2, 0.25, 0.25] -> once renormalised [2.4, 0.3, 0.3] > w_max.
    delta = torch.tensor([[5.0, 0.0, 0.0]], dtype=torch.float64)
    w = cort_weights(delta, torch.ones(1, 3, dtype=torch.bool), dataclasses.replace(RAW, w_max=2.0))
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 0.5]], dtype=torch.float64))


def reference_projection(z: list[float], w_min: float, w_max: float) -> list[float]:
    """One row, by a plain loop: bisection on the scale s of clip(s * exp(z)) until the mean is 1."""
    e = [math.exp(x - max(z)) for x in z]
    lo, hi = w_min / max(e), w_max / min(e)  # mean(clip(lo * e)) <= 1 <= mean(clip(hi * e))
    for _ in range(2000):
        mid = math.sqrt(lo * hi)
        if sum(min(max(mid * x, w_min), w_max) for x in e) / len(e) >= 1:
            hi = mid
        else:
            lo = mid
        if hi / lo - 1 < 1e-15:
            break
    return [min(max(hi * x, w_min), w_max) for x in e]


def adversarial_deltas() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, delta (B, T) float64, valid (B, T)): the cases a one-step clip-and-renormalise gets wrong, and edges."""
    gen = torch.Generator().manual_seed(0)
    T = 64
    one_hot = torch.full((1, T), -16.0, dtype=torch.float64)
    one_hot[0, 0] = 16.0
    cases = [
        ("one-hot peak", one_hot, torch.ones(1, T, dtype=torch.bool)),
        ("one-hot trough", -one_hot, torch.ones(1, T, dtype=torch.bool)),
        (
            "two tokens",
            torch.tensor([[16.0, -16.0]], dtype=torch.float64),
            torch.ones(1, 2, dtype=torch.bool),
        ),
        ("one token", torch.tensor([[7.0, 0.0]], dtype=torch.float64), torch.tensor([[True, False]])),
        ("constant", torch.full((1, 9), 3.0, dtype=torch.float64), torch.ones(1, 9, dtype=torch.bool)),
        ("heavy tail", 8 * torch.randn(4, T, generator=gen, dtype=torch.float64) ** 3, torch.ones(4, T) > 0),
        (
            "measured scale",
            2.3 + 3.7 * torch.randn(6, 200, generator=gen, dtype=torch.float64),
            torch.ones(6, 200) > 0,
        ),
        (
            "half masked",
            10 * torch.randn(5, T, generator=gen, dtype=torch.float64),
            torch.rand(5, T, generator=gen) < 0.5,
        ),
        (
            "empty row",
            torch.randn(2, 5, generator=gen, dtype=torch.float64),
            torch.tensor([[False] * 5, [True] * 5]),
        ),
        (
            "long",
            5 * torch.randn(1, 5000, generator=gen, dtype=torch.float64),
            torch.ones(1, 5000, dtype=torch.bool),
        ),
    ]
    return cases


BOUNDS = [(0.25, 4.0), (0.5, 2.0), (0.9, 1.1), (1.0, 3.0), (0.2, 1.0), (1.0, 1.0)]


@pytest.mark.parametrize(("w_min", "w_max"), BOUNDS)
@pytest.mark.parametrize("tau", [0.01, 1.0, 2.25])
@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("sign_aware", [False, True])
def test_projection_mean_one_within_bounds_on_adversarial_inputs(
    w_min: float, w_max: float, tau: float, standardize: bool, sign_aware: bool
) -> None:
    cfg = CoRTConfig(w_min=w_min, w_max=w_max, tau=tau, standardize=standardize, sign_aware=sign_aware)
    for name, delta, valid in adversarial_deltas():
        w = cort_weights(delta, valid, cfg)  # (B, T) float64
        assert w.dtype == torch.float64 and torch.isfinite(w).all(), name
        assert (w[~valid] == 1).all(), name
        assert (w[valid] >= w_min).all() and (w[valid] <= w_max).all(), name  # exact: no tolerance
        rows = valid.any(-1)
        mean = torch.where(valid, w, 0.0).sum(-1)[rows] / valid.sum(-1)[rows]
        torch.testing.assert_close(mean, torch.ones_like(mean), rtol=0, atol=1e-10, msg=name)
        ablation = cort_weights(
            delta, valid, dataclasses.replace(cfg, normalize=False)
        )  # clip(T softmax) only
        assert (ablation[valid] >= w_min).all() and (ablation[valid] <= w_max).all(), name
        # the order of the logits is kept (ties allowed where a bound clips)
        z = cort_logits(delta, valid, cfg)
        for b in range(delta.shape[0]):
            order = z[b][valid[b]].argsort()
            assert (w[b][valid[b]][order].diff() >= -1e-12).all(), name


@pytest.mark.parametrize(("w_min", "w_max"), BOUNDS)
def test_projection_equals_a_per_row_loop(w_min: float, w_max: float) -> None:
    for name, delta, valid in adversarial_deltas():
        if delta.shape[1] > 500:
            continue
        z = cort_logits(delta, valid, dataclasses.replace(RAW, w_min=w_min, w_max=w_max))
        w = project_weights(z, valid, w_min, w_max)
        for b in range(delta.shape[0]):
            if valid[b].any():
                ref = torch.tensor(
                    reference_projection(z[b][valid[b]].tolist(), w_min, w_max), dtype=torch.float64
                )
                torch.testing.assert_close(w[b][valid[b]], ref, rtol=1e-9, atol=1e-9, msg=name)


@pytest.mark.parametrize("seed", range(3))
def test_projection_conditions_hold(seed: int) -> None:
    """The definition: one scale s per row; free weights are s * exp(z), clipped ones lie where s * exp(z) is past
    their bound; and a projected row is its own projection (idempotent)."""
    gen = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(4, 50, generator=gen, dtype=torch.float64)
    valid = torch.ones(4, 50, dtype=torch.bool)
    w = project_weights(z, valid, 0.25, 4.0)
    for b in range(4):
        free = (w[b] > 0.25) & (w[b] < 4.0)
        assert free.any()
        s = (w[b][free] / z[b][free].exp()).mean()
        torch.testing.assert_close(w[b][free], s * z[b][free].exp())
        assert (s * z[b][w[b] == 0.25].exp() <= 0.25 + 1e-12).all()
        assert (s * z[b][w[b] == 4.0].exp() >= 4.0 - 1e-12).all()
    torch.testing.assert_close(project_weights(w.log(), valid, 0.25, 4.0), w)


def test_float32_weights_stay_within_bounds() -> None:
    delta = 6 * torch.randn(8, 300, generator=torch.Generator().manual_seed(1))
    valid = torch.ones(8, 300, dtype=torch.bool)
    w = cort_weights(delta, valid, CoRTConfig(w_min=0.25, w_max=4.0))
    assert w.dtype == torch.float32 and (w >= 0.25).all() and (w <= 4.0).all()
    torch.testing.assert_close(w.double().mean(-1), torch.ones(8, dtype=torch.float64), rtol=0, atol=1e-6)


def test_standardised_contrast_by_hand() -> None:
    # delta = [3, 1]: mean 2, population sd 1 -> z = [1, -1] / tau; tau = 2: w = 2 [e^0.5, e^-0.5] / (e^0.5 + e^-0.5)
    delta = torch.tensor([[3.0, 1.0]], dtype=torch.float64)
    valid = torch.ones(1, 2, dtype=torch.bool)
    cfg = CoRTConfig(standardize=True, tau=2.0, sd_floor=0.0)
    e = torch.tensor([math.exp(0.5), math.exp(-0.5)], dtype=torch.float64)
    torch.testing.assert_close(cort_weights(delta, valid, cfg)[0], 2 * e / e.sum())
    # tau = 1: 2 [e, 1/e] / (e + 1/e) = [1.76, 0.24], the low one under w_min = 0.25 -> [1.75, 0.25]
    w = cort_weights(delta, valid, dataclasses.replace(cfg, tau=1.0))
    torch.testing.assert_close(w[0], torch.tensor([1.75, 0.25], dtype=torch.float64))
    # with the noise floor 0.5: divided by sqrt(1 + 0.25), z = [1, -1] / (sqrt(1.25) tau)
    x = 1 / (math.sqrt(1.25) * 2.0)
    e = torch.tensor([math.exp(x), math.exp(-x)], dtype=torch.float64)
    w = cort_weights(delta, valid, dataclasses.replace(cfg, sd_floor=0.5))
    torch.testing.assert_close(w[0], 2 * e / e.sum())


def test_standardised_weights_ignore_a_response_offset_and_scale() -> None:
    """Standardised weights ignore a response's offset; its scale too without the noise floor, and nearly so
    with it when the contrasts vary by many times the floor (sd 2 to 12 nats here)."""
    gen = torch.Generator().manual_seed(3)
    delta = 4 * torch.randn(3, 40, generator=gen, dtype=torch.float64)
    valid = torch.rand(3, 40, generator=gen) < 0.8
    offset = torch.tensor([[5.0], [-2.0], [9.0]], dtype=torch.float64)
    torch.testing.assert_close(
        cort_weights(delta + offset, valid, CoRTConfig()), cort_weights(delta, valid, CoRTConfig())
    )
    plain = CoRTConfig(sd_floor=0.0)
    w = cort_weights(delta, valid, plain)
    shifted = delta * torch.tensor([[2.0], [0.5], [3.0]], dtype=torch.float64) + offset
    torch.testing.assert_close(cort_weights(shifted, valid, plain), w)
    assert (cort_weights(shifted, valid, CoRTConfig()) / w - 1).abs().max() < 0.05  # 4% at sd 2 nats
    # the raw map is not invariant: a larger contrast makes the weights peakier
    raw = dataclasses.replace(CoRTConfig(), standardize=False)
    assert not torch.allclose(cort_weights(shifted, valid, raw), cort_weights(delta, valid, raw))
    # a constant response gets uniform weights, with or without the floor
    const = torch.full((1, 6), 2.5, dtype=torch.float64)
    torch.testing.assert_close(
        cort_weights(const, torch.ones(1, 6) > 0, plain), torch.ones(1, 6, dtype=torch.float64)
    )
    torch.testing.assert_close(
        cort_weights(const, torch.ones(1, 6) > 0, CoRTConfig()), torch.ones(1, 6, dtype=torch.float64)
    )


@pytest.mark.parametrize(("scale", "most"), [(1e-4, 1e-3), (0.03, 0.05), (0.1, 0.12)])
def test_contrasts_at_the_noise_level_give_near_uniform_weights(scale: float, most: float) -> None:
    """The standardisation divides by sqrt(sd^2 + 0.5^2): contrasts of a few hundredths of a nat (noise) get
    weights within a few percent of 1, where the plain sd made them as spread as a 3-nat response's; contrasts of
    several nats are spread as before."""
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(16, 60, generator=gen, dtype=torch.float64)
    valid = torch.ones(16, 60, dtype=torch.bool)

    def spread(x: torch.Tensor, cfg: CoRTConfig) -> float:
        return float(cort_weights(x, valid, cfg).std(-1, correction=0).mean())

    big = spread(3.0 * noise, CoRTConfig())
    assert big > 0.4 and big == pytest.approx(spread(3.0 * noise, CoRTConfig(sd_floor=0.0)), rel=0.05)
    assert spread(scale * noise, CoRTConfig()) < most
    assert spread(scale * noise, CoRTConfig(sd_floor=0.0)) == pytest.approx(
        spread(3.0 * noise, CoRTConfig(sd_floor=0.0))
    )


def test_span_metrics_by_hand() -> None:
    # delta = [5, 0, 0] raw, w_max = 2 -> w = [2, 0.5, 0.5]; the span covers token 0: mass 2/3, tokens 1/3
    mask = [[False, True, True, True], [False, True, True, True]]
    old = [[0.0, 5.0 - 1.0, -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    cf = [[0.0, -1.0, -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    spans = [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]  # the prompt token's 1 is under the mask: ignored
    batch = make_batch([1.0, 0.0], [0, 0], mask, old, cf, spans=spans)
    out = cort(batch, dataclasses.replace(RAW, w_max=2.0))
    assert out.metrics["credit/cort/span_mass"] == pytest.approx(2 / 6)  # (2) of the 6 weight units in 2 rows
    assert out.metrics["credit/cort/span_tokens"] == pytest.approx(1 / 6)
    assert out.metrics["credit/cort/weight_max"] == pytest.approx(2.0)
    assert out.metrics["credit/cort/top_share"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    w = torch.tensor([[1.0, 1.0, 1.0]])
    uniform = span_metrics(w, torch.ones(1, 3, dtype=torch.bool), torch.tensor([[0.0, 1.0, 1.0]]))
    assert uniform == {
        "credit/cort/span_mass": pytest.approx(2 / 3),
        "credit/cort/span_tokens": pytest.approx(2 / 3),
    }


def test_sign_aware_ignores_negative_contrasts() -> None:
    delta = torch.tensor([[-3.0, -1.0, 0.0, 0.0]])
    valid = torch.ones(1, 4, dtype=torch.bool)
    torch.testing.assert_close(cort_weights(delta, valid, CoRTConfig(sign_aware=True)), torch.ones(1, 4))
    assert not torch.allclose(cort_weights(delta, valid, CoRTConfig()), torch.ones(1, 4))


@pytest.mark.parametrize("seed", range(3))
def test_ramp_at_zero_is_grpo_exactly(seed: int) -> None:
    batch = random_batch(seed, step=0, total_steps=100)  # k = 0 < k0 = 5
    out = cort(batch, CoRTConfig())
    assert out.metrics["credit/cort/alpha"] == 0.0
    assert torch.equal(out.advantages, grpo(batch, GRPOConfig()).advantages)


def test_smoothstep_ramp() -> None:
    cfg = CoRTConfig()  # k0 = 5, k1 = 30 of K = 100
    assert cort_ramp(0, 100, cfg) == 0.0 and cort_ramp(5, 100, cfg) == 0.0
    assert cort_ramp(30, 100, cfg) == 1.0 and cort_ramp(99, 100, cfg) == 1.0
    assert cort_ramp(17, 100, cfg) == pytest.approx(3 * 0.48**2 - 2 * 0.48**3)  # z = 12/25
    assert cort_ramp(3, 10, CoRTConfig(ramp_start=0.3, ramp_end=0.3)) == 1.0
    assert cort_ramp(2, 10, CoRTConfig(ramp_start=0.3, ramp_end=0.3)) == 0.0


def test_without_normalisation_the_total_drifts() -> None:
    batch = random_batch(0)
    cfg = CoRTConfig(normalize=False, ramp_start=0.0, ramp_end=0.0, w_min=0.9, w_max=1.1, delta_clip=3.0)
    out = cort(batch, cfg)
    n = batch.policy_mask.sum(-1)
    A_i = grpo(batch, GRPOConfig()).advantages.sum(-1) / n.clamp(min=1)
    assert not torch.allclose(out.advantages.sum(-1), n * A_i, atol=1e-4)


def test_nonfinite_counterfactual_is_neutral_and_counted() -> None:
    mask = [[False, True, True, True], [False, True, True, True]]
    old = [[0.0, -1.0, -0.5, -2.0], [0.0, -1.0, -1.0, -1.0]]
    cf = [[0.0, -float("inf"), -1.0, -1.0], [0.0, -1.0, -1.0, -1.0]]
    batch = make_batch([1.0, 0.0], [0, 0], mask, old, cf)
    out = cort(batch, ON)
    assert torch.isfinite(out.advantages).all()
    assert out.metrics["credit/cort/nonfinite_signal_tokens"] == 1.0
    a = out.advantages[0, 1:]
    A_i = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert a[0] == pytest.approx(A_i)  # weight 1
    w = cort_weights(torch.tensor([[0.5, -1.0]]), torch.ones(1, 2, dtype=torch.bool), CoRTConfig())
    torch.testing.assert_close(a[1:], A_i * w[0])
    assert float(a.sum()) == pytest.approx(3 * A_i, rel=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"delta_clip": 0.0},
        {"tau": -1.0},
        {"w_min": 0.0},
        {"w_min": 1.5},
        {"w_max": 0.5},
        {"ramp_start": 0.5, "ramp_end": 0.2},
        {"ramp_end": 1.5},
        {"normalize": 1},
        {"standardize": "yes"},
        {"sd_floor": -0.1},
        {"grpo": None},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        CoRTConfig(**kwargs)  # type: ignore[arg-type]
