"""The study's docs pages (docs/study/) quote the committed studies' own numbers (``studies/results/*/results.json``),
and each study's summary is what its runs say: recomputed here from the runs, not only re-rendered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from creditgym.agents.study.compare import parse_entry
from creditgym.agents.study.results import FINISHED, config_hash, summarize, summary_markdown, upgrade_results

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "results"
STUDIES = sorted(p.parent for p in RESULTS.glob("*/results.json"))
#: A study's follow-ups (``study-chains/controls``): the same settings at fewer seeds, each checked as a study is,
#: but not held to a study's three seeds an entry.
FOLLOW_UPS = sorted(p.parent for p in RESULTS.glob("*/*/results.json"))
EVERY = STUDIES + FOLLOW_UPS
IDS = [str(s.relative_to(RESULTS)) for s in EVERY]
#: The docs pages that quote the committed tables: the study, part by part.
STUDY_PAGES = sorted((ROOT / "docs" / "study").glob("*.md"))


def _load(study: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study's results.json as committed, and in the current form."""
    raw = json.loads((study / "results.json").read_text())
    return raw, upgrade_results(raw)


def test_the_study_covers_both_envs_and_every_module() -> None:
    entries: dict[str, set[str]] = {}
    for study in STUDIES:
        _, results = _load(study)
        if not results["pilot"]:
            env_id = results["config"]["train"]["env_id"]
            entries.setdefault(env_id, set()).update(row["entry"] for row in results["summary"])
    assert {"grpo", "rloo", "gae", "cort", "cast", "compo", "pact"} <= entries["creditgym/Math-v0"]
    assert {"grpo", "rloo", "cort"} <= entries["creditgym/Rubric-v0"]


@pytest.mark.parametrize("study", EVERY, ids=IDS)
def test_the_summary_is_recomputed_from_the_runs(study: Path) -> None:
    """Every figure of the stored summary (each key it has) equals `summarize` of the stored runs."""
    raw, results = _load(study)
    again = summarize(results["runs"], results["config"]["entries"], results["baseline"])
    assert [row["entry"] for row in raw["summary"]] == [row["entry"] for row in again]
    for stored, fresh in zip(raw["summary"], again, strict=True):
        for key, value in stored.items():
            numeric = isinstance(value, (float, list)) and value  # a number, or an interval
            expected = pytest.approx(value, rel=1e-12, abs=1e-15) if numeric else value
            assert fresh[key] == expected, (stored["entry"], key)


@pytest.mark.parametrize("study", EVERY, ids=IDS)
def test_counted_runs_finished_their_steps_and_only_they_are_counted(study: Path) -> None:
    raw, results = _load(study)
    steps = int(results["config"]["train"]["steps"])
    for row in raw["summary"]:
        runs = [r for r in results["runs"] if r["entry"] == row["entry"]]
        counted = sorted(r["seed"] for r in runs if r["status"] == FINISHED and r["final"] is not None)
        assert row["n"] == len(counted), row["entry"]
        assert row.get("seeds", counted) == counted, row["entry"]
        for run in runs:
            if run["status"] != FINISHED:  # kept in the record, never counted
                assert run["final"] is None, (run["entry"], run["seed"])
                continue
            assert run["steps_done"] == run["steps_planned"] == steps, (run["entry"], run["seed"])
            assert run["curve"][-1] == [steps, run["final"]], (run["entry"], run["seed"])
    assert results["partial"] == any(r["status"] != FINISHED for r in results["runs"])
    assert len(results["runs"]) == len(results["config"]["entries"]) * len(results["config"]["seeds"])


@pytest.mark.parametrize("study", EVERY, ids=IDS)
def test_each_run_names_the_config_it_was_trained_with(study: Path) -> None:
    """A run of the current form keeps its resolved TrainConfig and its hash: the study's settings, its entry's
    module and variant, its seed; a study's runs of one entry differ only in the seed."""
    raw, results = _load(study)
    if raw.get("format", 1) < 2:  # published before runs kept their config: the record claims none
        assert all(r["config_hash"] is None and r["train_config"] is None for r in results["runs"])
        return
    train = results["config"]["train"]
    for run in results["runs"]:
        config, entry = run["train_config"], parse_entry(run["entry"])
        assert run["config_hash"] == config_hash(config)
        assert {k: config[k] for k in train} == json.loads(json.dumps(train))
        assert (config["credit"], config["credit_kwargs"], config["seed"]) == (
            entry.module,
            dict(entry.kwargs),
            run["seed"],
        )
    hashes = [r["config_hash"] for r in results["runs"]]
    assert len(set(hashes)) == len(hashes)


@pytest.mark.parametrize("study", EVERY, ids=IDS)
def test_docs_tables_match_the_committed_results(study: Path) -> None:
    raw, results = _load(study)
    table = summary_markdown(raw)
    assert (study / "summary.md").read_text() == table
    assert any(table in page.read_text() for page in STUDY_PAGES), (
        f"the docs' table for {study.name} differs from results.json"
    )
    assert (study / "curves.png").stat().st_size > 10_000
    assert study in FOLLOW_UPS or all(
        len({r["seed"] for r in results["runs"] if r["entry"] == e}) >= 3
        for e in results["config"]["entries"]
    )
    header = table.split("| entry |")[0]
    assert ("**Partial study**" in header) == results["partial"]  # a partial study says so above its table
    assert ("**Pilot**" in header) == results["pilot"]


@pytest.mark.parametrize("study", ["math", "rubric"])
def test_report_only_redraws_a_first_form_study_unchanged(study: str, tmp_path: Path) -> None:
    """The two studies published in the first form (no runs/): ``creditgym compare --report-only`` redraws each,
    changing nothing, and their runs read as finished with all their steps."""
    from creditgym.agents.study.compare import load_config
    from creditgym.cli import main

    committed = RESULTS / study
    out = tmp_path / study
    out.mkdir()
    for name in ("results.json", "summary.md"):
        (out / name).write_bytes((committed / name).read_bytes())
    assert main(["compare", "--out", str(out), "--report-only"]) == 0
    assert (out / "summary.md").read_text() == (committed / "summary.md").read_text()
    assert (out / "results.json").read_bytes() == (committed / "results.json").read_bytes()
    raw = json.loads((committed / "results.json").read_text())
    assert load_config(out).entries == tuple(raw["config"]["entries"])
    new = upgrade_results(raw)
    assert {r["status"] for r in new["runs"]} == {FINISHED} and new["partial"] is False
    assert all(r["steps_done"] == r["steps_planned"] == raw["config"]["steps"] for r in new["runs"])
