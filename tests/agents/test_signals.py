"""Signal providers: a new module needing a new signal, both defined here, trains end to end; start-up checks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from creditgym import credit
from creditgym.agents.config import TrainConfig
from creditgym.agents.critics import ValueHead
from creditgym.agents.signals import PROVIDERS, StepContext, attention_concentration, signal_provider
from creditgym.agents.trainer import Trainer
from creditgym.credit import CreditBatch, CreditOutput

SMALL = dict(
    steps=2,
    prompts_per_step=2,
    group_size=4,
    eval_every=2,
    eval_episodes=4,
    checkpoint_every=1,
    env_kwargs={"max_new_tokens": 16},
)
CALLS: list[dict[str, Any]] = []


# -- a new signal and a module that reads it, registered here: nothing in agents/ or credit/ names them ----------


@dataclass(frozen=True)
class PositionConfig:
    scale: float = 0.5
    spread: float = 0.1


@pytest.fixture
def position_module(scratch_registry: None) -> None:
    """Declares ``token_position``, its provider and the ``position_test`` module; undone after the test."""
    credit.declare_signal("token_position", "(B, T) scale * the index of each policy token in its response")

    @signal_provider("token_position", params=("scale",))
    def token_position(step: StepContext, params: dict[str, Any]) -> torch.Tensor:
        CALLS.append({"step": step.step, "scale": params["scale"], "rows": int(step.policy_mask.shape[0])})
        index = step.policy_mask.long().cumsum(-1) - 1
        return params["scale"] * index.float() * step.policy_mask

    @credit.register("position_test", config=PositionConfig, signals={"token_position": ("scale",)})
    @torch.no_grad()
    def position_test(batch: CreditBatch, cfg: PositionConfig) -> CreditOutput:
        """GRPO's advantage, tilted towards later tokens by the ``token_position`` signal."""
        position = credit.require(batch, "token_position", module="position_test")
        base = credit.get("grpo")(batch).advantages
        advantages = base * (1 + cfg.spread * position) * batch.policy_mask
        return CreditOutput(advantages, metrics={"credit/position_test/position_max": float(position.max())})


def test_a_module_with_a_new_signal_defined_in_a_test_file_trains_end_to_end(
    tmp_path: Path, position_module: None
) -> None:
    CALLS.clear()
    cfg = TrainConfig(**SMALL, credit="position_test", credit_kwargs={"scale": 2.0})
    summary = Trainer(cfg, tmp_path).run()
    assert summary["steps"] == 2 and 0.0 <= summary["eval_after"] <= 1.0
    assert [c["step"] for c in CALLS] == [0, 1] and all(c["scale"] == 2.0 for c in CALLS)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["credit/position_test/position_max"] >= 2.0  # a response of 2+ tokens: index 1 * scale 2
    assert all(r["actor/pg_loss"] is not None for r in rows[1:])


def test_resume_restores_a_providers_state(tmp_path: Path) -> None:
    """The EMA teacher's weights are the provider's state: a resumed run continues from them exactly."""
    cfg = TrainConfig(**{**SMALL, "credit": "cast", "credit_kwargs": {"teacher": "ema", "teacher_ema": 0.5}})
    whole = Trainer(cfg, tmp_path / "whole")
    assert whole.providers["teacher_logprobs"].params == {
        "teacher": "ema",
        "teacher_context": "check",
        "teacher_refresh_every": 10,
        "teacher_ema": 0.5,
    }
    whole.run()
    half = Trainer(cfg, tmp_path / "half2")
    half.train_step()
    half.step = 1
    half.save_checkpoint()
    resumed = Trainer(cfg, tmp_path / "half2", resume=True)
    resumed.train_step()
    for a, b in zip(
        whole.providers["teacher_logprobs"].model.parameters(),
        resumed.providers["teacher_logprobs"].model.parameters(),
        strict=True,
    ):
        assert torch.equal(a, b)


def test_a_signal_without_a_provider_fails_at_start_up(tmp_path: Path, scratch_registry: None) -> None:
    credit.declare_signal("no_provider_signal", "(B, T) a signal nobody computes")

    @credit.register("orphan_test", config=PositionConfig, signals=("no_provider_signal",))
    def orphan(batch: CreditBatch, cfg: PositionConfig) -> CreditOutput:
        raise AssertionError("never reached")

    with pytest.raises(
        ValueError, match="needs the signal 'no_provider_signal', but no provider computes it"
    ):
        Trainer(TrainConfig(**SMALL, credit="orphan_test"), tmp_path)


def test_parameters_must_match_the_providers(tmp_path: Path, position_module: None) -> None:
    @credit.register("position_wrong_params", config=PositionConfig, signals={"token_position": ("spread",)})
    def wrong(batch: CreditBatch, cfg: PositionConfig) -> CreditOutput:
        raise AssertionError("never reached")

    with pytest.raises(ValueError, match=r"declares the parameters \['spread'\].*takes \['scale'\]"):
        Trainer(TrainConfig(**SMALL, credit="position_wrong_params"), tmp_path)
    with pytest.raises(ValueError, match="not fields of PositionConfig"):
        credit.register("bad_params_test", config=PositionConfig, signals={"token_position": ("nope",)})


def test_an_unknown_credit_kwarg_names_the_valid_fields(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no config field 'bogus'; its fields: \['grpo', "):
        Trainer(TrainConfig(**SMALL, credit="cort", credit_kwargs={"bogus": 1}), tmp_path)


def test_a_provider_needs_a_declared_signal() -> None:
    with pytest.raises(ValueError, match="no signal 'undeclared_signal' is declared"):
        signal_provider("undeclared_signal")(lambda step, params: step.old_logprobs)


def test_attention_concentration_is_one_minus_the_mean_entropy() -> None:
    ent = {-2: torch.tensor([[0.2, 0.4]]), -1: torch.tensor([[0.6, 0.0]])}
    torch.testing.assert_close(attention_concentration(ent), torch.tensor([[0.6, 0.8]]))
    torch.testing.assert_close(attention_concentration(list(ent.values())), torch.tensor([[0.6, 0.8]]))
    with pytest.raises(ValueError, match="at least one layer"):
        attention_concentration({})


def test_value_head_is_detached_zero_initialised_and_saved(tmp_path: Path) -> None:
    head = ValueHead(16, mlp_size=8)
    hidden = torch.randn(2, 5, 16, requires_grad=True)
    assert head(hidden).shape == (2, 5) and (head(hidden) == 0).all()  # zero output layer
    head(hidden).sum().backward()
    assert hidden.grad is None  # detached by default
    with torch.no_grad():
        head.net[-1].bias.fill_(0.5)
    head.save(tmp_path / "v.safetensors")
    again = ValueHead.load(tmp_path / "v.safetensors")
    assert again.mlp_size == 8
    torch.testing.assert_close(again(hidden), head(hidden))


def test_test_registrations_do_not_leak() -> None:
    """Modules registered by the tests above are gone: tests parametrized over ``available()`` never see them."""
    assert not {"position_test", "orphan_test", "position_wrong_params"} & set(credit.available())
    assert "token_position" not in credit.SIGNALS and "token_position" not in PROVIDERS
