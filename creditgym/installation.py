"""This installation of creditgym: where the package lives (and a one-line error when a stray ``creditgym`` folder
shadows it), which extra provides a module that is missing, and ``creditgym doctor``.

Nothing here imports torch or the rest of the package at module level: the CLI checks the installation before
anything else is imported.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import re
import sys
from functools import lru_cache
from pathlib import Path

__all__ = ["FOLDER", "ShadowedPackage", "bundled_assets", "check_package", "missing_extra", "version"]

#: This package's own folder (``__init__.py``, ``cli.py``, ``assets/``), found from this file, not by an import.
FOLDER = Path(__file__).resolve().parent
#: Extras for developers, never named as the fix for a missing module (``trl`` is in ``dev`` and in ``trl``).
_DEVELOPER_EXTRAS = ("dev", "docs")


class ShadowedPackage(ImportError):
    """``import creditgym`` found a folder that is not this package: one named ``creditgym`` earlier on
    ``sys.path`` (the current folder, a script's folder, ``PYTHONPATH``)."""


def check_package() -> None:
    """Raise `ShadowedPackage`, naming the folder, when the imported ``creditgym`` is not the one at `FOLDER`."""
    module = sys.modules.get("creditgym")
    found = [Path(p).resolve() for p in getattr(module, "__path__", [])]
    if module is None or FOLDER in found:
        return
    where = ", ".join(map(str, found)) or repr(module)
    raise ShadowedPackage(
        f"`import creditgym` found the folder {where}, not the creditgym package at {FOLDER}: a folder named "
        "creditgym earlier on sys.path shadows it; rename that folder or run from another directory"
    )


def bundled_assets() -> Path:
    """The bundled tiny model's folder (``creditgym/assets/tiny/``: the model and the one bundled tokenizer).

    Raises:
        ShadowedPackage: a stray ``creditgym`` folder shadows the package (`check_package`).
    """
    check_package()
    return FOLDER / "assets" / "tiny"


def version(dist: str) -> str:
    """The installed version of distribution ``dist``, or ``"not installed"``."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@lru_cache(maxsize=1)
def extras() -> dict[str, str]:
    """Import name of each optional dependency -> the extra that installs it (``{"swebench": "swe", ...}``), read
    from this distribution's metadata (pyproject's ``optional-dependencies``); empty when it has none."""
    try:
        requires = importlib.metadata.requires("creditgym") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    out: dict[str, str] = {}
    for req in requires:
        name, extra = (
            re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req),
            re.search(r"extra\s*==\s*['\"]([^'\"]+)", req),
        )
        if name and extra and extra.group(1) not in _DEVELOPER_EXTRAS:
            out.setdefault(name.group(0).lower().replace("-", "_").replace(".", "_"), extra.group(1))
    return out


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """One line saying which extra installs the module ``error`` found missing; None for any other module."""
    module = (error.name or "").partition(".")[0]
    extra = extras().get(module)
    if extra is None:
        return None
    return f"{module} is not installed: it comes with the {extra} extra, `pip install 'creditgym[{extra}]'`"


def _doctor(args: argparse.Namespace) -> int:
    from creditgym.verifiers.swe.engine import engine_status

    rows = [
        ("creditgym", f"{version('creditgym')} ({FOLDER})"),
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
    rows.append(("docker", engine_status(5.0)[1]))
    for dist in ("transformers", "gymnasium", "math-verify", "vllm", "swebench", "stable-baselines3"):
        extra = extras().get(dist.replace("-", "_"))
        found = version(dist)
        rows.append(
            (
                dist,
                f"{found} (pip install 'creditgym[{extra}]')"
                if found == "not installed" and extra
                else found,
            )
        )
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    """``creditgym doctor``: versions, the extras that provide what is missing, the GPU and the Docker engine."""
    sub.add_parser("doctor", help="report Python, torch, GPU and Docker engine").set_defaults(func=_doctor)
