"""studies/scripts/every_module.py: the committed runs of every module on SmolLM2 finished their steps with every
metric finite, and each folder's table is what the script renders from its files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "studies" / "scripts" / "every_module.py"
FOLDERS = sorted((ROOT / "studies" / "results" / "real-model").glob("every-module-*"))

spec = importlib.util.spec_from_file_location("every_module", SCRIPT)
assert spec and spec.loader
every = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = every
spec.loader.exec_module(every)


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_every_module_ran_to_the_end_with_finite_metrics(folder: Path) -> None:
    assert (folder / "table.md").read_text() == every.render(folder)
    assert (folder / "run.sh").is_file()
    for name in every.MODULES:
        row = every.run_row(folder / name)
        done, steps = row["steps"].split("/")
        assert row["module"] == name and done == steps and row["non_finite"] == [], row
        assert [int(s) for s, _ in row["eval_curve"]][-1] == int(steps)  # held out at the last step too
