"""Task sources shared by the envs: anything with ``__len__`` and ``sample(rng)``, and a fixed list of tasks."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import numpy as np

TEST_FRACTION_MOD = 5  # one task in five (by a hash of its text) belongs to the held-out split


def split_of(text: str) -> str:
    """``"test"`` for one text in five (by a stable hash), else ``"train"``: how every env splits its tasks."""
    h = int(hashlib.md5(text.encode()).hexdigest()[:8], 16)
    return "test" if h % TEST_FRACTION_MOD == 0 else "train"


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class TaskSource(Protocol[T_co]):
    """Where an env draws its tasks from, one per episode, with the env's seeded ``np_random``."""

    def __len__(self) -> int: ...

    def sample(self, rng: np.random.Generator) -> T_co: ...


class TaskList(Sequence[T], Generic[T]):
    """A fixed list of tasks (loaded from a file or a dataset), sampled uniformly."""

    def __init__(self, tasks: Sequence[T], name: str = "tasks") -> None:
        if not tasks:
            raise ValueError(f"{name}: no tasks")
        self._tasks = list(tasks)
        self.name = name

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, i):  # type: ignore[override]
        return self._tasks[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self._tasks)

    def sample(self, rng: np.random.Generator) -> T:
        return self._tasks[int(rng.integers(len(self._tasks)))]


def read_jsonl(path: str | os.PathLike[str], parse: Callable[[object, int], T | None]) -> list[T]:
    """``parse(record, lineno)`` of every non-blank line of a JSONL file, skipping ``None`` results.

    A missing file raises ``FileNotFoundError``; a line that is not JSON or that ``parse`` rejects with a
    ``ValueError`` raises ``ValueError`` naming the file and the line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such task file: {path}")
    out: list[T] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                item = parse(json.loads(line), lineno)
            except (json.JSONDecodeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: {e}") from e
            if item is not None:
                out.append(item)
    return out
