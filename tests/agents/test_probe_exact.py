"""The probe's exact truth on ``creditgym/Planted-v0`` (leading slots): the enumerated values equal a plain sum
over every accepted token, the reward the env pays averages to them, every filler token's truth is 0, and the
probe scores every entry, the sampled A* included, against it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym.agents.probe.exact import SlotValues, exact_truth, leading
from creditgym.agents.probe.report import probe_markdown
from creditgym.agents.probe.run import ProbeConfig, probe_batch, setup_probe
from creditgym.cli import main
from creditgym.envs.core import Source
from creditgym.envs.planted import PlantedEnv

L = 6


def _setup(match: str = "parity", layout: str = "lead", prompts: int = 2, group: int = 4):
    cfg = ProbeConfig(
        env_id="creditgym/Planted-v0",
        env_kwargs={"match": match, "layout": layout, "max_new_tokens": L},
        credit=("grpo",),
        prompts=prompts,
        group=group,
        k=2,
        target=None,
        seed=0,
        bootstrap=0,
    )
    setup = setup_probe(cfg)
    return setup, probe_batch(setup, cfg)


def _split(ep) -> tuple[list[int], list[int]]:
    led = ep.env.ledger
    start = int((np.asarray(led.source) == Source.PROMPT).sum())
    ids = [int(t) for t in led.token_id]
    return ids[:start], ids[start:]


def test_leading_slots() -> None:
    assert leading((0, 1)) and leading((0,)) and not leading((1, 3)) and not leading((1, 0))


def test_the_enumerated_value_is_the_sum_over_every_accepted_token() -> None:
    """In float64, so the cached enumeration and the plain passes differ by rounding alone (~1e-15 per term)."""
    setup, episodes = _setup(prompts=1, group=1)
    policy, env = setup.policy, episodes[0].env
    policy.model.double()
    try:
        prompt, _ = _split(episodes[0])
        width = int(policy.model.get_output_embeddings().weight.shape[0])
        masks = env.decisive_masks(width)
        exact, err = SlotValues(policy, masks, tol=0.0, max_tokens=width).value(prompt, 0)
        with torch.no_grad():
            ids = torch.tensor([prompt], device=policy.device)
            p0 = torch.softmax(policy.model(input_ids=ids).logits[0, -1], -1).numpy()
            accepted = np.flatnonzero(masks[0])
            rows = torch.tensor([[*prompt, int(y)] for y in accepted])
            p1 = torch.softmax(policy.model(input_ids=rows).logits[:, -1], -1).numpy()  # (n, V)
        plain = float(sum(p0[y] * p1[i][masks[1]].sum() for i, y in enumerate(accepted)))
        assert err == 0.0 and 0.0 < exact < 1.0
        assert exact == pytest.approx(plain, abs=1e-9)
        cut, cut_err = SlotValues(policy, masks, tol=1e-2).value(prompt, 0)
        assert 0 < cut_err < 1e-2 and abs(cut - exact) <= cut_err
    finally:
        policy.model.float()


def test_the_reward_the_env_pays_averages_to_the_exact_value() -> None:
    """V_0 is the probability that a response to the prompt earns the reward: 600 responses sampled from the
    policy and paid by the env agree with it within 4.5 binomial standard errors."""
    setup, episodes = _setup(prompts=1, group=1)
    policy = setup.policy
    prompt, _ = _split(episodes[0])
    env = PlantedEnv(policy.tokenizer, max_new_tokens=L, match="parity")
    env.reset(seed=0, options={"task": episodes[0].env.current_task})
    width = int(policy.model.get_output_embeddings().weight.shape[0])
    v0, err = SlotValues(policy, env.decisive_masks(width)).value(prompt, 0)
    n = 600
    g = torch.Generator().manual_seed(1)
    out = policy.sample([prompt] * n, max_new_tokens=L, stop_token_ids=(), generator=g)
    rewards = []
    for response in out.tokens:
        env.reset(seed=0, options={"task": episodes[0].env.current_task})
        rewards.append(env.step(np.asarray(response))[1])
    se = np.sqrt(max(v0 * (1 - v0), 1e-4) / n)
    assert abs(np.mean(rewards) - v0) <= 4.5 * se + err


def test_the_truth_is_zero_on_filler_and_sums_to_the_reward_less_the_first_value() -> None:
    setup, episodes = _setup()
    truth, bound = exact_truth(episodes, setup.policy)
    assert 0 <= bound < 1e-3
    firsts = {}
    for ep, t in zip(episodes, truth, strict=True):
        assert t.shape == (L,) and np.all(t[2:] == 0)
        prompt, response = _split(ep)
        v0 = t.sum() - ep.reward  # sum_t A(t) = R - V_0
        firsts.setdefault(tuple(prompt), []).append(-v0)
        hits = ep.env.slot_hits(response)
        if not hits[0]:
            assert (
                t[1] == 0 and t[0] < 0
            )  # a missed first slot: the reward is lost there, nothing after counts
    for values in firsts.values():  # a prompt's responses share its V_0
        assert np.ptp(values) < 1e-9 and 0 < values[0] < 1


def test_no_exact_truth_where_a_filler_token_comes_before_a_slot() -> None:
    setup, episodes = _setup(layout="random")
    assert any(not leading(ep.env.decisive_slots) for ep in episodes)
    assert exact_truth(episodes, setup.policy) is None


def test_the_probe_scores_every_entry_and_the_sampled_astar_against_the_truth(tmp_path: Path) -> None:
    args = ["probe", "--out", str(tmp_path), "--env", "creditgym/Planted-v0", "--env-kw", 'match="parity"']
    args += ["--env-kw", f"max_new_tokens={L}", "--every", "1", "--k", "8", "--target", "none"]
    args += ["--prompts", "4", "--group", "4", "--bootstrap", "200", "--credit", "grpo,forking"]
    assert main(args) == 0
    result = json.loads((tmp_path / "probe.json").read_text())
    entries = result["exact"]["entries"]
    assert list(entries)[:3] == ["A* (sampled)", "grpo", "forking"] and "null:position" in entries
    assert entries["grpo"]["spearman"]["value"] == 0.0  # flat within a response
    astar = entries["A* (sampled)"]["pearson"]
    assert astar["ci"][0] > 0.5  # K = 8 Monte-Carlo values find the two decisive tokens
    md = probe_markdown(result)
    assert "Against the exact truth" in md and "| A* (sampled) |" in md
    assert (tmp_path / "probe.md").read_text() == md
