"""The ``creditgym`` command: ``envs``, ``doctor``, ``eval``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import platform
import sys
from collections.abc import Sequence


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


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def docker_status(timeout: float = 5.0) -> tuple[bool, str]:
    """Whether a Docker engine answers (``DOCKER_HOST`` or the default socket), and a line saying which."""
    try:
        import docker
    except ImportError:
        return False, "docker SDK not installed (pip install 'creditgym[swe]')"
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout)
        version = client.version().get("Version", "?")
        client.close()
    except Exception as e:  # the SDK raises several types for "no engine"
        return (
            False,
            f"no engine at {host} ({type(e).__name__}); start one with `make engine` or set DOCKER_HOST",
        )
    return True, f"engine {version} at {host}"


def _cmd_doctor(args: argparse.Namespace) -> int:
    rows = [
        ("creditgym", _version("creditgym")),
        ("python", f"{platform.python_version()} ({sys.executable})"),
    ]
    try:
        import torch

        gpu = (
            f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
            if torch.cuda.is_available()
            else "none"
        )
        rows += [("torch", torch.__version__), ("gpu", gpu)]
    except ImportError:
        rows += [("torch", "not installed"), ("gpu", "unknown (no torch)")]
    _ok, line = docker_status()
    rows.append(("docker", line))
    for dist in ("transformers", "gymnasium", "math-verify", "vllm", "swebench", "stable-baselines3"):
        rows.append((dist, _version(dist)))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from creditgym.agents.evaluate import evaluate, write_report
    from creditgym.agents.scripted import SCRIPTED

    if args.agent not in SCRIPTED:
        raise SystemExit(f"unknown agent {args.agent!r}; known agents: {sorted(SCRIPTED)}")
    env_kwargs = {"split": args.split} if args.split else {}
    report = evaluate(args.env, SCRIPTED[args.agent](), args.episodes, seed=args.seed, env_kwargs=env_kwargs)
    print(
        f"{report.agent:<8} on {report.env_id}: accuracy {report.accuracy:.3f} over {report.episodes} episodes "
        f"(infra errors: {report.infra_errors}; statuses: {report.statuses})"
    )
    if args.out:
        print(f"report: {write_report(report, args.out)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="creditgym", description=__doc__)
    parser.add_argument("--version", action="version", version=f"creditgym {_version('creditgym')}")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("envs", help="list registered env ids, one line each").set_defaults(func=_cmd_envs)
    sub.add_parser("doctor", help="report Python, torch, GPU and Docker engine").set_defaults(
        func=_cmd_doctor
    )

    ev = sub.add_parser("eval", help="run an agent through an env and report its accuracy")
    ev.add_argument("--env", default="creditgym/Math-v0", help="registered env id (default: %(default)s)")
    ev.add_argument("--agent", default="oracle", help="oracle | random (default: %(default)s)")
    ev.add_argument("--episodes", type=int, default=50, help="number of episodes (default: %(default)s)")
    ev.add_argument(
        "--seed", type=int, default=0, help="episode i is reset with seed+i (default: %(default)s)"
    )
    ev.add_argument("--split", default="test", help="task split (default: %(default)s)")
    ev.add_argument("--out", default=None, help="folder for report.json and report.md")
    ev.set_defaults(func=_cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "eval":
        import gymnasium as gym

        import creditgym  # noqa: F401  (registers the env ids)

        if args.env not in gym.registry:
            from creditgym.envs import registered_ids

            raise SystemExit(f"unknown env id {args.env!r}; registered ids: {registered_ids()}")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
