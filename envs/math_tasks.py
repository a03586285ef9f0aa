"""Math task sources: a procedural generator checked with sympy, and loaders for GSM8K/MATH-style data.

A task source is anything with ``__len__`` and ``sample(rng)`` (see :class:`TaskSource`); the Math env draws one
task per episode from it with its seeded ``np_random``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sympy

from creditgym.envs import chain_tasks, word_tasks
from creditgym.envs.tasks import TaskList, TaskSource, read_jsonl, split_of

LEVELS: dict[int, str] = {
    1: "one-digit sums",
    2: "two-digit addition and subtraction",
    3: "multiplication and mixed operations with precedence",
    4: "linear equations in one unknown",
    5: "multi-step word problems",
    6: "worked chains: 3-6 arithmetic steps, each result written out",
    7: "grade-school word problems in plain words, one or two steps",
}
CHAIN_LEVEL = 6
DEFAULT_LEVEL = 2


@dataclass(frozen=True)
class MathTask:
    """One problem: the question shown to the policy and the gold answer the verifier compares against.

    ``solution`` is a worked solution without the final ``\\boxed{}`` (chains, level 6), or ``None``.
    """

    question: str
    answer: str
    task_id: str
    level: int | None = None
    source: str = "procedural"
    solution: str | None = None


# --------------------------------------------------------------------------------------------------------------
# procedural generator


_NAMES = ("Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia")
_ITEMS = ("apples", "books", "coins", "stamps", "marbles", "pencils", "cards", "shells", "stickers", "eggs")


def _level1(rng: np.random.Generator) -> tuple[str, sympy.Expr, str]:
    a, b = (int(x) for x in rng.integers(0, 10, size=2))
    return f"What is {a} + {b}?", sympy.Integer(a) + sympy.Integer(b), f"{a}+{b}"


def _level2(rng: np.random.Generator) -> tuple[str, sympy.Expr, str]:
    a, b = (int(x) for x in rng.integers(10, 100, size=2))
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", sympy.Integer(a) + b, f"{a}+{b}"
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", sympy.Integer(a) - b, f"{a}-{b}"


def _level3(rng: np.random.Generator) -> tuple[str, sympy.Expr, str]:
    a, b, c = int(rng.integers(2, 20)), int(rng.integers(2, 10)), int(rng.integers(1, 30))
    form = int(rng.integers(3))
    if form == 0:
        return f"What is {a} * {b}?", sympy.Integer(a) * b, f"{a}*{b}"
    if form == 1:
        return f"What is {c} + {a} * {b}?", c + sympy.Integer(a) * b, f"{c}+{a}*{b}"
    return f"What is ({c} + {a}) * {b}?", (c + sympy.Integer(a)) * b, f"({c}+{a})*{b}"


def _level4(rng: np.random.Generator) -> tuple[str, sympy.Expr, str]:
    x = sympy.Symbol("x")
    a, sol, b = int(rng.integers(2, 10)), int(rng.integers(-10, 11)), int(rng.integers(1, 30))
    c = a * sol + b
    solutions = sympy.solve(sympy.Eq(a * x + b, c), x)
    return f"Solve for x: {a}x + {b} = {c}.", solutions[0], f"solve({a}*x+{b}={c})"


def _level5(rng: np.random.Generator) -> tuple[str, sympy.Expr, str]:
    name, item = _NAMES[int(rng.integers(len(_NAMES)))], _ITEMS[int(rng.integers(len(_ITEMS)))]
    start, bags, per_bag = int(rng.integers(5, 40)), int(rng.integers(2, 6)), int(rng.integers(2, 10))
    given = int(rng.integers(1, start + 1))
    question = (
        f"{name} has {start} {item}. {name} buys {bags} bags with {per_bag} {item} in each bag, "
        f"then gives away {given} {item}. How many {item} does {name} have now?"
    )
    return question, sympy.Integer(start) + bags * per_bag - given, f"{start}+{bags}*{per_bag}-{given}"


_GENERATORS = {1: _level1, 2: _level2, 3: _level3, 4: _level4, 5: _level5, 7: word_tasks.generate}


def _chain_task(rng: np.random.Generator) -> MathTask:
    steps = chain_tasks.generate_chain(rng)
    question = chain_tasks.question(steps)
    answer = sympy.Integer(chain_tasks.evaluate(steps)[-1])
    worked = chain_tasks.solution(steps)
    if not chain_tasks.check_chain(question, worked, answer):
        raise AssertionError(f"generated chain {worked!r} for {question!r} failed its sympy check")
    return MathTask(question, sympy.latex(answer), _task_id(question), CHAIN_LEVEL, solution=worked)


def _task_id(question: str) -> str:
    return "p" + hashlib.md5(question.encode()).hexdigest()[:10]


def generate_task(rng: np.random.Generator, level: int) -> MathTask:
    """One procedural problem of the given difficulty, its answer derived and re-checked with sympy."""
    if level == CHAIN_LEVEL:
        return _chain_task(rng)
    if level not in _GENERATORS:
        raise ValueError(f"unknown difficulty level {level!r}; known levels: {LEVELS}")
    question, answer, formula = _GENERATORS[level](rng)
    if level == 4:
        a, b, c = (int(n) for n in re.findall(r"-?\d+", question))
        ok = sympy.simplify(a * answer + b - c) == 0
    else:
        ok = sympy.sympify(formula.replace("solve", ""), evaluate=True) == answer
    if not ok:  # the generator and sympy disagree: a bug in the generator, never a wrong gold in a dataset
        raise AssertionError(f"generated answer {answer} for {question!r} failed its sympy check")
    return MathTask(question=question, answer=sympy.latex(answer), task_id=_task_id(question), level=level)


class ProceduralMath:
    """Endless procedural problems at one or several difficulty levels, split into train/test by a hash.

    Args:
        levels: A level (1-7, see :data:`LEVELS`; 6 is the worked chains of :mod:`~creditgym.envs.chain_tasks`,
            7 the word problems of :mod:`~creditgym.envs.word_tasks`) or a sequence of levels, drawn uniformly.
        split: ``"train"`` or ``"test"``; a question belongs to exactly one split (1 in 5 is test).
    """

    def __init__(self, levels: int | Sequence[int] = DEFAULT_LEVEL, split: str = "train") -> None:
        self.levels = (levels,) if isinstance(levels, int) else tuple(levels)
        for level in self.levels:
            if level not in LEVELS:
                raise ValueError(f"unknown difficulty level {level!r}; known levels: {sorted(LEVELS)}")
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.split = split

    def __len__(self) -> int:
        return 2**31  # effectively endless

    def sample(self, rng: np.random.Generator) -> MathTask:
        while True:
            level = self.levels[int(rng.integers(len(self.levels)))]
            task = generate_task(rng, level)
            if split_of(task.question) == self.split:
                return task

    def take(self, n: int, seed: int = 0) -> TaskList[MathTask]:
        """``n`` distinct tasks, deterministic in ``seed`` (a fixed held-out set, for example)."""
        rng, seen, tasks = np.random.default_rng(seed), set(), []
        for _ in range(100 * n):
            task = self.sample(rng)
            if task.question not in seen:
                seen.add(task.question)
                tasks.append(task)
                if len(tasks) == n:
                    return TaskList(tasks, name=f"procedural-{self.split}")
        raise ValueError(
            f"could only find {len(tasks)} distinct {self.split} problems at levels {self.levels}"
        )


# --------------------------------------------------------------------------------------------------------------
# loaders


def last_boxed(text: str) -> tuple[int, int] | None:
    """Span of the contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, braces balanced."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return start, i
    return None


def _gsm8k_gold(answer: str) -> str:
    if "####" not in answer:
        raise ValueError("a GSM8K 'answer' must end with '#### <number>'")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def _math_gold(solution: str) -> str:
    span = last_boxed(solution)
    if span is None:
        raise ValueError("a MATH 'solution' must contain \\boxed{<answer>}")
    return solution[span[0] : span[1]].strip()


def record_to_task(record: dict, *, source: str, index: int) -> MathTask:
    """Map one GSM8K-style (``question``, ``answer`` with ``#### N``), MATH-style (``problem``, ``solution``
    with ``\\boxed{}``) or plain (``question``, ``answer``) record to a task."""
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    digits = re.sub(r"\D", "", str(record.get("level", "")))
    level = int(digits) if digits else None
    task_id = str(record.get("id", record.get("unique_id", f"{Path(source).stem}-{index}")))
    if "problem" in record and "solution" in record:
        return MathTask(record["problem"], _math_gold(record["solution"]), task_id, level, source)
    if "question" in record and "answer" in record:
        answer = str(record["answer"])
        gold = _gsm8k_gold(answer) if "####" in answer else answer.strip()
        if not gold:
            raise ValueError("empty 'answer'")
        return MathTask(record["question"], gold, task_id, level, source)
    raise ValueError(
        f"record has keys {sorted(record)}; expected ('question', 'answer') for GSM8K-style data "
        "or ('problem', 'solution') for MATH-style data"
    )


def load_jsonl(path: str | os.PathLike[str]) -> TaskList[MathTask]:
    """Tasks from a GSM8K- or MATH-style JSONL file. A bad line raises ``ValueError`` naming file and line."""
    tasks = read_jsonl(path, lambda record, lineno: record_to_task(record, source=str(path), index=lineno))
    return TaskList(tasks, name=str(path))


def load_dataset_dir(path: str | os.PathLike[str], split: str | None = None) -> TaskList[MathTask]:
    """Tasks from a Hugging Face ``datasets`` dataset saved on disk (``save_to_disk``); nothing is downloaded."""
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(str(path))
    if isinstance(data, DatasetDict):
        if split is None:
            split = "test" if "test" in data else next(iter(data))
        if split not in data:
            raise ValueError(f"{path}: no split {split!r}; available: {sorted(data)}")
        data = data[split]
    tasks = []
    for i, record in enumerate(data):
        try:
            tasks.append(record_to_task(dict(record), source=str(path), index=i))
        except ValueError as e:
            raise ValueError(f"{path}: row {i}: {e}") from e
    return TaskList(tasks, name=str(path))


def resolve_tasks(
    tasks: str | os.PathLike[str] | TaskSource[MathTask] | Sequence[MathTask] | None,
    *,
    levels: int | Sequence[int] = DEFAULT_LEVEL,
    split: str = "train",
) -> TaskSource[MathTask]:
    """Turn the Math env's ``tasks`` argument into a task source.

    ``None`` or ``"procedural"`` gives the bundled generator; a ``.jsonl`` path a JSONL file; a folder a dataset
    saved with ``datasets``; a list of :class:`MathTask` a fixed list; anything with ``sample`` is used as is.
    """
    if tasks is None or tasks == "procedural":
        return ProceduralMath(levels, split)
    if hasattr(tasks, "sample"):
        return tasks  # type: ignore[return-value]
    if isinstance(tasks, (str, os.PathLike)):
        path = Path(tasks)
        if path.is_dir():
            return load_dataset_dir(path, split=split)
        return load_jsonl(path)
    return TaskList(list(tasks))  # type: ignore[arg-type]
