"""``creditgym train --config FILE``: `TrainConfig` fields from a TOML or JSON file.

A file holds field names as keys (``lr = 1e-4``, ``[credit_kwargs]`` ``tau = 0.5``), the same names as
``config.json``, which every run writes, so a run's ``config.json`` is accepted back as it is. Flags given on the
command line override the file; fields in neither take their defaults (the model's, then the class's).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from creditgym.agents.train.config import TrainConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the backport (a dependency there)
    import tomli as tomllib

_FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _kinds(name: str) -> tuple[type, ...]:
    """The plain types a field's value may have (``int | None`` -> ``(int, NoneType)``; a float takes an int)."""
    hint = typing.get_type_hints(TrainConfig)[name]
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = tuple(typing.get_origin(k) or k for k in (typing.get_args(hint) if union else (hint,)))
    return (*kinds, int) if float in kinds else kinds


def _type_name(kinds: tuple[type, ...]) -> str:
    names = {Mapping: "a table", type(None): "null", int: "an integer", float: "a number", str: "a string"}
    shown = [k for k in kinds if not (k is int and float in kinds)]  # "a number" says an integer is one
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in shown))


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The `TrainConfig` fields ``path`` sets (``.toml``, or ``.json`` such as a run's ``config.json``).

    Raises:
        ValueError: the file cannot be read or parsed (the parser's message, with its line), is not a table of
            settings, names a field `TrainConfig` does not have, or gives a value of the wrong type.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"--config {path}: cannot read it ({e.strerror or e})") from e
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        kind = "JSON" if path.suffix == ".json" else "TOML (give a .json name for JSON)"
        raise ValueError(f"--config {path}: not valid {kind}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(
            f"--config {path}: expected a table of TrainConfig fields, got {type(data).__name__}"
        )
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ValueError(
            f"--config {path}: unknown settings {unknown}; TrainConfig's fields: {sorted(_FIELDS)}"
        )
    for name, value in data.items():
        kinds = _kinds(name)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise ValueError(f"--config {path}: {name} must be {_type_name(kinds)}, got {json.dumps(value)}")
    return data
