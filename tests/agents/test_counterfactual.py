"""CoRT's two signals as the trainer computes them, checked on the tiny model and the hard rubric.

``counterfactual_logprobs``: the same response tokens, scored teacher-forced after the env's criteria-free
prompt, aligned index by index with ``old_logprobs`` (token t in both), against a direct computation through the
bare model on unpadded sequences. ``criterion_spans``: the verdict's character spans mapped onto exactly the
tokens that cover them.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from creditgym.agents.providers import StepContext, char_offsets, verdict_span_mask
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.agents.train.rollout import Episode
from creditgym.agents.train.trainer import Trainer
from creditgym.credit import CreditBatch
from creditgym.envs.core import Source
from creditgym.envs.rubric import CRITERIA_HEADER, RubricEnv, criteria_block
from creditgym.verifiers.verdict import Verdict


def teacher_forced(model: torch.nn.Module, context: list[int], tokens: list[int]) -> torch.Tensor:
    """Reference: log-probs of ``tokens`` after ``context``, one unpadded sequence through the bare model."""
    ids = torch.tensor([context + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits[len(context) - 1 : -1], dim=-1)
    return logp.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module")
def trainer_step(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One real `Trainer` step of ``cort`` on the hard rubric; what the providers saw, the CreditBatch the module
    got, and a copy of the behaviour policy taken before the update."""
    cfg = TrainConfig(
        env_id="creditgym/Rubric-v0",
        env_kwargs={"preset": "hard"},
        max_new_tokens=24,
        credit="cort",
        steps=1,
        prompts_per_step=3,
        group_size=2,
        eval_every=1,
        eval_episodes=2,
        checkpoint_every=1,
        seed=0,
    )
    trainer = Trainer(cfg, tmp_path_factory.mktemp("cort-audit"))
    behaviour = copy.deepcopy(trainer.policy.model).eval()
    seen: dict[str, Any] = {}
    provider = trainer.providers["counterfactual_logprobs"]
    compute = provider.compute

    def spy_compute(step: StepContext) -> torch.Tensor:
        seen["step"] = step
        return compute(step)

    provider.compute = spy_compute  # type: ignore[method-assign]
    seen["metrics"] = trainer.train_step()
    seen["batch"] = seen["step"].credit_batch  # the CreditBatch the trainer handed the module
    seen["behaviour"] = behaviour
    seen["updated"] = trainer.policy.model
    yield seen


def test_counterfactual_logprobs_are_the_response_replayed_after_the_criteria_free_prompt(
    trainer_step: dict[str, Any],
) -> None:
    step: StepContext = trainer_step["step"]
    batch: CreditBatch = trainer_step["batch"]
    model = trainer_step["behaviour"]
    cf = batch.signals["counterfactual_logprobs"]  # (B, T), what the module read
    assert cf.shape == batch.old_logprobs.shape == batch.policy_mask.shape
    prompt_lengths, after_update = set(), []
    for row, ep in enumerate(step.episodes):
        led = ep.env.ledger
        start = int((led.source == Source.PROMPT).sum())
        prompt_lengths.add(start)
        prompt, response = led.token_id[:start].tolist(), led.token_id[start:].tolist()
        policy = torch.from_numpy(led.source == Source.POLICY)
        assert (
            torch.equal(batch.policy_mask[row, : led.n].cpu(), policy)
            and not batch.policy_mask[row, led.n :].any()
        )
        # the counterfactual prompt: the same instruction and template, the criteria block removed
        cf_prompt = ep.env.counterfactual_prompt_tokens()
        text, cf_text = ep.env.tokenizer.decode(prompt), ep.env.tokenizer.decode(cf_prompt)
        assert CRITERIA_HEADER in text and CRITERIA_HEADER not in cf_text
        task = ep.env.current_task
        assert text.replace(criteria_block(task), "") == cf_text and task.instruction in cf_text
        # l- at index t = log p(token t | criteria-free prompt, response tokens before t)
        minus = teacher_forced(model, cf_prompt, response)
        torch.testing.assert_close(cf[row, start : led.n].cpu(), minus, rtol=0, atol=2e-5)
        # l+ (old_logprobs) at the same index t = log p(token t | rubric prompt, response before t)
        plus = teacher_forced(model, prompt, response)
        torch.testing.assert_close(batch.old_logprobs[row, start : led.n].cpu(), plus, rtol=0, atol=2e-4)
        assert (cf[row, :start] == 0).all() and (cf[row, led.n :] == 0).all()
        after_update.append(teacher_forced(trainer_step["updated"], cf_prompt, response))
    # the replay used the behaviour policy: the updated actor scores the same replay differently
    assert any((a - cf[r, cf[r] != 0].cpu()).abs().max() > 1e-4 for r, a in enumerate(after_update))
    assert len(prompt_lengths) > 1  # rows of different prompt lengths: padding cannot hide a misalignment
    delta = (batch.old_logprobs - cf)[batch.policy_mask]
    assert delta.abs().mean() > 0.1  # the criteria change the model's log-probs: the replay is not a copy


def test_trainer_feeds_cort_the_verdict_spans(trainer_step: dict[str, Any]) -> None:
    step: StepContext = trainer_step["step"]
    batch: CreditBatch = trainer_step["batch"]
    spans = batch.signals["criterion_spans"]
    assert ((spans == 0) | (spans == 1)).all() and (spans[~batch.policy_mask] == 0).all()
    for row, ep in enumerate(step.episodes):
        verdict_spans = ep.info["verdict"].spans
        marked = spans[row].bool().cpu().numpy()
        assert marked.any() == any(e > s for s, e in verdict_spans if s < len(ep.info["response"]))
    metrics = trainer_step["metrics"]
    tokens = float(spans[batch.policy_mask].mean())
    assert metrics["credit/cort/span_tokens"] == pytest.approx(tokens)
    assert 0.0 <= metrics["credit/cort/span_mass"] <= 1.0


# -- char offsets and the span provider on hand-made verdicts ----------------------------------------------------


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy("creditgym/tiny", device="cpu")


@pytest.mark.parametrize("text", ["Hello there, winter is cold.", "café ☃ naïve 12345", "<<Title>>\nP.S. ok"])
def test_char_offsets_tile_the_decoded_text(policy: Policy, text: str) -> None:
    tok = policy.tokenizer
    ids = [*tok.encode(text, add_special_tokens=False), tok.eos_token_id]
    decoded = tok.decode(ids, skip_special_tokens=True)
    offsets = char_offsets(tok, ids)
    assert len(offsets) == len(ids) and offsets[-1][0] == offsets[-1][1] == len(decoded)  # EOS covers nothing
    assert "".join(decoded[a:b] for a, b in offsets) == decoded
    assert all(a <= b for a, b in offsets) and all(b == a2 for (_, b), (a2, _) in itertools.pairwise(offsets))
    # a token ends where the decoded prefix through it ends (when that prefix is a prefix of the text)
    for k, (_, end) in enumerate(offsets):
        prefix = tok.decode(ids[: k + 1], skip_special_tokens=True)
        if decoded.startswith(prefix):
            assert end == len(prefix)


def one_episode(policy: Policy, response: str, spans: tuple[tuple[int, int], ...]) -> Episode:
    env = RubricEnv(policy.tokenizer, preset="hard")
    env.reset(seed=0)
    tok = policy.tokenizer
    _, _, terminated, truncated, info = env.step_chunk(
        np.array([*tok.encode(response, add_special_tokens=False), tok.eos_token_id])
    )
    info = {**info, "verdict": Verdict(1.0, "correct", {}, spans)}  # spans chosen by hand
    return Episode(env=env, group=0, info=info, terminated=terminated, truncated=truncated)


def test_criterion_spans_mark_exactly_the_tokens_of_a_span(policy: Policy) -> None:
    response = "I like winter. The cold is here."
    start = response.index("winter")
    episodes = [
        one_episode(policy, response, ((start, start + len("winter")),)),
        one_episode(policy, response, ()),
    ]
    marked = verdict_span_mask(episodes, max(ep.env.ledger.n for ep in episodes))  # (B, T)
    assert (marked[1] == 0).all()
    led = episodes[0].env.ledger
    policy_pos = np.flatnonzero(led.source == Source.POLICY)
    offsets = char_offsets(policy.tokenizer, led.token_id[policy_pos].tolist())
    covered = "".join(
        response[a:b] for (a, b), pos in zip(offsets, policy_pos, strict=True) if marked[0, pos] > 0
    )
    assert "winter" in covered and len(covered) <= len("winter") + 2  # whole tokens around the word, no more
    assert (marked[0][torch.from_numpy(led.source != Source.POLICY)] == 0).all()
