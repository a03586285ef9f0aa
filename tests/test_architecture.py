"""The shape of the source: the import graph between the four roles, and file sizes (read from the source)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROLES = ("envs", "verifiers", "credit", "agents", "creditgym")
#: role -> the roles it may import (itself included). The CLI and the package root may import everything.
ALLOWED = {
    "verifiers": {"verifiers"},
    "credit": {"credit"},
    "envs": {"envs", "verifiers"},
    "agents": {"agents", "envs", "credit", "verifiers"},
    "creditgym": set(ROLES),
}
MAX_LINES = 600
MAX_TRAINER_LINES = 400


def _sources() -> list[Path]:
    files = []
    for role in ROLES:
        files += [p for p in (ROOT / role).rglob("*.py") if "assets" not in p.parts]
    return files


def _imported_roles(path: Path) -> set[str]:
    """The roles a file imports: ``creditgym.<role>`` in any import statement, at any depth."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "creditgym" and len(parts) > 1 and parts[1] in ROLES[:4]:
                out.add(parts[1])
    return out


def test_the_import_graph_between_roles() -> None:
    bad = []
    for path in _sources():
        role = path.relative_to(ROOT).parts[0]
        for target in _imported_roles(path) - ALLOWED[role]:
            bad.append(f"{path.relative_to(ROOT)} imports creditgym.{target}")
    assert not bad, "imports against the role graph:\n" + "\n".join(bad)


def test_the_graph_check_sees_an_import() -> None:
    """The check itself: a known import is found (so an empty result above means something)."""
    assert "credit" in _imported_roles(ROOT / "agents" / "trainer.py")
    assert "verifiers" in _imported_roles(ROOT / "envs" / "math.py")


def test_no_source_file_is_too_long() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _sources() + list((ROOT / "examples").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"
    trainer = len((ROOT / "agents" / "trainer.py").read_text().splitlines())
    assert trainer <= MAX_TRAINER_LINES, (
        f"agents/trainer.py has {trainer} lines (at most {MAX_TRAINER_LINES})"
    )
