"""CreditBatch / CreditOutput validation, the registry, and `require`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

from creditgym import credit
from creditgym.credit.base import CreditBatch, CreditOutput, register, require


def tiny_batch(**overrides: object) -> CreditBatch:
    mask = torch.tensor([[False, True, True, False], [False, True, False, False]])
    fields: dict[str, object] = {
        "token_rewards": torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
        "policy_mask": mask,
        "group_ids": torch.tensor([0, 0]),
        "old_logprobs": torch.full((2, 4), -1.0) * mask,
    }
    fields.update(overrides)
    return CreditBatch(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DummyConfig:
    pass


# --- CreditBatch -------------------------------------------------------------------------------------------


def test_valid_batch_and_shape() -> None:
    batch = tiny_batch(values=torch.rand(2, 4), segment_ids=torch.zeros(2, 4, dtype=torch.long))
    assert batch.shape == (2, 4)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"token_rewards": torch.zeros(4)},
            r"token_rewards: expected a 2-D float tensor \(B, T\), got shape \(4,\)",
        ),
        ({"token_rewards": torch.zeros(2, 4, dtype=torch.long)}, "token_rewards: expected a 2-D float"),
        (
            {"policy_mask": torch.ones(2, 4)},
            r"policy_mask: expected a bool tensor .*torch.float32.*\.bool\(\)",
        ),
        (
            {"policy_mask": torch.ones(2, 3, dtype=torch.bool)},
            r"policy_mask: .*shape \(2, 4\).*got shape \(2, 3\)",
        ),
        ({"group_ids": torch.zeros(2)}, r"group_ids: expected an integer tensor of shape \(2,\)"),
        ({"group_ids": torch.zeros(3, dtype=torch.long)}, r"group_ids: .*got shape \(3,\)"),
        ({"group_ids": torch.zeros(2, dtype=torch.bool)}, "group_ids: expected an integer"),
        ({"old_logprobs": torch.zeros(2, 5)}, r"old_logprobs: expected a float tensor of shape \(2, 4\)"),
        ({"values": torch.zeros(2, 4, dtype=torch.long)}, "values: expected a float tensor"),
        ({"segment_ids": torch.zeros(2, 4)}, "segment_ids: expected an integer tensor"),
    ],
)
def test_batch_rejects_bad_tensors(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        tiny_batch(**overrides)


def test_batch_rejects_rewards_off_the_policy_mask() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    with pytest.raises(
        ValueError, match=r"1 nonzero rewards where policy_mask is False, e.g. at \(b=0, t=3\)"
    ):
        tiny_batch(token_rewards=rewards)


def test_batch_rejects_non_finite_rewards() -> None:
    rewards = torch.tensor([[0.0, 0.0, float("nan"), 0.0], [0.0, 0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="1 non-finite"):
        tiny_batch(token_rewards=rewards)


def test_batch_rejects_bad_signals() -> None:
    with pytest.raises(ValueError, match=r"unknown signal 'logits'; known signals: \['attention_stats'"):
        tiny_batch(signals={"logits": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match=r"CreditBatch\(values=...\)"):
        tiny_batch(signals={"values": torch.zeros(2, 4)})
    with pytest.raises(ValueError, match=r"teacher_logprobs.*shape \(2, 4\) \+ \(...\).*got shape \(2, 3\)"):
        tiny_batch(signals={"teacher_logprobs": torch.zeros(2, 3)})
    tiny_batch(signals={"attention_stats": torch.rand(2, 4, 3)})  # trailing dims are allowed


def test_batch_rejects_bad_steps() -> None:
    with pytest.raises(ValueError, match="step=-1"):
        tiny_batch(step=-1)
    with pytest.raises(ValueError, match="total_steps=0"):
        tiny_batch(total_steps=0)


def test_batch_is_frozen_and_signals_read_only() -> None:
    signals = {"teacher_logprobs": torch.zeros(2, 4)}
    batch = tiny_batch(signals=signals)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.step = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        batch.signals["teacher_logprobs"] = torch.ones(2, 4)  # type: ignore[index]
    signals.clear()  # the batch keeps its own copy
    assert "teacher_logprobs" in batch.signals


def test_output_validation() -> None:
    CreditOutput(torch.zeros(2, 4), torch.zeros(2, 4), {"credit/x/y": 1.0})
    with pytest.raises(
        TypeError, match=r"advantages: expected a 2-D float tensor \(B, T\), got shape \(2,\)"
    ):
        CreditOutput(torch.zeros(2))
    with pytest.raises(
        TypeError, match=r"returns: expected a float tensor of shape \(2, 4\), got shape \(2, 3\)"
    ):
        CreditOutput(torch.zeros(2, 4), torch.zeros(2, 3))


# --- registry ----------------------------------------------------------------------------------------------


def test_builtin_modules_are_registered() -> None:
    assert {"grpo", "rloo", "gae"} <= set(credit.available())
    assert credit.available() == sorted(credit.available())
    gae = credit.get("gae")
    assert gae.signals == ("values",) and gae.critic and gae.config is credit.GAEConfig
    assert credit.get("grpo").signals == () and not credit.get("grpo").critic


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(KeyError) as info:
        credit.get("nope")
    assert isinstance(info.value, ValueError)
    assert str(info.value) == f"unknown credit module 'nope'; known modules: {credit.available()}"


def test_duplicate_name_raises(scratch_registry: None) -> None:
    with pytest.raises(ValueError, match="'grpo' is already registered"):
        register("grpo", config=DummyConfig)(lambda batch, cfg: CreditOutput(torch.zeros(batch.shape)))


def test_registration_validates_declaration(scratch_registry: None) -> None:
    with pytest.raises(ValueError, match=r"unknown signals \['logits'\]; known: \['attention_stats'"):
        register("dummy", config=DummyConfig, signals=("logits",))
    with pytest.raises(ValueError, match="must declare the 'values' signal"):
        register("dummy", config=DummyConfig, critic=True)
    with pytest.raises(ValueError, match="Python identifier"):
        register("my-module", config=DummyConfig)
    assert "dummy" not in credit.available()


def test_registered_module_runs_and_checks_its_contract(scratch_registry: None) -> None:
    @register("dummy", config=DummyConfig, signals=("values",))
    def dummy(batch: CreditBatch, cfg: DummyConfig) -> CreditOutput:
        values = require(batch, "values", module="credit module 'dummy'")
        return CreditOutput(values.clone())  # not masked: breaks the contract

    module = credit.get("dummy")
    assert module.fn is dummy and "dummy" in credit.available()
    with pytest.raises(
        ValueError, match=r"credit module 'dummy' needs the signal 'values'.*CreditBatch.values is None"
    ):
        module(tiny_batch())
    with pytest.raises(ValueError, match="exactly 0 where policy_mask is False"):
        module(tiny_batch(values=torch.rand(2, 4)))
    with pytest.raises(TypeError, match="takes a DummyConfig, got GRPOConfig"):
        module(tiny_batch(values=torch.rand(2, 4)), credit.GRPOConfig())  # type: ignore[arg-type]


def test_require() -> None:
    teacher = torch.zeros(2, 4)
    batch = tiny_batch(signals={"teacher_logprobs": teacher}, values=torch.ones(2, 4))
    assert require(batch, "teacher_logprobs") is teacher
    assert require(batch, "values") is batch.values
    with pytest.raises(
        ValueError, match=r"needs the signal 'counterfactual_logprobs'.*has no 'counterfactual_logprobs'"
    ):
        require(batch, "counterfactual_logprobs")
    with pytest.raises(ValueError, match="unknown signal 'logits'"):
        require(batch, "logits")
