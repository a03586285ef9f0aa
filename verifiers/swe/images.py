"""Docker images of SWE tasks: build, pull, check and clean them.

A local task's image (a folder ``tasks/<id>/`` in swebench's task-repo format) is built once with a plain
``docker build`` (the classic builder; no buildx) and tagged with the hash of the folder's build inputs
(:func:`content_hash`), so an edited task gets a new image and an unchanged one is never rebuilt. Official
images are pulled when a registry answers; otherwise the error names the missing image. Every image built here
carries ``LABEL`` and :data:`TASK_LABEL` (:func:`clean_images` removes them).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from creditgym.verifiers.swe.engine import default_client, engine_error, import_docker, is_engine_fault
from creditgym.verifiers.swe.sandbox import LABEL, SandboxError
from creditgym.verifiers.swe.tasks import SWETask

#: Image label naming the task an image was built for (``clean_images`` removes only images carrying it).
TASK_LABEL = "org.creditgym.swe.task"
HASH_LABEL = "org.creditgym.swe.content-hash"
BUILD_LOG_LINES = 40
#: Base image that bundled Dockerfiles build ``FROM`` (their ``ARG BASE_IMAGE``).
BASE_IMAGE_ENV = "CREDITGYM_BASE_IMAGE"
DEFAULT_BASE_IMAGE = "creditgym-base:bookworm"
#: Every file of a task folder ``tasks/<id>/`` (``hints.md`` and ``test_assets/`` are optional in swebench and
#: unused here). The Dockerfile builds the image; the others are metadata.
REQUIRED_FILES: tuple[str, ...] = (
    "task.yaml",
    "tests.json",
    "gold.patch",
    "test.patch",
    "eval.sh",
    "Dockerfile",
    "problem_statement.md",
)
_METADATA_FILES = frozenset({*REQUIRED_FILES, "hints.md"}) - {"Dockerfile"}
_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_LOCKS_GUARD = threading.Lock()


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


def _client(client: Any) -> Any:
    return client if client is not None else default_client()


def _engine_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, an engine that does not answer raised as ``SandboxError("engine")``."""
    try:
        return fn(*args, **kwargs)
    except SandboxError:
        raise
    except Exception as exc:
        if is_engine_fault(exc):
            raise engine_error(exc) from exc
        raise


def _image_present(client: Any, image: str) -> bool:
    docker = import_docker()
    try:
        _engine_call(client.images.get, image)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build_lock(tag: str) -> threading.Lock:
    with _BUILD_LOCKS_GUARD:
        return _BUILD_LOCKS.setdefault(tag, threading.Lock())


def _log_tail(build_log: Iterable[Any], lines: int = BUILD_LOG_LINES) -> str:
    text = []
    for chunk in build_log:
        if isinstance(chunk, dict):
            text.append(str(chunk.get("stream") or chunk.get("error") or chunk.get("status") or ""))
        else:
            text.append(str(chunk))
    return "\n".join("".join(text).rstrip().splitlines()[-lines:])


def _build(task: SWETask, client: Any) -> None:
    docker = import_docker()
    assert task.build_dir is not None
    dockerfile = (task.build_dir / "Dockerfile").read_text()
    buildargs = {"BASE_IMAGE": base_image()} if "ARG BASE_IMAGE" in dockerfile else None
    where = f"building image {task.image} for {task.instance_id} from {task.build_dir / 'Dockerfile'} failed"
    try:
        client.images.build(
            path=str(task.build_dir),
            tag=task.image,
            labels={LABEL: "1", TASK_LABEL: task.instance_id, HASH_LABEL: content_hash(task.build_dir)},
            buildargs=buildargs,
            rm=True,
            forcerm=True,
            pull=False,
        )
    except docker.errors.BuildError as exc:
        raise SandboxError(
            f"{where}: {exc.msg}\n--- last lines of the build log ---\n{_log_tail(exc.build_log)}",
            kind="build",
        ) from exc
    except docker.errors.APIError as exc:  # e.g. a Dockerfile the engine cannot parse
        raise SandboxError(f"{where}: {exc.explanation or exc}", kind="build") from exc
    except Exception as exc:
        if is_engine_fault(exc):
            raise engine_error(exc) from exc
        raise


def _pull(image: str, client: Any, timeout: float) -> str | None:
    """Pull ``image``; the reason it failed, or None. Runs in a thread so a silent network cannot hang us."""
    outcome: list[str | None] = []

    def work() -> None:
        try:
            client.images.pull(image)
            outcome.append(None)
        except Exception as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=work, name="creditgym-pull", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"the pull did not finish within {timeout:g} s"
    return outcome[0]


def ensure_image(task: SWETask, client: Any = None, *, build: bool = True, pull_timeout: float = 60.0) -> str:
    """Make the task's image present locally and return its tag.

    Local tasks are built once (plain ``docker build``); official images are pulled.

    Args:
        task: The task.
        client: A ``docker.DockerClient``; default: a shared client from the environment.
        build: False only checks: a missing image raises instead of being built or pulled.
        pull_timeout: Seconds a pull may take before it counts as failed (no registry reachable).

    Raises:
        SandboxError: ``"engine"`` (no engine), ``"build"`` (the build failed; the message ends with the last
            lines of the build log), ``"image_missing"`` (an official image that could not be pulled, or
            ``build=False`` and the image is absent; the message names the image).
    """
    client = _client(client)
    if _image_present(client, task.image):
        return task.image
    if not build:
        raise SandboxError(
            f"image {task.image} for {task.instance_id} is not present locally; "
            f"run `creditgym images build` to {'build' if task.is_local else 'pull'} it",
            kind="image_missing",
        )
    if task.is_local:
        with _build_lock(task.image):
            if not _image_present(client, task.image):
                _build(task, client)
        return task.image
    reason = _pull(task.image, client, pull_timeout)
    if reason is not None:
        raise SandboxError(
            f"image {task.image} for {task.instance_id} is not present locally and could not be pulled "
            f"({reason}); on a machine without a registry, `docker load` it first",
            kind="image_missing",
        )
    return task.image


def check_images(tasks: Iterable[SWETask], client: Any = None) -> dict[str, str]:
    """``instance_id -> "present" | "missing"``, without building or pulling anything.

    Raises:
        SandboxError: ``"engine"`` when no engine answers.
    """
    client = _client(client)
    return {t.instance_id: "present" if _image_present(client, t.image) else "missing" for t in tasks}


def clean_images(
    tasks: Iterable[SWETask] | None = None, client: Any = None, *, stale_only: bool = False
) -> list[str]:
    """Remove task images built here (those carrying :data:`TASK_LABEL`), and dead owners' sandbox containers.

    Args:
        tasks: With ``stale_only``, the current tasks: their images are kept.
        client: A ``docker.DockerClient``; default: a shared client from the environment.
        stale_only: Remove only tags that are no current task's image (built from an older version of a task,
            or for a task no longer in ``tasks``).

    Returns:
        The tags (or ids) removed.
    """
    from creditgym.verifiers.swe.lifecycle import cleanup

    docker = import_docker()
    client = _client(client)
    keep = {t.image for t in tasks or ()} if stale_only else set()
    cleanup(client, only_dead_owners=True)
    images = _engine_call(client.images.list, filters={"label": [f"{LABEL}=1", TASK_LABEL]})
    removed = []
    for image in images:
        refs = [t for t in image.tags if t not in keep] if image.tags else [image.id]
        for ref in refs:  # removing one of several tags only untags
            try:
                client.images.remove(ref)
            except docker.errors.NotFound:
                continue
            removed.append(ref)
    return removed
