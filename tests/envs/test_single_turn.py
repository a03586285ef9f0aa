"""``creditgym/SingleTurn-v0``: rows and a registered verifier as an env, graded for real, from lists, JSONL files
and datasets, trained with ``creditgym train``, and bad rows named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import creditgym  # noqa: F401
from creditgym.envs import SingleTurnEnv, registered_ids, verifier_names
from creditgym.envs.rubric import CRITERIA_HEADER, listed_criteria
from creditgym.verifiers.rubric import Criterion

SUMS = [
    {"id": "a", "prompt": "What is 2 + 3?", "answer": "5"},
    {"id": "b", "prompt": "What is 40 + 2?", "answer": 42},
]
LOWERCASE = "change_case:english_lowercase"


def _play(env: SingleTurnEnv, text: str, task_id: str) -> tuple[float, bool, bool, dict]:
    """Reset onto the row ``task_id`` and write ``text`` then the end-of-turn token in one chunk."""
    task = next(t for t in env.tasks if t.task_id == task_id)
    env.reset(seed=0, options={"task": task})
    ids = env.tokenizer(text, add_special_tokens=False)["input_ids"]
    _, reward, terminated, truncated, info = env.step(np.asarray([*ids, min(env.stop_token_ids)]))
    return float(reward), terminated, truncated, info


def test_the_math_verifier_grades_right_and_wrong_answers() -> None:
    env = SingleTurnEnv(SUMS, verifier="math")
    assert env.verifier_kwargs == {} and not env.has_counterfactual  # math shows nothing after the prompt
    assert _play(env, "2 + 3 = 5, so the answer is \\boxed{5}.", "a")[:3] == (1.0, True, False)
    reward, terminated, _, info = _play(env, "The answer is \\boxed{6}.", "a")
    assert (reward, terminated, info["status"], info["task_id"]) == (0.0, True, "wrong", "a")
    assert info["verdict"].details["gold"] == "5" and info["verdict"].details["extracted"] == "6"
    reward, _, _, info = _play(env, "\\boxed{42}", "b")  # a number in the row is read as its text
    assert reward == 1.0 and info["status"] == "correct"
    env.reset(seed=0, options={"task": env.tasks[1]})
    assert env.oracle_response() == "\\boxed{42}"


def test_the_rubric_verifier_shows_the_criteria_and_grades_each() -> None:
    rows = [
        {
            "prompt": "Describe tea.",
            "criteria": [
                LOWERCASE,
                {"id": "keywords:existence", "kwargs": {"keywords": ["leaf"]}, "weight": 3},
            ],
        }
    ]
    env = SingleTurnEnv(rows, verifier="rubric")
    env.reset(seed=0)
    full = env.tokenizer.decode(env.ledger.token_id.tolist())
    cf = env.tokenizer.decode(env.counterfactual_prompt_tokens())
    block = listed_criteria(env.current_task.reference)
    assert block.startswith(f"\n\n{CRITERIA_HEADER}\n1. ") and "2. " in block
    assert env.has_counterfactual and full.replace(block, "", 1) == cf and "Describe tea." in cf
    leaf = (
        "tea is a drink made by pouring hot water over a dried leaf, and many people enjoy it every morning."
    )
    assert _play(env, leaf, "rows-0")[0] == 1.0
    reward, _, _, info = _play(
        env, leaf.capitalize(), "rows-0"
    )  # the keyword passes (3), lowercase fails (1)
    assert reward == pytest.approx(3 / 4) and [c["passed"] for c in info["criteria"]] == [False, True]
    assert _play(env, leaf.replace("a dried leaf", "dried herbs"), "rows-0")[0] == pytest.approx(1 / 4)

    strict = SingleTurnEnv(rows, verifier="rubric", verifier_kwargs={"mode": "all_or_nothing"})
    assert _play(strict, leaf.capitalize(), "rows-0")[0] == 0.0
    hidden = SingleTurnEnv(rows, verifier="rubric", show_criteria=False)
    hidden.reset(seed=0)
    assert not hidden.has_counterfactual and CRITERIA_HEADER not in hidden.tokenizer.decode(
        hidden.ledger.token_id
    )


def test_rows_from_a_jsonl_file_and_a_dataset(tmp_path: Path) -> None:
    path = tmp_path / "sums.jsonl"
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in [*SUMS, {"prompt": "What is 1 + 1?", "answer": "2"}])
    )
    env = SingleTurnEnv(path, verifier="math")
    assert [t.task_id for t in env.tasks] == ["a", "b", "sums-3"]  # the row's id, else the file and its line
    assert _play(env, "\\boxed{2}", "sums-3")[0] == 1.0

    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"prompt": r["prompt"], "answer": str(r["answer"])} for r in SUMS])
    from_ds = SingleTurnEnv(ds, verifier="math")
    assert [t.prompt for t in from_ds.tasks] == [r["prompt"] for r in SUMS]
    assert _play(from_ds, "\\boxed{42}", "rows-1")[0] == 1.0
    ds.save_to_disk(str(tmp_path / "saved"))
    assert len(SingleTurnEnv(tmp_path / "saved", verifier="math").tasks) == 2
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "splits"))
    with pytest.raises(ValueError, match=r"holds the splits \['test', 'train'\]: pass one split's folder"):
        SingleTurnEnv(tmp_path / "splits", verifier="math")


def test_registered_made_by_id_and_passes_check_env(tmp_path: Path) -> None:
    assert "creditgym/SingleTurn-v0" in registered_ids() and {"math", "rubric"} <= set(verifier_names())
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "Say hi in lowercase.", "criteria": [LOWERCASE]}) + "\n")
    env = gym.make("creditgym/SingleTurn-v0", rows=str(path), verifier="rubric", max_new_tokens=16)
    check_env(env.unwrapped, skip_render_check=False)
    assert env.unwrapped.tasks[0].reference == (Criterion(LOWERCASE),)
    env.close()


def test_a_verifier_of_your_own_named_module_colon_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_verifiers.py").write_text(
        "from creditgym.envs import RowVerifier, register_verifier\n"
        "from creditgym.verifiers import Verdict\n\n"
        "def same(response, word):\n"
        "    ok = response.strip() == word\n"
        "    return Verdict(float(ok), 'correct' if ok else 'wrong')\n\n"
        "register_verifier('echo', RowVerifier(field='word', grade=same))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    env = SingleTurnEnv([{"prompt": "Say tea.", "word": "tea"}], verifier="my_verifiers:echo")
    assert _play(env, "tea", "rows-0")[0] == 1.0 and _play(env, "coffee", "rows-0")[0] == 0.0
    with pytest.raises(ValueError, match=r"the my_verifiers:echo verifier has no oracle response"):
        env.oracle_response()


@pytest.mark.parametrize(
    ("rows", "verifier", "message"),
    [
        (
            [SUMS[0], {"prompt": "x"}],
            "math",
            r"rows\[1\]: no 'answer' field \(verifier 'math' needs \['prompt', "
            r"'answer'\]\); the row has \['prompt'\]",
        ),
        ([{"answer": "1"}], "math", r"rows\[0\]: no 'prompt' field"),
        (
            [{"prompt": "x", "answer": "5"}],
            "rubric",
            r"rows\[0\]: no 'criteria' field \(verifier 'rubric' needs",
        ),
        ([{"prompt": "  ", "answer": "5"}], "math", r"rows\[0\]: 'prompt' must be a non-empty string"),
        ([{"prompt": "x", "answer": ""}], "math", r"rows\[0\]: 'answer' is empty"),
        (
            [{"prompt": "x", "answer": [1]}],
            "math",
            r"rows\[0\]: 'answer' must be a string or a number, got list",
        ),
        (["What is 2 + 3?"], "math", r"rows\[0\]: expected a dict with \['prompt', 'answer'\], got str"),
        ([{"prompt": "x", "criteria": []}], "rubric", r"rows\[0\]: 'criteria' must be a non-empty list"),
        (
            [{"prompt": "x", "criteria": ["nope:x"]}],
            "rubric",
            r"rows\[0\]: 'criteria' item 0: unknown criterion id "
            r"'nope:x'",
        ),
        (
            [{"prompt": "x", "criteria": [{"kwargs": {}}]}],
            "rubric",
            r"'criteria' item 0: expected an id or a dict",
        ),
        ({"train": SUMS}, "math", r"rows is a mapping with keys \['train'\]; pass a list of rows"),
        ([], "math", r"rows: no tasks"),
        (SUMS, "nope", r"unknown verifier 'nope'; registered verifiers: \[.*'math'.*'rubric'"),
        (SUMS, "no_such_module:x", r"verifier 'no_such_module:x': importing 'no_such_module' failed"),
    ],
)
def test_bad_rows_and_verifiers_are_named(rows: object, verifier: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SingleTurnEnv(rows, verifier=verifier)  # type: ignore[arg-type]


def test_a_bad_line_of_a_file_and_a_bad_verifier_kwarg_are_named(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(SUMS[0]) + "\n" + json.dumps({"prompt": "x", "solution": "5"}) + "\n")
    with pytest.raises(
        ValueError, match=rf"{path}:2: no 'answer' field .* the row has \['prompt', 'solution'\]"
    ):
        SingleTurnEnv(path, verifier="math")
    with pytest.raises(FileNotFoundError, match=r"rows='.*nope.jsonl': no such file"):
        SingleTurnEnv(tmp_path / "nope.jsonl", verifier="math")
    with pytest.raises(
        ValueError, match=r"verifier 'math' takes no \['mode'\]; its verifier_kwargs are \['timeout'\]"
    ):
        SingleTurnEnv(SUMS, verifier="math", verifier_kwargs={"mode": "partial"})


def test_creditgym_train_runs_a_step_on_rows_from_a_jsonl_file(tmp_path: Path) -> None:
    rows = tmp_path / "sums.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in SUMS))
    out = tmp_path / "run"
    cmd = [
        *(sys.executable, "-m", "creditgym.cli", "train", "--env", "creditgym/SingleTurn-v0"),
        *("--env-kw", f'rows="{rows}"', "--env-kw", 'verifier="math"'),
        *("--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-episodes", "2"),
        *("--max-new-tokens", "8", "--out", str(out)),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["env_id"] == "creditgym/SingleTurn-v0" and config["env_kwargs"] == {
        "rows": str(rows),
        "verifier": "math",
    }
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [m for m in steps if m["step"] == 1 and "rollout/reward" in m]
    assert trained and 0.0 <= trained[0]["rollout/reward"] <= 1.0 and (out / "final").is_dir()
    assert "has no held-out split" in res.stderr + res.stdout  # the rows have none: said once


def test_creditgym_eval_plays_the_rows_with_the_oracle(tmp_path: Path) -> None:
    """``eval``'s default ``--split test`` reaches only envs with splits; these rows have none and are all played."""
    rows = tmp_path / "sums.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in SUMS))
    cmd = [sys.executable, "-m", "creditgym.cli", "eval", "--env", "creditgym/SingleTurn-v0"]
    res = subprocess.run(
        [*cmd, "--env-kw", f'rows="{rows}"', "--episodes", "4"], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "oracle   on creditgym/SingleTurn-v0: accuracy 1.000 over 4 episodes" in res.stdout
