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
from typing import Any

from creditgym import installation

# Nothing here imports the rest of the package at module level: `main` checks first that it is this package.

__all__ = ["build_parser", "main"]


def __getattr__(name: str) -> Any:
    """``add_train_flags`` and ``train_overrides``, from `creditgym.commands.common` when first asked for."""
    if name in ("add_train_flags", "train_overrides"):
        from creditgym.commands import common

        return getattr(common, name)
    raise AttributeError(f"module 'creditgym.cli' has no attribute {name!r}")


def build_parser() -> argparse.ArgumentParser:
    from creditgym import models
    from creditgym.commands import compare, envs, images, probe, train
    from creditgym.commands import eval as eval_command

    parser = argparse.ArgumentParser(prog="creditgym", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"creditgym {installation.version('creditgym')}"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    envs.add_command(sub)
    models.add_command(sub)  # creditgym models
    installation.add_command(sub)  # creditgym doctor
    images.add_command(sub)
    train.add_command(sub)
    eval_command.add_command(sub)
    compare.add_command(sub)
    probe.add_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:  # before the parser: building it imports creditgym.envs, which a stray creditgym folder would shadow
        installation.check_package()
    except installation.ShadowedPackage as e:
        raise SystemExit(f"creditgym: {e}") from None
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "env", None) is not None and args.command in ("eval", "compare"):
            from creditgym.envs import UnknownEnvError, resolve_env_id

            try:  # module:EnvId imports the module here; compare's runs get the same string and do the same
                resolve_env_id(args.env)
            except UnknownEnvError as e:
                raise SystemExit(f"creditgym {args.command}: {e}") from e
        return int(args.func(args))
    except ModuleNotFoundError as e:  # an optional dependency: name the extra that installs it
        if (fix := installation.missing_extra(e)) is None:
            raise
        raise SystemExit(f"creditgym {args.command}: {fix}") from None


if __name__ == "__main__":
    code = main()
    # Under `python -m`, CPython exits by SIGINT (-2, not `code`) once a KeyboardInterrupt has ended any string
    # exec (a dataclass being made when Ctrl-C came), even one caught since; a string exec of its own clears that.
    exec("")
    sys.exit(code)
