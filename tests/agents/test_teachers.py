"""CAST's teachers: the snapshot's refresh cadence, the EMA, the answer-free context and its alignment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from creditgym.agents.probe.run import sample_batch
from creditgym.agents.providers import ForwardRequest, StepContext, sequence_logprobs
from creditgym.agents.providers.teachers import CHECK_INSTRUCTION, EXAMPLE_SEED, Teacher, context_block
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import Trainer
from creditgym.envs.core import Source

SMALL = dict(
    steps=3,
    prompts_per_step=2,
    group_size=4,
    eval_every=100,
    eval_episodes=4,
    checkpoint_every=100,
    env_kwargs={"max_new_tokens": 16},
)
CHAINS = dict(env_id="creditgym/Math-v0", env_kwargs={"difficulty": 6, "max_new_tokens": 24})
EXAMPLES = {"teacher_context": "examples:2"}


def trainer(tmp_path: Path, **credit_kwargs: Any) -> Trainer:
    cfg = TrainConfig(**{**SMALL, "credit": "cast", "credit_kwargs": credit_kwargs})
    return Trainer(cfg, tmp_path)


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def step_of(t: Trainer, prompts: int = 2, seed: int = 0) -> StepContext:
    episodes = sample_batch(t.policy, t.env.unwrapped, prompts, 2, seed=seed, temperature=1.0, top_p=1.0)
    return StepContext.of(t.step, episodes, t.policy, ForwardRequest())


def test_snapshot_equals_the_policy_right_after_a_refresh_and_lags_after(tmp_path: Path) -> None:
    t = trainer(tmp_path, teacher="snapshot", teacher_refresh_every=2)
    teacher = t.providers["teacher_logprobs"]
    assert isinstance(teacher, Teacher) and teacher.model is not None
    start = [p.clone() for p in teacher.model.parameters()]
    t.train_step()  # step 0: (0 + 1) % 2 != 0, no refresh: the teacher keeps the initial weights
    assert not same_weights(teacher.model, t.policy.model)
    assert all(torch.equal(a, b) for a, b in zip(start, teacher.model.parameters(), strict=True))
    t.step = 1
    t.train_step()  # step 1: refreshed after the update
    assert same_weights(teacher.model, t.policy.model)
    ctx = step_of(t)
    gap = (teacher.compute(ctx) - ctx.old_logprobs)[ctx.policy_mask]
    assert gap.abs().max() < 1e-4  # right after a refresh the gap is 0 (up to the sampler's float error)
    t.step = 2
    t.train_step()  # step 2: lags the policy by one update
    assert not same_weights(teacher.model, t.policy.model)
    ctx = step_of(t)
    assert (teacher.compute(ctx) - ctx.old_logprobs)[ctx.policy_mask].abs().max() > 1e-3


def test_ema_moves_by_the_documented_rate(tmp_path: Path) -> None:
    t = trainer(tmp_path, teacher="ema", teacher_ema=0.75)
    teacher = t.providers["teacher_logprobs"]
    before = [p.clone() for p in teacher.model.parameters()]
    t.train_step()
    for old, phi, theta in zip(before, teacher.model.parameters(), t.policy.model.parameters(), strict=True):
        torch.testing.assert_close(phi, 0.75 * old + 0.25 * theta)


def test_context_teacher_scores_context_prompt_response_aligned_with_old_logprobs(tmp_path: Path) -> None:
    t = Trainer(TrainConfig(**{**SMALL, **CHAINS, "credit": "cast", "credit_kwargs": EXAMPLES}), tmp_path)
    teacher = t.providers["teacher_logprobs"]
    assert isinstance(teacher, Teacher) and teacher.kind == "context" and teacher.model is None
    assert len(teacher.example_prompts) == 2 and len(teacher.block) > 2 * len(teacher.example_prompts[0])
    ctx = step_of(t)
    got = teacher.compute(ctx)
    for row, ep in enumerate(ctx.episodes):
        led = ep.env.ledger
        ids = torch.tensor([teacher.block + led.token_id.tolist()])
        want = sequence_logprobs(t.policy.model, ids, torch.ones_like(ids))[0, len(teacher.block) :]
        on = torch.from_numpy(led.source == Source.POLICY)
        torch.testing.assert_close(got[row, : led.n][on], want[on], atol=1e-5, rtol=1e-5)
        assert (got[row, : led.n][~on] == 0).all()
    # an empty block: the teacher is the behaviour policy, token for token aligned with old_logprobs
    teacher.block, teacher.example_prompts = [], []
    same = teacher.compute(ctx)
    torch.testing.assert_close(same[ctx.policy_mask], ctx.old_logprobs[ctx.policy_mask], atol=1e-4, rtol=1e-4)


def test_the_context_holds_no_answer_of_the_batch(tmp_path: Path) -> None:
    t = Trainer(TrainConfig(**{**SMALL, **CHAINS, "credit": "cast", "credit_kwargs": EXAMPLES}), tmp_path)
    teacher = t.providers["teacher_logprobs"]
    text = t.policy.tokenizer.decode(teacher.block)
    ctx = step_of(t, prompts=4, seed=3)
    for ep in ctx.episodes:
        task = ep.env.current_task
        assert task.question not in text and task.solution not in text
        assert f"\\boxed{{{task.answer}}}" not in text
    # the block is fixed: building it again, after the batch was drawn, gives the same tokens
    assert context_block(t.env.unwrapped, t.policy.tokenizer, "examples:2")[0] == teacher.block


def test_a_batch_task_equal_to_an_example_is_scored_without_the_block(tmp_path: Path) -> None:
    t = Trainer(TrainConfig(**{**SMALL, **CHAINS, "credit": "cast", "credit_kwargs": EXAMPLES}), tmp_path)
    teacher = t.providers["teacher_logprobs"]
    ctx = step_of(t)
    clash = t.env.unwrapped.fork()
    clash.reset(seed=EXAMPLE_SEED)  # the first worked example's task
    clash.step_chunk(ctx.episodes[0].env.response_tokens()[:5])
    ctx.episodes[0].env = clash
    ctx = StepContext.of(0, ctx.episodes, t.policy, ForwardRequest())
    got = teacher.compute(ctx)
    row0 = ctx.policy_mask[0]
    assert teacher.collisions == 1
    plain = sequence_logprobs(t.policy.model, ctx.input_ids[:1], ctx.attention_mask[:1])[0]
    torch.testing.assert_close(got[0][row0], plain[row0], atol=1e-5, rtol=1e-5)


def test_check_instruction_and_model_teachers(tmp_path: Path) -> None:
    t = trainer(tmp_path / "check")  # the default context
    teacher = t.providers["teacher_logprobs"]
    assert t.policy.tokenizer.decode(teacher.block).strip() == CHECK_INSTRUCTION.strip()
    m = trainer(tmp_path / "model", teacher="model:creditgym/tiny")
    teacher = m.providers["teacher_logprobs"]
    assert teacher.teacher_policy is not None and teacher.state_dict() == {}
    ctx = step_of(m)  # before any update the bundled model is the policy: gap 0
    torch.testing.assert_close(
        teacher.compute(ctx)[ctx.policy_mask], ctx.old_logprobs[ctx.policy_mask], atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"teacher": "lagged"}, "teacher: expected one of"),
        ({"teacher": "model:"}, "teacher: expected one of"),
        ({"teacher_context": "examples"}, "teacher_context: expected"),
    ],
)
def test_bad_teacher_settings_are_named(kwargs: dict[str, str], match: str) -> None:
    from creditgym.credit import CASTConfig

    with pytest.raises(ValueError, match=match):
        CASTConfig(**kwargs)
