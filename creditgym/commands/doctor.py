"""``creditgym doctor``: Python, torch, GPU, the Docker engine and the optional packages, one line each."""

from __future__ import annotations

import argparse
import platform
import sys

from creditgym.commands.common import version as _version


def docker_status(timeout: float = 5.0) -> tuple[bool, str]:
    """Whether a Docker engine answers (``DOCKER_HOST`` or the default socket), and a line saying which."""
    from creditgym.verifiers.swe.engine import engine_status

    return engine_status(timeout)


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


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sub.add_parser("doctor", help="report Python, torch, GPU and Docker engine").set_defaults(
        func=_cmd_doctor
    )
