"""Env ids: creditgym's own, Gymnasium's ``module:EnvId`` form, and third-party packages' entry points.

Three ways an env id becomes known, all resolved by `resolve_env_id` (which every command that takes ``--env``
calls):

- ``creditgym/...`` ids register when ``creditgym`` is imported;
- ``module:EnvId``, Gymnasium's own form: ``module`` is imported first (as ``gymnasium.make`` does), and is
  expected to call ``gymnasium.register("EnvId", ...)``;
- installed packages that declare an entry point in the group ``creditgym.envs`` (in their ``pyproject.toml``:
  ``[project.entry-points."creditgym.envs"] myenvs = "myenvs.register"``): the named module is imported, or the
  named callable called, once, the first time an id is resolved, so ``pip install`` is all it takes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from typing import Any

import gymnasium as gym

from creditgym.envs.tokenizer import resolve_tokenizer, same_tokenizer

ENTRY_POINT_GROUP = "creditgym.envs"

_loaded_entry_points = False


class UnknownEnvError(ValueError):
    """An env id that no registration, module import or entry point provides; the message lists what exists."""


def load_entry_points() -> list[str]:
    """Import (or call) every ``creditgym.envs`` entry point once; returns their names. A broken one raises."""
    global _loaded_entry_points
    names = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.append(ep.name)
        if _loaded_entry_points:
            continue
        try:
            target = ep.load()
        except Exception as e:
            raise UnknownEnvError(
                f"the {ENTRY_POINT_GROUP!r} entry point {ep.name!r} ({ep.value}) failed to import: "
                f"{type(e).__name__}: {e}"
            ) from e
        if callable(target) and not inspect.ismodule(target):
            target()
    _loaded_entry_points = True
    return names


def resolve_env_id(env_id: str) -> str:
    """The registered id behind ``env_id`` (``creditgym/Math-v0``, ``module:EnvId``, an entry point's id).

    Raises:
        UnknownEnvError: the module of ``module:EnvId`` does not import (the import error, named), it imports but
            registers no such id (the ids it did register, listed), or nothing registers a plain id.
    """
    module, sep, name = env_id.rpartition(":")
    if sep and module:
        before = set(gym.registry)
        try:
            importlib.import_module(module)
        except Exception as e:
            raise UnknownEnvError(
                f"env id {env_id!r}: importing module {module!r} failed ({type(e).__name__}: {e}); the "
                "'module:EnvId' form imports the module that registers EnvId (is it on sys.path / PYTHONPATH?)"
            ) from e
        if name not in gym.registry:
            added = sorted(set(gym.registry) - before)
            raise UnknownEnvError(
                f"env id {env_id!r}: module {module!r} imported, but registers no env {name!r}; "
                f"ids it registered: {added or 'none (already imported, or it registers nothing)'}"
            )
        return name
    if env_id not in gym.registry:
        load_entry_points()
    if env_id not in gym.registry:
        ours = sorted(i for i in gym.registry if "/" in i)
        raise UnknownEnvError(
            f"unknown env id {env_id!r}; registered ids: {ours}. Register yours with gymnasium.register, pass "
            f"'module:EnvId' so the module that registers it is imported first, or install a package with a "
            f"{ENTRY_POINT_GROUP!r} entry point"
        )
    return env_id


def _constructor_params(env_id: str) -> dict[str, inspect.Parameter]:
    creator = gym.spec(resolve_env_id(env_id)).entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    try:
        return dict(inspect.signature(creator).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return {}


def env_accepts(env_id: str, kwarg: str) -> bool:
    """Whether the env's constructor takes ``kwarg`` (a named parameter or ``**kwargs``), from its signature."""
    params = _constructor_params(env_id)
    return kwarg in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` after `resolve_env_id`, with a ``TypeError`` from the constructor turned into an error
    that names the env, the keyword argument and the ones it takes."""
    name = resolve_env_id(env_id)
    try:
        return gym.make(name, **kwargs)
    except TypeError as e:
        bad = [k for k in kwargs if not env_accepts(name, k)]
        if not bad:
            raise
        takes = [p for p in _constructor_params(name) if p != "self"]
        raise TypeError(
            f"env {name!r} takes no keyword argument {', '.join(map(repr, bad))} (its constructor takes "
            f"{takes}); drop it, or pass only what the env takes with --env-kw KEY=VALUE"
        ) from e


def with_tokenizer(env_id: str, kwargs: dict[str, Any], tokenizer: Any, *, model: str) -> dict[str, Any]:
    """``kwargs`` for ``make(env_id, ...)`` with the policy's tokenizer: the one way every command (train, probe,
    eval, compare, Ray) gives an env the model's tokenizer, chat template, end-of-turn and pad tokens.

    An env whose constructor takes no ``tokenizer`` gets ``kwargs`` unchanged.

    Raises:
        ValueError: the model's tokenizer has no chat template, or ``kwargs`` names a ``tokenizer`` that differs
            from the model's (both named).
    """
    out = dict(kwargs)
    if not env_accepts(env_id, "tokenizer"):
        return out
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"model {model!r}: its tokenizer has no chat template, and env {env_id!r} renders its prompts with "
            "one. Use a chat/instruct model, or give the model folder one: `tok.chat_template = "
            "creditgym.envs.tokenizer.CHATML_TEMPLATE; tok.save_pretrained(folder)`"
        )
    given = out.get("tokenizer")
    resolved = None if given is None else resolve_tokenizer(given)
    if resolved is not None and not same_tokenizer(resolved, tokenizer):
        label = given if isinstance(given, str) else getattr(given, "name_or_path", type(given).__name__)
        raise ValueError(
            f"env {env_id!r} was given tokenizer={label!r} ({len(resolved)} tokens), which "
            f"differs from the tokenizer of model {model!r} ({len(tokenizer)} tokens); the env must use the "
            "policy's tokenizer: drop the tokenizer argument (the model's is used)"
        )
    out["tokenizer"] = tokenizer
    return out
