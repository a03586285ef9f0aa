"""Signal providers: a new module needing a new signal, both defined here, trains end to end; a module names its
provider; start-up checks; old checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from creditgym import credit
from creditgym.agents.providers import (
    PROVIDERS,
    SignalProvider,
    StepContext,
    attention_concentration,
    provider_class,
    register_provider,
    signal_provider,
)
from creditgym.agents.providers.critics import ValueHead
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import Trainer
from creditgym.credit import CreditBatch, CreditOutput, ProvidedBy

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

    @signal_provider("position", signal="token_position", params=("scale",))
    def position(step: StepContext, params: dict[str, Any]) -> torch.Tensor:
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
        ValueError,
        match="credit module 'orphan_test', signal 'no_provider_signal': no provider computes the signal",
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


def test_a_module_names_its_provider_and_gets_only_the_fields_it_declared(
    tmp_path: Path, position_module: None
) -> None:
    """Two providers of one signal: the default unless the module names the other; each gets its parameters."""

    @signal_provider("position_squared", signal="token_position", params=("scale", "spread"))
    def squared(step: StepContext, params: dict[str, Any]) -> torch.Tensor:
        index = (step.policy_mask.long().cumsum(-1) - 1).float()
        return params["scale"] * index**2 * step.policy_mask

    with pytest.raises(
        ValueError,
        match=r"'token_position' has several providers, \['position', 'position_squared'\], and no default",
    ):
        provider_class("token_position")  # two providers, neither the default
    PROVIDERS["position"].default = True
    assert provider_class("token_position") is PROVIDERS["position"]
    assert provider_class("token_position", "position_squared") is squared

    @credit.register(
        "position_squared_test",
        config=PositionConfig,
        signals={"token_position": ProvidedBy("position_squared", ("scale", "spread"))},
    )
    def tilted(batch: CreditBatch, cfg: PositionConfig) -> CreditOutput:
        return credit.get("position_test").fn(batch, cfg)

    trainer = Trainer(TrainConfig(**SMALL, credit="position_squared_test"), tmp_path)
    provider = trainer.providers["token_position"]
    assert type(provider) is squared and provider.params == {"scale": 0.5, "spread": 0.1}
    assert Trainer(TrainConfig(**SMALL, credit="position_test"), tmp_path / "b").providers[
        "token_position"
    ].params == {"scale": 0.5}  # the default provider, with the one field position_test declared
    # the built-in modules: pact names its critic model, the others get the defaults
    assert credit.get("pact").provided_by["values"].provider == "critic_model"
    assert provider_class("values") is PROVIDERS["value_head"]


def test_unknown_or_mismatched_providers_are_named(tmp_path: Path, position_module: None) -> None:
    @credit.register(
        "typo_test", config=PositionConfig, signals={"token_position": ProvidedBy("positon", ("scale",))}
    )
    @credit.register(
        "wrong_signal_test", config=PositionConfig, signals={"token_position": ProvidedBy("teacher")}
    )
    def module(batch: CreditBatch, cfg: PositionConfig) -> CreditOutput:
        raise AssertionError("never reached")

    with pytest.raises(
        ValueError,
        match=r"no provider 'positon' of the signal 'token_position'; its providers: \['position'\]",
    ):
        Trainer(TrainConfig(**SMALL, credit="typo_test"), tmp_path)
    with pytest.raises(
        ValueError,
        match=r"no provider 'teacher' of the signal 'token_position' \(it computes 'teacher_logprobs'\)",
    ):
        Trainer(TrainConfig(**SMALL, credit="wrong_signal_test"), tmp_path)
    with pytest.raises(ValueError, match=r"importing module 'no_such_module_xyz' failed"):
        provider_class("token_position", "no_such_module_xyz:position")
    with pytest.raises(ValueError, match="a provider named 'position' is registered already"):
        signal_provider("position", signal="token_position")(lambda step, params: step.old_logprobs)
    with pytest.raises(ValueError, match=r"signal 'values' has a default provider already \('value_head'\)"):
        register_provider("another_value_head", signal="values", default=True)(
            type("X", (SignalProvider,), {})
        )
    with pytest.raises(ValueError, match="unknown signal 'nope'"):
        provider_class("nope")


def test_an_installed_package_adds_a_module_and_its_provider_by_entry_points(tmp_path: Path) -> None:
    """A package listing a module under ``creditgym.credit`` and its provider under ``creditgym.providers`` (its
    ``.dist-info``, as pip writes it): the names work with nothing imported by hand."""
    (tmp_path / "ep_credit.py").write_text(
        "import torch\n"
        "from dataclasses import dataclass\n"
        "from creditgym import credit\n"
        "credit.declare_signal('ep_signal', '(B, T) ones on the policy tokens')\n"
        "@dataclass(frozen=True)\n"
        "class Cfg:\n    pass\n"
        "@credit.register('ep_module', config=Cfg, signals=('ep_signal',))\n"
        "def ep_module(batch, cfg):\n"
        "    return credit.CreditOutput(credit.require(batch, 'ep_signal') * batch.policy_mask)\n"
    )
    (tmp_path / "ep_provider.py").write_text(
        "from creditgym.agents.providers import signal_provider\n"
        "@signal_provider('ep_ones', signal='ep_signal')\n"
        "def ep_ones(step, params):\n    return step.policy_mask.float()\n"
    )
    info = tmp_path / "ep_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[creditgym.credit]\nep = ep_credit\n\n[creditgym.providers]\nep = ep_provider\n"
    )
    script = (
        "from creditgym import credit\n"
        "from creditgym.agents.providers import PROVIDERS, provider_class\n"
        "assert 'ep_module' not in credit.available() and 'ep_ones' not in PROVIDERS\n"
        "module = credit.get('ep_module')\n"  # loads the creditgym.credit entry points
        "print(module.name, provider_class('ep_signal').name)\n"  # no provider of it yet: the providers' ones
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["ep_module", "ep_ones"]


def test_a_checkpoint_of_the_old_layout_resumes(tmp_path: Path) -> None:
    """Checkpoints keep each provider's state under its signal's name; PACT's of before its critic phase moved
    into its provider also hold an empty ``updated_logprobs`` entry, which a resumed run ignores."""
    from creditgym.agents.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

    cfg = TrainConfig(**{**SMALL, "credit": "pact", "credit_kwargs": {"critic": "probe"}})
    first = Trainer(cfg, tmp_path / "new")
    first.train_step()
    first.step = 1
    old = first._state() | {"providers": {**first._state()["providers"], "updated_logprobs": {}}}
    save_checkpoint(tmp_path / "old" / "checkpoints", 1, old)
    assert sorted(load_checkpoint(latest_checkpoint(tmp_path / "old" / "checkpoints"))["providers"]) == [
        "updated_logprobs",
        "values",
    ]
    resumed = Trainer(cfg, tmp_path / "old", resume=True)
    for a, b in zip(
        first.providers["values"].state_dict()["probe"]["head"].values(),
        resumed.providers["values"].state_dict()["probe"]["head"].values(),
        strict=True,
    ):
        assert torch.equal(a, b) and a.abs().sum() > 0  # the fitted head, restored


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
    tests = {"position_test", "orphan_test", "position_wrong_params", "position_squared_test", "typo_test"}
    assert not tests & set(credit.available())
    assert "token_position" not in credit.SIGNALS and not {"position", "position_squared"} & set(PROVIDERS)
    assert "another_value_head" not in PROVIDERS
