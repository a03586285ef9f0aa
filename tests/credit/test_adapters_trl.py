"""TRL adapter: a real `GRPOTrainer` on the bundled model gives every module's native advantages, per token.

The responses, rewards and signals are the shared `adapter_case` (the trainer's own rollouts and providers);
TRL gets the responses through its ``rollout_func`` and the signals through `CreditGRPOTrainer.credit_signals`,
in its own layout (left-padded prompts, right-padded completions). The learning rate is 0, so the policy that
TRL scores the old log-probs with is the one that sampled the responses, at every step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets  # the dev extra installs datasets and trl: a missing one fails here rather than skipping
import pytest
import torch
from transformers import TrainerCallback
from trl import GRPOConfig

from creditgym.credit import available
from creditgym.credit.adapters.trl import CreditGRPOTrainer, MissingInputError, last_token_rewards

TINY = Path(__file__).resolve().parents[2] / "creditgym" / "assets" / "tiny"
PLAN, STEPS = 10, 3  # TRL's max_steps, and the steps run (CoRT's ramp: 0, 0.10, 0.65 at steps 0, 1, 2)


def test_last_token_rewards() -> None:
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    out = last_token_rewards(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert out.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 3.0]]


class StopAfter(TrainerCallback):
    """Stops training after ``STEPS`` optimizer steps of a ``PLAN``-step run (``state.max_steps`` stays PLAN)."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        control.should_training_stop = state.global_step >= STEPS
        return control


class ReplayTrainer(CreditGRPOTrainer):
    """Hands TRL the case's responses (``rollout_func``) and signals (`credit_signals`), records each step."""

    case: Any
    signals: dict[str, torch.Tensor]
    rows: list[int]
    seen: list[tuple[int, list[int], torch.Tensor]]

    def credit_signals(self, output: dict[str, Any]) -> dict[str, torch.Tensor]:
        width = output["completion_ids"].shape[1]
        return {k: v[self.rows, :width] for k, v in self.signals.items()}

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        ids = torch.zeros_like(out["completion_ids"])
        for i, row in enumerate(self.rows):  # TRL got exactly the case's responses, in this row order
            n = len(self.case.response_ids[row])
            ids[i, :n] = torch.tensor(self.case.response_ids[row])
        assert torch.equal(out["completion_ids"] * out["completion_mask"], ids)
        self.seen.append((self.state.global_step, list(self.rows), out["advantages"].detach().clone()))
        return out


def replay_trainer(
    tmp_path: Path, case: Any, name: str, signals: dict[str, torch.Tensor], **kwargs: Any
) -> ReplayTrainer:
    """A `ReplayTrainer` for module ``name`` on the case: G completions per prompt ``"task-<group>"``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    G = int((case.group_ids == 0).sum())

    def rollout(prompts: list[str], trainer: ReplayTrainer) -> dict[str, Any]:
        taken: dict[int, int] = {}
        rows = []
        for prompt in prompts:  # one entry per completion, each prompt G times
            g = int(prompt.removeprefix("task-"))
            rows.append(int((case.group_ids == g).nonzero()[taken.setdefault(g, 0)]))
            taken[g] += 1
        trainer.rows = rows
        return {
            "prompt_ids": [case.prompt_ids[r] for r in rows],
            "completion_ids": [case.response_ids[r] for r in rows],
            "logprobs": [case.logprobs[r] for r in rows],
            "row": rows,
        }

    def reward(completions: list[Any], row: list[int], **kw: Any) -> list[float]:
        return [float(case.rewards[r]) for r in row]

    tok = AutoTokenizer.from_pretrained(TINY)
    P = int(case.group_ids.max()) + 1
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=P * G,
        num_generations=G,
        max_completion_length=case.width,
        max_steps=PLAN,
        learning_rate=0.0,
        use_vllm=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        temperature=1.0,
        bf16=False,  # TRL's default autocasts to bf16, which moves log-probs by up to 0.013 from the sampler's
    )
    trainer = ReplayTrainer(
        model=AutoModelForCausalLM.from_pretrained(TINY),
        reward_funcs=reward,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": [f"task-{g}" for g in range(P)]}),
        processing_class=tok,
        rollout_func=rollout,
        callbacks=[StopAfter()],
        credit=name,
        credit_config=case.modules[name][1],
        **kwargs,
    )
    trainer.case, trainer.signals, trainer.rows, trainer.seen = case, signals, [], []
    return trainer


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", available())
def test_module_through_trl_equals_native(tmp_path: Path, adapter_case: Any, name: str) -> None:
    """At each of 3 steps of a 10-step run: TRL's per-token advantages == the module's on the native batch."""
    case = adapter_case
    assert any(case.rewards[case.group_ids == g].unique().numel() > 1 for g in range(3))  # a real signal
    torch.set_num_threads(1)
    trainer = replay_trainer(tmp_path, case, name, case.signals(name))
    trainer.train()

    assert [s for s, _, _ in trainer.seen] == list(range(STEPS)) and trainer.state.max_steps == PLAN
    for step, rows, adv in trainer.seen:
        ref = case.responses(case.native(name, step, PLAN).advantages)[rows, : adv.shape[1]]
        torch.testing.assert_close(adv, ref.float(), rtol=1e-5, atol=1e-6)
    assert any(adv.abs().sum() > 0 for _, _, adv in trainer.seen)
    # old log-probs: TRL computed none (num_iterations = 1); the adapter scored the policy's own only for a
    # module that reads them, and they are the sampler's
    batch = trainer.credit_last_batch
    assert batch is not None
    native_old = case.responses(case.modules[name][2].old_logprobs)[trainer.rows]
    if name in ("cast", "cort", "prime"):
        torch.testing.assert_close(
            batch.old_logprobs[:, : native_old.shape[1]], native_old, rtol=0, atol=1e-5
        )
    else:
        with pytest.raises(MissingInputError):
            _ = batch.old_logprobs


def length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A trivial reward: longer completions score higher (varies within a group)."""
    return [float(len(c)) / 10.0 for c in completions]


class LossRecorder(CreditGRPOTrainer):
    """Records the outputs of each generation step and the advantages that reach the loss."""

    seen_outputs: list[dict[str, Any]]
    seen_advantages: list[torch.Tensor]

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.seen_outputs.append(out)
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self.seen_advantages.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


@pytest.mark.timeout(600)
def test_trl_generation_reaches_the_loss_per_token(tmp_path: Path) -> None:
    """TRL generating and learning itself (2 steps, TRL's defaults but for the sizes): the (B, T) advantages of
    the module on the batch the adapter built are what TRL's loss receives."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=2,
        learning_rate=1e-4,
        use_vllm=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        seed=0,
    )
    trainer = LossRecorder(
        model=AutoModelForCausalLM.from_pretrained(TINY),
        reward_funcs=length_reward,
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="]}),
        processing_class=AutoTokenizer.from_pretrained(TINY),
        credit="grpo",
        credit_config={"norm_by_std": False},
    )
    trainer.seen_outputs, trainer.seen_advantages = [], []
    trainer.train()

    assert trainer.state.global_step == 2 and len(trainer.seen_outputs) == 2
    for out in trainer.seen_outputs:
        assert out["advantages"].shape == out["completion_ids"].shape  # per token (B, T), not TRL's (B,)
        assert (out["advantages"][out["completion_mask"] == 0] == 0).all()
    batch, out = trainer.credit_last_batch, trainer.credit_last_output
    assert batch is not None and out is not None and out.advantages.abs().sum() > 0
    torch.testing.assert_close(trainer.seen_outputs[-1]["advantages"], out.advantages.float())
    seen, last = trainer.seen_advantages[-1], trainer.seen_outputs[-1]["advantages"]
    assert seen.dim() == 2  # TRL shuffles the rows of a generation batch before the loss
    torch.testing.assert_close(seen.flatten().sort().values, last.flatten().sort().values)


@pytest.mark.timeout(300)
def test_a_missing_signal_is_named(tmp_path: Path, adapter_case: Any) -> None:
    """vine's mc_values (TRL cannot fork an episode): refused at construction without the override, and at the
    first step when the override leaves it out; either error names the signal and `credit_signals`."""
    with pytest.raises(ValueError, match=r"'mc_values'.*credit_signals"):
        CreditGRPOTrainer(model=None, reward_funcs=lambda **kw: [], credit="vine")
    trainer = replay_trainer(tmp_path, adapter_case, "vine", {})
    with pytest.raises(ValueError, match=r"'mc_values'.*credit_signals"):
        trainer.train()
    bad = replay_trainer(tmp_path, adapter_case, "gae", {"values": torch.zeros(12, 3)})
    with pytest.raises(ValueError, match=r"signal 'values' must be a tensor of shape \(12, \d+\)"):
        bad.train()


@pytest.mark.timeout(300)
def test_no_plan_outside_train(tmp_path: Path, adapter_case: Any) -> None:
    """evaluate() before train(): TRL has no plan (state.max_steps 0), so cort's ramp raises naming it."""
    trainer = replay_trainer(tmp_path, adapter_case, "cort", adapter_case.signals("cort"))
    trainer.eval_dataset = trainer.train_dataset
    with pytest.raises(
        MissingInputError, match=r"'cort' reads CreditBatch.total_steps.*state.max_steps is 0"
    ):
        trainer.evaluate()


def test_config_errors() -> None:
    with pytest.raises(ValueError, match=r"no config field 'nrom_by_std'.*norm_by_std"):
        CreditGRPOTrainer(model=None, reward_funcs=lambda **kw: [], credit_config={"nrom_by_std": False})
    with pytest.raises(TypeError, match="GRPOConfig"):
        CreditGRPOTrainer(model=None, reward_funcs=lambda **kw: [], credit="grpo", credit_config=object())
    with pytest.raises(ValueError, match="known modules"):
        CreditGRPOTrainer(model=None, reward_funcs=lambda **kw: [], credit="gpro")
