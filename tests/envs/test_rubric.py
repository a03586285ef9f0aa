"""The Rubric env: counterfactual prompts, rewards, info, task sources, the oracle and the eval CLI."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import creditgym  # noqa: F401
from creditgym.envs import ENV_IDS, registered_ids
from creditgym.envs.rubric import CRITERIA_HEADER, RubricEnv, criteria_block
from creditgym.envs.rubric_tasks import PRESETS, ProceduralRubric, RubricTask, generate_task, load_jsonl
from creditgym.verifiers.rubric import Criterion, grade
from creditgym.verifiers.rubric.local import FIRST_SENTENCE_KEYWORD

_ENV = RubricEnv()


def _episode(env: RubricEnv, text: str, seed: int = 0, task: RubricTask | None = None):
    env.reset(seed=seed, options={"task": task} if task else None)
    ids = env.tokenizer(text, add_special_tokens=False)["input_ids"]
    return env.step(np.asarray([*ids, min(env.stop_token_ids)], dtype=np.int64))


def test_registered_and_passes_check_env() -> None:
    assert "creditgym/Rubric-v0" in registered_ids() and "creditgym/Rubric-v0" in ENV_IDS
    env = gym.make("creditgym/Rubric-v0", max_new_tokens=16)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 4), system=st.sampled_from([None, "Be brief."]))
def test_counterfactual_prompt_differs_only_by_the_criteria_block(
    seed: int, n: int, system: str | None
) -> None:
    env = _ENV
    env.system_prompt = system
    task = generate_task(np.random.default_rng(seed), n)
    env.reset(seed=0, options={"task": task})
    full = env.tokenizer.decode(env.ledger.token_id.tolist())
    cf = env.tokenizer.decode(env.counterfactual_prompt_tokens())
    block = criteria_block(task)
    assert block.startswith(f"\n\n{CRITERIA_HEADER}\n1. ") and block.count("\n") >= n + 2
    assert full.count(block) == 1 and full.replace(block, "", 1) == cf
    assert cf == env.tokenizer.decode(env.prompt_tokens(task, counterfactual=True))
    for i, c in enumerate(task.criteria, start=1):
        assert f"{i}. {c.description}" in block
    assert env.has_counterfactual
    env.system_prompt = None


def test_rewards_partial_and_all_or_nothing_with_criteria_in_info() -> None:
    task = RubricTask(
        "Tell me about tea.",
        (Criterion("keywords:existence", {"keywords": ["tea"]}), Criterion("punctuation:no_comma")),
        "t1",
    )
    for mode, expected in (("partial", 0.5), ("all_or_nothing", 0.0)):
        env = RubricEnv(reward_mode=mode)
        _, reward, terminated, truncated, info = _episode(env, "Tea, please.", task=task)
        assert reward == expected and terminated and not truncated
        assert [c["passed"] for c in info["criteria"]] == [True, False] and info["reward_mode"] == mode
        assert env.ledger.reward[-1] == expected and info["infra_error"] is None
        _, reward, *_ = _episode(env, "Tea please.", task=task)
        assert reward == 1.0
    with pytest.raises(ValueError, match="reward_mode"):
        RubricEnv(reward_mode="mean")


def test_oracle_passes_every_procedural_task_in_both_splits() -> None:
    for split in ("train", "test"):
        for task in ProceduralRubric(1, 4, split).take(150, seed=3):
            v = grade(task.oracle or "", task.criteria)
            assert v.score == 1.0, (task, v)


def test_oracle_response_through_the_env_scores_one() -> None:
    env = RubricEnv(max_new_tokens=200)
    for seed in range(10):
        env.reset(seed=seed)
        _, reward, terminated, *_ = _episode(env, env.oracle_response(), task=env.task)
        assert reward == 1.0 and terminated


def test_procedural_tasks_are_deterministic_split_and_varied() -> None:
    train = ProceduralRubric(split="train").take(200, seed=0)
    test = ProceduralRubric(split="test").take(50, seed=0)
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    assert [t.task_id for t in ProceduralRubric().take(20, seed=7)] == [
        t.task_id for t in ProceduralRubric().take(20, seed=7)
    ]
    assert {len(t.criteria) for t in train} == {1, 2, 3, 4}
    assert len({c.id for t in train for c in t.criteria}) >= 12
    a, b = RubricEnv(), RubricEnv()
    assert a.reset(seed=5)[1]["task_id"] == b.reset(seed=5)[1]["task_id"]
    with pytest.raises(ValueError, match="max_criteria"):
        ProceduralRubric(1, 5)


def _ifeval_rows() -> list[dict]:
    return [
        {
            "key": 1000,
            "prompt": "Write a haiku about tea. Do not use any commas.",
            "instruction_id_list": ["punctuation:no_comma"],
            "kwargs": [{}],
        },
        {
            "key": 1001,
            "prompt": "Write about cats in at most 20 words and include the word fur.",
            "instruction_id_list": ["length_constraints:number_words", "keywords:existence"],
            "kwargs": [{"num_words": 20, "relation": "less than", "keywords": None}, {"keywords": ["fur"]}],
        },
    ]


def test_ifeval_jsonl_tasks_have_no_counterfactual(tmp_path: Path) -> None:
    path = tmp_path / "ifeval.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _ifeval_rows()) + "\n")
    tasks = load_jsonl(path)
    assert len(tasks) == 2 and tasks[1].task_id == "1001" and not tasks.has_counterfactual
    env = RubricEnv(tasks=str(path))
    assert not env.has_counterfactual
    env.reset(seed=0, options={"task": tasks[1]})
    assert env.counterfactual_prompt_tokens() == env.ledger.token_id.tolist()
    assert criteria_block(tasks[1]) == ""
    with pytest.raises(ValueError, match="no oracle response"):
        env.oracle_response()
    _, reward, *_, info = _episode(env, "Soft fur everywhere.", task=tasks[1])
    assert reward == 1.0 and len(info["criteria"]) == 2


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", "ifeval.jsonl:2:"),
        (json.dumps({"prompt": "x"}), r"ifeval.jsonl:2: .*instruction_id_list"),
        (
            json.dumps({"prompt": "x", "instruction_id_list": ["keywords:nope"], "kwargs": [{}]}),
            r"ifeval.jsonl:2: unknown criterion id 'keywords:nope'; known ids",
        ),
        (
            json.dumps({"prompt": "x", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}),
            r"ifeval.jsonl:2: .*same length",
        ),
        (
            json.dumps(
                {"prompt": "x", "instruction_id_list": ["keywords:existence"], "kwargs": [{"k": ["a"]}]}
            ),
            r"ifeval.jsonl:2: criterion 'keywords:existence': unknown kwarg 'k'",
        ),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    path = tmp_path / "ifeval.jsonl"
    path.write_text(json.dumps(_ifeval_rows()[0]) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=match):
        load_jsonl(path)


def test_skip_unknown_drops_ifbench_only_ids(tmp_path: Path) -> None:
    row = {"key": 1, "prompt": "x", "instruction_id_list": ["count:word_count_range", "punctuation:no_comma"],
           "kwargs": [{"min_words": 1}, {}]}  # fmt: skip
    path = tmp_path / "ifbench.jsonl"
    path.write_text(json.dumps(row) + "\n")
    assert [c.id for c in load_jsonl(path, skip_unknown=True)[0].criteria] == ["punctuation:no_comma"]


def test_budget_truncation_is_still_graded_and_fork_copies() -> None:
    env = RubricEnv(max_new_tokens=4)
    env.reset(seed=1)
    fork = env.fork()
    ids = env.tokenizer("the cat sat on the mat today", add_special_tokens=False)["input_ids"]
    _, reward, terminated, truncated, info = env.step(np.asarray(ids, dtype=np.int64))
    assert truncated and not terminated and "criteria" in info and 0.0 <= reward <= 1.0
    assert fork.task is env.task and not fork.done


def test_eval_cli_oracle_scores_one(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "creditgym.cli", "eval", "--env", "creditgym/Rubric-v0", "--agent", "oracle",
           "--episodes", "20"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "mean score 1.000 over 20 episodes" in out.stdout  # partial credit: its score is a mean


# -------------------------------------------------------------------------------------------- the hard preset

_LOCAL_IDS = {
    "startend:end_checker",
    "detectable_content:postscript",
    FIRST_SENTENCE_KEYWORD,
    "detectable_format:number_bullet_lists",
    "detectable_format:title",
}


def test_hard_preset_is_registered_with_its_budget_and_passes_check_env() -> None:
    env = gym.make("creditgym/Rubric-v0", preset="hard")
    base = env.unwrapped
    assert isinstance(base, RubricEnv) and base.max_new_tokens == PRESETS["hard"].max_new_tokens == 192
    assert RubricEnv(preset="hard", max_new_tokens=96).max_new_tokens == 96
    assert RubricEnv().max_new_tokens == 256  # the default preset's budget, as before
    check_env(gym.make("creditgym/Rubric-v0", preset="hard", max_new_tokens=16).unwrapped)
    env.close()


def test_hard_tasks_have_4_to_8_criteria_with_localized_ones() -> None:
    tasks = ProceduralRubric(split="train", preset="hard").take(300, seed=0)
    assert {len(t.criteria) for t in tasks} == set(range(4, 9))
    local = [sum(c.id in _LOCAL_IDS for c in t.criteria) for t in tasks]
    assert min(local) >= 2 and max(local) == 5
    for cid in _LOCAL_IDS:
        assert sum(any(c.id == cid for c in t.criteria) for t in tasks) >= 100, cid
    assert all(len({c.id for c in t.criteria}) == len(t.criteria) for t in tasks)


def test_default_preset_tasks_are_unchanged_by_the_presets() -> None:
    """The credit study and the tiny model were made on these tasks: the digests are main's before presets."""
    digests = {
        "train": "ac4f8f86570d65bf173c703d0b6c52fb640f732c6962cc81d4d5ef81de90667a",
        "test": "0b015687bda8c2ba25d8efde6297546e2580bb049873a36f0ea5e7925fcdaf14",
    }
    for split, digest in digests.items():
        tasks = ProceduralRubric(split=split).take(300, seed=0)
        got = hashlib.sha256(json.dumps([(t.task_id, t.oracle) for t in tasks]).encode()).hexdigest()
        assert got == digest, split


@pytest.mark.parametrize("split", ["train", "test"])
def test_hard_oracles_pass_run_96_to_192_tokens_and_point_at_their_evidence(split: str) -> None:
    tok = _ENV.tokenizer
    for task in ProceduralRubric(split=split, preset="hard").take(150, seed=3):
        oracle = task.oracle or ""
        v = grade(oracle, task.criteria)
        assert v.score == 1.0, (task, v)
        assert 96 <= len(tok(oracle, add_special_tokens=False)["input_ids"]) < 192
        for c, row in zip(task.criteria, v.details["criteria"], strict=True):
            spans = [oracle[a:b] for a, b in row["spans"]]
            if c.id in _LOCAL_IDS:
                assert row["span"] is not None and row["span"] in v.spans, (c.id, oracle)
            if c.id == "startend:end_checker":
                assert [s.lower() for s in spans] == [c.kwargs["end_phrase"].lower()]
            elif c.id == "detectable_content:postscript":
                assert spans[0].upper().startswith("P.S.")
            elif c.id == FIRST_SENTENCE_KEYWORD:
                assert spans[0].lower() == c.kwargs["keyword"] and row["span"][1] <= oracle.index(".") + 1
            elif c.id == "detectable_format:number_bullet_lists":
                assert len(spans) == c.kwargs["num_bullets"] and all(s.startswith("* ") for s in spans)
            elif c.id == "detectable_format:title":
                assert re.fullmatch(r"<<[^<>]+>>", spans[0])


def test_hard_preset_all_or_nothing_and_partial_with_one_localized_criterion_missed() -> None:
    task = next(
        t
        for t in ProceduralRubric(split="test", preset="hard").take(50, seed=0)
        if any(c.id == "startend:end_checker" for c in t.criteria)
    )
    phrase = next(c.kwargs["end_phrase"] for c in task.criteria if c.id == "startend:end_checker")
    oracle = task.oracle or ""
    broken = oracle.replace(phrase, "").rstrip() + " Bye now."  # the end phrase moved away from the end
    n = len(task.criteria)
    for mode, expected in (("partial", (n - 1) / n), ("all_or_nothing", 0.0)):
        env = RubricEnv(preset="hard", reward_mode=mode)
        _, reward, terminated, _, info = _episode(env, oracle, task=task)
        assert reward == 1.0 and terminated
        _, reward, *_, info = _episode(env, broken, task=task)
        assert reward == pytest.approx(expected)
        row = next(r for r in info["criteria"] if r["id"] == "startend:end_checker")
        assert not row["passed"] and row["span"] is None


def test_hard_counterfactual_prompt_drops_every_criterion() -> None:
    env = RubricEnv(preset="hard")
    env.reset(seed=2)
    task = env.task
    assert task is not None and 4 <= len(task.criteria) <= 8
    full = env.tokenizer.decode(env.ledger.token_id.tolist())
    cf = env.tokenizer.decode(env.counterfactual_prompt_tokens())
    assert full.replace(criteria_block(task), "", 1) == cf and CRITERIA_HEADER not in cf


def test_bad_preset_arguments_are_named(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"unknown rubric preset 'harder'; known presets: \['default', 'hard'\]"
    ):
        RubricEnv(preset="harder")
    with pytest.raises(ValueError, match=r"max_criteria <= 8, got 4, 9"):
        RubricEnv(preset="hard", max_criteria=9)
    with pytest.raises(ValueError, match=r"max_criteria <= 4, got 1, 6"):
        RubricEnv(max_criteria=6)
    path = tmp_path / "ifeval.jsonl"
    path.write_text(json.dumps(_ifeval_rows()[0]) + "\n")
    with pytest.raises(ValueError, match="apply to procedural tasks only"):
        RubricEnv(tasks=str(path), preset="hard")
