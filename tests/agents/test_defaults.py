"""Each run setting's default is defined once, and the response budget is decided by one rule."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
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


def _defaults() -> dict[str, set[object]]:
    """Setting -> the default values it has in `TrainConfig` and `MODEL_DEFAULTS` (None, "not set", left out)."""
    out: dict[str, set[object]] = {name: set() for name in SETTINGS}
    for f in dataclasses.fields(TrainConfig):
        if f.name in out and f.default is not None:
            out[f.name].add(f.default)
    for model in MODEL_DEFAULTS.values():
        for name, value in model.items():
            if name in out:
                out[name].add(value)
    return out


def _constant(node: ast.AST | None) -> tuple[bool, object]:
    if isinstance(node, ast.Constant) and node.value is not None and not isinstance(node.value, str):
        return True, node.value
    return False, None


def _hard_coded(tree: ast.AST) -> Iterator[tuple[str, str, object, int]]:
    """(enclosing function or class, setting, value, line) of each default a setting is given in ``tree``: a
    parameter's default, a class field's, a dict literal's entry, a module constant named after it."""
    scopes: list[tuple[ast.AST, str]] = [(tree, "")]
    while scopes:
        node, scope = scopes.pop()
        for child in ast.iter_child_nodes(node):
            inner = (
                getattr(child, "name", scope)
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                else scope
            )
            scopes.append((child, inner))
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = child.args
                positional = args.posonlyargs + args.args
                pairs = list(
                    zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)
                )
                pairs += [
                    (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
                ]
                for arg, default in pairs:
                    yield inner, arg.arg, _constant(default), child.lineno  # type: ignore[misc]
            elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                yield scope, child.target.id.lower(), _constant(child.value), child.lineno  # type: ignore[misc]
            elif isinstance(child, ast.Assign):
                for target in child.targets:
                    if isinstance(target, ast.Name):
                        yield scope, target.id.lower(), _constant(child.value), child.lineno  # type: ignore[misc]
            elif isinstance(child, ast.Dict):
                for key, value in zip(child.keys, child.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        yield scope, key.value, _constant(value), child.lineno  # type: ignore[misc]


def test_each_train_config_default_is_defined_once_in_the_source() -> None:
    defaults = _defaults()
    assert all(defaults[name] for name in SETTINGS), defaults  # every setting has a default to look for
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == CONFIG:
                continue
            rel = path.relative_to(ROOT).as_posix()
            for scope, name, (is_constant, value), line in _hard_coded(ast.parse(path.read_text())):
                setting = next((s for s in SETTINGS if name == s or name.endswith("_" + s)), None)
                if setting is None or not is_constant or (rel, scope) in MODEL_LEVEL:
                    continue
                if any(value == d and type(value) is type(d) for d in defaults[setting]):
                    found.append(f"{rel}:{line} ({scope or 'module'}) {name} = {value!r}")
    assert not found, f"TrainConfig's defaults defined again (read them from TrainConfig): {found}"


def test_a_model_default_differs_from_the_class_default_it_replaces() -> None:
    for model, fields in MODEL_DEFAULTS.items():
        for name, value in fields.items():
            assert name in TrainConfig.__dataclass_fields__, (model, name)
            assert value != TrainConfig.__dataclass_fields__[name].default, (model, name, value)


def test_the_scan_sees_a_hard_coded_default() -> None:
    source = (
        "def f(top_p: float = 1.0, *, group_size=8):\n    return {'temperature': 1.0}\nMAX_NEW_TOKENS = 48\n"
    )
    got = {(name, value) for _, name, (_, value), _ in _hard_coded(ast.parse(source))}
    assert {("top_p", 1.0), ("group_size", 8), ("temperature", 1.0), ("max_new_tokens", 48)} <= got


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
