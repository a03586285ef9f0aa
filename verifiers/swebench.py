"""Grade a patch against a SWE-bench-style task with swebench's harness, in a fresh Docker sandbox.

Task sources (:func:`load_tasks`): the bundled task repo (:data:`BUNDLED_TASKS`), any folder in swebench's local
task-repo format (``tasks/<id>/{task.yaml, tests.json, gold.patch, test.patch, eval.sh, Dockerfile,
problem_statement.md}``), or a ``.json``/``.jsonl``/``.parquet`` file of official-schema instances (SWE-bench,
SWE-bench Verified, SWE-Gym; swebench >= 5 columns).

Images (:func:`ensure_image`): a local task's image is built once with a plain ``docker build`` (the classic
builder; no buildx) and tagged with the hash of the folder's build inputs, so an edited task gets a new image
and an unchanged one is never rebuilt. Official images are pulled when a registry answers; otherwise the error
names the missing image. Every image built here carries ``LABEL`` and :data:`TASK_LABEL`
(``creditgym images clean`` removes them).

Grading (:func:`grade`), in a fresh network-less container from the task image:

1. apply the patch: ``git apply -v``, then ``git apply -v --3way``, then ``patch --fuzz=5`` (swebench's
   chain), from a clean tree each time; a binary diff is refused before anything runs;
2. reset every file the test patch touches to ``HEAD`` (``git checkout HEAD -- <file>``, or delete it when the
   test patch creates it), never the whole tree, so edits to the tests cannot grade themselves;
3. apply the test patch and run the eval script (swebench's ``make_test_spec``, which records the test
   command's exit code);
4. parse the log with the task's swebench parser and grade FAIL_TO_PASS / PASS_TO_PASS with
   ``get_logs_eval``, ``get_eval_tests_report`` and ``get_resolution_status``. For unittest logs
   (``parse_log_django``) a test that unittest's own summary lists as failed stays failed, whatever result lines
   the patched code prints (a reward hack the parser alone accepts).

``swebench.harness`` is imported inside the functions: it takes about a second and calls ``load_dotenv()``.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from creditgym.verifiers._swe_tasks import (
    BUNDLED_TASKS,
    REQUIRED_FILES,
    SWETask,
    TaskFormatError,
    base_image,
    content_hash,
    load_task_dir,
    load_tasks,
    official_image_name,
    patch_files,
    scan_tasks,
    task_from_instance,
)
from creditgym.verifiers.sandbox import LABEL, DockerSandbox, SandboxConfig, SandboxError
from creditgym.verifiers.verdict import Verdict

__all__ = [
    "BUNDLED_TASKS",
    "REQUIRED_FILES",
    "TASK_LABEL",
    "SWETask",
    "SandboxError",
    "TaskFormatError",
    "check_images",
    "clean_images",
    "ensure_image",
    "grade",
    "grading_config",
    "load_task_dir",
    "load_tasks",
    "official_image_name",
    "patch_files",
    "run_parallel",
    "scan_tasks",
    "self_check",
    "task_from_instance",
]

#: Image label naming the task an image was built for (``clean_images`` removes only images carrying it).
TASK_LABEL = "org.creditgym.swe.task"
HASH_LABEL = "org.creditgym.swe.content-hash"
BUILD_LOG_LINES = 40
LOG_TAIL_CHARS = 4000

_DIR = "/tmp/creditgym"  # outside the repo, so `git clean` and the tests never see it
_APPLY_CMDS = (
    "git apply --verbose {patch}",
    "git apply --verbose --3way {patch}",
    "patch --batch --fuzz=5 -p1 -i {patch}",
)
_BINARY = re.compile(r"^(GIT binary patch|Binary files (.+) and (.+) differ)$", re.M)
_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_LOCKS_GUARD = threading.Lock()


# --------------------------------------------------------------------------- docker plumbing


def _client(client: Any) -> Any:
    if client is not None:
        return client
    from creditgym.verifiers.sandbox import _default_client

    return _default_client()


def _engine_fault(exc: BaseException) -> bool:
    """A connection-level failure, as opposed to an HTTP error the engine answered with."""
    import docker

    if isinstance(exc, docker.errors.APIError):
        return False
    return isinstance(exc, (OSError, docker.errors.DockerException)) or type(exc).__module__.startswith(
        ("requests", "urllib3")
    )


def _engine_error(exc: BaseException) -> SandboxError:
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return SandboxError(
        f"Docker engine not reachable at {host}: start it with `make engine` or set DOCKER_HOST "
        f"({type(exc).__name__}: {exc})",
        kind="engine",
    )


def _image_present(client: Any, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    except Exception as exc:
        if _engine_fault(exc):
            raise _engine_error(exc) from exc
        raise
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
    import docker

    assert task.build_dir is not None
    dockerfile = (task.build_dir / "Dockerfile").read_text()
    buildargs = {"BASE_IMAGE": base_image()} if "ARG BASE_IMAGE" in dockerfile else None
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
            f"building image {task.image} for {task.instance_id} from {task.build_dir / 'Dockerfile'} failed: "
            f"{exc.msg}\n--- last lines of the build log ---\n{_log_tail(exc.build_log)}",
            kind="build",
        ) from exc
    except docker.errors.APIError as exc:  # e.g. a Dockerfile the engine cannot parse
        raise SandboxError(
            f"building image {task.image} for {task.instance_id} from {task.build_dir / 'Dockerfile'} failed: "
            f"{exc.explanation or exc}",
            kind="build",
        ) from exc
    except Exception as exc:
        if _engine_fault(exc):
            raise _engine_error(exc) from exc
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
    """Remove task images built here (those carrying :data:`TASK_LABEL`), and leftover sandbox containers.

    Args:
        tasks: With ``stale_only``, the current tasks: their images are kept.
        client: A ``docker.DockerClient``; default: a shared client from the environment.
        stale_only: Remove only tags that are no current task's image (built from an older version of a task,
            or for a task no longer in ``tasks``).

    Returns:
        The tags (or ids) removed.
    """
    import docker

    from creditgym.verifiers.sandbox import cleanup

    client = _client(client)
    keep = {t.image for t in tasks or ()} if stale_only else set()
    try:
        cleanup(client, only_dead_owners=True)
        images = client.images.list(filters={"label": [f"{LABEL}=1", TASK_LABEL]})
    except SandboxError:
        raise
    except Exception as exc:
        if _engine_fault(exc):
            raise _engine_error(exc) from exc
        raise
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


# --------------------------------------------------------------------------- grading


def grading_config(task: SWETask, timeout: float = 300.0) -> SandboxConfig:
    """The limits grading runs under: 2g memory, 1 CPU, 1024 pids, the eval timeout, 32 MiB of log."""
    return SandboxConfig(
        memory="2g",
        cpus=1.0,
        pids=1024,
        command_timeout=timeout,
        output_limit=32 * 1024 * 1024,
        workdir=task.workdir,
    )


def _tar(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in files.items():
            data = text.encode("utf-8", errors="surrogateescape")
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _binary_problem(patch: str) -> str | None:
    match = _BINARY.search(patch)
    if match is None:
        return None
    start = patch.rfind("\ndiff --git ", 0, match.start()) + 1
    header = patch[start : patch.find("\n", start)]
    files = patch_files(header) or ((match.group(2) or "?"),)
    return (
        f"the patch changes a binary file ({files[-1]}); binary diffs cannot be graded: "
        "remove the binary change and send a text-only diff"
    )


def _apply(box: DockerSandbox, patch_path: str) -> tuple[bool, str]:
    """Apply with swebench's fallbacks; (applied, what git apply and the last fallback said)."""
    outputs = []
    for i, template in enumerate(_APPLY_CMDS):
        if i:  # a failed attempt (--3way conflicts, patch's partial hunks) leaves state behind
            box.exec("git checkout -- . && git clean -fdq", timeout=60)
        result = box.exec(template.format(patch=patch_path), timeout=60)
        if result.exit_code == 0:
            return True, result.output
        outputs.append("\n".join(result.output.strip().splitlines()[-10:]))
    return False, f"git apply: {outputs[0]}\npatch --fuzz=5: {outputs[-1]}"


def _reset_command(test_files: Sequence[str]) -> str:
    lines = []
    for path in test_files:
        q = shlex.quote(path)
        lines.append(
            f"if git cat-file -e HEAD:{q} 2>/dev/null; then git checkout -q HEAD -- {q}; else rm -rf -- {q}; fi"
        )
    return " && ".join(lines) or "true"


def _failed(error: str, applied: bool, started: float) -> Verdict:
    details = {"error": error, "patch_applied": applied, "resolution": "RESOLVED_NO", "tests": {}}
    return Verdict(0.0, "wrong", {**details, "seconds": time.monotonic() - started})


def _is_docker_error(exc: BaseException) -> bool:
    import docker

    return isinstance(exc, docker.errors.DockerException) or _engine_fault(exc)


def _infra(task: SWETask, error: str, kind: str, started: float) -> Verdict:
    return Verdict(
        None,
        "infra_error",
        {
            "error": error,
            "error_kind": kind,
            "image": task.image,
            "seconds": time.monotonic() - started,
        },
    )


_UNITTEST_RESULT = re.compile(r"^(.+?) \.\.\. (ok|FAIL|ERROR|skipped\b.*|expected failure)$", re.M)
_UNITTEST_SUMMARY = re.compile(r"^(FAIL|ERROR): (.+)$", re.M)


def _unittest_guard(log: str, status_map: dict[str, str]) -> dict[str, str]:
    """Trust unittest's own failure summary over result lines, for ``parse_log_django`` logs.

    Code under test runs in the runner's process, so a patch can print ``name ... ok`` lines of its own (an
    ``atexit`` hook suffices); the parser keeps the last line per test, so such a patch would grade as a fix.
    Here a test that unittest's summary lists (``FAIL: name``) or that has contradicting result lines fails.
    """
    start, end = log.find(">>>>> Start Test Output"), log.rfind(">>>>> End Test Output")
    section = log[start:end] if 0 <= start < end else log
    guarded = dict(status_map)
    outcomes: dict[str, set[str]] = {}
    for match in _UNITTEST_RESULT.finditer(section):
        outcomes.setdefault(match[1].strip(), set()).add(match[2].split()[0])
    for name, seen in outcomes.items():
        if len(seen) > 1 and name in guarded:
            guarded[name] = "ERROR" if "ERROR" in seen else "FAILED"
    for match in _UNITTEST_SUMMARY.finditer(section):
        guarded[match[2].strip()] = "ERROR" if match[1] == "ERROR" else "FAILED"
    return guarded


def _score(task: SWETask, log: str) -> tuple[bool, dict[str, str], dict[str, Any], str]:
    """(log readable, per-test outcomes, F2P/P2P report, resolution) from an eval log, by swebench's rules."""
    from swebench.harness.constants import EvalType
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.utils import make_test_spec

    spec = make_test_spec(task.instance())
    with tempfile.TemporaryDirectory(prefix="creditgym-grade-") as tmp:
        path = os.path.join(tmp, "test_output.txt")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(log)
        status_map, readable = get_logs_eval(spec, path)
    if task.log_parser == "parse_log_django" and readable:
        status_map = _unittest_guard(log, status_map)
    gold = {"FAIL_TO_PASS": list(task.fail_to_pass), "PASS_TO_PASS": list(task.pass_to_pass)}
    report = get_eval_tests_report(status_map, gold, eval_type=EvalType(task.eval_type))
    report = {k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}
    resolution = get_resolution_status(report) if readable else "RESOLVED_NO"
    tests = dict(status_map)
    for name in (*task.fail_to_pass, *task.pass_to_pass):
        tests.setdefault(name, "MISSING")
    return readable, tests, report, resolution


def grade(
    task: SWETask,
    patch: str | None,
    *,
    partial: bool = False,
    client: Any = None,
    timeout: float = 300.0,
    config: SandboxConfig | None = None,
    pull_timeout: float = 60.0,
) -> Verdict:
    """Grade ``patch`` (a ``git diff`` against the task's base commit) on ``task``.

    Args:
        task: The task.
        patch: The diff; ``None`` or blank grades the untouched repository.
        partial: Score the fraction of FAIL_TO_PASS tests that pass (0 if any PASS_TO_PASS test fails)
            instead of 1 / 0 for resolved / not.
        client: A ``docker.DockerClient``; default: a shared client from the environment.
        timeout: Seconds the eval script may run.
        config: Sandbox limits; default :func:`grading_config`.
        pull_timeout: Seconds a pull of a missing official image may take (see :func:`ensure_image`).

    Returns:
        A :class:`Verdict`. ``status``: ``"correct"`` (resolved), ``"wrong"`` (not resolved, or the patch did
        not apply / is binary: ``details["patch_applied"]`` False and ``details["error"]`` says why),
        ``"timeout"`` (the tests ran past ``timeout``; score 0), ``"infra_error"`` (engine down, image missing
        or not buildable, container died; score None, ``details["error"]``, and ``details["error_kind"]``: a
        ``SandboxError`` kind, or ``"docker"`` for another engine error).
        ``details``: ``resolution`` (swebench's ``RESOLVED_FULL`` / ``RESOLVED_PARTIAL`` / ``RESOLVED_NO``),
        ``patch_applied``, ``tests`` (every parsed test and every graded one: ``PASSED`` / ``FAILED`` /
        ``ERROR`` / ``SKIPPED`` / ``XFAIL`` / ``MISSING``), ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (``success``
        and ``failure`` lists), ``log_tail``, ``seconds``.
    """
    started = time.monotonic()
    patch = patch or ""
    empty = not patch.strip()
    problem = None if empty else _binary_problem(patch)
    if problem is not None:
        return _failed(problem, False, started)
    if not empty and not patch.endswith("\n"):
        patch += "\n"  # a diff cut after its last line is otherwise "corrupt" to git apply
    from swebench.harness.utils import make_test_spec

    eval_script = make_test_spec(task.instance()).eval_script
    try:
        client = _client(client)
        ensure_image(task, client, pull_timeout=pull_timeout)
        cfg = config or grading_config(task, timeout)
        with DockerSandbox(task.image, cfg, client=client, labels={TASK_LABEL: task.instance_id}) as box:
            files = {"eval.sh": eval_script, "test.patch": task.test_patch}
            if not empty:
                files["model.patch"] = patch
            box.copy_in(_tar(files), _DIR)
            if not empty:
                applied, apply_log = _apply(box, f"{_DIR}/model.patch")
                if not applied:
                    return _failed(
                        f"the patch did not apply (git apply, --3way, patch --fuzz=5):\n{apply_log}",
                        False,
                        started,
                    )
            if task.test_patch.strip():
                prepared = box.exec(
                    f"{_reset_command(task.test_files)} && git apply --verbose {_DIR}/test.patch", timeout=60
                )
                if prepared.exit_code != 0:
                    return _failed(
                        "the test patch did not apply after resetting the test files (does the patch move or "
                        f"replace paths the tests need?):\n{prepared.output.strip()[-2000:]}",
                        True,
                        started,
                    )
            run = box.exec(f"bash {_DIR}/eval.sh 2>&1", timeout=timeout)
    except SandboxError as exc:
        return _infra(task, str(exc), exc.kind, started)
    except Exception as exc:  # an engine answer the sandbox does not translate: still not the patch's fault
        if not _is_docker_error(exc):
            raise
        return _infra(task, f"Docker failed while grading: {type(exc).__name__}: {exc}", "docker", started)
    log = run.output
    common: dict[str, Any] = {"patch_applied": True, "log_tail": log[-LOG_TAIL_CHARS:], "empty_patch": empty}
    if run.timed_out:
        return Verdict(
            0.0,
            "timeout",
            {
                **common,
                "error": f"the tests ran past {timeout:g} s",
                "resolution": "RESOLVED_NO",
                "tests": {},
                "seconds": time.monotonic() - started,
            },
        )
    readable, tests, report, resolution = _score(task, log)
    resolved = resolution == "RESOLVED_FULL"
    if partial:
        f2p, p2p = report["FAIL_TO_PASS"], report["PASS_TO_PASS"]
        total = len(f2p["success"]) + len(f2p["failure"])
        score = 0.0 if p2p["failure"] or not readable else (len(f2p["success"]) / total if total else 1.0)
    else:
        score = 1.0 if resolved else 0.0
    details: dict[str, Any] = {
        **common,
        "resolution": resolution,
        "tests": tests,
        **report,
        "seconds": time.monotonic() - started,
    }
    if not readable:
        details["error"] = (
            "the test log could not be graded (no start/end markers, an error marker, no test results, or a "
            "non-zero test exit code without a failing test); see log_tail"
        )
    return Verdict(score, "correct" if resolved else "wrong", details)


def self_check(task: SWETask, client: Any = None, *, timeout: float = 300.0) -> tuple[Verdict, Verdict]:
    """(gold patch verdict, empty patch verdict): a sound task resolves with the first and not the second."""
    return grade(task, task.gold_patch, client=client, timeout=timeout), grade(
        task, "", client=client, timeout=timeout
    )


def run_parallel(fn: Callable[[SWETask], Any], tasks: Sequence[SWETask], jobs: int = 2) -> list[Any]:
    """``[fn(t) for t in tasks]`` on ``jobs`` threads (grading waits on Docker, not on Python)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="creditgym-swe") as pool:
        return list(pool.map(fn, tasks))
