"""Module paths: ``import creditgym`` installs no import hook, the paths of modules that moved are gone, and every
``creditgym`` import of the study scripts and examples names a module (and names) that exist."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Paths of creditgym 0.1's modules before ``agents/`` and ``verifiers/`` were split by job.
OLD_PATHS = (
    "creditgym.agents.trainer",
    "creditgym.agents.config",
    "creditgym.agents.loss",
    "creditgym.agents.signals",
    "creditgym.agents.probe_report",
    "creditgym.verifiers.swebench",
)


def test_import_creditgym_installs_no_import_hook_and_old_paths_are_gone() -> None:
    script = (
        "import importlib, sys\n"
        "before = list(sys.meta_path)\n"
        "import creditgym\n"
        "print(len(sys.meta_path) - len(before))\n"
        f"for name in {OLD_PATHS!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        print('gone', name)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert res.returncode == 0, res.stderr[-3000:]
    added, *gone = res.stdout.splitlines()
    assert added == "0"
    assert gone == [f"gone {name}" for name in OLD_PATHS]


def _creditgym_imports(path: Path) -> list[tuple[str, str | None]]:
    """``(module, name)`` for each ``from creditgym... import name`` and ``(module, None)`` for each ``import
    creditgym...`` anywhere in ``path``."""
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").startswith("creditgym")
        ):
            out += [(str(node.module), a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.startswith("creditgym")]
    return out


SCRIPTS = sorted(p for folder in ("studies", "examples") for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_the_scripts_import_current_paths(path: Path) -> None:
    bad = []
    for module, name in _creditgym_imports(path):
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError:
            bad.append(f"no module {module}")
            continue
        if name is not None and name != "*" and not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                bad.append(f"{module} has no {name}")
    assert not bad, f"{path.relative_to(ROOT)}: " + "; ".join(bad)
