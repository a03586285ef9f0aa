"""The credit probe: its figures (pure functions, checked by hand), ``creditgym probe`` end to end on the tiny
model, its bad inputs, a checkpoint's trained critic, and ``creditgym train --probe-every``."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from creditgym import credit
from creditgym.agents.probe.control import oracle_advantages, parse_control
from creditgym.agents.probe.progress import RolloutProgress
from creditgym.agents.probe.reliability import needed_k, next_k, refusal
from creditgym.agents.probe.report import (
    attainable,
    bootstrap_figures,
    decisive_share,
    figures,
    pearson,
    probe_markdown,
    rankdata,
    response_ingredients,
    spearman,
    spearman_brown,
)
from creditgym.agents.probe.run import ProbeConfig, probe_batch, setup_probe
from creditgym.agents.train.checkpoint import latest_checkpoint, load_checkpoint
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import Trainer
from creditgym.cli import build_parser, main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SMALL_TRAIN = dict(
    steps=1, prompts_per_step=2, group_size=2, eval_every=1, eval_episodes=2, max_new_tokens=12
)


@pytest.fixture(autouse=True)
def probe_envs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(HERE))  # probe_envs:ProbeParity-v0 and friends
    yield


# -- the figures, by hand -------------------------------------------------------------------------------------


def test_ranks_and_correlations_match_textbook_values() -> None:
    np.testing.assert_array_equal(rankdata(np.array([3.0, 1.0, 3.0, 2.0])), [2.5, 0.0, 2.5, 1.0])
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 1, 1], [1, 2, 3]) == 0.0 and spearman([2, 2], [1, 5]) == 0.0  # constant: ranks nothing
    assert spearman_brown(0.5) == pytest.approx(2 / 3) and spearman_brown(0.0) == 0.0


def test_decisive_share_counts_mass_on_the_top_tenth_with_ties_shared() -> None:
    assert decisive_share(np.ones(10), np.arange(10.0)) == pytest.approx(
        0.1
    )  # flat: exactly the share of tokens
    assert decisive_share(np.arange(10.0), np.arange(10.0)) == pytest.approx(
        9 / 45
    )  # the top token holds 9 of 45
    # n = 4: the top 0.4 tokens; two tie at |A*| = 5, each weighted 0.2: (2 + 3) * 0.2 / 10
    assert decisive_share(np.array([1.0, 2, 3, 4]), np.array([1.0, -5, 5, 0])) == pytest.approx(0.1)
    assert np.isnan(decisive_share(np.zeros(4), np.arange(4.0)))  # no mass, no share


def test_grpo_figures_on_a_batch_computed_by_hand() -> None:
    """Two groups of two: rewards (1, 0) and (1, 1); A* given per token. grpo's advantage is +-a = +-0.5 / std
    (std = 0.7071) in the first group, 0 in the second (all equal)."""
    lengths, rewards = [3, 2, 2, 3], [1.0, 0.0, 1.0, 1.0]
    astar = [
        np.array([0.5, 0.0, 0.3]),
        np.array([-0.5, -0.1]),
        np.array([0.25, 0.0]),
        np.array([0.1, 0.1, 0.1]),
    ]
    T = 1 + max(lengths)
    mask = torch.zeros(4, T, dtype=torch.bool)
    token_rewards = torch.zeros(4, T)
    for b, (n, r) in enumerate(zip(lengths, rewards, strict=True)):
        mask[b, 1 : 1 + n] = True
        token_rewards[b, n] = r
    batch = credit.CreditBatch(token_rewards, mask, torch.tensor([0, 0, 1, 1]), torch.zeros(4, T))
    adv = credit.get("grpo")(batch).advantages
    grpo = [adv[b][mask[b]].double().numpy() for b in range(4)]
    a = 0.5 / (np.sqrt(0.5) + 1e-6)
    np.testing.assert_allclose(np.concatenate(grpo), [a, a, a, -a, -a, 0, 0, 0, 0, 0], rtol=1e-6)
    got = figures(response_ingredients(grpo, astar))
    # Spearman: responses 0-2 have a non-constant A* and a constant grpo advantage -> 0 each; response 3 is left out
    assert got["spearman"] == 0.0
    # decisive share: responses 0 and 1 are flat with mass -> 0.1; response 2 has no mass, 3 a constant A*
    assert got["decisive_share"] == pytest.approx(0.1)
    # pooled Pearson over the 10 tokens, x = grpo / a = (1, 1, 1, -1, -1, 0, 0, 0, 0, 0), y = A*:
    # mean x 0.1, mean y 0.075; sum xy 1.4 -> n cov = 1.4 - 10 * 0.1 * 0.075 = 1.325;
    # n var x = 5 - 0.1 = 4.9; sum y^2 = 0.6925 -> n var y = 0.6925 - 0.05625 = 0.63625
    assert got["pearson"] == pytest.approx(1.325 / np.sqrt(4.9 * 0.63625), abs=1e-9)  # 0.7504
    # |A*| >= 0.25: 0.5 (+, +), 0.3 (+, +), -0.5 (-, -) agree; 0.25 against an advantage of 0 does not
    assert got["sign_agreement"] == pytest.approx(3 / 4)


def test_bootstrap_intervals_bracket_the_point_and_resample_responses() -> None:
    rng = np.random.default_rng(0)
    astar = [rng.normal(size=8) for _ in range(12)]
    good = [a + 0.3 * rng.normal(size=8) for a in astar]
    noise = [rng.normal(size=8) for _ in range(12)]
    tables = [response_ingredients(x, astar) for x in (good, noise)]
    (g, n) = bootstrap_figures(tables, n_boot=300, seed=1)
    for fig in (g, n):
        for key in ("spearman", "pearson", "decisive_share", "sign_agreement"):
            lo, hi = fig[key]["ci"]
            assert lo <= fig[key]["value"] <= hi
    assert g["spearman"]["ci"][0] > n["spearman"]["ci"][1]  # the informative module is separated from noise
    assert bootstrap_figures(tables, n_boot=0)[0]["pearson"]["ci"] is None
    rel = bootstrap_figures(tables[:1], n_boot=0, split_half=True)[0]
    assert rel["pearson"]["value"] == pytest.approx(spearman_brown(figures(tables[0])["pearson"]))


def test_the_attainable_correlation_is_the_square_root_of_the_reliability() -> None:
    rel = {"spearman": {"value": 0.36, "ci": [-0.2, 0.64]}, "pearson": {"value": None, "ci": None}}
    got = attainable(rel)
    assert got["spearman"]["value"] == pytest.approx(0.6) and got["spearman"]["ci"] == pytest.approx(
        [0.0, 0.8]
    )
    assert got["pearson"] == {"value": None, "ci": None}


def test_spearman_brown_projects_the_k_a_target_needs() -> None:
    # a lower bound of 0.25 at K = 8: n K with n r / (1 + (n - 1) r) = 0.5 -> n = 0.5 * 0.75 / (0.25 * 0.5) = 3
    assert needed_k(8, 0.25, 0.5) == 24
    assert needed_k(8, 0.4, 0.5) == 12  # n = 1.5
    assert needed_k(6, 0.4, 0.5) == 10  # 9, rounded up to an even K (two halves)
    assert needed_k(8, 0.6, 0.5) == 8 and needed_k(8, 0.0, 0.5) is None and needed_k(8, -0.3, 0.5) is None
    assert next_k(8, 0.4, 0.45, 0.5, 64) == 16  # at least double
    assert next_k(8, 0.25, 0.4, 0.5, 64) == 24  # the projection when it is larger
    assert next_k(8, 0.25, 0.4, 0.5, 20) is None  # beyond the budget
    assert next_k(8, -0.1, 0.2, 0.5, 64) == 16 and next_k(32, -0.1, 0.2, 0.5, 32) is None  # no bound: double
    assert next_k(8, -0.3, -0.1, 0.5, 64) is None and next_k(8, None, None, 0.5, 64) is None
    why = refusal(8, {"value": 0.4, "ci": [0.25, 0.55]}, 0.5, 16, rollouts_per_k=100)
    assert (
        "projects K = 24 to reach it, above --max-k 16: raise --max-k to 24 (about 1600 more rollouts)" in why
    )
    why = refusal(8, {"value": 0.2, "ci": [-0.1, 0.45]}, 0.5, 64, rollouts_per_k=100)
    assert "lower bound -0.100 is at or below 0" in why and "from its point estimate, at least K = 32" in why


def test_the_oracle_permutation_keeps_its_values_and_scales_correlations_by_the_factor() -> None:
    """The expectation the positive control rests on: permuting m of n values among themselves scales any
    correlation with them by (n - m) / (n - 1), checked over many draws for Spearman and Pearson."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=12)
    y = x + 0.6 * rng.normal(size=12)
    y[:5] = 0.0  # ties, as in a probe's A*
    draws = [oracle_advantages([y], 0.5, rng) for _ in range(4000)]
    (adv, factors) = draws[0]
    assert sorted(adv[0]) == sorted(y) and factors[0] == pytest.approx((12 - 6) / 11)
    for corr in (spearman, pearson):
        mean = np.mean([corr(x, a[0]) for a, _ in draws])
        assert mean == pytest.approx(corr(x, y) * 6 / 11, abs=0.015)
    assert oracle_advantages([y], 0.0, rng)[0][0].tolist() == y.tolist()  # noise 0: A*' itself
    assert parse_control("oracle") == 0.5 and parse_control("oracle:noise=0.2") == 0.2
    assert parse_control("grpo") is None and parse_control("vine:every=4") is None


def test_progress_lines_off_a_terminal_every_tenth(capsys: pytest.CaptureFixture[str]) -> None:
    with RolloutProgress("K = 8", 200, tty=False, every_s=3600) as bar:
        for _ in range(40):
            bar.advance(5)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("(")[1].split(")")[0] for line in lines] == [f"{p}%" for p in range(10, 101, 10)]
    assert lines[-1].startswith("creditgym probe: rollouts, K = 8: 200/200 (100%)")


# -- the command ------------------------------------------------------------------------------------------------


def _probe(out: Path, *args: str) -> int:
    """A small probe at a fixed K (``--target none``; a later ``--target`` wins)."""
    small = ["--prompts", "2", "--group", "2", "--k", "2", "--bootstrap", "50", "--target", "none"]
    return main(["probe", "--out", str(out), *small, *args])


def test_probe_command_writes_json_markdown_and_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--env",
        "creditgym/Math-v0",
        "--every",
        "4",
        "--credit",
        "grpo,gae,vine:every=4",
    ]
    assert _probe(tmp_path, *args) == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["complete"] is True and list(result["modules"]) == ["grpo", "gae", "vine:every=4"]
    assert (tmp_path / "probe.md").read_text() == probe_markdown(result)
    assert (tmp_path / "probe.png").stat().st_size > 5_000
    assert "| `vine:every=4` |" in capsys.readouterr().out
    assert result["modules"]["grpo"]["spearman"]["value"] == 0.0  # constant within each response
    for r in result["responses"]:
        assert len(r["astar"]) == len(r["tokens"]) == len(r["advantages"]["grpo"])
        assert sum(r["astar"]) == pytest.approx(r["reward"] - r["values"][0], abs=1e-9)
        assert r["starts"] == list(range(0, len(r["tokens"]), 4))


def test_reuse_scores_new_modules_against_the_same_astar(tmp_path: Path) -> None:
    args = ["--env", "creditgym/Math-v0", "--every", "4"]
    assert _probe(tmp_path / "a", *args, "--credit", "grpo") == 0
    first = json.loads((tmp_path / "a" / "probe.json").read_text())
    saved = str(tmp_path / "a" / "probe.json")
    assert _probe(tmp_path / "b", *args, "--credit", "grpo,rloo", "--reuse", saved) == 0
    again = json.loads((tmp_path / "b" / "probe.json").read_text())
    assert list(again["modules"]) == ["grpo", "rloo"] and again["timing"]["reused_from"] == saved
    assert [r["astar"] for r in again["responses"]] == [r["astar"] for r in first["responses"]]
    assert again["modules"]["grpo"] == first["modules"]["grpo"]
    with pytest.raises(SystemExit, match=r"probed another batch.*'seed': \(0, 1\)"):
        _probe(tmp_path / "c", *args, "--credit", "grpo", "--reuse", saved, "--seed", "1")
    steps = ["--env", "creditgym/Math-v0", "--k", "2", "--target", "none"]  # the default: step boundaries
    assert _probe(tmp_path / "s", *steps, "--credit", "grpo") == 0
    assert (
        _probe(tmp_path / "s2", *steps, "--credit", "rloo", "--reuse", str(tmp_path / "s" / "probe.json"))
        == 0
    )
    (tmp_path / "partial.json").write_text(json.dumps({"complete": False}))
    with pytest.raises(SystemExit, match="incomplete probe"):
        _probe(tmp_path / "d", *args, "--reuse", str(tmp_path / "partial.json"))


def test_a_module_env_id_and_the_parity_task(tmp_path: Path) -> None:
    args = ["--env", "probe_envs:ProbeParity-v0", "--credit", "grpo,rloo", "--k", "4", "--every", "1"]
    assert _probe(tmp_path, *args) == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    mass = [np.abs(r["astar"]) for r in result["responses"]]
    assert sum(m[:3].sum() for m in mass) / sum(m.sum() for m in mass) >= 0.8


#: the parity task at temperature 2: the tiny model's first tokens are close to coin flips, so A* is measurable
PARITY = ["--env", "probe_envs:ProbeParity-v0", "--temperature", "2", "--max-new-tokens", "6", "--every", "1"]
PARITY += ["--prompts", "4", "--group", "4", "--bootstrap", "400"]


def test_k_grows_to_the_target_and_the_positive_control_matches_its_expectation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The parity task scores only the first 3 tokens (the decisive tokens are known). K starts at 4, where the
    reliability's lower bound is below 0.5, and grows until it reaches it; the oracles (A* from independent
    continuations, 0 and half of each response's tokens permuted) score what the reliability predicts."""
    from probe_envs import CODE

    args = [*PARITY, "--k", "4", "--target", "0.5", "--credit", "grpo,oracle:noise=0,oracle:noise=0.5"]
    assert _probe(tmp_path, *args) == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    rounds = result["rounds"]
    assert rounds[0]["k"] == 4 and rounds[0]["reliability"]["ci"][0] < 0.5 and len(rounds) >= 2
    assert [r["k"] for r in rounds] == sorted({r["k"] for r in rounds}) and rounds[-1]["k"] == result[
        "batch"
    ]["k"]
    rel, top = result["reliability"]["pearson"], result["attainable"]["pearson"]  # the reported, pooled one
    assert rel == rounds[-1]["reliability"] and rel["ci"][0] >= 0.5
    assert top["value"] == pytest.approx(np.sqrt(rel["value"])) and top["ci"] == pytest.approx(
        np.sqrt(rel["ci"])
    )
    for label, noise in (("oracle:noise=0", 0.0), ("oracle:noise=0.5", 0.5)):
        control = result["control"][label]
        assert control["noise"] == noise and control["measured"] == result["modules"][label]["spearman"]
        within = result["reliability"]["spearman"]["value"]  # the control measures a within-response figure
        assert control["expected"]["value"] == pytest.approx(within * control["factor"])
        assert control["match"] is True, control  # the expectation lies inside the measured interval
    assert result["control"]["oracle:noise=0"]["factor"] == 1.0
    assert 0.4 < result["control"]["oracle:noise=0.5"]["factor"] < 0.7
    assert result["modules"]["oracle:noise=0"]["spearman"]["ci"][0] > 0.5  # far above grpo's 0
    assert result["batch"]["control_rollouts"] == result["batch"]["rollouts"]
    mass = [np.abs(r["astar"]) for r in result["responses"]]
    assert sum(m[:CODE].sum() for m in mass) / sum(m.sum() for m in mass) >= 0.95
    md = (tmp_path / "probe.md").read_text()
    assert "| attainable correlation |" in md and "| `oracle:noise=0.5` | 0.5 (factor" in md
    err = capsys.readouterr().err  # capsys: stdout is no terminal, so progress comes as lines on stderr
    assert "rollouts, K = 4: " in err and "(100%)" in err and "positive control, K = " in err
    assert f"below the target 0.5: K -> {rounds[1]['k']}" in err
    # reused: the grown A* and the control's continuations come back, only the modules are computed
    saved = str(tmp_path / "probe.json")
    args = [*PARITY, "--k", "4", "--target", "0.5", "--credit", "oracle:noise=0.5,rloo", "--reuse", saved]
    assert _probe(tmp_path / "again", *args) == 0
    again = json.loads((tmp_path / "again" / "probe.json").read_text())
    assert again["batch"]["k"] == result["batch"]["k"] and again["rounds"] == rounds
    assert [r["astar"] for r in again["responses"]] == [r["astar"] for r in result["responses"]]
    assert again["control"]["oracle:noise=0.5"] == result["control"]["oracle:noise=0.5"]


def test_a_target_the_budget_cannot_reach_is_refused_with_the_k_it_needs(tmp_path: Path) -> None:
    args = [*PARITY, "--k", "2", "--max-k", "2", "--target", "0.9", "--credit", "grpo"]
    with pytest.raises(SystemExit, match=r"reliability at K = 2 is .*(projects K = \d+|projects no K)") as e:
        _probe(tmp_path, *args)
    assert "No figure is reported" in str(e.value)
    partial = json.loads((tmp_path / "probe.json").read_text())
    assert partial["complete"] is False and partial["refused"] in str(e.value)
    assert [r["k"] for r in partial["rounds"]] == [2] and "modules" not in partial
    assert partial["rollouts_done"] == partial["rollouts_total"] > 0


def test_a_refusal_says_when_more_continuations_stopped_helping() -> None:
    """K 16 -> 32 moved the lower bound 0.440 -> 0.480 where Spearman-Brown projected 2 * 0.44 / 1.44 = 0.611:
    the refusal points at more responses. A bound that rose as projected (or more), a single round, and a round
    without a positive bound say nothing."""
    from creditgym.agents.probe.reliability import projected, stalled

    def rounds(*pairs: tuple[int, float]) -> list[dict[str, Any]]:
        return [{"k": k, "reliability": {"ci": [low, 0.9]}} for k, low in pairs]

    short = rounds((8, 0.30), (16, 0.44), (32, 0.48))
    assert projected(0.44, 16, 32) == pytest.approx(2 * 0.44 / 1.44)
    said = stalled(short)
    assert "K 16 -> 32 moved the lower bound 0.440 -> 0.480 where Spearman-Brown projected 0.611" in said
    assert "more responses (--prompts, --group)" in said
    assert stalled(short[:1]) == ""
    assert stalled(rounds((8, 0.30), (22, 0.55))) == ""  # projected 0.541: reached as projected
    flat = [{"k": 8, "reliability": {"ci": [-0.1, 0.5]}}, {"k": 16, "reliability": {"ci": [0.0, 0.5]}}]
    assert stalled(flat) == ""


def test_a_refused_probe_resumes_with_a_larger_budget_keeping_its_continuations(tmp_path: Path) -> None:
    """Refused at K = 4 (the parity task's reliability is below the target there), the same probe with a larger
    --max-k and --reuse of the refusal samples only the new columns, and reaches the target."""
    args = [*PARITY, "--k", "4", "--target", "0.5", "--credit", "grpo,oracle:noise=0.5"]
    with pytest.raises(SystemExit, match="above --max-k 4"):
        _probe(tmp_path / "refused", *args, "--max-k", "4")
    refused = json.loads((tmp_path / "refused" / "probe.json").read_text())
    saved = str(tmp_path / "refused" / "probe.json")
    assert _probe(tmp_path / "resumed", *args, "--max-k", "64", "--reuse", saved) == 0
    result = json.loads((tmp_path / "resumed" / "probe.json").read_text())
    assert (
        result["complete"] and result["batch"]["k"] > 4 and result["reliability"]["pearson"]["ci"][0] >= 0.5
    )
    assert result["rounds"][0] == refused["rounds"][0] and len(result["rounds"]) >= 2
    for old, new in zip(refused["responses"], result["responses"], strict=True):
        assert [row[:4] for row in new["continuation_rewards"]] == old["continuation_rewards"]
    assert result["timing"]["rollouts_resumed"] == refused["rollouts_done"] > 0
    assert result["timing"]["resumed_from"] == saved
    assert result["control"]["oracle:noise=0.5"]["measured"]["ci"] is not None  # the control is scored again


def test_a_response_of_one_step_has_no_within_response_figure_and_is_refused(tmp_path: Path) -> None:
    """The default positions are step boundaries; the tiny model's Math-v0 answers hold no newline, so each is
    one step and A* is constant within it: no within-response reliability, nothing to reach a target with."""
    with pytest.raises(
        SystemExit, match=r"A\* is constant within every response.*--every N, or a --delimiter"
    ):
        _probe(
            tmp_path,
            "--env",
            "creditgym/Math-v0",
            "--every",
            "newline",
            "--target",
            "0.5",
            "--credit",
            "grpo",
        )
    assert json.loads((tmp_path / "probe.json").read_text())["rounds"][0]["reliability"]["value"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "1"], r"K must be an int >= 2 \(the reliability of A\* compares two halves"),
        (
            ["--target", "1.5"],
            r"--target expects a reliability in \(0, 1\).*or 'none' \(a fixed K\), got '1.5'",
        ),
        (["--target", "0.5", "--k", "8", "--max-k", "4"], r"max_k \(4\) must be >= k \(8\)"),
        (["--credit", "grpo,oracle:noise=2"], r"oracle:noise=2.*noise=q with q in \[0, 1\]"),
        (["--credit", "oracle:shuffle=0.5"], r"the positive control takes one parameter, noise=q"),
        (["--env", "CartPole-v1"], r"env 'CartPole-v1' \(CartPoleEnv\) cannot fork"),
        (
            ["--env", "probe_envs:ProbeNoFork-v0"],
            r"cannot fork inside an episode \(forks_mid_episode is False",
        ),
        (["--env", "probe_envs:ProbeTwoTurn-v0"], r"is multi-turn \(it takes max_turns\).*--max-turns N"),
        (["--every", "0"], "--every expects an int >= 1, 'steps' or 'newline', got '0'"),
        (["--credit", "nope"], "unknown credit module 'nope'"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(tmp_path: Path, args: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        _probe(tmp_path, *args)


def test_a_multi_turn_env_is_probed_with_a_turn_budget(tmp_path: Path) -> None:
    assert (
        _probe(tmp_path, "--env", "probe_envs:ProbeTwoTurn-v0", "--max-turns", "2", "--credit", "grpo") == 0
    )
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["config"]["env_kwargs"] == {"max_turns": 2}
    assert all(sum(r["astar"]) == pytest.approx(r["reward"] - r["values"][0]) for r in result["responses"])


@pytest.fixture(scope="module")
def gae_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-step ``gae`` run: its checkpoint holds a value head fitted once."""
    out = tmp_path_factory.mktemp("gae-run")
    Trainer(TrainConfig(credit="gae", **SMALL_TRAIN), out).run()  # type: ignore[arg-type]
    return out


def test_a_checkpoint_is_probed_with_its_trained_critic(gae_run: Path) -> None:
    setup = setup_probe(ProbeConfig(checkpoint=str(gae_run), credit=("gae", "compo"), k=2))
    state = load_checkpoint(latest_checkpoint(gae_run / "checkpoints"))  # type: ignore[arg-type]
    trained = setup.modules["gae"][2]["values"].state_dict()["head"]
    for key, value in state["providers"]["values"]["head"].items():
        assert torch.equal(trained[key].cpu(), value) and value.abs().sum() > 0
    fresh = setup.modules["compo"][2]["values"].state_dict()["head"]  # another module: its own, untrained
    assert all(
        (v == 0).all() for k, v in fresh.items() if k.endswith("weight") and v.dim() == 2 and v.shape[0] == 1
    )
    assert setup.step == 1 and setup.run.env_id == "creditgym/Math-v0" and setup.run.max_new_tokens == 12
    for name, p in setup.policy.model.state_dict().items():
        assert torch.equal(p.cpu(), state["model"][name])


def test_a_warm_checkpoint_gives_its_critic_to_the_untrained_policy(gae_run: Path) -> None:
    from creditgym.agents.train.policy import load_policy

    setup = setup_probe(ProbeConfig(credit=("gae", "compo"), warm=(str(gae_run),), k=2))
    state = load_checkpoint(latest_checkpoint(gae_run / "checkpoints"))  # type: ignore[arg-type]
    warmed = setup.modules["gae"][2]["values"].state_dict()["head"]
    for key, value in state["providers"]["values"]["head"].items():
        assert torch.equal(warmed[key].cpu(), value) and value.abs().sum() > 0
    base = load_policy("creditgym/tiny").model.state_dict()
    policy = setup.policy.model.state_dict()
    assert all(torch.equal(policy[name].cpu(), base[name].cpu()) for name in base)  # the probe's own policy
    assert any(not torch.equal(state["model"][name], base[name].cpu()) for name in base)  # not the run's
    assert setup.step == TrainConfig().steps - 1 and setup.settings["warm"]["gae"].endswith("step-000001")
    with pytest.raises(ValueError, match=r"warm checkpoint .* trained 'gae', which is not among .*'compo'"):
        setup_probe(ProbeConfig(credit=("compo",), warm=(str(gae_run),), k=2))
    with pytest.raises(ValueError, match="'gae' is both --checkpoint's module and --warm's"):
        setup_probe(ProbeConfig(checkpoint=str(gae_run), credit=("gae",), warm=(str(gae_run),), k=2))
    with pytest.raises(ValueError, match="two warm checkpoints for 'gae'"):
        setup_probe(ProbeConfig(credit=("gae",), warm=(str(gae_run), str(gae_run)), k=2))


def test_a_checkpoint_from_another_model_is_refused(gae_run: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from creditgym.agents.train.policy import bundled_model_path, load_policy

    config = AutoConfig.from_pretrained(bundled_model_path())
    config.hidden_size, config.intermediate_size = 64, 128
    torch.manual_seed(0)
    other = tmp_path / "other-model"
    AutoModelForCausalLM.from_config(config).save_pretrained(other)
    load_policy("creditgym/tiny").tokenizer.save_pretrained(other)
    with pytest.raises(
        SystemExit, match=rf"checkpoint .*step-000001 is from another model.*{other}.*creditgym/tiny"
    ):
        _probe(tmp_path / "out", "--checkpoint", str(gae_run), "--model", str(other))
    with pytest.raises(SystemExit, match="no checkpoint at"):
        _probe(tmp_path / "out", "--checkpoint", str(tmp_path))


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("signum", "sigint_ignored"),
    [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "ctrl-c-in-a-background-job", "sigterm"],
)
def test_an_interrupted_probe_leaves_a_partial_probe_json(
    tmp_path: Path, signum: signal.Signals, sigint_ignored: bool
) -> None:
    """SIGINT or SIGTERM during the rollouts: exit 130 and a valid probe.json marked incomplete; SIGINT too where
    the probe started with SIGINT ignored, as a background job of a script or CI runner does (Python then raises
    nothing on SIGINT by itself: this once let a probe run to its end).

    The signal is sent once the rollouts' progress bar (drawn on a pseudo-terminal) shows some rollouts done and
    not all, whatever the machine's speed: no time is assumed anywhere.
    """
    import pty
    import re
    import select

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE), "TERM": "xterm", "COLUMNS": "160"}
    # a probe that never exits is sent SIGABRT below: with the fault handler on, its threads' stacks come out
    env["PYTHONFAULTHANDLER"] = "1"
    cmd = [sys.executable, "-m", "creditgym.cli", "probe", "--out", str(tmp_path), "--credit", "grpo"]
    cmd += ["--prompts", "4", "--group", "4", "--k", "256", "--rows", "32", "--max-new-tokens", "24"]
    cmd += ["--every", "1", "--target", "none"]
    master, slave = pty.openpty()
    start = _ignore_sigint if sigint_ignored else None
    proc = subprocess.Popen(
        cmd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True, preexec_fn=start
    )
    os.close(slave)
    output = b""

    def read(wait: float) -> bool:
        nonlocal output
        if not select.select([master], [], [], wait)[0]:
            return True
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        output += chunk
        return bool(chunk)

    def progressed() -> bool:  # "rollouts ... 96/20480": some done, not all
        done = re.findall(rb"rollouts[^\r\n]*?(\d+)/(\d+)", output[-4096:])
        return any(0 < int(a) < int(b) for a, b in done)

    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and not progressed():
            read(1.0)
        assert progressed() and proc.poll() is None, output[-3000:].decode(errors="replace")
        proc.send_signal(signum)
        # Read until the child closes the terminal: a child that wrote to a terminal nobody reads would block.
        deadline = time.monotonic() + 300
        terminal_open = True
        while time.monotonic() < deadline and terminal_open and proc.poll() is None:
            terminal_open = read(1.0)
        try:  # a closed terminal: the child is exiting, and cannot block on it
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            for _ in range(10):
                read(1.0)
            raise AssertionError(
                f"no exit 300 s after {signum.name}:\n" + output[-6000:].decode(errors="replace")
            ) from None
        for _ in range(20):  # what it wrote last
            if not read(0.1):
                break
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = output.decode(errors="replace")
    assert proc.returncode == 130, text[-3000:]
    assert "interrupted" in text
    partial = json.loads((tmp_path / "probe.json").read_text())
    assert partial["complete"] is False and partial["interrupted"] is True
    assert 0 < partial["rollouts_done"] < partial["rollouts_total"]
    done = sum(v is not None for r in partial["responses"] for row in r["continuation_rewards"] for v in row)
    assert done == partial["rollouts_done"]


def _deterministic(metrics: dict[str, float | None]) -> dict[str, float | None]:
    """A metrics row without wall-clock figures and probe figures."""
    return {
        k: v for k, v in metrics.items() if not k.startswith(("time/", "probe/")) and not k.endswith("per_s")
    }


@pytest.mark.parametrize("credit", ["grpo", "cast", "compo", "pact"])  # 3 of them probe with their providers
def test_probing_logs_the_figures_and_leaves_training_unchanged(tmp_path: Path, credit: str) -> None:
    base = TrainConfig(**{**SMALL_TRAIN, "steps": 2}, credit=credit, checkpoint_every=5)  # type: ignore[arg-type]
    probing = dataclasses.replace(base, probe_every=1, probe_prompts=1, probe_k=2, probe_stride=4)
    plain, probed = Trainer(base, tmp_path / "plain"), Trainer(probing, tmp_path / "probed")
    plain.run()
    probed.run()
    assert [_deterministic(m) for m in plain.log.history] == [_deterministic(m) for m in probed.log.history]
    rows = [json.loads(line) for line in (tmp_path / "probed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "probe/spearman" in r] == [0.0, 1.0, 2.0]
    for r in rows:
        for k in ("spearman", "pearson"):
            if r.get(f"probe/reliability_{k}") is not None:
                assert r[f"probe/attainable_{k}"] == pytest.approx(
                    np.sqrt(max(r[f"probe/reliability_{k}"], 0.0))
                )
    assert all(r["probe/decisive_share"] is None or 0 <= r["probe/decisive_share"] <= 1 for r in rows)
    assert build_parser().parse_args(["train", "--out", "x", "--probe-every", "3"]).probe_every == 3


def test_probe_benchmark_runs_with_a_tiny_budget(tmp_path: Path) -> None:
    cmd = [sys.executable, "examples/benchmarks/probe.py", "--prompts", "1", "--group", "2", "--k", "2"]
    cmd += ["--steps", "1", "--json", str(tmp_path / "b.json")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["rollouts"] > 0 and data["rollouts_per_s"] > 0 and data["vine_step_over_grpo"] > 0
    assert "vine step / grpo step" in res.stdout and "load average" in res.stdout


def test_probe_batch_draws_a_probes_responses_again(tmp_path: Path) -> None:
    """Re-scoring starts from `probe_batch`: from a finished probe's own settings it gives that probe's
    responses, token for token; another seed gives others."""
    assert _probe(tmp_path, "--env", "creditgym/Math-v0", "--every", "4", "--credit", "grpo") == 0
    saved = json.loads((tmp_path / "probe.json").read_text())
    fields = {f.name for f in dataclasses.fields(ProbeConfig)}
    # the warm checkpoints give critics, not responses (saved as None when there were none)
    settings = {k: v for k, v in saved["config"].items() if k in fields and k not in ("credit", "warm")}
    cfg = ProbeConfig(**settings, credit=("grpo",))
    setup = setup_probe(cfg)
    episodes = probe_batch(setup, cfg)
    drawn = [[ep.env.tokenizer.decode([t]) for t in ep.env.response_tokens().tolist()] for ep in episodes]
    assert drawn == [r["tokens"] for r in saved["responses"]]
    other = probe_batch(setup, dataclasses.replace(cfg, seed=cfg.seed + 1))
    assert [ep.env.response_tokens().tolist() for ep in other] != [
        ep.env.response_tokens().tolist() for ep in episodes
    ]
