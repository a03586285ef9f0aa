"""Math task sources: the procedural generator (sympy-checked) and the GSM8K/MATH/datasets loaders."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import LEVELS, ProceduralMath, generate_task, load_dataset_dir, load_jsonl


def _python_answer(question: str) -> Fraction:
    """An independent check of the generator, in plain Python rather than sympy."""
    import re

    nums = [int(n) for n in re.findall(r"-?\d+", question)]
    if question.startswith("Work out each step"):  # a chain: its own independent check in test_chain_tasks
        values: dict[str, int] = {}
        for var, left, op, right in re.findall(r"([a-z]) = ([a-z]|\d+) ([-+*]) (\d+)", question):
            values[var] = eval(f"{values.get(left, left)} {op} {right}", {"__builtins__": {}})
        return Fraction(values[var])
    if question.startswith("Solve for x"):
        a, b, c = nums
        return Fraction(c - b, a)
    if "bags" in question:
        start, bags, per_bag, given = nums
        return Fraction(start + bags * per_bag - given)
    expr = question.removeprefix("What is ").removesuffix("?")
    return Fraction(eval(expr, {"__builtins__": {}}))  # digits and + - * ( ) only


@pytest.mark.parametrize("level", sorted(set(LEVELS) - {7}))  # 7, word problems: test_word_tasks.py
def test_generator_answers_are_right(level: int) -> None:
    rng = np.random.default_rng(level)
    for _ in range(200):
        task = generate_task(rng, level)
        assert Fraction(task.answer.replace("\\frac{", "").replace("}{", "/").rstrip("}")) == _python_answer(
            task.question
        ), task


def test_levels_get_harder() -> None:
    rng = np.random.default_rng(0)
    lengths = [np.mean([len(generate_task(rng, lvl).question) for _ in range(50)]) for lvl in sorted(LEVELS)]
    assert lengths[0] < lengths[-1]
    assert generate_task(rng, 1).question.count("+") == 1


def test_train_and_test_splits_are_disjoint_and_deterministic() -> None:
    train = {t.question for t in ProceduralMath(2, "train").take(300, seed=0)}
    test = {t.question for t in ProceduralMath(2, "test").take(100, seed=0)}
    assert not train & test
    assert [t.question for t in ProceduralMath(2, "test").take(20, seed=5)] == [
        t.question for t in ProceduralMath(2, "test").take(20, seed=5)
    ]


def test_unknown_level_and_split_are_named() -> None:
    with pytest.raises(ValueError, match="unknown difficulty level 9"):
        ProceduralMath(9)
    with pytest.raises(ValueError, match="split"):
        ProceduralMath(1, "validation")


def _write(path: Path, rows: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_gsm8k_and_math_jsonl(tmp_path: Path) -> None:
    gsm = _write(tmp_path / "gsm.jsonl", [{"question": "Q1?", "answer": "Some steps.\n#### 1,234"}])
    math = _write(
        tmp_path / "math.jsonl",
        [{"problem": "P?", "solution": "So $x=\\boxed{\\frac{1}{2}}$.", "level": "Level 3"}],
    )
    assert load_jsonl(gsm)[0].answer == "1234"
    task = load_jsonl(math)[0]
    assert task.answer == "\\frac{1}{2}" and task.level == 3


def test_malformed_jsonl_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", [{"question": "ok", "answer": "1"}, "{not json", {"x": 1}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:2:"):
        load_jsonl(path)
    path = _write(tmp_path / "keys.jsonl", [{"question": "ok", "answer": "1"}, {"x": 1}])
    with pytest.raises(ValueError, match=r"keys\.jsonl:2: record has keys \['x'\]"):
        load_jsonl(path)
    path = _write(tmp_path / "noboxed.jsonl", [{"problem": "p", "solution": "no box here"}])
    with pytest.raises(ValueError, match=r"noboxed\.jsonl:1: .*boxed"):
        load_jsonl(path)


def test_dataset_saved_on_disk(tmp_path: Path) -> None:
    from datasets import Dataset, DatasetDict

    rows = {"question": ["What is 1 + 1?", "What is 2 + 5?"], "answer": ["#### 2", "#### 7"]}
    DatasetDict({"test": Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "ds"))
    tasks = load_dataset_dir(tmp_path / "ds")
    assert [t.answer for t in tasks] == ["2", "7"]


def test_env_plays_a_jsonl_task_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "gsm.jsonl", [{"question": "What is 40 + 2?", "answer": "#### 42"}])
    env = MathEnv(tasks=path, max_new_tokens=32)
    env.reset(seed=0)
    ids = env.tokenizer(env.oracle_response(), add_special_tokens=False)["input_ids"]
    _, reward, terminated, _, info = env.step(np.asarray([*ids, env.tokenizer.eos_token_id]))
    assert reward == 1.0 and terminated and info["gold"] == "42"
