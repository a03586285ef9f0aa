"""Every ```python block of the README runs as written (each in a fresh interpreter)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int) -> None:
    out = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, f"README python block {index} failed:\n{BLOCKS[index]}\n{out.stderr[-3000:]}"
