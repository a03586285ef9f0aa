"""Worked chains (Math-v0, ``difficulty=6``): generated right, checked with sympy, one wrong step dooms the answer."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import sympy

import creditgym  # noqa: F401
from creditgym.envs import chain_tasks
from creditgym.envs.chain_tasks import CHAIN_STEPS, MAX_VALUE, check_chain, evaluate, generate_chain, question
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import CHAIN_LEVEL, ProceduralMath, generate_task
from creditgym.envs.tasks import split_of


def _python_chain(text: str) -> list[int]:
    """An independent reading of the question, in plain Python: every variable's value in order."""
    values: dict[str, int] = {}
    for var, left, op, right in re.findall(r"([a-z]) = ([a-z]|\d+) ([-+*]) (\d+)", text):
        x = values[left] if left.isalpha() else int(left)
        values[var] = {"+": x + int(right), "-": x - int(right), "*": x * int(right)}[op]
    return list(values.values())


def test_chains_are_right_and_stay_in_range() -> None:
    rng = np.random.default_rng(0)
    lengths = set()
    for _ in range(300):
        task = generate_task(rng, CHAIN_LEVEL)
        values = _python_chain(task.question)
        assert task.answer == str(values[-1]) and task.level == CHAIN_LEVEL
        assert all(0 <= v <= MAX_VALUE for v in values)
        assert task.solution is not None
        assert [int(v) for v in re.findall(r"= (\d+)(?:;|\.$)", task.solution)] == values
        lengths.add(len(values))
    assert lengths == set(range(CHAIN_STEPS[0], CHAIN_STEPS[1] + 1))


def test_one_wrong_intermediate_result_carried_on_dooms_the_answer() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        steps = generate_chain(rng)
        values = evaluate(steps)
        k = int(rng.integers(len(steps)))
        for delta in (-1, 1, 10):
            wrong = [*values[:k], values[k] + delta]
            for step in steps[k + 1 :]:  # the later steps, done right, from the wrong result
                wrong.append(wrong[-1] + step.right if step.op == "+" else
                             wrong[-1] - step.right if step.op == "-" else wrong[-1] * step.right)  # fmt: skip
            assert wrong[-1] != values[-1], (steps, k, delta)
            worked = chain_tasks.solution(steps, wrong)
            assert not check_chain(question(steps), worked, sympy.Integer(values[-1]))


def test_sympy_check_rejects_a_solution_that_does_not_follow_the_question() -> None:
    steps = generate_chain(np.random.default_rng(2))
    text, worked, answer = question(steps), chain_tasks.solution(steps), sympy.Integer(evaluate(steps)[-1])
    assert check_chain(text, worked, answer)
    assert not check_chain(text, worked, answer + 1)
    assert not check_chain(text, worked.rsplit(";", 1)[0] + ".", answer)  # a step left out
    first = re.search(r"= (\d+);", worked)
    assert first is not None
    assert not check_chain(text, worked.replace(first.group(0), f"= {int(first.group(1)) + 1};", 1), answer)


def test_splits_by_hash_of_the_question_and_deterministic() -> None:
    train = ProceduralMath(CHAIN_LEVEL, "train").take(200, seed=0)
    test = ProceduralMath(CHAIN_LEVEL, "test").take(50, seed=0)
    assert {split_of(t.question) for t in train} == {"train"} and {split_of(t.question) for t in test} == {
        "test"
    }
    assert not {t.question for t in train} & {t.question for t in test}
    assert [t.task_id for t in ProceduralMath(CHAIN_LEVEL, "test").take(10, seed=4)] == [
        t.task_id for t in ProceduralMath(CHAIN_LEVEL, "test").take(10, seed=4)
    ]


def test_prompt_states_the_chain_and_the_oracle_writes_it_in_40_to_150_tokens() -> None:
    env = gym.make("creditgym/Math-v0", difficulty=CHAIN_LEVEL).unwrapped
    assert isinstance(env, MathEnv)
    lengths = []
    for seed in range(40):
        _, info = env.reset(seed=seed)
        task = env.task
        assert task is not None and info["question"] == task.question
        prompt = env.tokenizer.decode(env.ledger.token_id.tolist())
        assert question(_steps_of(task.question)) in prompt and "\\boxed{}" in prompt
        oracle = env.oracle_response()
        assert oracle == f"{task.solution} The answer is \\boxed{{{task.answer}}}."
        lengths.append(len(env.tokenizer(oracle, add_special_tokens=False)["input_ids"]) + 1)
    assert min(lengths) >= 40 and max(lengths) <= 150


def _steps_of(text: str) -> tuple[chain_tasks.Step, ...]:
    return tuple(
        chain_tasks.Step(var, left, op, int(right))
        for var, left, op, right in re.findall(r"([a-z]) = ([a-z]|\d+) ([-+*]) (\d+)", text)
    )


def _play(env: MathEnv, text: str) -> tuple[float, dict]:
    ids = env.tokenizer(text, add_special_tokens=False)["input_ids"]
    _, reward, terminated, _, info = env.step(np.asarray([*ids, env.tokenizer.eos_token_id]))
    assert terminated
    return float(reward), info


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reward_is_the_verdict_on_the_final_answer(seed: int) -> None:
    env = MathEnv(difficulty=CHAIN_LEVEL)
    env.reset(seed=seed)
    task = env.task
    assert task is not None and task.solution is not None
    reward, info = _play(env, env.oracle_response())
    assert reward == 1.0 and info["verdict"].status == "correct"
    steps = _steps_of(task.question)
    values = evaluate(steps)
    wrong = [*values[:-1], values[-1] + 1]
    env.reset(seed=seed)
    reward, _ = _play(env, f"{chain_tasks.solution(steps, wrong)} The answer is \\boxed{{{wrong[-1]}}}.")
    assert reward == 0.0
    env.reset(seed=seed)  # the right chain but a wrong box: the reward is the final answer's verdict only
    reward, _ = _play(env, f"{task.solution} The answer is \\boxed{{{values[-1] + 2}}}.")
    assert reward == 0.0
