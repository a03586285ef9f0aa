"""`creditgym compare`: the statistics on hand-computed numbers, variant parsing, the summary table, a CI smoke run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from creditgym.agents.compare import (
    CompareConfig,
    Entry,
    curve_stats,
    paired_difference,
    parse_entry,
    run_status,
    split_entries,
    summarize,
    summary_markdown,
    t_interval,
    t_quantile,
    train_settings,
)
from creditgym.cli import main

# -- statistics ----------------------------------------------------------------------------------------------------


def test_t_interval_of_three_numbers_uses_t_4_303() -> None:
    # mean 2, s = 1, half-width = t_{0.975, 2} / sqrt(3) = 4.30265 / 1.73205 = 2.48414
    lo, hi = t_interval([1.0, 2.0, 3.0])
    assert lo == pytest.approx(2 - 2.484138, abs=1e-5) and hi == pytest.approx(2 + 2.484138, abs=1e-5)
    assert t_interval([0.5]) is None and t_interval([]) is None
    assert t_interval([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7))


def test_t_quantile_table_and_large_df() -> None:
    assert t_quantile(2) == pytest.approx(4.303, abs=5e-4)
    assert t_quantile(1) == pytest.approx(12.706, abs=5e-4)
    assert t_quantile(30) == pytest.approx(2.042, abs=5e-4)
    assert t_quantile(60) == pytest.approx(2.000298, abs=1e-5)  # beyond the table
    with pytest.raises(ValueError, match="df"):
        t_quantile(0)


def test_paired_difference_over_shared_seeds() -> None:
    # diffs on seeds 0, 1, 2: 0.1, 0.2, 0.0 -> mean 0.1, s = 0.1, half = 4.30265 * 0.1 / sqrt(3) = 0.248414
    xs = {0: 0.6, 1: 0.8, 2: 0.7}
    base = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.9}  # seed 3 has no partner: ignored
    diff, ci, n = paired_difference(xs, base)
    assert n == 3 and diff == pytest.approx(0.1)
    assert ci == pytest.approx((0.1 - 0.248414, 0.1 + 0.248414), abs=1e-5)
    assert paired_difference({0: 1.0}, {1: 0.0}) == (None, None, 0)
    assert paired_difference({0: 1.0}, {0: 0.25}) == (0.75, None, 1)


def test_curve_stats_per_step() -> None:
    rows = curve_stats([[[0, 0.0], [10, 1.0]], [[0, 1.0], [10, 1.0]], [[0, 0.5]]])
    assert [r[0] for r in rows] == [0, 10]
    _, m, _, hi = rows[0]
    assert m == pytest.approx(0.5) and hi - m == pytest.approx(4.302653 * 0.5 / math.sqrt(3), abs=1e-5)
    assert rows[1][1:] == pytest.approx((1.0, 1.0, 1.0))


# -- entries -------------------------------------------------------------------------------------------------------


def test_variants_parse_against_the_module_config() -> None:
    assert parse_entry("grpo") == Entry("grpo", "grpo", {})
    assert parse_entry("cort:normalize=false") == Entry("cort:normalize=false", "cort", {"normalize": False})
    assert parse_entry("cast:flip=false").kwargs == {"flip": False}
    assert parse_entry("compo:gate=shuffled").kwargs == {"gate": "shuffled"}  # not JSON: kept as a string
    assert parse_entry("compo:gate=position").kwargs == {"gate": "position"}
    assert parse_entry("pact:without_is=true").kwargs == {"without_is": True}
    two = parse_entry("cort:tau=0.5;w_max=2")
    assert two.kwargs == {"tau": 0.5, "w_max": 2} and two.slug == "cort_tau_0.5_w_max_2"
    assert split_entries("grpo, cort:normalize=false,compo:layers=[-1,-2]") == [
        "grpo",
        "cort:normalize=false",
        "compo:layers=[-1,-2]",
    ]


def test_bad_variants_say_what_is_known() -> None:
    with pytest.raises(
        ValueError, match=r"unknown credit module 'nope'.*\['cast', 'compo', 'cort', .*'grpo'"
    ):
        parse_entry("nope:x=1")
    with pytest.raises(ValueError, match=r"CoRTConfig has no field 'norm'; its fields: \[.*'normalize'"):
        parse_entry("cort:norm=false")
    with pytest.raises(ValueError, match=r"CompPOConfig refuses .*'attention', 'shuffled', 'position'"):
        parse_entry("compo:gate=random")
    with pytest.raises(ValueError, match="name:key=value"):
        parse_entry("cort:normalize")
    with pytest.raises(ValueError, match="distinct"):
        CompareConfig(entries=("grpo", "grpo"), seeds=(0,), steps=1)
    with pytest.raises(ValueError, match="registered"):
        CompareConfig(env_id="creditgym/Nope-v0", entries=("grpo",))


def test_cli_reports_a_bad_entry(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"creditgym compare: entry 'cort:nrm=1'.*its fields"):
        main(["compare", "--credit", "grpo,cort:nrm=1", "--out", str(tmp_path)])


def test_run_status_reuses_resumes_and_refuses_other_settings(tmp_path: Path) -> None:
    cfg = CompareConfig(entries=("grpo",), seeds=(0,), steps=4, lr=1e-4)
    settings = train_settings(cfg, parse_entry("grpo"), 0)
    assert "--lr" in settings and settings[settings.index("--lr") + 1] == "0.0001"
    run = tmp_path / "run"
    assert run_status(run, settings, 4) == ("missing", None)
    run.mkdir()
    assert run_status(run, settings, 4) == ("incomplete", None)
    (run / "compare.json").write_text(json.dumps({"settings": settings, "returncode": 1}))
    (run / "train.log").write_text("step 1\nValueError: boom\n")
    assert run_status(run, settings, 4) == ("failed", "exit 1: ValueError: boom")
    (run / "summary.json").write_text(json.dumps({"steps": 4}))
    assert run_status(run, settings, 4) == ("ok", None)
    assert run_status(run, settings, 8)[0] == "failed"  # fewer steps than asked: resumed by run_compare
    assert run_status(run, settings, 2)[0] == "stale"
    other = train_settings(CompareConfig(entries=("grpo",), seeds=(0,), steps=4), parse_entry("grpo"), 0)
    status, error = run_status(run, other, 4)
    assert status == "stale" and "other settings" in error


# -- the report ----------------------------------------------------------------------------------------------------


def _results(entries: list[str], finals: dict[str, list[float]], step_s: dict[str, float]) -> dict[str, Any]:
    runs = [
        {
            "entry": e,
            "seed": seed,
            "final": f,
            "curve": [[0, 0.0], [10, f]],
            "wall_s": 100.0 + seed,
            "step_s": step_s[e],
            "status": "ok",
            "log": f"runs/{e}/seed{seed}/train.log",
            "error": None,
        }
        for e in entries
        for seed, f in enumerate(finals[e])
    ]
    cfg = {"env_id": "creditgym/Math-v0", "entries": entries, "seeds": [0, 1, 2], "steps": 10}
    base = "grpo" if "grpo" in entries else entries[0]
    return {"config": cfg, "baseline": base, "runs": runs, "summary": summarize(runs, entries, base)}


def test_summary_markdown_on_fixed_results() -> None:
    results = _results(
        ["grpo", "cort:normalize=false"],
        {"grpo": [0.5, 0.6, 0.7], "cort:normalize=false": [0.6, 0.8, 0.7]},
        {"grpo": 2.0, "cort:normalize=false": 3.0},
    )
    results["runs"].append(
        {
            **results["runs"][0],
            "seed": 3,
            "final": None,
            "status": "failed",
            "log": "runs/grpo/seed3/train.log",
        }
    )
    row = results["summary"][1]
    assert row["n"] == 3 and row["diff_vs_baseline"] == pytest.approx(0.1) and row["step_time_ratio"] == 1.5
    assert summary_markdown(results) == (
        "Held-out score (greedy, the env's test split) of `creditgym/Math-v0` after 10 steps, seeds 0, 1, 2: "
        "mean ± half-width of the 95% t-interval across seeds; Δ is the paired difference to `grpo` on shared "
        "seeds; step time is the mean training step relative to `grpo`'s.\n"
        "\n"
        "| entry | n | final | Δ vs `grpo` | wall (s) | step time vs `grpo` |\n"
        "|---|---:|---:|---:|---:|---:|\n"
        "| `grpo` | 3 | 0.600 ± 0.248 | baseline | 101.0 | 1.000 |\n"
        "| `cort:normalize=false` | 3 | 0.700 ± 0.248 | +0.100 ± 0.248 | 101.0 | 1.500 |\n"
        "\n"
        "Runs not in the table:\n"
        "\n"
        "- `grpo` seed 3: failed (`runs/grpo/seed3/train.log`)\n"
    )
    assert summary_markdown(results) == summary_markdown(json.loads(json.dumps(results)))  # pure, JSON-stable


def test_summary_names_the_baseline_when_grpo_is_absent() -> None:
    results = _results(["cort", "cast"], {"cort": [1.0], "cast": [0.0]}, {"cort": 1.0, "cast": 1.0})
    text = summary_markdown(results)
    assert "`grpo` is not an entry, so the first entry, `cort`, is the baseline." in text
    assert "| `cast` | 1 | 0.000 ± n/a | -1.000 ± n/a | 100.0 | 1.000 |" in text


# -- the CI smoke run ----------------------------------------------------------------------------------------------

# the tiniest budget: 2 prompts x 2 completions, 8 tokens, 4 held-out episodes after every step; 2 runs in parallel
TINY = (
    "--env creditgym/Math-v0 --credit grpo,cort --seeds 1 --steps 2 --workers 2 --prompts-per-step 2 "
    "--group-size 2 --eval-every 1 --eval-episodes 4 --max-new-tokens 8 --device cpu"
)


def _compare(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "creditgym.cli", "compare", *TINY.split(), "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_compare_smoke_two_modules_one_seed_two_steps_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "study"
    res = _compare(out)
    assert res.returncode == 0, res.stdout + res.stderr
    results = json.loads((out / "results.json").read_text())
    assert [(r["entry"], r["seed"], r["status"]) for r in results["runs"]] == [
        ("grpo", 0, "ok"),
        ("cort", 0, "ok"),
    ]
    for run in results["runs"]:
        assert [step for step, _ in run["curve"]] == [0, 1, 2]  # held-out at step 0 and every step
        assert run["final"] == run["curve"][-1][1] and 0.0 <= run["final"] <= 1.0
        assert run["wall_s"] > 0 and run["step_s"] > 0
        assert (out / run["log"]).is_file() and (out / run["log"]).parent.name == "seed0"
    grpo, cort = results["summary"]
    assert grpo["entry"] == "grpo" and grpo["n"] == 1 and grpo["step_time_ratio"] == 1.0
    assert cort["diff_vs_baseline"] == pytest.approx(cort["final_mean"] - grpo["final_mean"])
    assert results["machine"]["cpu_count"] >= 1 and results["config"]["steps"] == 2
    assert (out / "summary.md").read_text() == summary_markdown(results)
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    summary_file = out / "runs" / "cort" / "seed0" / "summary.json"
    stamp = summary_file.stat().st_mtime_ns
    t0 = time.monotonic()
    again = _compare(out)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("done before, reused") == 2 and time.monotonic() - t0 < 30
    assert summary_file.stat().st_mtime_ns == stamp  # nothing retrained
    assert json.loads((out / "results.json").read_text()) == results

    report = subprocess.run(
        [sys.executable, "-m", "creditgym.cli", "compare", "--out", str(out), "--report-only"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    assert json.loads((out / "results.json").read_text()) == results
