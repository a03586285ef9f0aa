"""The README's Results section is the committed study's own numbers (``examples/results/*/results.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditgym.agents.compare import summary_markdown

ROOT = Path(__file__).resolve().parents[1]
STUDIES = sorted(p.parent for p in (ROOT / "examples" / "results").glob("*/results.json"))


def test_the_study_covers_both_envs_and_every_module() -> None:
    entries = {}
    for study in STUDIES:
        results = json.loads((study / "results.json").read_text())
        entries[results["config"]["env_id"]] = {row["entry"] for row in results["summary"]}
    assert {"grpo", "rloo", "gae", "cort", "cast", "compo", "pact"} <= entries["creditgym/Math-v0"]
    assert {"grpo", "rloo", "cort"} <= entries["creditgym/Rubric-v0"]


@pytest.mark.parametrize("study", STUDIES, ids=[s.name for s in STUDIES])
def test_readme_tables_match_the_committed_results(study: Path) -> None:
    results = json.loads((study / "results.json").read_text())
    table = summary_markdown(results)
    assert (study / "summary.md").read_text() == table
    assert table in (ROOT / "README.md").read_text(), (
        f"README's table for {study.name} differs from results.json"
    )
    assert (study / "curves.png").stat().st_size > 10_000
    assert all(
        len(set(r["seed"] for r in results["runs"] if r["entry"] == e)) >= 3
        for e in results["config"]["entries"]
    )
