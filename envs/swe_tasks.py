"""SWE task sources: swebench's local task-repo format, the bundled tasks, and official-schema instance files.

The grader's task record (:class:`~creditgym.verifiers.swe.tasks.SWETask`) lives in ``verifiers``; finding and
reading tasks is the env's side, like the Math and Rubric task sources. Nothing here touches Docker or imports
``swebench.harness`` (slow, and it calls ``load_dotenv()``), so listing tasks is cheap and works without an
engine. ``swebench.task.repo`` is light and reads the task folders.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from creditgym.verifiers.swe.images import REQUIRED_FILES, content_hash, local_image_tag, official_image_name
from creditgym.verifiers.swe.tasks import SWETask, TaskFormatError, patch_files

__all__ = [
    "BUNDLED_TASKS",
    "REQUIRED_FILES",
    "SWETask",
    "TaskFormatError",
    "load_task_dir",
    "load_tasks",
    "read_instances",
    "scan_tasks",
    "task_from_instance",
]

#: The bundled task repo (``sweb.yaml`` + ``tasks/<id>/``).
BUNDLED_TASKS: Path = Path(__file__).resolve().parent / "assets" / "swe_tasks"

TASK_FILE = "task.yaml"
TESTS_FILE = "tests.json"
_REQUIRED_KEYS: tuple[str, ...] = ("instance_id", "repo", "base_commit", "log_parser")
_OFFICIAL_KEYS: tuple[str, ...] = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
_EVAL_TYPES = ("pass_and_fail", "fail_only")


def _test_list(value: Any, where: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise TaskFormatError(f"{where}: {key} is a string but not a JSON list ({e})") from e
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise TaskFormatError(f"{where}: {key} must be a list of test names, got {type(value).__name__}")
    return tuple(value)


def _eval_type(value: Any, where: str) -> str:
    value = str(getattr(value, "value", value))
    if value not in _EVAL_TYPES:
        raise TaskFormatError(f"{where}: eval_type must be one of {_EVAL_TYPES}, got {value!r}")
    return value


def load_task_dir(task_dir: str | Path) -> SWETask:
    """One ``tasks/<id>/`` folder. Raises ``TaskFormatError`` naming the missing file or field."""
    from swebench.task.repo import load_task

    task_dir = Path(task_dir)
    missing = [name for name in REQUIRED_FILES if not (task_dir / name).is_file()]
    if missing:
        raise TaskFormatError(
            f"task folder {task_dir} is missing {', '.join(missing)} "
            f"(a task folder holds {', '.join(REQUIRED_FILES)})"
        )
    try:
        inst = load_task(task_dir)
    except (ValueError, TypeError, AttributeError) as e:  # yaml.YAMLError and JSONDecodeError are ValueErrors
        raise TaskFormatError(f"{task_dir}: {TASK_FILE} or {TESTS_FILE} cannot be read: {e}") from e
    where = str(task_dir / TASK_FILE)
    if not isinstance(inst, dict):
        raise TaskFormatError(f"{where} must be a mapping")
    for key in _REQUIRED_KEYS:
        if not inst.get(key):
            raise TaskFormatError(f"{where} has no {key!r}")
    if inst["instance_id"] != task_dir.name:
        raise TaskFormatError(
            f"{where}: instance_id {inst['instance_id']!r} differs from its folder name {task_dir.name!r}"
        )
    tests_where = str(task_dir / TESTS_FILE)
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if key not in inst:
            raise TaskFormatError(f"{tests_where} has no {key!r}")
    return SWETask(
        instance_id=inst["instance_id"],
        repo=inst["repo"],
        base_commit=str(inst["base_commit"]),
        problem_statement=inst["problem_statement"],
        gold_patch=inst["patch"],
        test_patch=inst["test_patch"],
        fail_to_pass=_test_list(inst["FAIL_TO_PASS"], tests_where, "FAIL_TO_PASS"),
        pass_to_pass=_test_list(inst["PASS_TO_PASS"], tests_where, "PASS_TO_PASS"),
        image=local_image_tag(inst["instance_id"], content_hash(task_dir)),
        eval_script=inst["eval_script"],
        log_parser=inst["log_parser"],
        eval_type=_eval_type(inst.get("eval_type", "pass_and_fail"), where),
        version=str(inst.get("version", "")),
        test_files=patch_files(inst["test_patch"]),
        build_dir=task_dir,
        workdir=str(inst.get("workdir", "/testbed")),
    )


def task_from_instance(inst: Mapping[str, Any], where: str = "instance") -> SWETask:
    """An official-schema instance (SWE-bench, SWE-bench Verified, SWE-Gym; swebench >= 5 columns).

    ``eval_script`` is required (the 5.x datasets carry it); ``image`` defaults to swebench's Docker Hub name,
    ``log_parser`` to swebench's parser for the repo, ``eval_type`` to ``"pass_and_fail"``.
    """
    iid = inst.get("instance_id") or "?"
    where = f"{where} {iid}"
    for key in _OFFICIAL_KEYS:
        if key not in inst or inst[key] is None:
            raise TaskFormatError(f"{where} has no {key!r} field")
    if not inst.get("eval_script"):
        raise TaskFormatError(
            f"{where} has no 'eval_script' field: swebench >= 5 instances carry image, eval_script, log_parser "
            "and eval_type; export the dataset with swebench 5.x, or write the task in the task-repo format"
        )
    log_parser = inst.get("log_parser") or _default_parser(str(inst["repo"]), where)
    return SWETask(
        instance_id=str(inst["instance_id"]),
        repo=str(inst["repo"]),
        base_commit=str(inst["base_commit"]),
        problem_statement=str(inst["problem_statement"]),
        gold_patch=str(inst["patch"]),
        test_patch=str(inst["test_patch"]),
        fail_to_pass=_test_list(inst["FAIL_TO_PASS"], where, "FAIL_TO_PASS"),
        pass_to_pass=_test_list(inst["PASS_TO_PASS"], where, "PASS_TO_PASS"),
        image=str(inst.get("image") or official_image_name(str(inst["instance_id"]))),
        eval_script=str(inst["eval_script"]),
        log_parser=str(log_parser),
        eval_type=_eval_type(inst.get("eval_type") or "pass_and_fail", where),
        version=str(inst.get("version", "")),
        test_files=patch_files(str(inst["test_patch"])),
        build_dir=None,
        workdir=str(inst.get("workdir") or "/testbed"),
    )


def _default_parser(repo: str, where: str) -> str:
    from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

    parser = MAP_REPO_TO_PARSER_PY.get(repo)
    if parser is None:
        raise TaskFormatError(f"{where} has no 'log_parser' and swebench knows no parser for {repo!r}")
    return parser.__name__


def read_instances(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``.json`` (a list, or a dict keyed by id), ``.jsonl`` or ``.parquet`` file."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise TaskFormatError(f"instance file {path} does not exist")
    try:
        if suffix == ".json":
            data = json.loads(path.read_text())
            rows = list(data.values()) if isinstance(data, dict) else data
        elif suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        else:
            rows = _read_parquet(path)
    except json.JSONDecodeError as e:
        raise TaskFormatError(f"{path} is not valid {suffix[1:].upper()}: {e}") from e
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TaskFormatError(f"{path} must hold a list of instance objects")
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # swebench's loader goes through `datasets`, which needs pyarrow anyway
        from swebench.harness.utils import load_swebench_dataset

        return [dict(row) for row in load_swebench_dataset(str(path))]
    return pq.read_table(path).to_pylist()


def _task_dirs(root: Path) -> list[Path]:
    if (root / TASK_FILE).is_file():  # a single task folder
        return [root]
    tasks = root / "tasks" if (root / "tasks").is_dir() else root
    return sorted(d for d in tasks.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))


def scan_tasks(
    source: str | Path | Sequence[SWETask] = "bundled", instance_ids: Sequence[str] | None = None
) -> tuple[list[SWETask], list[TaskFormatError]]:
    """Like :func:`load_tasks`, but a broken task is reported in the second list and the others still load."""
    if not isinstance(source, (str, Path)):
        tasks, errors = list(source), []
    else:
        path = BUNDLED_TASKS if str(source) == "bundled" else Path(source).expanduser()
        tasks, errors = [], []
        if path.suffix.lower() in (".json", ".jsonl", ".parquet"):
            for i, row in enumerate(read_instances(path)):
                try:
                    tasks.append(task_from_instance(row, where=f"{path} row {i}:"))
                except TaskFormatError as e:
                    errors.append(e)
        elif path.is_dir():
            for task_dir in _task_dirs(path):
                try:
                    tasks.append(load_task_dir(task_dir))
                except TaskFormatError as e:
                    errors.append(e)
        else:
            raise TaskFormatError(
                f"task source {str(source)!r} is neither 'bundled', a task-repo folder (holding tasks/<id>/), "
                "nor a .json/.jsonl/.parquet file of instances"
            )
    if instance_ids is not None:
        by_id = {t.instance_id: t for t in tasks}
        unknown = sorted(set(instance_ids) - set(by_id))
        if unknown:
            raise TaskFormatError(f"unknown instance ids {unknown}; known: {sorted(by_id)}")
        tasks = [by_id[i] for i in instance_ids]
    return tasks, errors


def load_tasks(
    source: str | Path | Sequence[SWETask] = "bundled", instance_ids: Sequence[str] | None = None
) -> list[SWETask]:
    """Load SWE tasks.

    Args:
        source: ``"bundled"``; a task-repo folder (holding ``tasks/<id>/``), a ``tasks/`` folder or one task
            folder; a ``.json``/``.jsonl``/``.parquet`` file of official-schema instances; or tasks already
            loaded (returned as a list).
        instance_ids: Keep only these, in this order (unknown ids raise).

    Raises:
        TaskFormatError: A task is malformed; the message names the file or field (every broken task is
            listed). Use :func:`scan_tasks` to load the good ones anyway.
    """
    tasks, errors = scan_tasks(source, instance_ids)
    if errors:
        raise TaskFormatError("\n".join(str(e) for e in errors))
    return tasks
