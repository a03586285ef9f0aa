"""Rubric task sources: a procedural generator of short instructions with 1-4 criteria, and an IFEval JSONL loader.

Procedural tasks keep the instruction and its criteria apart, so the env can render the prompt with and without
the criteria block (the counterfactual prompt CoRT replays), and each carries an ``oracle`` response that passes
every criterion.

IFEval / IFBench-format data (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``) already writes the
instructions into ``prompt``: there is no separate block to remove. The loader keeps ``prompt`` as the
instruction and marks the task ``render_criteria=False``: the criteria are graded but not rendered, the
counterfactual prompt equals the prompt, and ``has_counterfactual`` is False (CoRT refuses such an env).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from creditgym.envs.tasks import TaskList, TaskSource, split_of
from creditgym.verifiers.rubric import Criterion


@dataclass(frozen=True)
class RubricTask:
    """One instruction and its rubric.

    Attributes:
        instruction: The request shown to the policy.
        criteria: The rubric, in display order.
        task_id: A stable id.
        render_criteria: Whether the prompt lists the criteria under the instruction (False for IFEval data,
            whose prompt already states them).
        oracle: A response that passes every criterion, when known (procedural tasks).
        source: Where the task came from.
    """

    instruction: str
    criteria: tuple[Criterion, ...]
    task_id: str
    render_criteria: bool = True
    oracle: str | None = None
    source: str = "procedural"


RubricTaskSource = TaskSource[RubricTask]


class RubricTaskList(TaskList[RubricTask]):
    """A fixed list of rubric tasks, sampled uniformly."""

    @property
    def has_counterfactual(self) -> bool:
        return all(t.render_criteria for t in self._tasks)


# --------------------------------------------------------------------------------------------------------------
# procedural generator

_TOPICS: dict[str, tuple[str, ...]] = {
    "cats": ("cat", "fur", "nap", "milk"),
    "the sea": ("sea", "wave", "salt", "boat"),
    "rain": ("rain", "cloud", "wet", "drop"),
    "bread": ("bread", "oven", "flour", "crust"),
    "trains": ("train", "track", "station", "ticket"),
    "gardens": ("garden", "seed", "soil", "flower"),
    "music": ("music", "song", "drum", "note"),
    "winter": ("winter", "snow", "cold", "ice"),
    "books": ("book", "page", "story", "shelf"),
    "the moon": ("moon", "night", "light", "sky"),
    "coffee": ("coffee", "cup", "bean", "warm"),
    "bicycles": ("bike", "wheel", "road", "ride"),
}
_TEMPLATES = (
    "Write a short note about {topic}.",
    "Tell me about {topic}.",
    "Describe {topic} in a few sentences.",
    "Write a few lines on {topic}.",
)
_ENDINGS = ("Any other questions?", "Is there anything else I can help with?", "That is all.")
_FORBIDDEN = ("very", "really", "thing", "stuff", "nice")
# Pairs of kinds that cannot both hold (or would make the oracle awkward).
_KINDS = (
    "keywords",
    "frequency",
    "forbidden",
    "words_less",
    "words_least",
    "lowercase",
    "ending",
    "bullets",
    "json",
    "no_comma",
    "title",
    "postscript",
    "quotation",
    "placeholders",
    "sentences",
    "highlights",
)
_CONFLICTS = {
    frozenset(p)
    for p in [
        ("words_less", "words_least"),
        ("json", "bullets"),
        ("json", "ending"),
        ("json", "postscript"),
        ("json", "quotation"),
        ("json", "title"),
        ("json", "placeholders"),
        ("json", "highlights"),
        ("json", "sentences"),
        ("json", "lowercase"),
        ("quotation", "bullets"),
        ("ending", "postscript"),
        ("bullets", "highlights"),
        ("words_less", "bullets"),
    ]
}


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def generate_task(rng: np.random.Generator, n_criteria: int) -> RubricTask:
    """One procedural task with ``n_criteria`` compatible criteria and an oracle response that passes them all."""
    topic = _pick(rng, list(_TOPICS))
    words = _TOPICS[topic]
    instruction = _pick(rng, _TEMPLATES).format(topic=topic)
    kinds: list[str] = []
    for kind in rng.permutation(_KINDS):
        if len(kinds) == n_criteria:
            break
        if all(frozenset((kind, k)) not in _CONFLICTS for k in kinds):
            kinds.append(str(kind))

    criteria: list[Criterion] = []
    keyword, word2 = words[0], words[1 + int(rng.integers(len(words) - 1))]
    repeat = 1
    body = [
        f"I like {keyword}",
        f"A {word2} is part of it",
        f"People enjoy {keyword} every day",
        "It is good to learn about it and to share what we know with our friends",
    ]
    extra_lines: list[str] = []
    prefix, postscript, ending = "", "", ""
    for kind in kinds:
        if kind == "keywords":
            criteria.append(Criterion("keywords:existence", {"keywords": [keyword, word2]}))
        elif kind == "frequency":
            repeat = int(rng.integers(2, 4))
            criteria.append(
                Criterion(
                    "keywords:frequency", {"keyword": keyword, "frequency": repeat, "relation": "at least"}
                )
            )
        elif kind == "forbidden":
            criteria.append(
                Criterion("keywords:forbidden_words", {"forbidden_words": [_pick(rng, _FORBIDDEN)]})
            )
        elif kind == "words_less":
            n = int(rng.integers(60, 100))
            criteria.append(
                Criterion("length_constraints:number_words", {"num_words": n, "relation": "less than"})
            )
        elif kind == "words_least":
            n = int(rng.integers(5, 16))
            criteria.append(
                Criterion("length_constraints:number_words", {"num_words": n, "relation": "at least"})
            )
        elif kind == "lowercase":
            criteria.append(Criterion("change_case:english_lowercase"))
        elif kind == "ending":
            ending = _pick(rng, _ENDINGS)
            criteria.append(Criterion("startend:end_checker", {"end_phrase": ending}))
        elif kind == "bullets":
            n = int(rng.integers(1, 4))
            extra_lines += [f"* {_pick(rng, words)} point {i + 1}" for i in range(n)]
            criteria.append(Criterion("detectable_format:number_bullet_lists", {"num_bullets": n}))
        elif kind == "json":
            criteria.append(Criterion("detectable_format:json_format"))
        elif kind == "no_comma":
            criteria.append(Criterion("punctuation:no_comma"))
        elif kind == "title":
            prefix = f"<<{topic}>>\n"
            criteria.append(Criterion("detectable_format:title"))
        elif kind == "postscript":
            postscript = f"\nP.S. I like {keyword}."
            criteria.append(Criterion("detectable_content:postscript", {"postscript_marker": "P.S."}))
        elif kind == "quotation":
            criteria.append(Criterion("startend:quotation"))
        elif kind == "placeholders":
            n = int(rng.integers(1, 3))
            body.append("Write to " + " and ".join(["[name]", "[place]"][:n]))
            criteria.append(Criterion("detectable_content:number_placeholders", {"num_placeholders": n}))
        elif kind == "sentences":
            n = int(rng.integers(2, 4))
            criteria.append(
                Criterion("length_constraints:number_sentences", {"num_sentences": n, "relation": "at least"})
            )
        elif kind == "highlights":
            n = int(rng.integers(1, 3))
            body.append("It is " + " and ".join(f"*{w}*" for w in words[:n]))
            criteria.append(Criterion("detectable_format:number_highlighted_sections", {"num_highlights": n}))
    body += [f"The {keyword} is here"] * max(0, repeat - 2)
    text = prefix + ". ".join(body) + "."
    if extra_lines:
        text += "\n" + "\n".join(extra_lines)
    text += postscript
    if ending:
        text += " " + ending
    if "json" in kinds:
        text = json.dumps({"answer": text.replace("\n", " ")})
    if "lowercase" in kinds:
        text = text.lower()
    if "quotation" in kinds:
        text = f'"{text}"'

    key = instruction + "|" + json.dumps([(c.id, c.kwargs) for c in criteria], sort_keys=True)
    task_id = "r" + hashlib.md5(key.encode()).hexdigest()[:10]
    return RubricTask(instruction, tuple(criteria), task_id, oracle=text)


class ProceduralRubric:
    """Endless procedural rubric tasks with 1-4 criteria, split into train/test by a hash.

    Args:
        min_criteria: Fewest criteria per task (>= 1).
        max_criteria: Most criteria per task (<= 4).
        split: ``"train"`` or ``"test"``; a task belongs to exactly one split (1 in 5 is test).
    """

    has_counterfactual = True

    def __init__(self, min_criteria: int = 1, max_criteria: int = 4, split: str = "train") -> None:
        if not 1 <= min_criteria <= max_criteria <= 4:
            raise ValueError(
                f"need 1 <= min_criteria <= max_criteria <= 4, got {min_criteria}, {max_criteria}"
            )
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.min_criteria, self.max_criteria, self.split = min_criteria, max_criteria, split

    def __len__(self) -> int:
        return 2**31  # effectively endless

    def sample(self, rng: np.random.Generator) -> RubricTask:
        while True:
            n = int(rng.integers(self.min_criteria, self.max_criteria + 1))
            task = generate_task(rng, n)
            if split_of(task.task_id) == self.split:
                return task

    def take(self, n: int, seed: int = 0) -> RubricTaskList:
        """``n`` distinct tasks, deterministic in ``seed``."""
        rng, seen, tasks = np.random.default_rng(seed), set(), []
        for _ in range(100 * n):
            task = self.sample(rng)
            if task.task_id not in seen:
                seen.add(task.task_id)
                tasks.append(task)
                if len(tasks) == n:
                    return RubricTaskList(tasks, name=f"procedural-{self.split}")
        raise ValueError(f"could only find {len(tasks)} distinct {self.split} tasks")


# --------------------------------------------------------------------------------------------------------------
# IFEval-format loader


def record_to_task(
    record: object, *, source: str, index: int, skip_unknown: bool = False
) -> RubricTask | None:
    """Map one IFEval/IFBench record (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``) to a task.

    Returns ``None`` when ``skip_unknown`` dropped every criterion of the record.
    """
    from creditgym.verifiers.rubric import known_ids

    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    missing = [k for k in ("prompt", "instruction_id_list") if k not in record]
    if missing:
        raise ValueError(f"record has keys {sorted(record)}; missing {missing} (IFEval format)")
    prompt, ids = record["prompt"], record["instruction_id_list"]
    kwargs = record.get("kwargs") or [{} for _ in ids]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("'prompt' must be a non-empty string")
    if not isinstance(ids, list) or not isinstance(kwargs, list) or len(ids) != len(kwargs):
        raise ValueError("'instruction_id_list' and 'kwargs' must be lists of the same length")
    known = set(known_ids())
    criteria = []
    for iid, kw in zip(ids, kwargs, strict=True):
        if skip_unknown and iid not in known:
            continue
        criteria.append(Criterion(iid, kw or {}))
    if not criteria:
        if skip_unknown:
            return None
        raise ValueError("'instruction_id_list' is empty")
    task_id = str(record.get("key", f"{Path(source).stem}-{index}"))
    return RubricTask(prompt, tuple(criteria), task_id, render_criteria=False, source=source)


def load_jsonl(path: str | os.PathLike[str], *, skip_unknown: bool = False) -> RubricTaskList:
    """Tasks from an IFEval/IFBench-format JSONL file. A bad line raises ``ValueError`` naming file and line.

    Args:
        path: The file.
        skip_unknown: Drop criteria whose id is not in the vocabulary (e.g. IFBench-only ids) instead of raising.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such task file: {path}")
    tasks = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                task = record_to_task(
                    json.loads(line), source=str(path), index=lineno, skip_unknown=skip_unknown
                )
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: {e}") from e
            if task is not None:
                tasks.append(task)
    return RubricTaskList(tasks, name=str(path))


def resolve_tasks(
    tasks: str | os.PathLike[str] | RubricTaskSource | Sequence[RubricTask] | None,
    *,
    min_criteria: int = 1,
    max_criteria: int = 4,
    split: str = "train",
) -> RubricTaskSource:
    """Turn the Rubric env's ``tasks`` argument into a task source (``"procedural"``, a ``.jsonl`` path, a list)."""
    if tasks is None or tasks == "procedural":
        return ProceduralRubric(min_criteria, max_criteria, split)
    if hasattr(tasks, "sample"):
        return tasks  # type: ignore[return-value]
    if isinstance(tasks, (str, os.PathLike)):
        return load_jsonl(tasks)
    return RubricTaskList(list(tasks))  # type: ignore[arg-type]
