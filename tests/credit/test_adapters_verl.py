"""verl adapter: estimators with verl's signature equal the credit modules called directly; real registration;
through real verl's registry, every module gives its native advantages on the bundled model's rollouts."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch

from creditgym.credit import available, get
from creditgym.credit.adapters.verl import (
    MissingInputError,
    group_index,
    make_verl_estimator,
    register_with_verl,
)
from creditgym.credit.base import CreditBatch
from creditgym.credit.gae import GAEConfig
from creditgym.credit.grpo import GRPOConfig

B, T = 8, 12
STEP, PLAN = 2, 10  # CreditBatch.step (0-based) and total_steps: verl's global_steps = STEP + 1


def verl_inputs(seed: int = 0) -> dict[str, Any]:
    """verl-shaped inputs: (B, T) rewards on the last valid token, a right-padded mask with a tool-token gap."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()  # (B, T) {0, 1}, like verl's response_mask
    mask[0, 1] = 0  # a tool token inside row 0
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), lengths - 1] = torch.randint(
        0, 2, (B,), generator=g
    ).float() + 0.1 * torch.arange(B)
    index = np.array(["q-a", "q-a", "q-b", "q-b", "q-b", "q-c", "q-c", "q-a"], dtype=object)

    def rand(lo: float = -1.0, hi: float = 1.0) -> torch.Tensor:
        return (lo + (hi - lo) * torch.rand(B, T, generator=g)) * mask

    return {
        "token_level_rewards": rewards,
        "response_mask": mask,
        "index": index,
        "values": rand(0.05, 0.95),
        "old_log_probs": rand(-3.0, 0.0),
        "teacher_logprobs": rand(-3.0, 0.0),
        "counterfactual_logprobs": rand(-3.0, 0.0),
        "criterion_spans": (rand(0.0, 1.0) > 0.7).float(),
        "attention_stats": rand(0.0, 1.0),
        "mc_values": torch.stack([rand(0.0, 1.0), rand(0.0, 1.0)], -1),  # what a rollout worker would sample
        "token_entropy": rand(0.0, 3.0),
        "token_ids": torch.randint(0, 6, (B, T), generator=g) * mask,  # few ids: tokens recur across rows
        "reference_logprobs": rand(-3.0, 0.0),
        "global_steps": STEP + 1,
        "total_training_steps": PLAN,
    }


def direct(name: str, x: dict[str, Any], cfg: object | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The module called on a hand-built CreditBatch (groups numbered by first appearance)."""
    module = get(name)
    signals = {
        k: x[k]
        for k in (
            "teacher_logprobs",
            "counterfactual_logprobs",
            "criterion_spans",
            "attention_stats",
            "mc_values",
            "token_entropy",
            "token_ids",
            "reference_logprobs",
        )
    }
    batch = CreditBatch(
        x["token_level_rewards"],
        x["response_mask"].bool(),
        torch.tensor([0, 0, 1, 1, 1, 2, 2, 0]),
        x["old_log_probs"],
        values=x["values"],
        signals={k: v for k, v in signals.items() if k in module.signals},
        step=STEP,
        total_steps=PLAN,
    )
    out = module(batch, cfg)
    return out.advantages, out.advantages if out.returns is None else out.returns


def test_group_index() -> None:
    ids = group_index(np.array(["b", "a", "b", "c"], dtype=object), 4, torch.device("cpu"))
    assert ids.tolist() == [0, 1, 0, 2]
    assert group_index(None, 3, torch.device("cpu")).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="one per row"):
        group_index(np.array(["a"], dtype=object), 2, torch.device("cpu"))


@pytest.mark.parametrize("name", available())
def test_estimator_equals_module(name: str) -> None:
    x = verl_inputs()
    fn = make_verl_estimator(name)
    adv, ret = fn(**x)  # verl's keyword names; extra signals go through **kwargs
    assert adv.shape == ret.shape == (B, T)
    assert (adv[x["response_mask"] == 0] == 0).all()
    ref_adv, ref_ret = direct(name, x)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_positional_call_and_missing_inputs() -> None:
    """verl's dispatcher call (rewards, mask, index, config) runs grpo; what another module lacks is named with
    the keyword that carries it, never filled with zeros."""
    x = verl_inputs(1)
    adv, ret = make_verl_estimator("grpo")(x["token_level_rewards"], x["response_mask"], x["index"])
    torch.testing.assert_close(adv, direct("grpo", x)[0])
    torch.testing.assert_close(ret, adv)  # no value targets: (adv, adv) as verl's GRPO
    with pytest.raises(ValueError, match=r"signal 'values'.*values=<tensor"):
        make_verl_estimator("gae")(x["token_level_rewards"], x["response_mask"], x["index"])
    with pytest.raises(ValueError, match=r"signal 'teacher_logprobs'.*teacher_logprobs=<tensor"):
        make_verl_estimator("cast")(**{**x, "teacher_logprobs": None})
    for name, key in [("cast", "old_log_probs"), ("cort", "old_log_probs"), ("cort", "total_training_steps")]:
        with pytest.raises(MissingInputError, match=rf"{key}=") as e:
            make_verl_estimator(name)(**{k: v for k, v in x.items() if k != key})
        assert isinstance(e.value, ValueError)
    with pytest.raises(MissingInputError, match=r"global_steps=self.global_steps"):
        make_verl_estimator("compo")(**{k: v for k, v in x.items() if k != "global_steps"})
    with pytest.raises(TypeError, match=r"unknown keywords \['teacher_logprob'\].*old_log_probs"):
        make_verl_estimator("grpo")(**x, teacher_logprob=x["teacher_logprobs"])
    with pytest.raises(ValueError, match="1-based"):
        make_verl_estimator("cort")(**{**x, "global_steps": 0})


def test_verl_config_mapping() -> None:
    """gamma/lam/norm_adv_by_std_in_grpo from verl's algorithm config, then factory overrides, then config.credit."""
    x = verl_inputs(2)
    algo = {"gamma": 0.9, "lam": 0.5, "norm_adv_by_std_in_grpo": False}
    adv, ret = make_verl_estimator("gae")(**x, config=algo)
    ref = direct("gae", x, GAEConfig(gamma=0.9, lam=0.5))
    torch.testing.assert_close((adv, ret), ref)
    adv, _ = make_verl_estimator("grpo")(**x, config=algo)
    torch.testing.assert_close(adv, direct("grpo", x, GRPOConfig(norm_by_std=False))[0])
    adv, _ = make_verl_estimator("gae", {"whiten": False})(**x, config=algo)
    torch.testing.assert_close(adv, direct("gae", x, GAEConfig(gamma=0.9, lam=0.5, whiten=False))[0])
    adv, _ = make_verl_estimator("gae")(**x, config={**algo, "credit": {"lam": 1.0}})
    torch.testing.assert_close(adv, direct("gae", x, GAEConfig(gamma=0.9, lam=1.0))[0])
    cfg = GAEConfig(gamma=0.8, lam=0.8)
    adv, _ = make_verl_estimator("gae", cfg)(**x, config=algo)  # an instance is used as is
    torch.testing.assert_close(adv, direct("gae", x, cfg)[0])
    with pytest.raises(TypeError, match="GAEConfig"):
        make_verl_estimator("gae", GRPOConfig())
    with pytest.raises(ValueError, match=r"no config field 'lamda'.*'lam'"):
        make_verl_estimator("gae", {"lamda": 0.9})
    with pytest.raises(ValueError, match=r"no config field 'lamda'.*'lam'"):
        make_verl_estimator("gae")(**x, config={**algo, "credit": {"lamda": 0.9}})
    # verl's lam is GAE's trace: it reaches gae's lam, never CAST's (a weight of the same name)
    adv, _ = make_verl_estimator("cast")(**x, config=algo)
    torch.testing.assert_close(adv, direct("cast", x)[0])


@pytest.fixture(scope="session")
def core_algos() -> Any:
    """verl's ``core_algos``. verl pins transformers<5.11, so it lives in its own environment (``make test-verl``,
    run by ``make test``, builds ``.venv-verl``); where it is absent the test is skipped, saying so, and under
    ``CREDITGYM_REQUIRE_VERL=1`` (set by ``make test-verl``) it fails instead."""
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as e:
        if os.environ.get("CREDITGYM_REQUIRE_VERL") == "1":
            pytest.fail(f"CREDITGYM_REQUIRE_VERL=1 but verl does not import: {e}", pytrace=False)
        pytest.skip(
            f"verl is not installed in this environment ({e}); it has its own (verl pins transformers<5.11): "
            "run `make test-verl`"
        )
    return core_algos


def test_register_with_verl(core_algos: Any) -> None:
    """Registers every module in verl's own registry; credit_grpo, credit_rloo and credit_gae equal verl's GRPO,
    RLOO and GAE."""
    from verl.trainer.config.algorithm import AlgoConfig

    fns = register_with_verl()
    assert sorted(fns) == [f"credit_{n}" for n in available()]
    assert register_with_verl() == fns  # idempotent
    for verl_name, fn in fns.items():
        assert core_algos.get_adv_estimator_fn(verl_name) is fn

    # against verl's own estimators, through verl's registry and its AlgoConfig
    x = verl_inputs(3)
    x["index"] = np.array(["a", "a", "b", "b", "b", "c", "c", "a"], dtype=object)  # no singleton group
    algo = AlgoConfig(gamma=0.95, lam=0.9)
    adv, _ = core_algos.get_adv_estimator_fn("credit_grpo")(**x, config=algo)
    ref, _ = core_algos.compute_grpo_outcome_advantage(
        x["token_level_rewards"], x["response_mask"], x["index"], config=algo
    )
    torch.testing.assert_close(adv, ref)
    adv, _ = core_algos.get_adv_estimator_fn("credit_rloo")(**x, config=algo)
    ref, _ = core_algos.compute_rloo_outcome_advantage(
        x["token_level_rewards"], x["response_mask"], x["index"], config=algo
    )
    torch.testing.assert_close(adv, ref)
    adv, ret = core_algos.get_adv_estimator_fn("credit_gae")(**x, config=algo)
    ref_adv, ref_ret = core_algos.compute_gae_advantage_return(
        x["token_level_rewards"], x["values"], x["response_mask"], gamma=0.95, lam=0.9
    )
    m = x["response_mask"].bool()  # verl leaves whitened garbage off the mask; we put 0 there
    torch.testing.assert_close(adv[m], ref_adv[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret[m], ref_ret[m], rtol=1e-5, atol=1e-5)


#: What verl's own dispatcher can run: it passes only token_level_rewards, response_mask, index and config.
DISPATCHER_ONLY = ("grpo", "rloo")


@pytest.mark.parametrize("name", available())
def test_module_through_verl_equals_native(core_algos: Any, adapter_case: Any, name: str) -> None:
    """Through verl's registry, with verl's response-only tensors and keywords, on the bundled model's rollouts:
    the advantages (and value targets) of the module run natively, token for token. With only what verl's
    dispatcher passes, a module that needs more raises naming a keyword that carries it."""
    from verl.trainer.config.algorithm import AlgoConfig

    case = adapter_case
    register_with_verl()
    fn = core_algos.get_adv_estimator_fn(f"credit_{name}")
    _, _, batch = case.modules[name]
    dispatched = {
        "token_level_rewards": case.responses(batch.token_rewards),
        "response_mask": case.responses(batch.policy_mask).long(),
        "index": np.array([f"task-{g}" for g in case.group_ids.tolist()], dtype=object),
        "config": AlgoConfig(),
    }
    given = {
        "old_log_probs": case.responses(batch.old_logprobs),
        "global_steps": STEP + 1,
        "total_training_steps": PLAN,
        **case.signals(name),
    }
    adv, ret = fn(**dispatched, **given)
    ref = case.native(name, STEP, PLAN)
    assert ref.advantages.abs().sum() > 0
    torch.testing.assert_close(adv, case.responses(ref.advantages))
    torch.testing.assert_close(ret, adv if ref.returns is None else case.responses(ref.returns))
    if name in DISPATCHER_ONLY:
        torch.testing.assert_close(fn(**dispatched)[0], adv)
    else:
        with pytest.raises(ValueError) as e:
            fn(**dispatched)
        assert any(f"{key}=" in str(e.value) for key in given), str(e.value)


def test_register_without_verl(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", None)
    with pytest.raises(ImportError, match="pip install verl"):
        register_with_verl()
