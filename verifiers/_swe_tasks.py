"""SWE task sources: swebench's local task-repo format and official-schema instance files.

Nothing here touches Docker or imports ``swebench.harness`` (slow, and it calls ``load_dotenv()``), so listing
tasks is cheap and works without an engine. ``swebench.task.repo`` is light and reads the task folders.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The bundled task repo (``sweb.yaml`` + ``tasks/<id>/``); ``envs/`` sits next to ``verifiers/`` both in the
#: source tree and in the installed ``creditgym`` package.
BUNDLED_TASKS: Path = Path(__file__).resolve().parent.parent / "envs" / "assets" / "swe_tasks"

#: Base image that bundled Dockerfiles build ``FROM`` (their ``ARG BASE_IMAGE``).
BASE_IMAGE_ENV = "CREDITGYM_BASE_IMAGE"
DEFAULT_BASE_IMAGE = "creditgym-base:bookworm"

TASK_FILE = "task.yaml"
TESTS_FILE = "tests.json"
#: Every file of ``tasks/<id>/`` (``hints.md`` and ``test_assets/`` are optional in swebench and unused here).
REQUIRED_FILES: tuple[str, ...] = (
    TASK_FILE,
    TESTS_FILE,
    "gold.patch",
    "test.patch",
    "eval.sh",
    "Dockerfile",
    "problem_statement.md",
)
_METADATA_FILES = frozenset({*REQUIRED_FILES, "hints.md"}) - {"Dockerfile"}
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
_DIFF_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$", re.M)


class TaskFormatError(ValueError):
    """A task folder or instance record that cannot be loaded; the message names the file or field at fault."""


@dataclass(frozen=True)
class SWETask:
    """One SWE-bench-style task, from a local task folder or an official-schema instance.

    Attributes:
        instance_id: ``owner__repo-N``.
        repo: ``owner/repo``.
        base_commit: The commit ``/testbed`` is checked out at in the image.
        problem_statement: The issue text the agent sees.
        gold_patch: The reference fix (a ``git diff``).
        test_patch: The tests that grade it; applied after the agent's patch, on reset test files.
        fail_to_pass: Tests that must go from failing to passing.
        pass_to_pass: Tests that must keep passing.
        image: Local tasks: ``sweb.eval.x86_64.<id>:<hash>``, a tag derived from the hash of the folder's build
            inputs, so an edited task gets a fresh image. Official tasks: the instance's ``image`` field, or
            swebench's Docker Hub name for the instance.
        eval_script: The script that prints the test output between swebench's start/end markers.
        log_parser: A key of ``swebench.harness.log_parsers.PARSER_REGISTRY``.
        eval_type: ``"pass_and_fail"`` or ``"fail_only"``.
        version: The repo version the instance belongs to.
        test_files: Every path the test patch touches: reset to ``HEAD`` (or deleted, when the patch creates
            them) before the test patch is applied, so a patch that edits the tests cannot grade itself.
        build_dir: The folder to ``docker build`` (local tasks); ``None`` for official images.
        workdir: The repo inside the container.
    """

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    gold_patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    image: str
    eval_script: str
    log_parser: str
    eval_type: str
    version: str
    test_files: tuple[str, ...]
    build_dir: Path | None
    workdir: str = "/testbed"

    @property
    def is_local(self) -> bool:
        """Whether the image is built from a task folder (rather than pulled)."""
        return self.build_dir is not None

    def instance(self) -> dict[str, Any]:
        """The swebench instance dict (``make_test_spec`` reads it)."""
        return {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "version": self.version,
            "patch": self.gold_patch,
            "test_patch": self.test_patch,
            "problem_statement": self.problem_statement,
            "FAIL_TO_PASS": list(self.fail_to_pass),
            "PASS_TO_PASS": list(self.pass_to_pass),
            "image": self.image,
            "eval_script": self.eval_script,
            "log_parser": self.log_parser,
            "eval_type": self.eval_type,
        }


def patch_files(diff: str) -> tuple[str, ...]:
    """The paths a ``git diff`` touches (both sides of a rename), in order of appearance."""
    seen: dict[str, None] = {}
    for match in _DIFF_HEADER.finditer(diff):
        for path in match.groups():
            seen.setdefault(path.strip().strip('"'), None)
    return tuple(seen)


def base_image() -> str:
    return os.environ.get(BASE_IMAGE_ENV, DEFAULT_BASE_IMAGE)


def build_inputs(task_dir: Path) -> list[Path]:
    """Files of a task folder that can reach the image: the Dockerfile and everything but task metadata.

    Metadata files (``task.yaml``, patches, ``eval.sh``, ...) count only when the Dockerfile names them.
    """
    dockerfile = (task_dir / "Dockerfile").read_text()
    files = []
    for path in sorted(task_dir.rglob("*")):
        rel = path.relative_to(task_dir)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        if len(rel.parts) == 1 and rel.name in _METADATA_FILES and rel.name not in dockerfile:
            continue
        files.append(path)
    return files


def content_hash(task_dir: Path) -> str:
    """sha256 over the build inputs (path and bytes) and the base image name."""
    digest = hashlib.sha256()
    if "BASE_IMAGE" in (task_dir / "Dockerfile").read_text():
        digest.update(f"BASE_IMAGE={base_image()}\0".encode())
    for path in build_inputs(task_dir):
        digest.update(path.relative_to(task_dir).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def local_image_tag(instance_id: str, digest: str) -> str:
    return f"sweb.eval.x86_64.{instance_id.lower()}:{digest[:12]}"


def official_image_name(instance_id: str, namespace: str = "swebench") -> str:
    """swebench's published name (``ImageSpec.name`` with a namespace)."""
    key = f"sweb.eval.x86_64.{instance_id}:latest"
    return f"{namespace}/{key}".replace("__", "_1776_").lower()


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
