"""``creditgym envs``: the registered env ids, one line each (id, first docstring line, entry point)."""

from __future__ import annotations

import argparse
import importlib


def _cmd_envs(args: argparse.Namespace) -> int:
    import gymnasium as gym

    from creditgym.envs import registered_ids

    for env_id in registered_ids():
        spec = gym.spec(env_id)
        entry = (
            spec.entry_point
            if isinstance(spec.entry_point, str)
            else getattr(spec.entry_point, "__name__", "?")
        )
        doc = ""
        if isinstance(spec.entry_point, str):
            module, _, attr = spec.entry_point.partition(":")
            doc = (getattr(importlib.import_module(module), attr).__doc__ or "").strip().splitlines()[0]
        print(f"{env_id:<28} {doc}  [{entry}]")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sub.add_parser("envs", help="list registered env ids, one line each").set_defaults(func=_cmd_envs)
