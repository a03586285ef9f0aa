"""Code, tests, examples and study scripts name no issue numbers: they say what a thing does and why, never when.

The research record (docs/, studies/results/*.md and the data beside them) may cite issues; the scripts and
``run.sh`` files under studies/results may not, since they are code a reader runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Every file under these is checked (text files; binaries and caches skipped).
CODE_TREES = ("agents", "credit", "envs", "verifiers", "creditgym", "examples", "tests")
CODE_TREES += ("studies/scripts", "studies/tests")
#: Under studies/results only the code is checked: the Markdown and data files there are the record.
RESULT_CODE = ("*.py", "*.sh")
#: Files whose text holds the pattern's own examples (this one and the docs' check of the same rule).
EXAMPLES = (Path(__file__).resolve(), ROOT / "tests" / "test_docs.py")
#: "issue 13", "Issue #7", "issues 13 and 14", "issue13"; not "tissue 3" nor "an issue with 3 seeds"
ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", flags=re.I)


def _checked() -> list[Path]:
    files = [ROOT / "Makefile", ROOT / "pyproject.toml"]
    for tree in CODE_TREES:
        files += [p for p in (ROOT / tree).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for pattern in RESULT_CODE:
        files += (ROOT / "studies" / "results").rglob(pattern)
    return sorted(p for p in set(files) if p.resolve() not in EXAMPLES)


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file (model weights, images, archives)."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def test_the_pattern() -> None:
    for text in ("before issue 13", "(Issue #7)", "issues 13 and 14", "see issue13"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("tissue 3", "an issue with 3 seeds", "the issue's power", "#### 72", "issues"):
        assert not ISSUE_NUMBER.search(text), text


def test_the_checked_files_include_each_tree() -> None:
    files = _checked()
    for tree in CODE_TREES:
        assert any(p.is_relative_to(ROOT / tree) for p in files), f"no file checked under {tree}/"
    assert ROOT / "creditgym" / "cli.py" in files and ROOT / "Makefile" in files
    assert any(p.name == "run.sh" and p.is_relative_to(ROOT / "studies" / "results") for p in files)
    assert not any(p.suffix == ".md" and p.is_relative_to(ROOT / "studies" / "results") for p in files)


@pytest.mark.parametrize("tree", ("Makefile", "pyproject.toml", *CODE_TREES, "studies/results"))
def test_no_issue_numbers_in_code(tree: str) -> None:
    found = []
    for path in _checked():
        if not path.is_relative_to(ROOT / tree):
            continue
        text = _text(path)
        for n, line in enumerate((text or "").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}" for m in ISSUE_NUMBER.finditer(line)]
    assert not found, "say what and why instead of citing an issue: " + "; ".join(found)
