"""``creditgym/SingleTurn-v0``: your own rows and any registered verifier, as a token-level one-turn env.

The one-call env of single-turn tasks (as ``verifiers``' ``SingleTurnEnv(dataset, rubric)``)::

    env = SingleTurnEnv([{"prompt": "What is 2 + 3?", "answer": "5"}], verifier="math")
    env = gymnasium.make("creditgym/SingleTurn-v0", rows="data.jsonl", verifier="rubric")

Each row has a ``prompt`` and the field its verifier grades against: ``answer`` for ``math``
(`creditgym.verifiers.math.verify`), ``criteria`` for ``rubric`` (`creditgym.verifiers.rubric.grade`). A verifier
of your own is a `RowVerifier` added with `register_verifier`, and named ``"name"`` or ``"module:name"`` (the
module is imported first, as Gymnasium does for env ids).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from creditgym.envs.one_turn import OneTurnEnv
from creditgym.envs.rubric import listed_criteria
from creditgym.envs.tasks import TaskList, read_jsonl
from creditgym.envs.tokenizer import BUNDLED
from creditgym.verifiers.math import verify
from creditgym.verifiers.rubric import Criterion, grade
from creditgym.verifiers.verdict import Verdict

#: The rows ``creditgym/SingleTurn-v0`` plays when given none: a few sums for the math verifier.
EXAMPLE_ROWS = Path(__file__).parent / "assets" / "single_turn_math.jsonl"


class Grader(Protocol):
    """``grade(response, reference, **verifier_kwargs)``: the verdict on one response."""

    def __call__(self, response: str, reference: Any, /, **kwargs: Any) -> Verdict: ...


class ReadReference(Protocol):
    """A row's field -> the reference the grader takes; a ``ValueError`` says what is wrong with the field."""

    def __call__(self, value: Any, /) -> Any: ...


class ShowReference(Protocol):
    """The text a prompt adds after the row's prompt for its reference (a rubric's criteria)."""

    def __call__(self, reference: Any, /) -> str: ...


@dataclass(frozen=True)
class RowVerifier:
    """How a verifier grades a row.

    Attributes:
        field: The row field the response is graded against (``answer``, ``criteria``).
        grade: ``grade(response, reference, **verifier_kwargs) -> Verdict``; its keyword-only parameters are the
            env's ``verifier_kwargs``.
        read: Turns ``row[field]`` into the reference once, when the rows load (default: as it is); a bad field
            raises ``ValueError`` with a message that follows the field's name (``'answer' is empty``).
        show: The text the prompt adds after the row's prompt (left out of the counterfactual prompt); None adds
            nothing.
        oracle: A response the verifier passes, from the reference (``creditgym eval --agent oracle``), or None.
    """

    field: str
    grade: Grader
    read: ReadReference | None = None
    show: ShowReference | None = None
    oracle: ShowReference | None = None


_VERIFIERS: dict[str, RowVerifier] = {}


def register_verifier(name: str, verifier: RowVerifier) -> RowVerifier:
    """Make ``verifier`` known to `SingleTurnEnv` as ``name``; a name already taken raises ``ValueError``."""
    if not name.isidentifier():
        raise ValueError(f"a verifier name is an identifier (letters, digits, _), got {name!r}")
    if name in _VERIFIERS:
        raise ValueError(f"verifier {name!r} is already registered")
    _VERIFIERS[name] = verifier
    return verifier


def verifier_names() -> list[str]:
    """The registered verifiers' names, sorted."""
    return sorted(_VERIFIERS)


def get_verifier(name: str) -> RowVerifier:
    """The verifier registered as ``name``, or as ``short`` after importing ``module`` for ``module:short``.

    Raises:
        ValueError: the module does not import, or no verifier has that name (the registered ones listed).
    """
    module, sep, short = name.rpartition(":")
    if sep and module:
        try:
            importlib.import_module(module)
        except Exception as e:
            raise ValueError(
                f"verifier {name!r}: importing {module!r} failed ({type(e).__name__}: {e})"
            ) from e
    if short not in _VERIFIERS:
        raise ValueError(
            f"unknown verifier {name!r}; registered verifiers: {verifier_names()} (add one with "
            "creditgym.envs.single_turn.register_verifier, and name it 'module:name')"
        )
    return _VERIFIERS[short]


def _read_answer(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"must be a string or a number, got {type(value).__name__} {value!r:.60}")
    if not str(value).strip():
        raise ValueError("is empty")
    return str(value).strip()


def _read_criteria(value: Any) -> tuple[Criterion, ...]:
    if isinstance(value, (str, Mapping)) or not isinstance(value, Sequence) or not value:
        raise ValueError(
            "must be a non-empty list of criteria, each an id or {'id': ..., 'kwargs': {...}, 'weight': ...}, "
            f"got {value!r:.80}"
        )
    out = []
    for i, item in enumerate(value):
        try:
            if isinstance(item, Criterion):
                out.append(item)
            elif isinstance(item, str):
                out.append(Criterion(item))
            elif isinstance(item, Mapping) and "id" in item and set(item) <= {"id", "kwargs", "weight"}:
                out.append(Criterion(item["id"], item.get("kwargs") or {}, item.get("weight", 1.0)))
            else:
                raise ValueError(
                    f"expected an id or a dict with 'id' (and 'kwargs', 'weight'), got {item!r:.80}"
                )
        except ValueError as e:
            raise ValueError(f"item {i}: {e}") from e
    return tuple(out)


register_verifier(
    "math",
    RowVerifier(
        field="answer", grade=verify, read=_read_answer, oracle=lambda answer: f"\\boxed{{{answer}}}"
    ),
)
register_verifier(
    "rubric", RowVerifier(field="criteria", grade=grade, read=_read_criteria, show=listed_criteria)
)


@dataclass(frozen=True)
class SingleTurnTask:
    """One row: the prompt, what its verifier grades against, an id (the row's ``id``, else its place)."""

    prompt: str
    reference: Any
    task_id: str
    source: str = "rows"


def row_task(row: Any, verifier: RowVerifier, *, name: str, task_id: str, source: str) -> SingleTurnTask:
    """The task of one row; a ``ValueError`` names the missing or bad field (the caller names the row)."""
    need = ("prompt", verifier.field)
    if not isinstance(row, Mapping):
        raise ValueError(f"expected a dict with {list(need)}, got {type(row).__name__} {row!r:.60}")
    missing = [k for k in need if row.get(k) is None]
    if missing:
        raise ValueError(
            f"no {' or '.join(map(repr, missing))} field (verifier {name!r} needs {list(need)}); the row has "
            f"{sorted(map(str, row))}"
        )
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"'prompt' must be a non-empty string, got {prompt!r:.60}")
    value = row[verifier.field]
    try:
        reference = value if verifier.read is None else verifier.read(value)
    except ValueError as e:
        raise ValueError(f"{verifier.field!r} {e}") from e
    given_id = row.get("id")
    return SingleTurnTask(prompt, reference, task_id if given_id is None else str(given_id), source)


Rows = str | os.PathLike[str] | Iterable[Mapping[str, Any]]


def load_rows(rows: Rows, verifier: RowVerifier, *, name: str) -> TaskList[SingleTurnTask]:
    """The tasks of ``rows``: a list of dicts (or any iterable of them, a ``datasets.Dataset`` included), a
    ``.jsonl`` file, or a folder saved with ``datasets`` (``save_to_disk``; nothing is downloaded).

    Raises:
        ValueError: a bad row, named (``rows[3]``, ``data.jsonl:4``, ``folder: row 3``) with what is wrong.
        FileNotFoundError: a path that does not exist.
    """
    if isinstance(rows, (str, os.PathLike)):
        path = Path(rows)
        if path.is_dir():
            from datasets import DatasetDict, load_from_disk

            data = load_from_disk(str(path))
            if isinstance(data, DatasetDict):
                raise ValueError(
                    f"rows={str(path)!r} holds the splits {sorted(data)}: pass one split's folder, e.g. "
                    f"{str(path / next(iter(data)))!r}"
                )
            return _from_iterable(data, verifier, name=name, source=str(path), label=f"{path}: row {{i}}")
        if not path.exists():
            raise FileNotFoundError(f"rows={str(path)!r}: no such file (expected a .jsonl file or a folder)")
        tasks = read_jsonl(
            path,
            lambda row, lineno: row_task(
                row, verifier, name=name, task_id=f"{path.stem}-{lineno}", source=str(path)
            ),
        )
        return TaskList(tasks, name=str(path))
    if isinstance(rows, Mapping):
        raise ValueError(
            f"rows is a mapping with keys {sorted(map(str, rows))[:8]}; pass a list of rows (a DatasetDict: one "
            "split, e.g. ds['train'])"
        )
    if not isinstance(rows, Iterable):
        raise ValueError(
            f"rows must be a list of dicts, a .jsonl path or a dataset, got {type(rows).__name__}"
        )
    return _from_iterable(rows, verifier, name=name, source="rows", label="rows[{i}]")


def _from_iterable(
    rows: Iterable[Any], verifier: RowVerifier, *, name: str, source: str, label: str
) -> TaskList[SingleTurnTask]:
    tasks = []
    for i, row in enumerate(rows):
        try:
            tasks.append(row_task(row, verifier, name=name, task_id=f"{source}-{i}", source=source))
        except ValueError as e:
            raise ValueError(f"{label.format(i=i)}: {e}") from e
    return TaskList(tasks, name=source)


def _check_kwargs(name: str, grader: Grader, kwargs: Mapping[str, Any]) -> None:
    try:
        params = inspect.signature(grader).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    takes = sorted(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
    bad = sorted(set(kwargs) - set(takes))
    if bad:
        raise ValueError(f"verifier {name!r} takes no {bad}; its verifier_kwargs are {takes}")


class SingleTurnEnv(OneTurnEnv[SingleTurnTask]):
    """Your rows, graded by a registered verifier, as a token-level episode.

    Description:
        Each episode draws one row and renders its ``prompt`` with the tokenizer's chat template as one user turn
        (for the ``rubric`` verifier followed, unless ``show_criteria=False``, by the criteria as a numbered list,
        as in ``creditgym/Rubric-v0``). The policy writes the response one token at a time; at the end-of-turn
        token (or the budget) the verifier grades it once against the row's reference (its ``answer``, its
        ``criteria``).

        **Counterfactual prompt** (for CoRT): the row's prompt without what the verifier showed after it; with
        nothing shown (``math``) it equals the prompt and :attr:`has_counterfactual` is False.

    Action Space:
        ``Discrete(V)`` with V = ``len(tokenizer)`` (a 1-D array of ids steps a chunk, see ``step_chunk``).

    Observation Space:
        ``Dict(tokens=Sequence(Discrete(V)), sources=Sequence(Discrete(3)))``: the whole context so far.

    Rewards:
        0 on every step except the last policy token, which gets the verdict's score (in [0, 1]);
        ``info["verdict"]`` holds the whole :class:`~creditgym.verifiers.Verdict`.

    Episode End:
        ``terminated`` at the end-of-turn token; ``truncated`` when ``max_new_tokens`` is reached (the truncated
        response is still graded) or when the verifier fails (``info["infra_error"]`` set, reward 0, not to be
        trained on).

    Args:
        rows: A list of dicts (or any iterable of them: a ``datasets.Dataset``), a ``.jsonl`` path, or a folder
            saved with ``datasets``; each row has a ``prompt`` and the verifier's field (and optionally an
            ``id``). The rows have no split: name a held-out set with ``--eval-env-kw rows=...``.
        verifier: A registered verifier's name (``math``, ``rubric``, ``module:name``) or a `RowVerifier`.
        tokenizer: A Hugging Face tokenizer with a chat template, or a name/path (default: the bundled one).
        verifier_kwargs: The verifier's keyword arguments, e.g. ``{"timeout": 5.0}``, ``{"mode":
            "all_or_nothing"}`` for ``rubric``.
        show_criteria: Whether the prompt shows what the verifier shows (the rubric's criteria).
        max_new_tokens: Token budget of the response.
        system_prompt: Optional system turn (kept in the counterfactual prompt too).
        stop_token_ids: Tokens that end the response (default: EOS and known end-of-turn markers).
    """

    task_type = SingleTurnTask
    verifier_name = "verifier"

    def __init__(
        self,
        rows: Rows,
        verifier: str | RowVerifier,
        *,
        tokenizer: Any = BUNDLED,
        verifier_kwargs: Mapping[str, Any] | None = None,
        show_criteria: bool = True,
        max_new_tokens: int = 256,
        system_prompt: str | None = None,
        stop_token_ids: Sequence[int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if isinstance(verifier, RowVerifier):
            name, spec = getattr(verifier.grade, "__name__", type(verifier.grade).__name__), verifier
        elif isinstance(verifier, str):
            name, spec = verifier, get_verifier(verifier)
        else:
            raise ValueError(
                f"verifier must be a registered name or a RowVerifier, got {type(verifier).__name__}"
            )
        self.verifier_kwargs = dict(verifier_kwargs or {})
        _check_kwargs(name, spec.grade, self.verifier_kwargs)
        super().__init__(
            tokenizer,
            max_new_tokens=max_new_tokens,
            system_prompt=system_prompt,
            stop_token_ids=stop_token_ids,
            render_mode=render_mode,
        )
        self.verifier = spec
        self.verifier_name = f"{name} verifier"  # type: ignore[misc]  (names this verifier in an infra error)
        self.show_criteria = bool(show_criteria)
        self.tasks = load_rows(rows, spec, name=name)

    @property
    def has_counterfactual(self) -> bool:
        """Whether the prompt shows something the counterfactual prompt leaves out."""
        return self.show_criteria and self.verifier.show is not None

    def prompt_text(self, task: SingleTurnTask, *, counterfactual: bool = False) -> str:
        """The row's prompt and, unless ``counterfactual``, what the verifier shows of its reference."""
        if counterfactual or not self.has_counterfactual:
            return task.prompt
        return task.prompt + self.verifier.show(task.reference)  # type: ignore[misc]

    def oracle_response(self) -> str:
        """A response the verifier passes on the current row (the ``math`` verifier's ``\\boxed{answer}``)."""
        if self.verifier.oracle is None:
            raise ValueError(f"the {self.verifier_name} has no oracle response (a RowVerifier's oracle)")
        return self.verifier.oracle(self.current_task.reference)

    def reset_info(self, task: SingleTurnTask) -> dict[str, Any]:
        return {"task_id": task.task_id, "prompt": task.prompt}

    def grade(self, response: str) -> tuple[Verdict, dict[str, Any]]:
        task = self.current_task
        verdict = self.verifier.grade(response, task.reference, **self.verifier_kwargs)
        extra: dict[str, Any] = {"task_id": task.task_id}
        if "criteria" in verdict.details:  # a rubric's per-criterion results, as Rubric-v0 reports them
            extra["criteria"] = list(verdict.details["criteria"])
        return verdict, extra
