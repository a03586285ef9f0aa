"""CreditBatch / CreditOutput validation (diagnostics included), the registry (declarations, ``module:name``), and
`require`."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from creditgym import credit
from creditgym.credit.base import CreditBatch, CreditOutput, ProvidedBy, register, require


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


def test_diagnostics_are_named_b_t_tensors_checked_against_the_mask(scratch_registry: None) -> None:
    flips = torch.tensor([[0.0, 1.0, -1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out = CreditOutput(torch.zeros(2, 4), diagnostics={"credit": torch.ones(2, 4) * 0.5, "mark/flip": flips})
    with pytest.raises(TypeError):
        out.diagnostics["credit"] = torch.zeros(2, 4)  # type: ignore[index]  (read-only)
    with pytest.raises(
        TypeError, match=r"diagnostics\['credit'\]: expected a float tensor of shape \(2, 4\)"
    ):
        CreditOutput(torch.zeros(2, 4), diagnostics={"credit": torch.zeros(2, 4, dtype=torch.long)})
    with pytest.raises(
        ValueError, match=r"diagnostics\['mark/flip'\]: a mark 'mark/<name>' holds only -1, 0"
    ):
        CreditOutput(torch.zeros(2, 4), diagnostics={"mark/flip": 0.5 * flips})
    with pytest.raises(ValueError, match="a mark 'mark/<name>'"):
        CreditOutput(torch.zeros(2, 4), diagnostics={"mark/": flips})

    @register("diag_test", config=DummyConfig)
    def diag(batch: CreditBatch, cfg: DummyConfig) -> CreditOutput:
        return CreditOutput(torch.zeros(batch.shape), diagnostics={"credit": torch.ones(batch.shape)})

    with pytest.raises(
        ValueError, match=r"diagnostics\['credit'\] must be finite and exactly 0 where policy_mask"
    ):
        credit.get("diag_test")(tiny_batch())  # 1 on prompt and padding tokens


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


def test_a_declaration_names_providers_and_their_config_fields(scratch_registry: None) -> None:
    @dataclass(frozen=True)
    class TwoFields:
        scale: float = 1.0
        layers: tuple[int, ...] = (-1,)

    def fn(batch: CreditBatch, cfg: TwoFields) -> CreditOutput:
        return CreditOutput(torch.zeros(batch.shape))

    register(
        "decl_test", config=TwoFields, signals={"values": ProvidedBy("my_critic", ("scale",))}, critic=True
    )(fn)
    register("decl_short", config=TwoFields, signals={"attention_stats": ("layers",), "values": ()})(fn)
    register("decl_tuple", config=TwoFields, signals=("values",))(fn)
    assert credit.get("decl_test").provided_by == {"values": ProvidedBy("my_critic", ("scale",))}
    assert credit.get("decl_short").provided_by == {
        "attention_stats": ProvidedBy(None, ("layers",)),  # None: the signal's default provider
        "values": ProvidedBy(),
    }
    assert credit.get("decl_short").signal_params == {"attention_stats": ("layers",), "values": ()}
    assert credit.get("decl_tuple").signals == ("values",) and credit.get("decl_tuple").provided_by == {
        "values": ProvidedBy()
    }
    with pytest.raises(
        ValueError, match=r"the parameters \['nope'\] declared for signal 'values' are not fields"
    ):
        register("decl_bad", config=TwoFields, signals={"values": ProvidedBy("my_critic", ("nope",))})
    with pytest.raises(TypeError, match="a tuple of config field names"):
        ProvidedBy("my_critic", "scale")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a tuple or a mapping"):
        register("decl_str", config=TwoFields, signals="values")


def test_module_colon_name_imports_the_module_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None
) -> None:
    (tmp_path / "my_credit_mod.py").write_text(
        "import torch\n"
        "from dataclasses import dataclass\n"
        "from creditgym import credit\n"
        "@dataclass(frozen=True)\n"
        "class Cfg:\n    pass\n"
        "@credit.register('imported_test', config=Cfg)\n"
        "def imported_test(batch, cfg):\n    return credit.CreditOutput(torch.zeros(batch.shape))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "imported_test" not in credit.available()
    assert credit.get("my_credit_mod:imported_test").name == "imported_test"
    assert credit.get("imported_test").name == "imported_test"  # registered now
    with pytest.raises(credit.UnknownCreditModuleError, match="registers no credit module 'other'"):
        credit.get("my_credit_mod:other")
    with pytest.raises(credit.UnknownCreditModuleError, match="importing module 'no_such_mod_xyz' failed"):
        credit.get("no_such_mod_xyz:imported_test")
    del sys.modules["my_credit_mod"]  # a later test importing it gets a fresh module


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


def test_a_module_names_its_actor_loss_which_a_run_resolves(scratch_registry: None) -> None:
    """``register(..., actor_loss=...)``: the policy loss of the module's paper, used by a run that names none."""
    from creditgym.agents.train.config import TrainConfig, resolve

    @register("dis_one", config=DummyConfig, actor_loss="dis")
    @register("sgd_one", config=DummyConfig, actor_loss="sgd")
    def one(batch: CreditBatch, cfg: DummyConfig) -> CreditOutput:
        return CreditOutput(torch.zeros(batch.shape))

    assert resolve(TrainConfig(credit="dis_one")).loss == "dis"
    assert resolve(TrainConfig(credit="dis_one", loss="ppo")).loss == "ppo"  # the run's own wins
    assert resolve(TrainConfig(credit="grpo")).loss == "ppo"
    with pytest.raises(
        ValueError, match=r"'sgd_one' names the actor loss 'sgd'.*known losses: \['dis', 'ppo'\]; pass --loss"
    ):
        resolve(TrainConfig(credit="sgd_one"))
    with pytest.raises(
        ValueError, match=r"actor_loss must name a policy loss like 'ppo' or 'dis', got 'D I S'"
    ):
        register("bad_loss", config=DummyConfig, actor_loss="D I S")


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
