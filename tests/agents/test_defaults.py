"""The response budget is decided by one rule."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

from creditgym.agents.train.config import MODEL_DEFAULTS, TrainConfig, resolve, response_budget
from creditgym.envs.math import MathEnv

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agents", "envs", "credit", "creditgym", "verifiers")
CONFIG = ROOT / "agents" / "train" / "config.py"
SETTINGS = ("max_new_tokens", "temperature", "top_p", "group_size", "prompts_per_step")
#: The model-level sampling calls default to the model's own distribution (temperature 1, no nucleus cut): an
#: identity of those functions, not the run's setting, which every run path passes explicitly.
MODEL_LEVEL = {
    ("agents/train/policy.py", "sample"),
    ("agents/train/backends.py", "generate_scored"),
}
NO_BUDGET = "testing/NoBudgetDefaults-v0"
if NO_BUDGET not in gym.registry:
    gym.register(NO_BUDGET, entry_point=lambda: MathEnv(max_new_tokens=8))


# -- the response budget ---------------------------------------------------------------------------------------


def test_the_budget_is_the_users_else_the_models_else_the_envs() -> None:
    tiny = MODEL_DEFAULTS["creditgym/tiny"]["max_new_tokens"]
    assert TrainConfig().max_new_tokens is None  # not set
    assert response_budget(TrainConfig()) == tiny
    assert (
        response_budget(TrainConfig(model="smollm2-135m")) == MODEL_DEFAULTS["smollm2-135m"]["max_new_tokens"]
    )
    assert response_budget(TrainConfig(max_new_tokens=12)) == 12
    assert response_budget(TrainConfig(env_kwargs={"max_new_tokens": 24})) == 24
    assert response_budget(TrainConfig(max_new_tokens=24, env_kwargs={"max_new_tokens": 24})) == 24
    assert response_budget(TrainConfig(model="some/local-folder")) is None  # the env's own
    assert TrainConfig.for_model(model="smollm2-135m").max_new_tokens is None  # waits for the env
    # the model's default is not passed to an env that takes no budget; a budget the user set is refused there
    assert response_budget(TrainConfig(env_id=NO_BUDGET)) is None
    with pytest.raises(ValueError, match=r"takes no max_new_tokens, so max_new_tokens=12 cannot reach it"):
        response_budget(TrainConfig(env_id=NO_BUDGET, max_new_tokens=12))
    with pytest.raises(ValueError, match=r"max_new_tokens=12 and env_kwargs max_new_tokens=24 differ"):
        response_budget(TrainConfig(max_new_tokens=12, env_kwargs={"max_new_tokens": 24}))


def test_a_resolved_config_records_the_budget_and_resolves_to_itself() -> None:
    cfg = resolve(TrainConfig())
    assert cfg.max_new_tokens == MODEL_DEFAULTS["creditgym/tiny"]["max_new_tokens"]
    assert resolve(cfg) == cfg
    assert resolve(TrainConfig(env_id=NO_BUDGET)).max_new_tokens is None
