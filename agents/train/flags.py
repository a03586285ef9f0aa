"""The ``creditgym train`` flag of each `TrainConfig` field, both ways: overrides -> argv and argv -> overrides.

The CLI builds its parser from the same names (``creditgym.commands.common.add_train_flags``); ``creditgym compare`` uses
`train_argv` to hand a study's settings to its ``train`` subprocesses, so a knob has one spelling everywhere.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from creditgym.agents.train.config import TrainConfig

#: TrainConfig fields with a flag of their own shape: ``--env ID`` and repeated ``KEY=VALUE`` pairs.
MAPPING_FLAGS: Mapping[str, str] = {
    "env_id": "--env",
    "env_kwargs": "--env-kw",
    "credit_kwargs": "--credit-kw",
    "eval_env_kwargs": "--eval-env-kw",
}
_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig))


def train_flag(name: str) -> str:
    """The flag of a `TrainConfig` field: ``env_id`` -> ``--env``, ``eval_every`` -> ``--eval-every``."""
    return MAPPING_FLAGS.get(name, "--" + name.replace("_", "-"))


def json_or_str(raw: str) -> Any:
    """``KEY=VALUE`` values are JSON when they parse, else the string itself."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def train_argv(overrides: Mapping[str, Any]) -> list[str]:
    """``creditgym train`` flags setting ``overrides`` (TrainConfig field -> value), in the fields' order.

    Raises:
        ValueError: an unknown field, or None (a flag cannot say None: leave the field out for its default).
    """
    unknown = sorted(set(overrides) - set(_FIELDS))
    if unknown:
        raise ValueError(f"unknown TrainConfig fields {unknown}; its fields: {list(_FIELDS)}")
    argv: list[str] = []
    for name in (n for n in _FIELDS if n in overrides):
        value = overrides[name]
        if value is None:
            raise ValueError(
                f"TrainConfig.{name}=None cannot be passed as a flag; leave it out for its default"
            )
        if name in MAPPING_FLAGS and name != "env_id":
            for key, item in dict(value).items():
                argv += [train_flag(name), f"{key}={json.dumps(item)}"]
        else:
            argv += [train_flag(name), str(value)]
    return argv


def parse_train_argv(argv: Sequence[str]) -> dict[str, Any]:
    """The inverse of `train_argv`, order-insensitive: field -> value string (mapping fields: key -> JSON value).

    Used to tell whether two argument lists say the same thing, whatever order an older version wrote them in.
    """
    by_flag = {train_flag(n): n for n in _FIELDS}
    out: dict[str, Any] = {}
    for flag, value in zip(argv[::2], argv[1::2], strict=False):
        name = by_flag.get(flag, flag)
        if name in MAPPING_FLAGS and name != "env_id":
            key, _, raw = value.partition("=")
            out.setdefault(name, {})[key] = json_or_str(raw)
        else:
            out[name] = value
    return out
