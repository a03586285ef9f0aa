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

import numpy as np
import pytest
import torch

from creditgym import credit
from creditgym.agents.checkpoint import latest_checkpoint, load_checkpoint
from creditgym.agents.config import TrainConfig
from creditgym.agents.probe import ProbeConfig, probe_batch, setup_probe
from creditgym.agents.probe_report import (
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
from creditgym.agents.trainer import Trainer
from creditgym.cli import build_parser, main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = sorted((ROOT / "examples" / "results" / "probe").glob("*/probe.json"))
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
    ceiling = bootstrap_figures(tables[:1], n_boot=0, ceiling=True)[0]
    assert ceiling["pearson"]["value"] == pytest.approx(spearman_brown(figures(tables[0])["pearson"]))


# -- the command ------------------------------------------------------------------------------------------------


def _probe(out: Path, *args: str) -> int:
    return main(
        ["probe", "--out", str(out), "--prompts", "2", "--group", "2", "--k", "2", "--bootstrap", "50", *args]
    )


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
    (tmp_path / "partial.json").write_text(json.dumps({"complete": False}))
    with pytest.raises(SystemExit, match="incomplete probe"):
        _probe(tmp_path / "d", *args, "--reuse", str(tmp_path / "partial.json"))


def test_a_module_env_id_and_the_parity_task(tmp_path: Path) -> None:
    assert _probe(tmp_path, "--env", "probe_envs:ProbeParity-v0", "--credit", "grpo,rloo", "--k", "4") == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    mass = [np.abs(r["astar"]) for r in result["responses"]]
    assert sum(m[:3].sum() for m in mass) / sum(m.sum() for m in mass) >= 0.8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--k", "1"], r"K must be an int >= 2 \(the reliability of A\* compares two halves"),
        (["--env", "CartPole-v1"], r"env 'CartPole-v1' \(CartPoleEnv\) cannot fork"),
        (
            ["--env", "probe_envs:ProbeNoFork-v0"],
            r"cannot fork inside an episode \(forks_mid_episode is False",
        ),
        (["--env", "probe_envs:ProbeTwoTurn-v0"], r"is multi-turn \(it takes max_turns\).*--max-turns N"),
        (["--every", "0"], "--every expects an int >= 1 or 'newline', got '0'"),
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


def test_a_checkpoint_from_another_model_is_refused(gae_run: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from creditgym.agents.policy import bundled_model_path, load_policy

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


def test_an_interrupted_probe_leaves_a_partial_probe_json(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) during the rollouts: exit 130 and a valid probe.json marked incomplete."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    cmd = [sys.executable, "-m", "creditgym.cli", "probe", "--out", str(tmp_path), "--credit", "grpo"]
    # K = 64: 20,480 rollouts, about 270 s at 75/s here, so that the signal always lands during the rollouts
    cmd += ["--prompts", "4", "--group", "4", "--k", "64", "--rows", "32", "--max-new-tokens", "24"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    path = tmp_path / "probe.json"
    deadline, seen = time.monotonic() + 600, False
    while time.monotonic() < deadline and proc.poll() is None and not seen:
        seen = path.exists() and json.loads(path.read_text())["stage"] == "rollouts"  # written atomically
        time.sleep(0.2)
    assert seen and proc.poll() is None, proc.communicate()[0]  # the probe is in its rollouts, still running
    time.sleep(15.0)  # some of the rollouts (about 1,100 here), far from all
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    partial = json.loads(path.read_text())
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


#: probe folders that score every module (the rest probe one module beside grpo, issue 13's before/after)
EVERY_MODULE = ("chains-tiny-", "hard-tiny-", "chains-gae20-", "easy-tiny")


@pytest.mark.parametrize("path", RESULTS, ids=[p.parent.name for p in RESULTS])
def test_the_readme_probe_tables_are_the_committed_results(path: Path) -> None:
    result = json.loads(path.read_text())
    table = probe_markdown(result)
    assert (path.parent / "probe.md").read_text() == table
    assert (path.parent / "probe.png").stat().st_size > 10_000
    assert table in (ROOT / "README.md").read_text(), f"README's probe table for {path.parent.name} is stale"
    every = {"grpo", "rloo", "gae", "cort", "cast", "compo", "pact", "vine"}
    assert set(result["modules"]) >= (every if path.parent.name.startswith(EVERY_MODULE) else {"grpo"})


def test_after_tables_reuse_their_before_batch() -> None:
    """Each ``*-after`` of a full sweep scores the modules against its ``*-before`` file's very A*."""
    afters = [
        p for p in RESULTS if p.parent.name.startswith(EVERY_MODULE) and p.parent.name.endswith("-after")
    ]
    assert len(afters) == 3
    for after in afters:
        before = after.parent.parent / after.parent.name.replace("-after", "-before") / "probe.json"
        a, b = json.loads(after.read_text()), json.loads(before.read_text())
        assert a["timing"]["reused_from"].endswith(f"{before.parent.name}/probe.json")
        assert [r["astar"] for r in a["responses"]] == [r["astar"] for r in b["responses"]]
        assert a["modules"]["grpo"] == b["modules"]["grpo"]  # an unchanged module scores the same


def test_probe_batch_draws_a_committed_probes_responses_again() -> None:
    """The re-scoring scripts under examples/results/probe start from `probe_batch`: from a committed probe's
    own settings it gives that probe's responses, token for token."""
    saved = json.loads((ROOT / "examples/results/probe/chains-tiny-before/probe.json").read_text())
    fields = {f.name for f in dataclasses.fields(ProbeConfig)}
    settings = {k: v for k, v in saved["config"].items() if k in fields and k != "credit"}
    cfg = ProbeConfig(**settings, credit=("grpo",))
    setup = setup_probe(cfg)
    episodes = probe_batch(setup, cfg)
    drawn = [[ep.env.tokenizer.decode([t]) for t in ep.env.response_tokens().tolist()] for ep in episodes]
    assert drawn == [r["tokens"] for r in saved["responses"]]
    other = probe_batch(setup, dataclasses.replace(cfg, seed=cfg.seed + 1))
    assert [ep.env.response_tokens().tolist() for ep in other] != [
        ep.env.response_tokens().tolist() for ep in episodes
    ]


def test_committed_results_cover_math_and_rubric() -> None:
    assert {json.loads(p.read_text())["config"]["env_id"] for p in RESULTS} >= {
        "creditgym/Math-v0",
        "creditgym/Rubric-v0",
    }


def test_the_committed_chain_and_easy_responses_hold_no_newline() -> None:
    """The README's reason for `vine`'s constant credit on the chains and Math-v0: under its default newline
    steps each of their responses is one step, where most hard-rubric responses hold a newline."""

    def with_newline(name: str) -> tuple[int, int]:
        rows = json.loads((ROOT / "examples/results/probe" / name / "probe.json").read_text())["responses"]
        return sum(any("\n" in t for t in r["tokens"]) for r in rows), len(rows)

    probes = ROOT / "examples/results/probe"
    chains = sorted(
        p.parent.name
        for p in probes.glob("*/probe.json")
        if p.parent.name.startswith(("chains-", "study-chains-"))
    )
    assert len(chains) == 18 and "chains-vine-steps-step60" in chains
    counts = [with_newline(n) for n in (*chains, "easy-tiny")]
    assert sum(n for n, _ in counts) == 0 and sum(total for _, total in counts) == 432
    assert with_newline("hard-tiny-after") == (13, 16)
