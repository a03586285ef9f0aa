"""The ``creditgym`` command.

Subcommands:
    train     train a policy with a credit module on an env (flags generated from ``TrainConfig``)
    eval      run an agent through an env (or the SWE tasks) and report its accuracy / resolve rate
    compare   train several credit modules x seeds with one budget; tables and curves of held-out scores
    probe     score credit modules' per-token advantages against Monte-Carlo ground truth on one batch
    envs      list the registered env ids
    images    build, check or clean the Docker images of SWE tasks
    doctor    report Python, torch, GPU and the Docker engine
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from creditgym.commands import compare, doctor, envs, images, probe, train
from creditgym.commands import eval as eval_command
from creditgym.commands.common import add_train_flags, train_overrides
from creditgym.commands.common import version as _version
from creditgym.commands.doctor import docker_status

__all__ = ["add_train_flags", "build_parser", "docker_status", "main", "train_overrides"]


def build_parser() -> argparse.ArgumentParser:
    from creditgym import models

    parser = argparse.ArgumentParser(prog="creditgym", description=__doc__)
    parser.add_argument("--version", action="version", version=f"creditgym {_version('creditgym')}")
    sub = parser.add_subparsers(dest="command", required=True)

    envs.add_command(sub)
    models.add_command(sub)  # creditgym models
    doctor.add_command(sub)
    images.add_command(sub)
    train.add_command(sub)
    eval_command.add_command(sub)
    compare.add_command(sub)
    probe.add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "env", None) is not None and args.command in ("eval", "compare"):
        from creditgym.envs import UnknownEnvError, resolve_env_id

        try:  # module:EnvId imports the module here; compare's runs get the same string and do the same
            resolve_env_id(args.env)
        except UnknownEnvError as e:
            raise SystemExit(f"creditgym {args.command}: {e}") from e
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
