"""Grade a patch against a SWE-bench-style task with swebench's harness, in a fresh Docker sandbox.

Tasks come from ``creditgym.envs.swe_tasks`` (the bundled set, swebench's task-repo folders, official instance
files) as :class:`SWETask` records; their images from :mod:`creditgym.verifiers.swe.images`.

Grading (:func:`grade`), in a fresh network-less container from the task image:

1. refuse what cannot be graded before anything runs: a patch bigger than ``diff_limit``, a binary diff;
2. apply the patch: ``git apply -v``, then ``git apply -v --3way``, then ``patch --fuzz=5`` (swebench's
   chain), from a clean tree each time;
3. look at what the patch changed, in the container, and apply the tampering policy: a patch that adds a Python
   start-up hook (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``) or a top-level module shadowing the
   standard library or a test runner is refused as ``tampered``; the files the test patch touches, any test file
   the patch changed (under ``tests``/``test``/``testing``, ``test_*.py``, ``*_test.py``, ``conftest.py``...)
   and the test runner's configuration (``pytest.ini``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``) are
   restored to the base commit (``details["restored"]`` lists those the patch had changed), so edits to tests
   are never graded;
4. apply the test patch and run the eval script (swebench's ``make_test_spec``, which records the test
   command's exit code), with two observers of the test process: canaries appended to the test patch's modules
   (checks whose every assertion must fail) and the witness (``creditgym.verifiers.swe.witness``), set up before
   any code of the repository runs, which records what each test body itself did;
5. read the log (``creditgym.verifiers.swe.scoring``): bounded, parsed with the task's swebench parser,
   failures sticky; a graded pass that the witness did not see is a failure, and a canary that passed or a probe
   that did not fail marks the run ``tampered``. Then FAIL_TO_PASS / PASS_TO_PASS are graded with
   ``get_eval_tests_report`` and ``get_resolution_status``.

Every git command runs with hooks and fsmonitor off, and ``.git/`` is checked unchanged after each apply attempt.
What each check stops, and what it cannot: ``docs/envs/swe-security.md``.

``swebench.harness`` is imported inside the functions: it takes about a second and calls ``load_dotenv()``.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import secrets
import tarfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from creditgym.verifiers.swe import integrity, scoring, scripts
from creditgym.verifiers.swe.docker_sandbox import DockerSandbox
from creditgym.verifiers.swe.engine import default_client, import_docker, is_engine_fault
from creditgym.verifiers.swe.images import TASK_LABEL, check_images, clean_images, ensure_image
from creditgym.verifiers.swe.sandbox import SandboxConfig, SandboxError
from creditgym.verifiers.swe.tasks import SWETask, TaskFormatError, patch_files
from creditgym.verifiers.verdict import Verdict

__all__ = [
    "TASK_LABEL",
    "SWETask",
    "SandboxError",
    "TaskFormatError",
    "check_images",
    "clean_images",
    "ensure_image",
    "grade",
    "grading_config",
    "patch_files",
    "run_parallel",
    "self_check",
]

LOG_TAIL_CHARS = 4000
_DIR = "/tmp/creditgym"  # outside the repo, so `git clean` and the tests never see it
_APPLY_CMDS = (
    "git apply --verbose {patch}",
    "git apply --verbose --3way {patch}",
    "patch --batch --fuzz=5 -p1 -i {patch}",
)
# Linear: literal line starts, one greedy run to the end of the line (the old `(.+) and (.+)` was quadratic).
_BINARY = re.compile(r"^(?:GIT binary patch|Binary files .* differ)$", re.M)
# What the patch changed, NUL-separated, on stdout alone (git's warnings, a `.gitattributes` can make it print
# some, go to /dev/null; merged into the output they garbled the first path): "/tracked", files changed against
# HEAD, "/new", files untracked since the snapshot (ignored ones included). Paths from git never start with "/".
_BEFORE = "/tmp/creditgym.untracked"  # written as the sandbox's user: _DIR is root's
_SNAPSHOT = f"git ls-files -z --others 2>/dev/null | sort -z > {_BEFORE}"
_CHANGED = (
    "set -o pipefail; { printf '/tracked\\0' && git -c core.quotepath=off diff --name-only -z --no-renames HEAD && "
    f"printf '/new\\0' && git ls-files -z --others | sort -z | comm -z -13 {_BEFORE} -; }} 2>/dev/null"
)
# The paths on stdin (NUL-separated) that name neither a file of the tree nor one of HEAD (a deletion): printed
# back, NUL-separated. None is printed when every path is one git could have meant.
_UNKNOWN = (
    'while IFS= read -r -d \'\' p; do [ -e "$p" ] || [ -L "$p" ] || git cat-file -e "HEAD:$p" 2>/dev/null '
    "|| printf '%s\\0' \"$p\"; done"
)
_WITNESS_SOURCE = (Path(__file__).parent / "witness.py").read_text(encoding="utf-8")


def grading_config(task: SWETask, timeout: float = 300.0) -> SandboxConfig:
    """The limits grading runs under: 2g memory, 1 CPU, 1024 pids, 4g of disk, the eval timeout, 32 MiB of log."""
    return SandboxConfig(
        memory="2g",
        cpus=1.0,
        pids=1024,
        disk="4g",
        command_timeout=timeout,
        max_lifetime=timeout + 900.0,
        output_limit=32 * 1024 * 1024,
        workdir=task.workdir,
    )


def _tar(files: dict[str, str]) -> bytes:
    """The grader's files in ``_DIR``, a folder owned by root: the sandbox's user can read them, not replace them."""
    buffer = io.BytesIO()
    mtime = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        folders = {posixpath.dirname(f"{_DIR}/{name}").lstrip("/") for name in files} | {_DIR.lstrip("/")}
        for name in sorted(folders):
            folder = tarfile.TarInfo(name)
            folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, mtime
            tar.addfile(folder)
        for name, text in files.items():
            data = text.encode("utf-8", errors="surrogateescape")
            info = tarfile.TarInfo(f"{_DIR.lstrip('/')}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, mtime
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _binary_problem(patch: str) -> str | None:
    match = _BINARY.search(patch)
    if match is None:
        return None
    start = patch.rfind("\ndiff --git ", 0, match.start()) + 1
    header = patch[start : patch.find("\n", start)]
    line = match.group(0)
    fallback = line[len("Binary files ") : -len(" differ")].rpartition(" and ")[0] or "?"
    files = patch_files(header) or (fallback,)
    return (
        f"the patch changes a binary file ({files[-1]}); binary diffs cannot be graded: "
        "remove the binary change and send a text-only diff"
    )


def _git(box: DockerSandbox, cmd: str) -> Any:
    """Run ``cmd`` with hooks and fsmonitor off for every git command in it."""
    return box.exec(scripts.SAFE_GIT + cmd, timeout=60)


def _apply(box: DockerSandbox, patch_path: str) -> tuple[str, str]:
    """Apply with swebench's fallbacks: ("applied" | "failed" | "git", what git apply and the last fallback said).

    ``"git"``: an attempt changed ``.git/`` (checked after each one, before any other git command runs).
    """
    outputs, before = [], box.exec(scripts.GIT_STATE, timeout=60).output
    for i, template in enumerate(_APPLY_CMDS):
        if i:  # a failed attempt (--3way conflicts, patch's partial hunks) leaves state behind
            _git(box, "git checkout -- . && git clean -fdq")
        result = _git(box, template.format(patch=patch_path))
        if box.exec(scripts.GIT_STATE, timeout=60).output != before:
            return "git", template.split(" -")[0]
        if result.exit_code == 0:
            return "applied", result.output
        outputs.append("\n".join(result.output.strip().splitlines()[-10:]))
    return "failed", f"git apply: {outputs[0]}\npatch --fuzz=5: {outputs[-1]}"


def _test_files(box: DockerSandbox, task: SWETask) -> list[str]:
    """The Python test files the witness may take test code from: tracked ones and the test patch's."""
    tracked = _git(box, "git ls-files -z 2>/dev/null").output.split("\0")
    files = dict.fromkeys([*tracked, *patch_files(task.test_patch)])
    return [p for p in files if p.endswith(".py") and integrity.is_test_file(p)]


def _changed(box: DockerSandbox) -> tuple[list[str], list[str]] | None:
    """(every path the applied patch changed, the paths it created), from git in the container; None when git
    failed or named a path that is neither in the tree nor a deletion (the list cannot be trusted)."""
    listed = _git(box, _CHANGED)
    fields = listed.output.split("\0")
    if listed.exit_code != 0 or fields[:1] != ["/tracked"] or "/new" not in fields or fields[-1] != "":
        return None
    at = fields.index("/new")
    tracked = [p for p in fields[1:at] if p]
    added = [p for p in fields[at + 1 :] if p]
    paths = "".join(f"{p}\0" for p in tracked + added).encode("utf-8", errors="surrogateescape")
    unknown = box.exec(scripts.SAFE_GIT + _UNKNOWN, timeout=60, stdin=paths)
    if unknown.exit_code != 0 or unknown.output:
        return None
    return tracked + added, added


def _verdict(status: str, started: float, error: str | None = None, **details: Any) -> Verdict:
    """A scored verdict (0 unless ``score`` is given): resolution ``RESOLVED_NO`` and no tests unless given."""
    score = details.pop("score", 0.0)
    body: dict[str, Any] = {"resolution": "RESOLVED_NO", "tests": {}, **details}
    if error is not None:
        body["error"] = error
    return Verdict(score, status, {**body, "seconds": time.monotonic() - started})  # type: ignore[arg-type]


def _tampered(reasons: list[str], started: float, **details: Any) -> Verdict:
    error = "the patch tampers with the tests: " + "; ".join(reasons)
    return _verdict("wrong", started, error, error_kind="tampered", tampered=reasons, **details)


def _is_docker_error(exc: BaseException) -> bool:
    return isinstance(exc, import_docker().errors.DockerException) or is_engine_fault(exc)


def _infra(task: SWETask, error: str, kind: str, started: float) -> Verdict:
    return Verdict(
        None,
        "infra_error",
        {"error": error, "error_kind": kind, "image": task.image, "seconds": time.monotonic() - started},
    )


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
        A :class:`Verdict`. ``status``: ``"correct"`` (resolved), ``"wrong"`` (not resolved; or the patch did
        not apply, is binary or too large: ``details["patch_applied"]`` False and ``details["error"]`` says
        why; or its log could not be read, a parser raising or running past ``scoring.PARSE_TIMEOUT_S``:
        ``error_kind == "log"``; or it tampers with the tests: ``details["error_kind"] == "tampered"`` and ``details["tampered"]``
        lists why; or the tests wrote past the disk limit: ``error_kind == "disk"``), ``"timeout"`` (the tests
        ran past ``timeout``; score 0), ``"infra_error"`` (engine down, image missing or not buildable,
        container died; score None, ``details["error"]``, and ``details["error_kind"]``: a ``SandboxError``
        kind, or ``"docker"`` for another engine error).
        ``details``: ``resolution`` (swebench's ``RESOLVED_FULL`` / ``RESOLVED_PARTIAL`` / ``RESOLVED_NO``),
        ``patch_applied``, ``tests`` (every graded test: ``PASSED`` / ``FAILED`` / ``ERROR`` / ``SKIPPED`` /
        ``XFAIL`` / ``MISSING``), ``other_tests`` (how many other parsed tests were left out),
        ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (``success`` and ``failure`` lists), ``restored``, ``canaries``
        (how many failed as they must, how many passed), ``witness`` (``armed``; ``unconfirmed``: graded tests
        the log says passed that the witness did not see pass, graded as failed), ``log_tail``, ``seconds``.
    """
    started = time.monotonic()
    cfg = config or grading_config(task, timeout)
    patch = patch or ""
    empty = not patch.strip()
    size = len(patch.encode("utf-8", errors="surrogateescape"))
    if size > cfg.diff_limit:
        error = f"the patch has {size} bytes, more than the {cfg.diff_limit} a patch may have (diff_limit)"
        return _verdict("wrong", started, error, patch_applied=False)
    problem = None if empty else _binary_problem(patch)
    if problem is not None:
        return _verdict("wrong", started, problem, patch_applied=False)
    reasons = integrity.git_dir_refusal(patch)
    if reasons:
        return _tampered(reasons, started, patch_applied=False)
    if not empty and not patch.endswith("\n"):
        patch += "\n"  # a diff cut after its last line is otherwise "corrupt" to git apply
    from swebench.harness.utils import make_test_spec

    token = uuid.uuid4().hex[:16]
    modules = [path for path in task.test_files if integrity.is_test_module(path)]
    spec_script = make_test_spec(task.instance()).eval_script
    expected = bool(modules) and integrity.START_MARKER in spec_script  # canaries will be in what runs
    eval_script = integrity.with_canaries(spec_script, modules, f"{_DIR}/canary.py")
    key = secrets.token_hex(16)
    eval_script = integrity.with_witness(eval_script, f"{_DIR}/py", f"{_DIR}/witness-files.json")
    # One brace group that exits: bash parses all of it before running any and never reads the file again, so
    # the tests cannot rewrite what runs after them.
    eval_script = "{\n" + scripts.SAFE_GIT + eval_script.rstrip("\n") + "\nexit\n}\n"
    restore, restored = list(task.test_files), []
    try:
        client = client if client is not None else default_client()
        ensure_image(task, client, pull_timeout=pull_timeout)
        with DockerSandbox(task.image, cfg, client=client, labels={TASK_LABEL: task.instance_id}) as box:
            canary = integrity.canary_source(token)
            files = {
                "eval.sh": eval_script,
                "test.patch": task.test_patch,
                "canary.py": canary,
                "py/sitecustomize.py": integrity.SITECUSTOMIZE,
                "py/creditgym_witness.py": _WITNESS_SOURCE,
            }
            if not empty:
                files["model.patch"] = patch
            box.copy_in(_tar(files), "/")
            if not empty:
                _git(box, _SNAPSHOT)
                applied, apply_log = _apply(box, f"{_DIR}/model.patch")
                if applied == "git":
                    why = f".git/: changed by `{apply_log}` (hooks and config run code when git runs)"
                    return _tampered([why], started, patch_applied=True)
                if applied == "failed":
                    error = f"the patch did not apply (git apply, --3way, patch --fuzz=5):\n{apply_log}"
                    return _verdict("wrong", started, error, patch_applied=False)
                listed = _changed(box)
                if listed is None:
                    error = (
                        "git could not list the files the patch changed (a path it printed is neither in the tree "
                        "nor a deletion), so the tests cannot be restored: send a plain source diff"
                    )
                    return _verdict("wrong", started, error, error_kind="changed", patch_applied=True)
                changed, added = listed
                reasons = integrity.refusal(changed, added)
                if reasons:
                    return _tampered(reasons, started, patch_applied=True)
                restore = integrity.restored(changed, task.test_files)
                restored = [p for p in restore if p not in task.test_files]
            apply_tests = f" && git apply --verbose {_DIR}/test.patch" if task.test_patch.strip() else ""
            prepared = _git(box, f"{integrity.reset_command(restore)}{apply_tests}")
            if prepared.exit_code != 0:
                error = (
                    "the test patch did not apply after resetting the test files (does the patch move or "
                    f"replace paths the tests need?):\n{prepared.output.strip()[-2000:]}"
                )
                return _verdict("wrong", started, error, patch_applied=True)
            box.copy_in(_tar({"witness-files.json": json.dumps(_test_files(box, task))}), "/")
            run = box.exec(f"bash {_DIR}/eval.sh 2>&1", timeout=timeout, stdin=f"{key}\n".encode())
    except SandboxError as exc:
        return _infra(task, str(exc), exc.kind, started)
    except Exception as exc:  # an engine answer the sandbox does not translate: still not the patch's fault
        if not _is_docker_error(exc):
            raise
        return _infra(task, f"Docker failed while grading: {type(exc).__name__}: {exc}", "docker", started)
    return _judge(
        task,
        run,
        token,
        key.encode(),
        partial,
        started,
        empty=empty,
        restored=restored,
        timeout=timeout,
        expected=expected,
    )


def _judge(
    task: SWETask,
    run: Any,
    token: str,
    key: bytes,
    partial: bool,
    started: float,
    *,
    empty: bool,
    restored: list[str],
    timeout: float,
    expected: bool,
) -> Verdict:
    """The verdict on an eval run: timeout, disk, tampering, or swebench's grade."""
    log = run.output
    common: dict[str, Any] = {
        "patch_applied": True,
        "log_tail": log[-LOG_TAIL_CHARS:],
        "empty_patch": empty,
        "restored": restored,
    }
    if run.disk_exceeded:
        error = "the tests wrote more than the sandbox's disk limit and were stopped"
        return _verdict("wrong", started, error, error_kind="disk", **common)
    if run.timed_out:
        return _verdict("timeout", started, f"the tests ran past {timeout:g} s", **common)
    scored = scoring.score_bounded(task, log, key=key, token=token, canaries_expected=expected)
    if scored.error:
        return _verdict("wrong", started, scored.error, error_kind="log", tests=scored.tests, **common)
    common.update(canaries=scored.canaries, witness=scored.witness, other_tests=scored.other_tests)
    if scored.tampering:
        return _tampered(scored.tampering, started, **common)
    report, resolved = scored.report, scored.resolution == "RESOLVED_FULL"
    if partial:
        f2p, p2p = report["FAIL_TO_PASS"], report["PASS_TO_PASS"]
        total = len(f2p["success"]) + len(f2p["failure"])
        readable_p2p = not p2p["failure"] and scored.readable
        score = (len(f2p["success"]) / total if total else 1.0) if readable_p2p else 0.0
    else:
        score = 1.0 if resolved else 0.0
    error = None
    if not scored.readable:
        error = (
            "the test log could not be graded (no start/end markers, an error marker, no test results, or a "
            "non-zero test exit code without a failing test); see log_tail"
        )
    status = "correct" if resolved else "wrong"
    return _verdict(
        status,
        started,
        error,
        score=score,
        resolution=scored.resolution,
        tests=scored.tests,
        **report,
        **common,
    )


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
