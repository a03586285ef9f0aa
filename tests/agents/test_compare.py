"""`creditgym compare`: variant parsing, the study's train settings, the summary table, CI smoke runs (the
statistics: test_stats.py; through Ray: tests/test_ray.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from creditgym.agents.study.compare import (
    CompareConfig,
    Entry,
    config_hash,
    load_config,
    parse_entry,
    parse_seeds,
    plan,
    read_run,
    resolved_train_config,
    run_status,
    split_entries,
    summarize,
    summary_markdown,
    train_settings,
    upgrade_config,
    upgrade_results,
    write_report,
)
from creditgym.agents.study.scheduler import child_pythonpath, run_threads
from creditgym.agents.train.flags import parse_train_argv
from creditgym.cli import build_parser, main, train_overrides

ROOT = Path(__file__).resolve().parents[2]
#: A study in the first form of results.json (before status/steps/probe/config hash), as published, without its
#: runs/: two entries x three seeds cut from the first published study, and the table it renders to.
FIRST_FORM = Path(__file__).resolve().parent / "data" / "first-form-study"

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


def test_a_quoted_value_may_hold_the_separators() -> None:
    """``;`` separates an entry's fields and ``,`` the entries: inside a JSON string neither splits, so a
    ``vine`` step delimiter can be the chains' ``;``, and the run's flags carry it to ``creditgym train``."""
    entries = split_entries('vine:delimiter=";",grpo,vine:delimiter=", ";k=4')
    assert entries == ['vine:delimiter=";"', "grpo", 'vine:delimiter=", ";k=4']
    semicolon, comma = parse_entry(entries[0]), parse_entry(entries[2])
    assert semicolon.kwargs == {"delimiter": ";"} and comma.kwargs == {"delimiter": ", ", "k": 4}
    assert semicolon.slug == "vine_delimiter" and comma.slug == "vine_delimiter_k_4"
    cfg = CompareConfig(entries=entries, seeds=(0,), train={"steps": 1})
    argv = train_settings(cfg, semicolon, 0)
    assert argv[argv.index("--credit-kw") + 1] == 'delimiter=";"'
    assert parse_train_argv(argv)["credit_kwargs"] == {"delimiter": ";"}
    with pytest.raises(ValueError, match=r"VineConfig refuses \{'delimiter': ''\}.*non-empty string"):
        parse_entry('vine:delimiter=""')


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
        CompareConfig(entries=("grpo", "grpo"), seeds=(0,), train={"steps": 1})
    with pytest.raises(ValueError, match="registered"):
        CompareConfig(entries=("grpo",), train={"env_id": "creditgym/Nope-v0"})
    with pytest.raises(ValueError, match=r"\['seed'\] come from each entry and seed"):
        CompareConfig(train={"seed": 3})
    with pytest.raises(ValueError, match="unknown TrainConfig fields \\['lrr'\\]"):
        CompareConfig(train={"lrr": 0.1})
    with pytest.raises(ValueError, match="lr, critic_lr and max_grad_norm must be > 0"):
        CompareConfig(train={"lr": -1.0})


def test_runs_are_planned_seed_by_seed_so_a_stopped_study_holds_pairs(tmp_path: Path) -> None:
    cfg = CompareConfig(entries=("grpo", "rloo", "cort"), seeds=(0, 1), train={"steps": 2})
    lines: list[str] = []
    jobs = plan(cfg, tmp_path, lines.append)
    assert [job.name for job in jobs] == [
        "grpo seed 0",
        "rloo seed 0",
        "cort seed 0",
        "grpo seed 1",
        "rloo seed 1",
        "cort seed 1",
    ]
    assert lines == []  # nothing to reuse in an empty folder


def test_cli_reports_a_bad_entry(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"creditgym compare: entry 'cort:nrm=1'.*its fields"):
        main(["compare", "--credit", "grpo,cort:nrm=1", "--out", str(tmp_path)])


def test_seeds_are_a_count_or_a_list_and_zero_says_how_to_name_seed_0(tmp_path: Path) -> None:
    assert (parse_seeds("3"), parse_seeds("0,4,7"), parse_seeds("5,")) == ((0, 1, 2), (0, 4, 7), (5,))
    with pytest.raises(
        SystemExit, match=r"--seeds 0 is a count of seeds and runs nothing; for seed 0 alone write '0,'"
    ):
        main(["compare", "--credit", "grpo", "--seeds", "0", "--out", str(tmp_path)])
    with pytest.raises(ValueError, match=r"a count \(3\) or a comma list"):
        parse_seeds("two")


def test_run_status_reuses_resumes_and_refuses_other_settings(tmp_path: Path) -> None:
    cfg = CompareConfig(entries=("grpo",), seeds=(0,), train={"steps": 4, "lr": 1e-4})
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
    other = train_settings(
        CompareConfig(entries=("grpo",), seeds=(0,), train={"steps": 4}), parse_entry("grpo"), 0
    )
    status, error = run_status(run, other, 4)
    assert status == "stale" and "other settings" in error
    # a run folder of the version before `train` overrides: the same flags in another order are the same run
    older = ["--env", "creditgym/Math-v0", "--credit", "grpo", "--seed", "0", "--lr", "0.0001"]
    (run / "compare.json").write_text(json.dumps({"settings": older, "returncode": 0}))
    assert run_status(run, settings, 4) == ("ok", None)


# -- the study's train settings -------------------------------------------------------------------------------------


def test_every_train_flag_reaches_the_runs() -> None:
    """The compare parser has every train knob but the run's own module and seed, and passes what was given."""
    argv = ["compare", "--credit", "grpo,cort", "--out", "x", "--steps", "5", "--kl-coef", "0.01"]
    argv += ["--clip-high", "0.3", "--loss-agg", "seq-mean-token-sum", "--env-kw", "difficulty=3"]
    args = build_parser().parse_args(argv)
    train = train_overrides(args, exclude=("credit", "credit_kwargs", "seed"))
    assert train == {
        "env_kwargs": {"difficulty": 3},
        "steps": 5,
        "clip_high": 0.3,
        "loss_agg": "seq-mean-token-sum",
        "kl_coef": 0.01,
    }
    cfg = CompareConfig(entries=("grpo", "cort:tau=0.5"), seeds=(1,), train=train)
    assert cfg.train["env_id"] == "creditgym/Math-v0" and cfg.steps == 5  # named, from TrainConfig
    assert train_settings(cfg, cfg.parsed()[1], 1) == [
        "--env", "creditgym/Math-v0", "--env-kw", "difficulty=3", "--credit", "cort", "--credit-kw", "tau=0.5",
        "--seed", "1", "--clip-high", "0.3", "--loss-agg", "seq-mean-token-sum", "--kl-coef", "0.01",
    ]  # fmt: skip
    train_flags = {a.dest for a in build_parser()._subparsers._group_actions[0].choices["train"]._actions}
    compare_flags = {a.dest for a in build_parser()._subparsers._group_actions[0].choices["compare"]._actions}
    # --credit: the entries; --out: both; --config, --overwrite, --wandb: a run folder's (a study has its own)
    assert train_flags - compare_flags == {"config", "credit_kw", "overwrite", "resume", "seed", "wandb"}


OLD_CONFIG = {
    "env_id": "creditgym/Math-v0", "entries": ["grpo", "cort"], "seeds": [0, 1, 2], "steps": 60,
    "eval_every": 10, "eval_episodes": 200, "prompts_per_step": None, "group_size": None, "lr": None,
    "max_new_tokens": None, "model": None, "device": None, "env_kwargs": {"difficulty": 2}, "workers": 2,
}  # fmt: skip


def test_an_old_study_config_is_upgraded(tmp_path: Path) -> None:
    new = upgrade_config(OLD_CONFIG)
    assert new == {
        "entries": ["grpo", "cort"],
        "seeds": [0, 1, 2],
        "train": {"env_id": "creditgym/Math-v0", "steps": 60, "eval_every": 10, "eval_episodes": 200,
                  "env_kwargs": {"difficulty": 2}},
    }  # fmt: skip
    assert upgrade_config(new) == new
    (tmp_path / "config.json").write_text(json.dumps(OLD_CONFIG))
    cfg = load_config(tmp_path)
    assert cfg.train["eval_every"] == 10 and cfg.seeds == (0, 1, 2)
    with pytest.raises(FileNotFoundError, match="run `creditgym compare`"):
        load_config(tmp_path / "nothing")


def test_report_only_on_a_published_study(tmp_path: Path) -> None:
    """A published study (results.json in the old form, no runs/): --report-only redraws it, changing nothing."""
    committed = FIRST_FORM
    out = tmp_path / "study"
    out.mkdir()
    for name in ("results.json", "summary.md"):
        (out / name).write_bytes((committed / name).read_bytes())
    assert main(["compare", "--out", str(out), "--report-only"]) == 0
    assert (out / "summary.md").read_text() == (committed / "summary.md").read_text()
    assert (out / "results.json").read_bytes() == (committed / "results.json").read_bytes()
    assert (out / "curves.png").stat().st_size > 10_000
    assert load_config(out).entries == tuple(
        json.loads((committed / "results.json").read_text())["config"]["entries"]
    )


def test_child_pythonpath_carries_this_process_path(tmp_path: Path) -> None:
    path = child_pythonpath([str(tmp_path), sys.prefix + "/lib", str(tmp_path / "missing"), str(tmp_path)])
    assert path.split(os.pathsep)[0] == str(tmp_path.resolve()) and path.count(str(tmp_path)) == 1
    assert sys.prefix not in path.split(os.pathsep)[0]


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
    results["runs"].append(
        {
            **results["runs"][0],
            "seed": 4,
            "final": None,
            "status": "missing",
            "log": "runs/grpo/seed4/train.log",
        }
    )
    row = results["summary"][1]
    assert row["n"] == 3 and row["diff_vs_baseline"] == pytest.approx(0.1) and row["step_time_ratio"] == 1.5
    assert summary_markdown(results) == (
        "**Partial study**: 6 of 8 runs finished; the table counts finished runs only, and the study is not "
        "complete.\n"
        "\n"
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
        "- `grpo` seed 4: not started (`runs/grpo/seed4/train.log`)\n"
    )
    assert summary_markdown(results) == summary_markdown(json.loads(json.dumps(results)))  # pure, JSON-stable


def test_summary_names_the_baseline_when_grpo_is_absent() -> None:
    results = _results(["cort", "cast"], {"cort": [1.0], "cast": [0.0]}, {"cort": 1.0, "cast": 1.0})
    text = summary_markdown(results)
    assert "`grpo` is not an entry, so the first entry, `cort`, is the baseline." in text
    assert "| `cast` | 1 | 0.000 ± n/a | -1.000 ± n/a | 100.0 | 1.000 |" in text


def _fake_run(
    out: Path, cfg: CompareConfig, label: str, seed: int, rows: list[dict[str, Any]], done: bool
) -> None:
    """A run folder as the trainer and compare leave it: config.json, metrics.jsonl, compare.json, and
    summary.json when it finished (its steps: the last row's)."""
    entry = parse_entry(label)
    folder = out / "runs" / entry.slug / f"seed{seed}"
    folder.mkdir(parents=True)
    config = resolved_train_config(cfg.train, entry, seed)
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "cut')
    record = {"settings": train_settings(cfg, entry, seed), "wall_s": 10.0, "returncode": 0 if done else None}
    (folder / "compare.json").write_text(json.dumps({**record, "interrupted": not done, "error": None}))
    curve = [[r["step"], r["eval/accuracy"]] for r in rows if "eval/accuracy" in r]
    if done:
        (folder / "summary.json").write_text(json.dumps({"steps": rows[-1]["step"], "eval_curve": curve}))


def _rows(steps: int, scores: dict[int, float], probe: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for step in range(steps + 1):
        row: dict[str, Any] = {"step": float(step)}
        if step:
            row["time/step_s"] = 2.0
        if step in scores:
            row["eval/accuracy"] = scores[step]
        if probe and step % 2 == 0:
            row.update({"probe/rank_corr": 0.1 * step, "probe/sign_agree": float("nan")})
        rows.append(row)
    return rows


def test_a_partial_study_keeps_every_run_counts_finished_ones_and_says_so(tmp_path: Path) -> None:
    cfg = CompareConfig(
        entries=("grpo", "rloo"), seeds=(0, 1), train={"steps": 4, "eval_every": 2}, pilot=True
    )
    _fake_run(tmp_path, cfg, "grpo", 0, _rows(4, {0: 0.5, 2: 0.55, 4: 0.6}, probe=True), done=True)
    _fake_run(tmp_path, cfg, "grpo", 1, _rows(4, {0: 0.5, 2: 0.6, 4: 0.7}), done=True)
    _fake_run(tmp_path, cfg, "rloo", 0, _rows(4, {0: 0.5, 2: 0.65, 4: 0.8}), done=True)
    _fake_run(tmp_path, cfg, "rloo", 1, _rows(2, {0: 0.5, 2: 0.9}), done=False)  # stopped at step 2
    results = write_report(cfg, tmp_path)
    grpo0 = results["runs"][0]
    assert grpo0["probe"] == [
        {"step": 0, "figures": {"rank_corr": 0.0, "sign_agree": None}},  # NaN -> null: results.json is JSON
        {"step": 2, "figures": {"rank_corr": 0.2, "sign_agree": None}},
        {"step": 4, "figures": {"rank_corr": 0.4, "sign_agree": None}},
    ]
    assert grpo0["config_hash"] == config_hash(resolved_train_config(cfg.train, parse_entry("grpo"), 0))
    stopped = results["runs"][3]
    assert (stopped["status"], stopped["state"], stopped["steps_done"], stopped["steps_planned"]) == (
        "partial",
        "interrupted",
        2,
        4,
    )
    assert stopped["final"] is None and stopped["curve"] == [[0, 0.5], [2, 0.9]]  # kept, not counted
    assert results["partial"] is True and results["pilot"] is True
    rloo = results["summary"][1]
    assert (rloo["n"], rloo["seeds"], rloo["n_paired"]) == (1, [0], 1)
    assert rloo["final_mean"] == pytest.approx(0.8) and rloo["diff_vs_baseline"] == pytest.approx(0.2)
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith("**Pilot**: runs that size the study")
    assert "**Partial study**: 3 of 4 runs finished" in text
    assert "- `rloo` seed 1: partial (2 of 4 steps) (`runs/rloo/seed1/train.log`)" in text
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(results))
    assert load_config(tmp_path) == cfg  # the pilot flag survives config.json


def test_results_of_the_first_form_read_as_the_current_one() -> None:
    """A study published before status/steps/probe/config hash: its runs read as finished with all their steps,
    its table renders as it was published."""
    study = FIRST_FORM
    old = json.loads((study / "results.json").read_text())
    new = upgrade_results(old)
    assert {r["status"] for r in new["runs"]} == {"finished"} and new["partial"] is False
    assert all(r["steps_done"] == r["steps_planned"] == 60 for r in new["runs"])
    assert summary_markdown(old) == (study / "summary.md").read_text()
    assert summarize(new["runs"], new["config"]["entries"], new["baseline"])[0]["n"] == 3


def test_read_run_of_a_run_never_started(tmp_path: Path) -> None:
    cfg = CompareConfig(entries=("grpo",), seeds=(0,), train={"steps": 4})
    run = read_run(tmp_path, cfg, parse_entry("grpo"), 0)
    assert (run["status"], run["state"], run["steps_done"], run["curve"], run["probe"]) == (
        "partial",
        "missing",
        0,
        [],
        [],
    )
    assert run["config_hash"] == config_hash(run["train_config"]) and run["train_config"]["steps"] == 4


def test_local_runs_keep_to_the_threads_the_caller_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert (run_threads(1), run_threads(2), run_threads(16)) == (8, 4, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a shared machine: one thread a run, whatever the cores
    assert (run_threads(1), run_threads(2)) == (1, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert run_threads(2) == 4


# -- the CI smoke run ----------------------------------------------------------------------------------------------

# the tiniest budget: 2 prompts x 2 completions, 8 tokens, 4 held-out episodes after every step; 2 runs in parallel
TINY = (
    "--env creditgym/Math-v0 --credit grpo,cort --seeds 1 --steps 2 --workers 2 --prompts-per-step 2 "
    "--group-size 2 --eval-every 1 --eval-episodes 4 --max-new-tokens 8 --device cpu"
)


# `creditgym compare` in a fresh interpreter that says at exit whether anything imported Ray
_MAIN = "import sys; from creditgym.cli import main; c = main(); print('ray imported:', 'ray' in sys.modules); sys.exit(c)"


def _compare(out: Path, *extra: str, tiny: str = TINY, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", _MAIN, "compare", *tiny.split(), "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)


def test_compare_smoke_two_modules_one_seed_two_steps_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "study"
    res = _compare(out)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ray imported: False" in res.stdout  # without --ray, Ray is not imported
    results = json.loads((out / "results.json").read_text())
    assert [(r["entry"], r["seed"], r["status"]) for r in results["runs"]] == [
        ("grpo", 0, "finished"),
        ("cort", 0, "finished"),
    ]
    assert results["format"] == 2 and results["partial"] is False and results["pilot"] is False
    for run in results["runs"]:
        assert [step for step, _ in run["curve"]] == [0, 1, 2]  # held-out at step 0 and every step
        assert (run["steps_done"], run["steps_planned"], run["probe"]) == (2, 2, [])
        ran = json.loads((out / run["log"]).with_name("config.json").read_text())  # what the trainer resolved
        assert run["train_config"] == ran and run["config_hash"] == config_hash(ran)
        entry = parse_entry(run["entry"])
        assert ran == resolved_train_config(results["config"]["train"], entry, 0)  # compare knows it before
        assert run["final"] == run["curve"][-1][1] and 0.0 <= run["final"] <= 1.0
        assert run["wall_s"] > 0 and run["step_s"] > 0
        assert (out / run["log"]).is_file() and (out / run["log"]).parent.name == "seed0"
    assert results["runs"][0]["config_hash"] != results["runs"][1]["config_hash"]
    grpo, cort = results["summary"]
    assert grpo["entry"] == "grpo" and grpo["n"] == 1 and grpo["step_time_ratio"] == 1.0
    assert cort["diff_vs_baseline"] == pytest.approx(cort["final_mean"] - grpo["final_mean"])
    assert results["machine"]["cpu_count"] >= 1 and results["config"]["train"]["steps"] == 2
    assert (out / "summary.md").read_text() == summary_markdown(results)
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    summary_file = out / "runs" / "cort" / "seed0" / "summary.json"
    stamp = summary_file.stat().st_mtime_ns
    again = _compare(out)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        again.stdout.count("done before, reused") == 2
    )  # the mtime below: nothing retrained, no timing needed
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


def test_compare_on_a_module_env_id_from_the_register_env_example(tmp_path: Path) -> None:
    """``--env register_env:myorg/Reverse-v0``: the parent finds ``register_env`` on its sys.path (not through
    PYTHONPATH) and its train children, started elsewhere, import it all the same."""
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'examples')!r}); " + _MAIN
    tiny = TINY.replace("creditgym/Math-v0", "register_env:myorg/Reverse-v0").replace(
        "grpo,cort", "grpo,rloo"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-c", code, "compare", *tiny.split(), "--out", str(tmp_path / "study")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    results = json.loads((tmp_path / "study" / "results.json").read_text())
    assert results["config"]["train"]["env_id"] == "register_env:myorg/Reverse-v0"
    assert [(r["entry"], r["status"]) for r in results["runs"]] == [
        ("grpo", "finished"),
        ("rloo", "finished"),
    ]
    for run in results["runs"]:
        assert [step for step, _ in run["curve"]] == [0, 1, 2]
        assert all(0.0 <= score <= 1.0 for _, score in run["curve"])
        log = (tmp_path / "study" / run["log"]).read_text()
        assert "--env register_env:myorg/Reverse-v0" in log and "has no held-out split" in log


def test_compare_keeps_the_probe_figures_of_a_run_with_probe_every(tmp_path: Path) -> None:
    """A real run with ``--probe-every``: its ``probe/*`` metrics land in results.json, one entry per probed step."""
    tiny = TINY.replace("grpo,cort", "grpo").replace("--workers 2", "--workers 1")
    res = _compare(
        tmp_path / "study", "--probe-every", "1", "--probe-prompts", "1", "--probe-k", "2", tiny=tiny
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (run,) = json.loads((tmp_path / "study" / "results.json").read_text())["runs"]
    assert run["status"] == "finished" and [p["step"] for p in run["probe"]] == [0, 1, 2]
    logged = json.loads(
        (tmp_path / "study" / "runs" / "grpo" / "seed0" / "metrics.jsonl").read_text().split("\n")[0]
    )
    names = {k.removeprefix("probe/") for k in logged if k.startswith("probe/")}
    assert names and set(run["probe"][0]["figures"]) == names
    assert run["train_config"]["probe_every"] == 1
