"""Rubric task sources: a procedural generator of instructions with 1-4 criteria (4-8 with ``preset="hard"``),
and an IFEval JSONL loader.

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
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from creditgym.envs.tasks import TaskList, TaskSource, read_jsonl, split_of
from creditgym.verifiers.rubric import Criterion
from creditgym.verifiers.rubric.local import FIRST_SENTENCE_KEYWORD


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


_FILLERS = ("We share it with our friends", "Many people talk about it", "It makes the day better")


@dataclass(frozen=True)
class RubricPreset:
    """A family of procedural tasks: how many criteria, of which kinds, and the response budget it is played with.

    Attributes:
        min_criteria: Fewest criteria per task (the env's ``min_criteria`` default).
        max_criteria: Most criteria per task (and the cap on ``max_criteria``).
        kinds: Criterion kinds drawn at random (see ``generate_task``).
        local_kinds: Localized kinds, whose evidence is one place in the response (its end, a P.S., its first
            sentence, its bullets, its title); each task draws ``min_local`` or more of them first.
        min_local: Fewest localized criteria per task.
        conflicts: Pairs of kinds that never share a task.
        min_words: ``[low, high)`` of N in "at least N words".
        oracle_words: Fewest words of the oracle response (filler sentences are added up to it).
        max_new_tokens: The env's default response budget for these tasks.
    """

    min_criteria: int
    max_criteria: int
    kinds: tuple[str, ...]
    local_kinds: tuple[str, ...] = ()
    min_local: int = 0
    conflicts: frozenset[frozenset[str]] = frozenset(_CONFLICTS)
    min_words: tuple[int, int] = (5, 16)
    oracle_words: int = 0
    max_new_tokens: int = 256


PRESETS: dict[str, RubricPreset] = {
    # 1-4 criteria of 16 kinds; what the bundled model and the credit study were built on.
    "default": RubricPreset(1, 4, _KINDS),
    # 4-8 criteria, 2-5 of them localized; longer answers (at least 20-40 words when asked), 192-token budget.
    "hard": RubricPreset(
        4,
        8,
        kinds=tuple(
            k for k in _KINDS if k not in ("json", "words_less", "ending", "postscript", "bullets", "title")
        ),
        local_kinds=("ending", "postscript", "first_keyword", "bullets", "title"),
        min_local=2,
        conflicts=frozenset(_CONFLICTS - {frozenset(("ending", "postscript"))}),
        min_words=(20, 41),
        oracle_words=48,
        max_new_tokens=192,
    ),
}


def get_preset(preset: str | RubricPreset) -> RubricPreset:
    """A preset by name (see :data:`PRESETS`), or the given one."""
    if isinstance(preset, RubricPreset):
        return preset
    if preset not in PRESETS:
        raise ValueError(f"unknown rubric preset {preset!r}; known presets: {sorted(PRESETS)}")
    return PRESETS[preset]


def _choose_kinds(rng: np.random.Generator, n: int, preset: RubricPreset) -> list[str]:
    kinds: list[str] = []

    def take(candidates: Sequence[str], upto: int) -> None:
        for kind in rng.permutation(candidates):
            if len(kinds) == upto:
                break
            if all(frozenset((kind, k)) not in preset.conflicts for k in kinds):
                kinds.append(str(kind))

    if preset.local_kinds:  # no draw at all otherwise: the default preset's tasks stay what they were
        take(
            preset.local_kinds,
            int(rng.integers(min(preset.min_local, n), min(n, len(preset.local_kinds)) + 1)),
        )
    take(preset.kinds, n)
    return kinds


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def generate_task(
    rng: np.random.Generator, n_criteria: int, preset: str | RubricPreset = "default"
) -> RubricTask:
    """One procedural task with ``n_criteria`` compatible criteria and an oracle response that passes them all."""
    spec = get_preset(preset)
    topic = _pick(rng, list(_TOPICS))
    words = _TOPICS[topic]
    instruction = _pick(rng, _TEMPLATES).format(topic=topic)
    kinds = _choose_kinds(rng, n_criteria, spec)

    criteria: list[Criterion] = []
    keyword, word2 = words[0], words[1 + int(rng.integers(len(words) - 1))]
    repeat, min_words = 1, spec.oracle_words
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
            n = int(rng.integers(*spec.min_words))
            min_words = max(min_words, n)
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
        elif kind == "first_keyword":
            first = _pick(rng, words[1:])
            body[0] += f" and the {first}"
            criteria.append(Criterion(FIRST_SENTENCE_KEYWORD, {"keyword": first}))
    body += [f"The {keyword} is here"] * max(0, repeat - 2)
    for filler in _FILLERS * 4:  # the default preset's body is long enough already: nothing is added there
        if len(re.findall(r"\w+", ". ".join(body))) >= min_words:
            break
        body.append(filler)
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
    """Endless procedural rubric tasks of one preset, split into train/test by a hash.

    Args:
        min_criteria: Fewest criteria per task (>= 1; default: the preset's, 1 or 4).
        max_criteria: Most criteria per task (at most the preset's most, 4 or 8; default: that).
        split: ``"train"`` or ``"test"``; a task belongs to exactly one split (1 in 5 is test).
        preset: ``"default"`` (1-4 criteria) or ``"hard"`` (4-8 criteria, 2-5 of them localized); see
            :data:`PRESETS`.
    """

    has_counterfactual = True

    def __init__(
        self,
        min_criteria: int | None = None,
        max_criteria: int | None = None,
        split: str = "train",
        preset: str | RubricPreset = "default",
    ) -> None:
        self.preset = get_preset(preset)
        low = self.preset.min_criteria if min_criteria is None else min_criteria
        high = self.preset.max_criteria if max_criteria is None else max_criteria
        if not 1 <= low <= high <= self.preset.max_criteria:
            raise ValueError(
                f"need 1 <= min_criteria <= max_criteria <= {self.preset.max_criteria}, got {low}, {high}"
            )
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        self.min_criteria, self.max_criteria, self.split = low, high, split

    def __len__(self) -> int:
        return 2**31  # effectively endless

    def sample(self, rng: np.random.Generator) -> RubricTask:
        while True:
            n = int(rng.integers(self.min_criteria, self.max_criteria + 1))
            task = generate_task(rng, n, self.preset)
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
    tasks = read_jsonl(
        path,
        lambda record, lineno: record_to_task(
            record, source=str(path), index=lineno, skip_unknown=skip_unknown
        ),
    )
    return RubricTaskList(tasks, name=str(path))


def resolve_tasks(
    tasks: str | os.PathLike[str] | RubricTaskSource | Sequence[RubricTask] | None,
    *,
    min_criteria: int | None = None,
    max_criteria: int | None = None,
    split: str = "train",
    preset: str = "default",
) -> RubricTaskSource:
    """Turn the Rubric env's ``tasks`` argument into a task source (``"procedural"``, a ``.jsonl`` path, a list).

    ``preset``, ``min_criteria`` and ``max_criteria`` shape the procedural tasks only; given with other tasks they
    raise ``ValueError`` rather than being ignored.
    """
    if tasks is None or tasks == "procedural":
        return ProceduralRubric(min_criteria, max_criteria, split, preset)
    if preset != "default" or min_criteria is not None or max_criteria is not None:
        raise ValueError(
            f"preset={preset!r}, min_criteria={min_criteria!r} and max_criteria={max_criteria!r} apply to "
            f"procedural tasks only, not to tasks={tasks!r:.80}"
        )
    if hasattr(tasks, "sample"):
        return tasks  # type: ignore[return-value]
    if isinstance(tasks, (str, os.PathLike)):
        return load_jsonl(tasks)
    return RubricTaskList(list(tasks))  # type: ignore[arg-type]
