"""Grade-school word problems (Math-v0, ``difficulty=7``): deterministic, right, verified, and not gameable."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

from creditgym.envs import word_tasks
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import LEVELS, MathTask, ProceduralMath, generate_task
from creditgym.verifiers.math import verify_many

LEVEL = 7
#: Each template recognised by its wording, and its answer from the question's numbers in order: a second,
#: plain-Python reading of the question, independent of the templates' own arithmetic.
READINGS: tuple[tuple[str, object], ...] = (
    (r"gives \w+ \d+ more", lambda n: n[0] + n[1]),
    (r"gave \d+ of them", lambda n: n[0] - n[1]),
    (r"Each bag holds", lambda n: n[0] * n[1]),
    (r"shares \d+ .* equally", lambda n: Fraction(n[0], n[1])),
    (r"finds \d+ more .* loses", lambda n: n[0] + n[1] - n[2]),
    (r"then bought \d+ bags", lambda n: n[0] + n[1] * n[2]),
    (r"has \d+ more .* than", lambda n: n[0] + n[0] + n[1]),
)


def _tasks(n: int = 120) -> list[MathTask]:
    return list(ProceduralMath(LEVEL, "test").take(n, seed=1))


def _reading(question: str) -> Fraction:
    numbers = [int(x) for x in re.findall(r"\d+", question)]
    matches = [fn for pattern, fn in READINGS if re.search(pattern, question)]
    assert len(matches) == 1, question
    return Fraction(matches[0](numbers))  # type: ignore[operator]


def test_level_is_registered_and_deterministic() -> None:
    assert LEVEL in LEVELS
    first = [t.question for t in ProceduralMath(LEVEL, "train").take(40, seed=3)]
    assert first == [t.question for t in ProceduralMath(LEVEL, "train").take(40, seed=3)]
    assert first != [t.question for t in ProceduralMath(LEVEL, "train").take(40, seed=4)]
    env_a, env_b = MathEnv(difficulty=LEVEL), MathEnv(difficulty=LEVEL)
    for seed in range(5):
        assert env_a.reset(seed=seed)[1]["question"] == env_b.reset(seed=seed)[1]["question"]


def test_every_template_is_drawn_and_answers_are_right() -> None:
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(400):
        task = generate_task(rng, LEVEL)
        assert Fraction(task.answer) == _reading(task.question), task
        seen.add(next(p for p, _ in READINGS if re.search(p, task.question)))
    assert len(seen) == len(word_tasks.TEMPLATES)


def test_answer_is_a_new_positive_whole_number() -> None:
    for task in _tasks():
        answer = int(task.answer)
        assert answer > 0
        assert answer not in {int(x) for x in re.findall(r"\d+", task.question)}, task.question


def test_a_template_whose_arithmetic_is_wrong_fails_the_sympy_check(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = word_tasks.Template(
        "{name} has {a} {item} and {b} more.", "a - b", lambda a, b, c: Fraction(a + b), 1
    )
    monkeypatch.setattr(word_tasks, "TEMPLATES", (broken,))
    monkeypatch.setattr(word_tasks, "TWO_STEP_SHARE", 0.0)
    with pytest.raises(AssertionError, match="failed its sympy check"):
        generate_task(np.random.default_rng(0), LEVEL)


def test_reference_answers_pass_and_wrong_ones_fail_the_verifier() -> None:
    tasks = _tasks(60)
    golds = [t.answer for t in tasks]
    right = verify_many([f"The answer is \\boxed{{{g}}}." for g in golds], golds)
    assert [v.status for v in right] == ["correct"] * len(tasks)
    off_by_one = [f"\\boxed{{{int(g) + d}}}" for g in golds for d in (-1, 1)]
    assert all(v.score == 0 for v in verify_many(off_by_one, [g for g in golds for _ in (-1, 1)]))


def test_the_env_rewards_its_oracle_and_nothing_else() -> None:
    env = MathEnv(difficulty=LEVEL, max_new_tokens=512)
    tok = env.tokenizer
    for seed in range(4):
        for text, want in ((None, 1.0), ("I think it is \\boxed{1}.", 0.0)):
            env.reset(seed=seed)
            text = env.oracle_response() if text is None else text
            if want == 0.0 and env.current_task.answer == "1":
                continue
            ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            reward = env.step(np.array(ids))[1]
            assert reward == want, (env.current_task, text)


def test_listing_numbers_or_copying_the_question_never_scores() -> None:
    tasks = _tasks(60)
    listing = " ".join(str(i) for i in range(0, 201))
    hacks: list[tuple[str, str]] = []
    for t in tasks:
        numbers = re.findall(r"\d+", t.question)
        hacks += [
            (listing, t.answer),
            ("The answer is " + ", ".join(str(i) for i in range(0, 201)) + ".", t.answer),
            (" ".join(f"\\boxed{{{i}}}" for i in range(0, 201)), t.answer),
            ("\\boxed{" + ", ".join(str(i) for i in range(0, 201)) + "}", t.answer),
            (t.question, t.answer),
            (" ".join(f"\\boxed{{{x}}}" for x in numbers), t.answer),
            (f"\\boxed{{{numbers[-1]}}}", t.answer),
        ]
    verdicts = verify_many([h for h, _ in hacks], [g for _, g in hacks])
    scored = [(h[:60], g) for (h, g), v in zip(hacks, verdicts, strict=True) if v.score]
    assert not scored
