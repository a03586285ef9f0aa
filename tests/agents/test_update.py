"""The update's pass: rows whose advantage is 0 everywhere run without a graph, and nothing the optimizer or the
logs see changes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from creditgym.agents.train import update
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.loss import actor_loss, aggregate
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.agents.train.trainer import Trainer
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import ProceduralMath


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return load_policy("creditgym/tiny", device="cpu")


@pytest.fixture(scope="module")
def batch(policy: Policy) -> tuple[torch.Tensor, ...]:
    """Three prompts x two sampled responses, right-padded, with their behaviour log-probs."""
    env = MathEnv(policy.tokenizer)
    prompts = [env.prompt_tokens(t) for t in ProceduralMath(levels=(1, 2, 3), split="test").take(3, seed=1)]
    ctx = [p for p in prompts for _ in range(2)]
    out = policy.sample(ctx, max_new_tokens=10, generator=torch.Generator().manual_seed(4))
    width = max(len(c) + len(t) for c, t in zip(ctx, out.tokens, strict=True))
    ids = torch.zeros(len(ctx), width, dtype=torch.long)
    att, mask, old = (
        torch.zeros_like(ids),
        torch.zeros_like(ids, dtype=torch.bool),
        torch.zeros(len(ctx), width),
    )
    for i, (c, t, lp) in enumerate(zip(ctx, out.tokens, out.logprobs, strict=True)):
        n = len(c) + len(t)
        ids[i, :n], att[i, :n], mask[i, len(c) : n], old[i, len(c) : n] = torch.tensor(c + t), 1, True, lp
    return ids, att, mask, old


def _loss_and_grads(policy: Policy, batch, advantages: torch.Tensor, graph_for_all: bool, cfg: TrainConfig):
    ids, att, mask, old = batch
    policy.model.zero_grad(set_to_none=True)
    fwd = update.update_pass(
        policy, ids, att, mask, advantages, module=None, entropy_grad=False, graph_for_all=graph_for_all
    )
    loss, metrics = actor_loss(fwd.logprobs, old, advantages, mask, cfg)
    metrics["entropy"] = aggregate(fwd.entropies, mask, cfg.loss_agg).item()
    update.backward(loss, policy.model.parameters())
    grads = [p.grad.clone() for p in policy.model.parameters()]
    policy.model.zero_grad(set_to_none=True)
    return loss.item(), metrics, grads, fwd


@pytest.mark.parametrize("loss", ["ppo", "dis"])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("dead_groups", [(1,), (0, 2), (0, 1, 2)])
def test_rows_without_advantage_change_no_gradient_and_no_metric(
    policy: Policy, batch, dead_groups, loss: str, agg: str
) -> None:
    cfg = TrainConfig(loss=loss, loss_agg=agg)
    ids, _, mask, _ = batch
    advantages = torch.where(mask, torch.linspace(-1.5, 1.5, ids.shape[0])[:, None], 0.0)
    for g in dead_groups:
        advantages[2 * g : 2 * g + 2] = 0.0  # a group whose responses all scored the same
    full = _loss_and_grads(policy, batch, advantages, graph_for_all=True, cfg=cfg)
    split = _loss_and_grads(policy, batch, advantages, graph_for_all=False, cfg=cfg)
    live = update.rows_with_gradient(advantages, mask)
    assert int(live.sum()) == ids.shape[0] - 2 * len(dead_groups)
    torch.testing.assert_close(split[3].logprobs, full[3].logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(split[3].entropies, full[3].entropies, atol=1e-5, rtol=0)
    assert torch.equal(split[3].mask, full[3].mask)
    assert split[0] == pytest.approx(full[0], abs=1e-6)
    assert split[1] == pytest.approx(full[1], abs=1e-5)  # ratio, approx KL, clip shares, entropy
    for a, b in zip(split[2], full[2], strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    if len(dead_groups) == 3:  # nothing to learn from: a zero gradient, not a missing one
        assert not split[3].logprobs.requires_grad
        assert all(float(g.abs().max()) == 0.0 for g in split[2])


def test_a_run_steps_the_same_with_and_without_the_split(tmp_path: Path, monkeypatch) -> None:
    """Two steps of grpo on the tiny model (groups of 2, so some score the same): identical weights after."""
    cfg = TrainConfig(steps=2, prompts_per_step=4, group_size=2, eval_episodes=1, max_new_tokens=12, seed=3)
    weights, zero_rows = [], []
    real = update.update_pass

    def every_row(*a, **kw):
        return real(*a, **{**kw, "graph_for_all": True})

    for split in (True, False):
        if not split:
            monkeypatch.setattr("creditgym.agents.train.trainer.update_pass", every_row)
        trainer = Trainer(cfg, tmp_path / str(split))
        for _ in range(2):
            zero_rows.append(trainer.train_step()["actor/zero_advantage_rows"])
            trainer.step += 1
        weights.append(copy.deepcopy(trainer.policy.model.state_dict()))
    assert zero_rows[:2] == zero_rows[2:] and any(z > 0 for z in zero_rows)
    for name, w in weights[0].items():
        torch.testing.assert_close(w, weights[1][name], atol=1e-6, rtol=0)
