"""studies/scripts/verdict.py: the verdict per module from a study's own numbers, by hand, and the committed
verdict tables against their studies and the docs pages that quote them (docs/study/)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sp

from creditgym.agents.study.compare import parse_entry
from creditgym.agents.study.stats import holm, min_detectable_effect, t_quantile

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "studies" / "scripts"
VERDICTS = sorted((ROOT / "studies" / "results").glob("*/verdict.md"))
#: The docs pages that quote the committed tables: the study, part by part.
STUDY_PAGES = sorted((ROOT / "docs" / "study").glob("*.md"))


def in_the_docs(path: Path) -> bool:
    """The committed table ``path`` is on one of the study's docs pages: included (``--8<-- "<path>"``, so the
    page shows the file itself) or quoted whole."""
    include, table = f'--8<-- "{path.relative_to(ROOT).as_posix()}"', path.read_text()
    return any(include in text or table in text for text in (page.read_text() for page in STUDY_PAGES))


def _committed(name: str) -> list[Path]:
    """The committed files ``name`` of the studies and of their follow-ups (``study-chains/controls``)."""
    results = ROOT / "studies" / "results"
    return sorted(results.glob(f"*/{name}")) + sorted(results.glob(f"*/*/{name}"))


CURVES = _committed("curve.md")
POOLED = sorted(p.parent for p in _committed("verdict.json") if json.loads(p.read_text()).get("studies"))


def _study(folder: Path) -> dict[str, Any]:
    """The results a committed verdict was made from: the folder's results.json, or, for a pooled verdict, the
    studies its verdict.json names, pooled."""
    source = json.loads((folder / "verdict.json").read_text())
    if source.get("studies"):
        return verdict.pool([json.loads((ROOT / p / "results.json").read_text()) for p in source["studies"]])
    return json.loads((folder / "results.json").read_text())


def _example(name: str) -> Any:
    """``studies/scripts/<name>.py`` as a module (a dataclass looks its module up in sys.modules), with its folder
    on the import path, as when it runs as a script (headline.py imports verdict.py)."""
    if str(STUDY) not in sys.path:
        sys.path.append(str(STUDY))
    spec = importlib.util.spec_from_file_location(f"study_{name}", STUDY / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"study_{name}"] = module
    spec.loader.exec_module(module)
    return module


verdict = _example("verdict")


def _run(entry: str, seed: int, final: float | None, status: str = "finished") -> dict[str, Any]:
    return {
        "entry": entry, "seed": seed, "status": status, "state": "ok", "steps_done": 4, "steps_planned": 4,
        "final": final, "curve": [], "probe": [], "wall_s": 1.0, "step_s": 1.0, "config_hash": None,
        "train_config": None, "log": "", "error": None,
    }  # fmt: skip


def _results(finals: dict[str, list[float | None]]) -> dict[str, Any]:
    runs = [
        _run(entry, seed, final, "finished" if final is not None else "partial")
        for entry, row in finals.items()
        for seed, final in enumerate(row)
    ]
    seeds = list(range(len(next(iter(finals.values())))))
    config = {"entries": list(finals), "seeds": seeds, "train": {"steps": 4}}
    return {"format": 2, "config": config, "baseline": "grpo", "runs": runs, "partial": False, "pilot": False}


def test_verdicts_by_hand() -> None:
    results = _results(
        {
            "grpo": [0.50, 0.60, 0.55, 0.40],
            "up": [0.60, 0.72, 0.64, None],  # +0.10, +0.12, +0.09 on seeds 0-2; seed 3 not finished
            "down": [0.40, 0.49, 0.46, 0.31],  # -0.10, -0.11, -0.09, -0.09
            "flat": [0.52, 0.58, 0.56, 0.41],  # +0.02, -0.02, +0.01, +0.01
            "weak": [0.45, 0.58, 0.51, 0.39],  # -0.05, -0.02, -0.04, -0.01: p 0.046 alone
            "alone": [0.9, None, None, None],
        }
    )
    rows = {row["entry"]: row for row in verdict.verdict_rows(results)}
    assert list(rows) == ["up", "down", "flat", "weak", "alone"]
    up = rows["up"]
    assert up["seeds"] == [0, 1, 2] and up["diff"] == pytest.approx(0.31 / 3)
    sd = ((0.1 - 0.31 / 3) ** 2 + (0.12 - 0.31 / 3) ** 2 + (0.09 - 0.31 / 3) ** 2) ** 0.5 / 2**0.5
    assert up["sd"] == pytest.approx(sd)
    assert up["ci95"] == pytest.approx(
        [0.31 / 3 - t_quantile(2) * sd / 3**0.5, 0.31 / 3 + t_quantile(2) * sd / 3**0.5]
    )
    assert up["mde"] == pytest.approx((4.302653 + 1.060660) * sd / 3**0.5, rel=1e-5)
    ps = {e: sp.ttest_1samp(_diffs(results, e), 0.0).pvalue for e in rows if e != "alone"}
    assert {e: rows[e]["p"] for e in ps} == pytest.approx(ps, rel=1e-9)
    # Holm over the 4 entries with 2+ pairs: down 4 p, up 3 p, weak 2 p, flat max(1 p, weak's)
    assert rows["down"]["p_holm"] == pytest.approx(4 * ps["down"]) and rows["up"]["p_holm"] == pytest.approx(
        3 * ps["up"]
    )
    assert rows["weak"]["p_holm"] == pytest.approx(2 * ps["weak"]) and rows["flat"][
        "p_holm"
    ] == pytest.approx(ps["flat"])
    assert rows["weak"]["ci95"][1] < 0 < rows["weak"]["p_holm"] - 0.05  # worse alone, not in the family of 4
    verdicts = [rows[e]["verdict"] for e in ("up", "down", "flat", "weak")]
    assert verdicts == ["better", "worse", "unresolved", "unresolved"]
    assert (
        rows["alone"]["verdict"] is None and rows["alone"]["seeds"] == [0] and "p_holm" not in rows["alone"]
    )
    table = verdict.verdict_markdown(results)
    assert "| `alone` | 1 | fewer than 2 pairs |" in table and "| `down` | 4 | -0.098" in table
    assert "| `weak` | 4 | -0.030 [-0.059, -0.001] | 0.092 | 0.038 | unresolved |" in table
    assert table.startswith("Verdicts: Holm's step-down correction over the family of this table's 4 paired")
    assert "post hoc" in table and "no entry is called equal" in table


def _diffs(results: dict[str, Any], entry: str) -> list[float]:
    final = {(r["entry"], r["seed"]): r["final"] for r in results["runs"] if r["final"] is not None}
    return [final[entry, s] - final["grpo", s] for s in range(4) if (entry, s) in final]


def test_an_entry_is_equal_only_inside_a_margin_given() -> None:
    """With a margin, the Holm-adjusted two one-sided tests (TOST) call an entry equal; scipy's one-sided tests."""
    results = _results(
        {
            "grpo": [0.50, 0.60, 0.55, 0.40],
            "flat": [0.52, 0.58, 0.56, 0.41],  # +0.02, -0.02, +0.01, +0.01
            "weak": [0.45, 0.58, 0.51, 0.39],  # -0.05, -0.02, -0.04, -0.01
            "up": [0.60, 0.72, 0.64, 0.50],  # +0.10, +0.12, +0.09, +0.10
        }
    )
    rows = {row["entry"]: row for row in verdict.verdict_rows(results, margin=0.05)}
    for entry, row in rows.items():
        d = _diffs(results, entry)
        tost = max(
            sp.ttest_1samp(d, -0.05, alternative="greater").pvalue,
            sp.ttest_1samp(d, 0.05, alternative="less").pvalue,
        )
        assert row["p_equal"] == pytest.approx(tost, rel=1e-9), entry
    assert [rows[e]["verdict"] for e in ("flat", "weak", "up")] == [
        "equal within ±0.05",
        "unresolved",
        "better",
    ]
    assert "equivalence margin ±0.05" in verdict.verdict_markdown(results, margin=0.05)
    assert "not fixed in advance." in verdict.verdict_markdown(results)
    planned = verdict.verdict_markdown(results, planned_mde=0.143)
    assert "fixed in advance from its pilot: 0.143" in planned and "not fixed in advance" not in planned
    with pytest.raises(ValueError, match="margin must be > 0, got 0"):
        verdict.verdict_rows(results, margin=0)


def test_pool_keeps_each_run_once_and_refuses_studies_that_disagree() -> None:
    a = _results({"grpo": [0.5, 0.6], "up": [0.6, 0.7]})
    b = _results({"grpo": [0.5, 0.6, 0.4], "down": [0.4, 0.5, 0.3]})
    b["runs"] = [r for r in b["runs"] if r["seed"] == 2]  # a follow-up at seed 2 only
    b["config"]["seeds"] = [2]
    pooled = verdict.pool([a, b])
    assert pooled["config"]["entries"] == ["grpo", "up", "down"] and pooled["config"]["seeds"] == [0, 1, 2]
    assert sorted((r["entry"], r["seed"]) for r in pooled["runs"]) == [
        ("down", 2), ("grpo", 0), ("grpo", 1), ("grpo", 2), ("up", 0), ("up", 1)
    ]  # fmt: skip
    rows = {row["entry"]: row for row in verdict.verdict_rows(pooled)}
    assert rows["up"]["seeds"] == [0, 1] and rows["down"]["seeds"] == [2]
    assert verdict.pool([a, a])["runs"] == a["runs"]  # the same run twice (a rerun baseline) is kept once
    other = _results({"grpo": [0.5, 0.6]})
    other["runs"][0]["curve"] = [[0, 0.1], [4, 0.5]]
    with pytest.raises(ValueError, match=r"grpo seed 0 differs between studies"):
        verdict.pool([a, other])
    steps = _results({"grpo": [0.5]})
    steps["config"]["train"] = {"steps": 8}
    with pytest.raises(ValueError, match=r"study 1 was run with other settings"):
        verdict.pool([a, steps])
    with pytest.raises(ValueError, match=r"study 1 has baseline 'rloo'"):
        verdict.pool([a, {**a, "baseline": "rloo"}])
    with pytest.raises(ValueError, match="no study given"):
        verdict.pool([])


@pytest.mark.parametrize("folder", POOLED, ids=[p.name for p in POOLED])
def test_committed_pooled_verdicts_are_their_studies_pooled_and_in_the_docs(folder: Path) -> None:
    """A pooled verdict (``--study`` repeated) is verdict.py's table of the studies its verdict.json names."""
    results = _study(folder)
    assert (folder / "verdict.md").read_text() == verdict.verdict_markdown(results)
    assert json.loads((folder / "verdict.json").read_text())["rows"] == json.loads(
        json.dumps(verdict.verdict_rows(results))
    )
    assert in_the_docs(folder / "verdict.md")


def test_the_command_writes_a_pooled_verdict_into_a_folder_it_makes(tmp_path: Path) -> None:
    """``--out`` may name a folder that does not exist yet (a new pooled record): it is made, and the tables
    written there are the committed pooled verdict's."""
    folder = POOLED[0]
    studies = json.loads((folder / "verdict.json").read_text())["studies"]
    out = tmp_path / "new" / "pooled" / "verdict.md"
    verdict.main([arg for study in studies for arg in ("--study", str(ROOT / study))] + ["--out", str(out)])
    assert out.read_text() == (folder / "verdict.md").read_text()
    assert out.with_name("curve.md").read_text() == (folder / "curve.md").read_text()
    assert (
        json.loads(out.with_suffix(".json").read_text())["rows"]
        == json.loads((folder / "verdict.json").read_text())["rows"]
    )


def test_min_detectable_effect_needs_two_pairs() -> None:
    assert min_detectable_effect(0.02, 6) == pytest.approx((2.570582 + 0.919544) * 0.02 / 6**0.5, rel=1e-5)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        min_detectable_effect(0.02, 1)


def test_probe_columns_show_the_probed_figures_and_say_what_was_not_probed() -> None:
    results = _results({"grpo": [0.5, 0.6], "cast": [0.6, 0.7], "vine": [0.5, 0.6]})
    fig = {"value": 0.125, "ci": [0.05, 0.2]}
    probe = {"modules": {"grpo": {"spearman": {"value": 0.0, "ci": [0.0, 0.0]}, "pearson": fig},
                         "cast": {"spearman": fig, "pearson": fig}}}  # fmt: skip
    table = verdict.verdict_markdown(results, probe)
    assert "| `grpo` | | baseline | | | | +0.000 [+0.000, +0.000] | +0.125 [+0.050, +0.200] |" in table
    assert "| `cast` | 2 | +0.100" in table and table.count("+0.125 [+0.050, +0.200]") == 3
    assert (
        "| `vine` | 2 | +0.000 [+0.000, +0.000] | 1.000 | 0.000 | unresolved | not probed | not probed |"
        in table
    )


@pytest.mark.parametrize("path", VERDICTS, ids=[p.parent.name for p in VERDICTS])
def test_committed_verdicts_are_their_studies_and_in_the_docs(path: Path) -> None:
    """Each committed verdict.md is verdict.py's table of its study (and the probe its first line names)."""
    text = path.read_text()
    source = json.loads((path.parent / "verdict.json").read_text())  # {"probe": "studies/results/..."}
    results = json.loads((path.parent / "results.json").read_text())
    probe = json.loads((ROOT / source["probe"]).read_text()) if source.get("probe") else None
    assert text == verdict.verdict_markdown(results, probe, source.get("margin"), source.get("planned_mde"))
    assert in_the_docs(path)


def test_curve_differences_by_hand() -> None:
    results = _results({"grpo": [0.5, 0.6, 0.4], "up": [0.6, 0.7, None]})
    curves = {("grpo", 0): [0.2, 0.4, 0.5], ("grpo", 1): [0.2, 0.5, 0.6], ("grpo", 2): [0.2, 0.3, 0.4]}
    curves |= {("up", 0): [0.2, 0.45, 0.6], ("up", 1): [0.2, 0.6, 0.7], ("up", 2): [0.2, 0.3, 0.3]}
    for run in results["runs"]:  # held-out steps 0, 2, 4; up's seed 2 did not finish, so it is not paired
        run["curve"] = [
            [step, v] for step, v in zip((0, 2, 4), curves[run["entry"], run["seed"]], strict=True)
        ]
    rows = verdict.curve_rows(results)
    assert [(r["entry"], r["step"], r["seeds"]) for r in rows] == [("up", 2, [0, 1]), ("up", 4, [0, 1])]
    at2 = rows[0]
    assert at2["diff"] == pytest.approx(0.075)
    half = t_quantile(1) * (0.05**2 / 2) ** 0.5 / 2**0.5  # diffs 0.05 and 0.10: sd 0.05 / sqrt(2)
    assert at2["ci95"] == pytest.approx([0.075 - half, 0.075 + half])
    assert rows[1]["diff"] == pytest.approx(0.1) and rows[1]["ci95"] == pytest.approx([0.1, 0.1])
    table = verdict.curve_markdown(results)
    assert "| entry | seeds paired | Δ vs `grpo` at step 2 | Δ vs `grpo` at step 4 |" in table
    assert "| `up` | 2 | +0.075 [" in table and "| +0.100 [+0.100, +0.100] |" in table


@pytest.mark.parametrize("path", CURVES, ids=[p.parent.name for p in CURVES])
def test_committed_curve_differences_are_their_studies_and_in_the_docs(path: Path) -> None:
    results = _study(path.parent)
    text = (path.parent / "curve.md").read_text()
    assert text == verdict.curve_markdown(results)
    assert in_the_docs(path)
    assert json.loads((path.parent / "verdict.json").read_text())["curve"] == json.loads(
        json.dumps(verdict.curve_rows(results))
    )


def test_probe_rows_average_each_probed_step_over_the_finished_runs_by_hand() -> None:
    results = _results({"grpo": [0.5, 0.6], "cast": [0.6, None]})
    logged = {
        ("grpo", 0): [
            (
                0,
                {"spearman": None, "pearson": 0.10, "ceiling_spearman": 0.4},
            ),  # an older run: its reliability
            (2, {"pearson": 0.30, "ceiling_spearman": -0.2}),
        ],
        # a run of today's probe logs A*'s reliability and the attainable correlation by those names
        ("grpo", 1): [
            (0, {"spearman": None, "pearson": 0.20, "reliability_spearman": 0.2, "attainable_spearman": 0.5})
        ],
        ("cast", 0): [(0, {"spearman": 0.05, "pearson": 0.15, "decisive_share": 0.5})],
        ("cast", 1): [(0, {"spearman": 0.9, "pearson": 0.9})],  # not finished: not averaged
    }
    for run in results["runs"]:
        run["probe"] = [{"step": k, "figures": f} for k, f in logged[run["entry"], run["seed"]]]
    rows = verdict.probe_rows(results)
    assert [(r["entry"], r["step"], r["seeds"]) for r in rows] == [
        ("grpo", 0, [0, 1]), ("grpo", 2, [0]), ("cast", 0, [0])
    ]  # fmt: skip
    assert rows[0]["pearson"] == pytest.approx(0.15) and rows[0]["reliability_spearman"] == pytest.approx(0.3)
    assert rows[0]["attainable_spearman"] == pytest.approx(
        (0.4**0.5 + 0.5) / 2
    )  # the old run's: its square root
    assert (rows[1]["reliability_spearman"], rows[1]["attainable_spearman"]) == (-0.2, 0.0)  # 0 below 0
    assert rows[0]["spearman"] is None and rows[1]["pearson"] == pytest.approx(0.30)
    assert rows[2]["spearman"] == pytest.approx(0.05) and rows[2]["decisive_share"] == pytest.approx(0.5)
    # two seeds: mean 0.15, sd 0.0707, t_{0.975, 1} = 12.706 -> half-width 12.706 * 0.0707 / sqrt(2) = 0.635
    assert rows[0]["pearson_ci95"] == pytest.approx([0.15 - 0.6353, 0.15 + 0.6353], abs=1e-3)
    # no value, or one seed: no interval
    assert rows[0]["spearman_ci95"] is None and rows[1]["pearson_ci95"] is None
    table = verdict.probe_markdown(results)
    assert "| `grpo` | 0 | 2 |  | +0.150 [-0.485, +0.785] |  | +0.300 |  | +0.566 |  |" in table
    assert "| `cast` | 0 | 1 | +0.050 | +0.150 | +0.500 |  |  |  |  |" in table
    assert verdict.probe_markdown(_results({"grpo": [0.5]})) == ""  # no run probed: no table


PROBES = _committed("probes.md")


@pytest.mark.parametrize("path", PROBES, ids=[p.parent.name for p in PROBES])
def test_committed_probe_tables_are_their_runs_and_in_the_docs(path: Path) -> None:
    """probes.md is the probe figures its study's runs logged (results.json; a pooled folder's studies, pooled),
    and the study's docs pages quote it."""
    results = _study(path.parent)
    assert path.read_text() == verdict.probe_markdown(results)
    assert json.loads((path.parent / "verdict.json").read_text())["probes"] == json.loads(
        json.dumps(verdict.probe_rows(results))
    )
    assert in_the_docs(path)


DIAGNOSTICS = _committed("diagnostics.md")


@pytest.mark.parametrize("path", DIAGNOSTICS, ids=[p.parent.name for p in DIAGNOSTICS])
def test_committed_diagnostics_are_their_rows_and_in_the_docs(path: Path) -> None:
    """diagnostics.md is the rendering of the rows beside it, for the study's entries, and the docs quote it."""
    rows = json.loads(path.with_suffix(".json").read_text())
    assert path.read_text() == _example("diagnostics").markdown(rows)
    entries = json.loads((path.parent / "results.json").read_text())["config"]["entries"]
    assert list(dict.fromkeys(row["entry"] for row in rows)) == entries
    assert in_the_docs(path)


def test_diagnostics_average_each_window_per_seed_then_over_seeds(tmp_path: Path) -> None:
    diag = _example("diagnostics")
    (tmp_path / "config.json").write_text(
        json.dumps({"entries": ["grpo", "cast:b_wrong=0"], "seeds": [0, 1]})
    )

    def write(slug: str, seed: int, rows: list[dict[str, Any]]) -> None:
        folder = tmp_path / "runs" / slug / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def row(step: int, reward: float, **extra: float) -> dict[str, Any]:
        return {
            "step": step,
            "rollout/reward": reward,
            "actor/entropy": 0.1,
            "rollout/response_tokens": 10,
            **extra,
        }

    write("grpo", 0, [row(1, 0.0), row(2, 1.0), row(3, 1.0), {"step": 3, "eval/accuracy": 0.5}])
    write("grpo", 1, [row(1, 0.5), row(2, 0.5)])  # stopped after step 2: no second window
    slug = parse_entry("cast:b_wrong=0").slug
    write(
        slug,
        0,
        [row(1, 0.2, **{"credit/cast/adv_mean": -0.5}), row(2, 0.4, **{"credit/cast/adv_mean": -0.1})],
    )
    rows = diag.diagnostics(tmp_path, 2)
    assert [(r["entry"], r["steps"], r["seeds"]) for r in rows] == [
        ("grpo", [1, 2], 2), ("grpo", [3, 4], 1), ("cast:b_wrong=0", [1, 2], 1)
    ]  # fmt: skip
    assert rows[0]["reward"] == pytest.approx((0.5 + 0.5) / 2) and rows[1]["reward"] == 1.0
    assert rows[0]["mean advantage"] is None and rows[2]["mean advantage"] == pytest.approx(-0.3)
    table = diag.markdown(rows)
    assert "| `cast:b_wrong=0` | 1-2 | 1 | 0.300 | 0.100 | 10.0 | -0.300 |  |  |  |" in table


#: The entries a study's follow-ups must reproduce: on the chains `grpo` and `pact` (part 5's `cast` and `compo`
#: differ from the study's by up to 0.010 at some seeds, 0 and 2 for both and 3 and 4 for `cast`, and today's code
#: reproduces the follow-up's, docs/study/part5.md); on the easy task and the hard rubric every entry (None), as their
#: probed follow-ups reran them all.
REPRODUCED: dict[str, set[str] | None] = {
    "study-chains": {"grpo", "pact"},
    "study-easy": None,
    "study-hard": None,
}
#: A study's follow-ups that ran new seeds instead of rerunning its own (the hard rubric's seeds 6-19).
EXTENSIONS = {"study-hard": {"seeds6-9", "seeds10-14", "seeds15-16", "seeds17-19"}}
FOLLOW_UPS = sorted(
    (study, p.parent.name)
    for study in REPRODUCED
    for p in (ROOT / "studies" / "results" / study).glob("*/results.json")
    if p.parent.name not in EXTENSIONS.get(study, set())
)
EXTENDED = sorted((study, name) for study, names in EXTENSIONS.items() for name in names)


@pytest.mark.parametrize(("study", "extension"), EXTENDED, ids=[f"{s}/{e}" for s, e in EXTENDED])
def test_extensions_ran_seeds_of_their_own_with_the_study_settings(study: str, extension: str) -> None:
    """A follow-up left out of the reproduction test below ran only seeds the study did not, with its settings."""
    folder = ROOT / "studies" / "results" / study
    first = json.loads((folder / "results.json").read_text())
    runs = json.loads((folder / extension / "results.json").read_text())["runs"]
    assert runs and not {r["seed"] for r in runs} & {r["seed"] for r in first["runs"]}
    by_entry = {r["entry"]: r["train_config"] for r in first["runs"] if r["seed"] == 0}
    for run in runs:
        assert {**run["train_config"], "seed": 0} == by_entry[run["entry"]]


@pytest.mark.parametrize(("study", "follow_up"), FOLLOW_UPS, ids=[f"{s}/{f}" for s, f in FOLLOW_UPS])
def test_rerunning_reproduced_the_committed_study_runs(study: str, follow_up: str) -> None:
    """Each follow-up of a study ran its entries again with the study's settings (a fresh folder, the same
    command) for its seeds, or reused such a rerun (``vine-seeds12`` has ``controls-rest``'s runs, copied into
    its folder): the same resolved config, and the same held-out curve to the last digit. A probed
    follow-up (``--probe-every``) differs in its probe settings only; its probes draw seeds of their own, so its
    training, and so its curve, are still the study's."""

    def unprobed(config: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if not k.startswith("probe_")}

    folder = ROOT / "studies" / "results" / study
    first = {(r["entry"], r["seed"]): r for r in json.loads((folder / "results.json").read_text())["runs"]}
    runs = json.loads((folder / follow_up / "results.json").read_text())["runs"]
    entries = REPRODUCED[study]
    if entries is None:  # every entry was rerun
        assert {r["entry"] for r in runs} == {e for e, _ in first}
    again = [r for r in runs if entries is None or r["entry"] in entries]
    assert again
    for b in again:
        a = first[b["entry"], b["seed"]]
        assert a["status"] == b["status"] == "finished"
        assert unprobed(a["train_config"]) == unprobed(b["train_config"])
        assert (a["config_hash"] == b["config_hash"]) == (a["train_config"] == b["train_config"])
        assert bool(b["train_config"]["probe_every"]) == bool(b["probe"])  # a probed run logged its figures
        assert a["curve"] == b["curve"] and len(a["curve"]) == 4, (b["entry"], b["seed"])


headline = _example("headline")


def test_the_headline_is_its_studies_verdicts_and_in_the_docs() -> None:
    """studies/results/headline.md is headline.py's table of the committed verdicts, the study's first docs page
    includes it, each row's difference and MDE are the ones its study's verdict.md prints for that entry, and its
    verdict is Holm's over the table's own rows (the p-values its studies' verdict.json keep)."""
    path = ROOT / "studies" / "results" / "headline.md"
    table = path.read_text()
    assert table == headline.headline_markdown()
    assert '--8<-- "studies/results/headline.md"' in (ROOT / "docs" / "study" / "index.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("|")][2:]
    assert len(lines) == len(headline.ROWS)
    ps = [headline.verdict_row(row.study, row.entry)["p"] for row in headline.ROWS]
    for row, line, p_holm in zip(headline.ROWS, lines, holm(ps), strict=True):
        cells = _cells(line)
        assert cells[0] == f"`{row.entry}`"
        printed = (ROOT / "studies" / "results" / row.study / "verdict.md").read_text()
        assert f"| `{row.entry}` | {cells[2]} | {cells[3]} | " in printed and f" | {cells[5]} | " in printed
        assert cells[4] == verdict.p_cell(p_holm)
        assert cells[6] == (
            "unresolved" if p_holm >= 0.05 else "worse" if cells[3].startswith("-") else "better"
        )
        assert (row.probed is None) == (cells[7] == "not probed during training")
    assert f"this table's {len(headline.ROWS)} home-task paired differences" in table


def test_the_holm_changes_are_the_pairs_an_uncorrected_test_resolved_and_holm_does_not() -> None:
    """studies/results/holm-changes.md lists, from every committed verdict.json and the headline, each pair with an
    unadjusted p below 0.05 and a Holm-adjusted one at or above it, and the study's first page includes it."""
    path = ROOT / "studies" / "results" / "holm-changes.md"
    assert path.read_text() == headline.holm_changes_markdown()
    assert '--8<-- "studies/results/holm-changes.md"' in (ROOT / "docs" / "study" / "index.md").read_text()
    changes = {(c["table"], c["entry"]) for c in headline.holm_changes()}
    assert {("study-chains/controls-pooled", "gae:lam=0.865"), ("study-chains/controls-pooled", "compo:gate=shuffled"),
            ("study-easy", "cort"), ("study-easy", "compo")} <= changes  # fmt: skip
    for c in headline.holm_changes():
        assert c["p"] < 0.05 <= c["p_holm"]


def test_the_headline_says_what_a_family_with_the_easy_column_would_change() -> None:
    """The caption's wider family (home rows and the easy column) is Holm over all of their p-values."""
    easy = [headline.verdict_row(headline.EASY, row.easy)["p"] for row in headline.ROWS if row.easy]
    home = [headline.verdict_row(row.study, row.entry)["p"] for row in headline.ROWS]
    size, lost = headline.wider_family()
    wider = holm(home + easy)
    assert size == len(home) + len(easy)
    expected = [
        (row.entry, wider[i])
        for i, (row, p) in enumerate(zip(headline.ROWS, holm(home), strict=True))
        if p < 0.05 <= wider[i]
    ]
    assert lost == expected


#: The headline's columns the README's short results table keeps: the entry, its task and seeds, the difference
#: and the verdict.
README_COLUMNS = (0, 1, 2, 3, 6)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_readme_results_are_the_headline_condensed() -> None:
    """The README's short results table is studies/results/headline.md with fewer rows and columns: its header is the
    headline's kept columns, and each of its rows is the headline's row for that entry, cell for cell."""
    lines = [
        line
        for line in (ROOT / "studies" / "results" / "headline.md").read_text().splitlines()
        if line.startswith("|")
    ]
    full = {cells[0]: cells for cells in map(_cells, lines[2:])}
    section = (ROOT / "README.md").read_text().split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    first = section[section.index("\n|") + 1 :].split("\n\n", 1)[0]  # the section's first table
    table = first.splitlines()
    assert _cells(table[0]) == [_cells(lines[0])[i] for i in README_COLUMNS]
    rows = [_cells(line) for line in table[2:]]
    assert len(rows) >= 6 and {"`cort`", "`cast`", "`compo`", "`pact`", "`vine`"} <= {r[0] for r in rows}
    for row in rows:
        assert row == [full[row[0]][i] for i in README_COLUMNS], row[0]


def test_the_headline_names_what_a_verdict_lacks() -> None:
    with pytest.raises(KeyError, match="no row for 'nope'"):
        headline.verdict_row("study-chains", "nope")
    with pytest.raises(KeyError, match="no probe rows for 'nope'"):
        headline.probe_cell("study-chains/probed-pooled", "nope")


def test_the_headline_command_writes_the_committed_table(tmp_path: Path) -> None:
    out = tmp_path / "new" / "headline.md"
    res = subprocess.run(
        [sys.executable, "studies/scripts/headline.py", "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert out.read_text() == res.stdout == (ROOT / "studies" / "results" / "headline.md").read_text()
    assert (
        out.with_name("holm-changes.md").read_text()
        == (ROOT / "studies" / "results" / "holm-changes.md").read_text()
    )


@pytest.mark.parametrize("name", ["study-chains", "study-hard/pooled0-19"])
def test_rerender_runs_the_command_each_committed_verdict_was_made_with(name: str, tmp_path: Path) -> None:
    """``--rerender``'s command line for a committed verdict.json (its probe, its pooled studies) writes that
    folder's tables again, to the last character."""
    folder = ROOT / "studies" / "results" / name
    argv = verdict.rerender(folder / "verdict.json")
    assert argv[-2:] == ["--out", str(folder / "verdict.md")]
    verdict.main([*argv[:-1], str(tmp_path / "verdict.md")])
    for table in ("verdict.md", "curve.md"):
        assert (tmp_path / table).read_text() == (folder / table).read_text()
    with pytest.raises(SystemExit):
        verdict.main(["--rerender", "--margin", "0.02"])
