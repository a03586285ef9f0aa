"""TRL adapter: `CreditGRPOTrainer` trains two steps on the tiny model with per-token module advantages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets  # the dev extra installs datasets and trl: a missing one fails here rather than skipping
import pytest
import torch
from trl import GRPOConfig

from creditgym.credit import get
from creditgym.credit.adapters.trl import CreditGRPOTrainer, last_token_rewards

TINY = Path(__file__).resolve().parents[2] / "agents" / "tiny"


def test_last_token_rewards() -> None:
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    out = last_token_rewards(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert out.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 3.0]]


def length_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A trivial reward: longer completions score higher (varies within a group)."""
    return [float(len(c)) / 10.0 for c in completions]


class RecordingTrainer(CreditGRPOTrainer):
    """Records the advantages that reach the loss and the outputs of each generation step."""

    seen_advantages: list[torch.Tensor]
    seen_outputs: list[dict[str, Any]]

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        self.seen_outputs.append(out)
        return out

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self.seen_advantages.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("credit", "cfg"), [("grpo", {"norm_by_std": False}), ("rloo", None)])
def test_two_steps_on_tiny_model(tmp_path: Path, credit: str, cfg: dict[str, Any] | None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(TINY)
    data = datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="]})
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
        logging_steps=1,
        save_strategy="no",
        seed=0,
        temperature=1.0,
    )
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=length_reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        credit=credit,
        credit_config=cfg,
    )
    trainer.seen_advantages, trainer.seen_outputs = [], []
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(trainer.seen_outputs) >= 2 and len(trainer.seen_advantages) >= 2
    for out in trainer.seen_outputs:
        adv, ids = out["advantages"], out["completion_ids"]
        assert adv.dim() == 2 and adv.shape == ids.shape  # per token (B, T), not TRL's (B,)
        assert (adv[out["completion_mask"] == 0] == 0).all()
    for adv in trainer.seen_advantages:
        assert adv.dim() == 2
    # the last advantages are the module's, on the batch the adapter built
    batch, out = trainer.credit_last_batch, trainer.credit_last_output
    assert batch is not None and out is not None
    ref = get(credit)(batch, trainer.credit_config)
    torch.testing.assert_close(trainer.seen_outputs[-1]["advantages"], ref.advantages.float())
    assert batch.group_ids.tolist() == [0, 0, 0, 0]
    assert (batch.token_rewards.sum(1)[batch.policy_mask.any(1)] > 0).all()
    assert out.advantages.abs().sum() > 0  # rewards vary within the group: a real signal reached the loss
    last_out = trainer.seen_outputs[-1]["advantages"]
    torch.testing.assert_close(
        trainer.seen_advantages[-1].flatten().sort().values, last_out.flatten().sort().values
    )


def test_signal_module_needs_override() -> None:
    with pytest.raises(ValueError, match="credit_signals"):
        CreditGRPOTrainer(model=None, reward_funcs=length_reward, credit="gae")
    with pytest.raises(TypeError, match="GRPOConfig"):
        CreditGRPOTrainer(model=None, reward_funcs=length_reward, credit="grpo", credit_config=object())
