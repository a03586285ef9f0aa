"""The shape of the source, read from it: the import graph between the four roles (any import), the module
graph (module-level imports: no cycle; the agents' subpackages only downward), and file sizes."""

from __future__ import annotations

import ast
from collections.abc import Container, Iterator, Mapping
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
    assert "credit" in _imported_roles(ROOT / "agents" / "train" / "trainer.py")
    assert "verifiers" in _imported_roles(ROOT / "envs" / "math.py")


# -- the module graph: module-level imports (not inside functions, not under TYPE_CHECKING) -------------------------

#: The agents' layers, bottom to top (longest prefix wins): a module imports at module level only modules of its
#: own group or of a lower layer. Stated in agents/__init__.py too.
AGENT_LAYERS: tuple[tuple[str, ...], ...] = (
    ("study.stats",),  # statistics: pure, imports nothing of agents
    ("train",),  # the building blocks: policy, backends, rollouts, losses, config, checkpoints, plots
    ("eval", "providers"),  # evaluation of any agent; the signal providers (neither imports the other)
    ("probe",),  # the Monte-Carlo probe: providers, and eval's env set-up
    (
        "train.trainer",
    ),  # the training loop: providers, credit, update; evaluation and the probe during training
    ("study",),  # compare: runs of the trainer, their results, scheduling
)


def _module_name(path: Path) -> str:
    """``agents/train/policy.py`` -> ``creditgym.agents.train.policy`` (a package: its ``__init__``'s name)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = parts if parts[0] == "creditgym" else ["creditgym", *parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(
    body: list[ast.stmt], module: str, is_package: bool, known: Container[str]
) -> Iterator[str]:
    """The modules a module imports when it is imported: its top-level statements, into ``if`` (but not ``if
    TYPE_CHECKING``) and ``try`` blocks; never inside a function or class body. ``from p import m`` of a module
    ``p.m`` (one of ``known``) imports ``p.m``; of a name defined in ``p``, ``p`` itself."""
    package = module if is_package else module.rpartition(".")[0]
    for node in body:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                yield sub if sub in known else source
        elif isinstance(node, ast.If) and not _is_type_checking(node.test):
            yield from _module_level_imports(node.body + node.orelse, module, is_package, known)
        elif isinstance(node, ast.Try):
            blocks = node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
            yield from _module_level_imports(blocks, module, is_package, known)


def module_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of ``sources`` it imports at module level; ``sources``: module -> (its source text,
    whether it is a package's ``__init__``)."""
    graph = {}
    for module, (text, is_package) in sources.items():
        names = _module_level_imports(ast.parse(text).body, module, is_package, sources)
        graph[module] = {n for n in names if n in sources and n != module}
    return graph


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each an import cycle), sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def agent_group(module: str) -> tuple[str, int] | None:
    """The `AGENT_LAYERS` group of an ``creditgym.agents.*`` module and its layer (None: not in agents)."""
    prefix = "creditgym.agents."
    if not module.startswith(prefix):
        return None
    rest = module[len(prefix) :]
    found = [
        (group, layer)
        for layer, groups in enumerate(AGENT_LAYERS)
        for group in groups
        if rest == group or rest.startswith(group + ".")
    ]
    return max(found, key=lambda g: len(g[0])) if found else None


def layering_violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Every import from an agents group to another group of its own layer or of a higher one."""
    bad = []
    for module, targets in sorted(graph.items()):
        here = agent_group(module)
        for target in sorted(targets):
            there = agent_group(target)
            if here and there and here[0] != there[0] and there[1] >= here[1]:
                bad.append(
                    f"{module} (layer {here[1]}: {here[0]}) imports {target} (layer {there[1]}: {there[0]})"
                )
    return bad


def _graph_of_the_source() -> dict[str, set[str]]:
    return module_graph({_module_name(p): (p.read_text(), p.name == "__init__.py") for p in _sources()})


def test_no_import_cycle_between_modules() -> None:
    graph = _graph_of_the_source()
    assert len(graph) > 80 and graph["creditgym.agents.train.trainer"]  # the graph was read
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (module-level imports):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_agents_subpackages_import_only_downward() -> None:
    graph = _graph_of_the_source()
    unplaced = sorted(m for m in graph if m.startswith("creditgym.agents.") and agent_group(m) is None)
    assert not unplaced, f"agents modules in no layer of AGENT_LAYERS: {unplaced}"
    bad = layering_violations(graph)
    assert not bad, "imports against the agents' layers (AGENT_LAYERS):\n" + "\n".join(bad)


def test_the_module_graph_checks_can_fail() -> None:
    """The checks themselves, on synthetic sources: a planted cycle and an upward import are found; imports inside
    a function or under TYPE_CHECKING are not module-level edges."""
    sources = {
        "creditgym.agents.train.policy": ("from creditgym.agents.probe import run\n", False),
        "creditgym.agents.probe": ("", True),
        "creditgym.agents.probe.run": ("import creditgym.agents.train.policy\n", False),
        "creditgym.agents.providers.base": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from creditgym.agents.train import trainer\n"
            "def f():\n    from creditgym.agents.study import compare\n"
            "from . import spans\n",
            False,
        ),
        "creditgym.agents.providers.spans": ("", False),
        "creditgym.agents.train.trainer": ("", False),
        "creditgym.agents.study.compare": ("", False),
    }
    graph = module_graph(sources)
    assert graph["creditgym.agents.providers.base"] == {"creditgym.agents.providers.spans"}
    assert graph["creditgym.agents.train.policy"] == {"creditgym.agents.probe.run"}
    assert find_cycles(graph) == [["creditgym.agents.probe.run", "creditgym.agents.train.policy"]]
    assert layering_violations(graph) == [
        "creditgym.agents.train.policy (layer 1: train) imports creditgym.agents.probe.run (layer 3: probe)"
    ]
    assert agent_group("creditgym.agents.train.trainer") == ("train.trainer", 4)
    assert agent_group("creditgym.agents.study.stats") == ("study.stats", 0)
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}) == [["a", "b", "c"]]


def test_no_source_file_is_too_long() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in _sources() + list((ROOT / "examples").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"
    trainer = len((ROOT / "agents" / "train" / "trainer.py").read_text().splitlines())
    assert trainer <= MAX_TRAINER_LINES, (
        f"agents/train/trainer.py has {trainer} lines (at most {MAX_TRAINER_LINES})"
    )
