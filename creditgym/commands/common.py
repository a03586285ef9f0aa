"""What several commands share: the package version, ``KEY=VALUE`` flags, the `TrainConfig` flags, ``--ray``."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Sequence

from creditgym.agents.train.flags import MAPPING_FLAGS as _MAPPING_FIELDS
from creditgym.agents.train.flags import json_or_str
from creditgym.agents.train.flags import train_flag as _flag


def version(dist: str) -> str:
    """The installed version of ``dist``, or "not installed"."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def key_values(pairs: Sequence[str] | None, flag: str) -> dict[str, object]:
    """``KEY=VALUE`` pairs of a repeated ``flag`` as a dict, each value read as JSON (else kept as a string)."""
    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} expects KEY=VALUE, got {pair!r}")
        out[key] = json_or_str(raw)
    return out


def add_train_flags(
    parser: argparse.ArgumentParser, *, exclude: Sequence[str] = (), only: Sequence[str] | None = None
) -> None:
    """One flag per `TrainConfig` field (or per field in ``only``), help and default read from the config.

    Every flag defaults to None (= the field's default), so `train_overrides` keeps only what was given.
    """
    import dataclasses
    import typing

    from creditgym.agents.train.config import TrainConfig, config_help

    hints, helps = typing.get_type_hints(TrainConfig), config_help(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        if f.name in _MAPPING_FIELDS or f.name in exclude or (only is not None and f.name not in only):
            continue
        kinds = [k for k in typing.get_args(hints[f.name]) or (hints[f.name],) if k is not type(None)]
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
        text = helps[f.name].replace("``", "").replace("%", "%%")
        parser.add_argument(_flag(f.name), type=kinds[0], default=None, help=f"{text} (default: {default})")


def train_overrides(args: argparse.Namespace, *, exclude: Sequence[str] = ()) -> dict[str, object]:
    """The `TrainConfig` fields given on the command line (flags of `add_train_flags`, --*-kw pairs)."""
    import dataclasses

    from creditgym.agents.train.config import TrainConfig

    out: dict[str, object] = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in exclude:
            continue
        dest = _MAPPING_FIELDS.get(f.name, _flag(f.name))[2:].replace("-", "_")
        value = getattr(args, dest, None)
        if f.name in _MAPPING_FIELDS and f.name != "env_id" and value is not None:
            value = key_values(value, _MAPPING_FIELDS[f.name])
        if value is not None:
            out[f.name] = value
    return out


def add_ray_flags(parser: argparse.ArgumentParser, what: str, note: str = "") -> None:
    parser.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help=f"run each {what} as a Ray task{note}: HOST:PORT of a cluster's head, auto (the cluster `ray "
        "start` made on this machine) or local (a cluster in this process); needs the ray extra",
    )
    parser.add_argument(
        "--run-cpus", type=float, default=1.0, help=f"--ray: CPUs each {what} holds (default: %(default)s)"
    )
