"""The committed probes (studies/results/probe/*, studies/results/scale/*): the docs quote each one's table as the
probe renders it, the positive controls match their expectations, each ``-after`` probe reuses its ``-before``
batch, and a committed probe's batch is drawn again from its own settings."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from creditgym.agents.probe.report import probe_markdown
from creditgym.agents.probe.run import ProbeConfig, probe_batch, setup_probe

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "studies" / "results" / "probe").glob("*/probe.json"))


def test_the_committed_scale_refusal_says_more_continuations_stopped_helping() -> None:
    """SmolLM2's hard-rubric probe: K 16 -> 32 moved the lower bound 0.440 -> 0.480 where Spearman-Brown
    projected 0.611, so the refusal points at more responses; the tiny model's probe, which reached its target,
    says nothing."""
    from creditgym.agents.probe.reliability import projected, stalled

    scale = ROOT / "studies" / "results" / "scale"
    rounds = json.loads((scale / "smollm2-rubric-refused-k32" / "probe.json").read_text())["rounds"]
    assert [r["k"] for r in rounds] == [8, 16, 32]
    low16 = rounds[1]["reliability"]["ci"][0]
    assert projected(low16, 16, 32) == pytest.approx(2 * low16 / (1 + low16))
    said = stalled(rounds)
    assert "K 16 -> 32 moved the lower bound 0.440 -> 0.480 where Spearman-Brown projected 0.611" in said
    assert "more responses (--prompts, --group)" in said
    assert stalled(rounds[:1]) == ""
    reached = json.loads((scale / "tiny-rubric" / "probe.json").read_text())["rounds"]
    assert len(reached) == 2 and stalled(reached) == ""  # 8 -> 22 moved the bound as projected, or more


#: probe folders that score every module (the rest probe one module beside grpo: a module before and after a change)
EVERY_MODULE = ("chains-tiny-", "hard-tiny-", "chains-gae20-", "easy-tiny")


@pytest.mark.parametrize("path", RESULTS, ids=[p.parent.name for p in RESULTS])
def test_the_docs_probe_tables_are_the_committed_results(path: Path) -> None:
    result = json.loads(path.read_text())
    table = probe_markdown(result)
    assert (path.parent / "probe.md").read_text() == table
    assert (path.parent / "probe.png").stat().st_size > 10_000
    # the study's pages, the probe's page and the modules' pages (their before/after of the defaults) quote every
    # committed probe
    pages = [
        *sorted((ROOT / "docs" / "study").glob("*.md")),
        ROOT / "docs" / "probe.md",
        *sorted((ROOT / "docs" / "credit").glob("*.md")),
    ]
    assert any(table in page.read_text() for page in pages), (
        f"the docs' probe table for {path.parent.name} is stale"
    )
    every = {"grpo", "rloo", "gae", "cort", "cast", "compo", "pact", "vine"}
    assert set(result["modules"]) >= (every if path.parent.name.startswith(EVERY_MODULE) else {"grpo"})


def test_no_committed_fixed_k_probe_reaches_the_default_target() -> None:
    """docs/probe.md: measured at a fixed K, no committed table's within-response reliability has its lower bound
    at the default target."""
    fixed = [json.loads(p.read_text()) for p in RESULTS]
    fixed = [r for r in fixed if not r.get("rounds")]
    assert len(fixed) >= 20
    rel = [r.get("reliability", r.get("ceiling"))["spearman"] for r in fixed]
    assert max(x["ci"][0] for x in rel) < ProbeConfig.target == 0.5


def test_the_committed_positive_controls_match_their_expectations() -> None:
    """The parity task (decisive tokens known) and the chains: each oracle's expected within-response Spearman
    lies inside its measured interval, and the reliability's lower bound reached the run's target."""
    for name in ("positive-control-parity", "positive-control-chains"):
        result = json.loads((ROOT / "studies/results/probe" / name / "probe.json").read_text())
        rel = result["reliability"]["spearman"]
        assert rel["ci"][0] >= result["config"]["target"] and result["rounds"][-1]["reliability"] == rel
        assert set(result["control"]) == {"oracle:noise=0", "oracle:noise=0.5"}
        for control in result["control"].values():
            assert control["match"] is True
            lo, hi = control["measured"]["ci"]
            assert lo <= control["expected"]["value"] <= hi
    refused = json.loads((ROOT / "studies/results/probe/positive-control-chains/refused.json").read_text())
    assert refused["complete"] is False and refused["config"]["target"] == 0.5
    page = re.sub(r"\n(> )?", " ", (ROOT / "docs" / "probe.md").read_text())  # a wrapped quote
    assert refused["refused"] in page


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
    """The re-scoring scripts under studies/results/probe start from `probe_batch`: from a committed probe's
    own settings it gives that probe's responses, token for token."""
    saved = json.loads((ROOT / "studies/results/probe/chains-tiny-before/probe.json").read_text())
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
    """The docs' reason for `vine`'s constant credit on the chains and Math-v0: under its default newline
    steps each of their responses is one step, where most hard-rubric responses hold a newline."""

    def with_newline(name: str) -> tuple[int, int]:
        rows = json.loads((ROOT / "studies/results/probe" / name / "probe.json").read_text())["responses"]
        return sum(any("\n" in t for t in r["tokens"]) for r in rows), len(rows)

    probes = ROOT / "studies/results/probe"
    chains = sorted(
        p.parent.name
        for p in probes.glob("*/probe.json")
        if p.parent.name.startswith(("chains-", "study-chains-"))
    )
    assert len(chains) == 18 and "chains-vine-steps-step60" in chains
    counts = [with_newline(n) for n in (*chains, "easy-tiny")]
    assert sum(n for n, _ in counts) == 0 and sum(total for _, total in counts) == 432
    assert with_newline("hard-tiny-after") == (13, 16)
