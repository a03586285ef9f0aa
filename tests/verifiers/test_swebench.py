"""``verifiers.swebench``: task sources, images and grading with swebench's harness in Docker sandboxes.

Docker tests share one session fixture that builds the bundled images (cached by content hash, so only the first
run builds) and grades every task's gold and empty patch in parallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import json
import shutil
import time
from pathlib import Path

import pytest

from creditgym.envs.swe_tasks import BUNDLED_TASKS, load_tasks, scan_tasks
from creditgym.verifiers.swe.grading import (
    TASK_LABEL,
    SandboxError,
    SWETask,
    TaskFormatError,
    check_images,
    ensure_image,
    grade,
    run_parallel,
    self_check,
)

BUNDLED_IDS = sorted(p.name for p in (BUNDLED_TASKS / "tasks").iterdir() if p.is_dir())
DEAD_HOST = "unix:///tmp/nope.sock"


def _task(instance_id: str) -> SWETask:
    return load_tasks("bundled", [instance_id])[0]


def _edit(task: SWETask, path: str, *replacements: tuple[str, str], new_file: bool = False) -> str:
    """A ``git diff`` of ``path`` in the task's repo after string replacements (or a whole new file)."""
    assert task.build_dir is not None
    old = "" if new_file else (task.build_dir / "repo" / path).read_text()
    new = old
    for before, after in replacements:
        assert before in new, before
        new = new.replace(before, after)
    return _diff(path, old, new, new_file=new_file)


def _diff(path: str, old: str, new: str, *, new_file: bool = False) -> str:
    header = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if new_file else "")
    body = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        "/dev/null" if new_file else f"a/{path}",
        f"b/{path}",
    )
    return header + "".join(body)


def _copy_task(tmp_path: Path, instance_id: str) -> Path:
    dest = tmp_path / "repo" / "tasks" / instance_id
    shutil.copytree(BUNDLED_TASKS / "tasks" / instance_id, dest)
    return dest


# --------------------------------------------------------------------------- task sources (no Docker)


def test_bundled_tasks_are_well_formed() -> None:
    from swebench.task.checks import check_task_repo
    from swebench.task.repo import load_task_repo

    tasks = load_tasks()
    assert [t.instance_id for t in tasks] == BUNDLED_IDS and len(tasks) >= 4
    assert check_task_repo(BUNDLED_TASKS) == []  # swebench's own task-repo checker
    assert [i["instance_id"] for i in load_task_repo(BUNDLED_TASKS)] == BUNDLED_IDS
    for task in tasks:
        assert task.fail_to_pass and len(task.pass_to_pass) >= 2
        assert not set(task.fail_to_pass) & set(task.pass_to_pass)
        assert task.image.startswith(f"sweb.eval.x86_64.{task.instance_id.lower()}:")
        assert task.log_parser == "parse_log_django" and task.eval_type == "pass_and_fail"
        assert task.test_files and all(f.startswith("tests/") for f in task.test_files)
        assert task.test_patch in task.eval_script  # eval.sh stands alone under swebench's run_instance too
        assert ">>>>> Start Test Output" in task.eval_script and ">>>>> End Test Output" in task.eval_script
        assert len(task.gold_patch.splitlines()) < 40 and "tests/" not in task.gold_patch
        assert "```" in task.problem_statement and "expect" in task.problem_statement.lower()
    assert any(len(t.fail_to_pass) >= 2 for t in tasks)


def test_image_tag_follows_build_inputs_only(tmp_path: Path) -> None:
    original = _task("creditgym__spans-1")
    folder = _copy_task(tmp_path, "creditgym__spans-1")
    assert load_tasks(folder)[0].image == original.image  # same inputs, same tag: nothing to rebuild
    (folder / "problem_statement.md").write_text("reworded\n")
    (folder / "repo" / "spans" / "__pycache__").mkdir()
    (folder / "repo" / "spans" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert load_tasks(folder)[0].image == original.image
    (folder / "repo" / "README.md").write_text("changed\n")
    assert load_tasks(folder)[0].image != original.image


@pytest.mark.parametrize("missing", ["gold.patch", "Dockerfile", "tests.json", "task.yaml"])
def test_missing_file_is_named_and_other_tasks_load(tmp_path: Path, missing: str) -> None:
    broken = _copy_task(tmp_path, "creditgym__spans-1")
    _copy_task(tmp_path, "creditgym__textkit-1")
    (broken / missing).unlink()
    with pytest.raises(TaskFormatError, match=missing.replace(".", r"\.")):
        load_tasks(tmp_path / "repo")
    tasks, errors = scan_tasks(tmp_path / "repo")
    assert [t.instance_id for t in tasks] == ["creditgym__textkit-1"]
    assert len(errors) == 1 and "creditgym__spans-1" in str(errors[0])


def test_bad_metadata_is_named(tmp_path: Path) -> None:
    folder = _copy_task(tmp_path, "creditgym__spans-1")
    meta = (folder / "task.yaml").read_text()
    (folder / "task.yaml").write_text(
        "\n".join(line for line in meta.splitlines() if "base_commit" not in line)
    )
    with pytest.raises(TaskFormatError, match="base_commit"):
        load_tasks(folder)
    (folder / "task.yaml").write_text(meta)
    (folder / "tests.json").write_text('{"FAIL_TO_PASS": "not json"}')
    with pytest.raises(TaskFormatError, match=r"tests\.json"):
        load_tasks(folder)
    with pytest.raises(TaskFormatError, match="neither"):
        load_tasks(tmp_path / "nowhere.txt")
    with pytest.raises(TaskFormatError, match="unknown instance ids"):
        load_tasks("bundled", ["nope__nope-1"])


def _official_rows() -> list[dict[str, object]]:
    local = _task("creditgym__romanum-1").instance()
    row = {**local, "instance_id": "astropy__astropy-12907", "repo": "astropy/astropy", "hints_text": ""}
    del row["image"]  # the official name is derived
    row["FAIL_TO_PASS"] = json.dumps(row["FAIL_TO_PASS"])  # HF dumps carry JSON strings
    gym = {
        **local,
        "instance_id": "getmoto__moto-7365",
        "image": "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365",
    }
    return [row, gym]


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_official_schema_files_load(tmp_path: Path, suffix: str) -> None:
    rows = _official_rows()
    path = tmp_path / f"instances{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = ("FAIL_TO_PASS", "PASS_TO_PASS")  # one type per column: JSON strings, like the HF dumps
        rows = [
            {"image": None, **r, **{k: r[k] if isinstance(r[k], str) else json.dumps(r[k]) for k in columns}}
            for r in rows
        ]
        pq.write_table(pa.Table.from_pylist(rows), path)
    first, second = load_tasks(path)
    assert first.image == "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    assert second.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-7365"
    assert first.build_dir is None and not first.is_local
    assert first.fail_to_pass == second.fail_to_pass and len(first.fail_to_pass) == 2
    assert first.test_files == ("tests/test_convert.py",)


def test_official_row_without_eval_script_is_named(tmp_path: Path) -> None:
    row = _official_rows()[0]
    del row["eval_script"]
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(TaskFormatError, match="eval_script"):
        load_tasks(path)


def test_binary_patch_is_refused_before_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", DEAD_HOST)  # proves no engine is needed to refuse it
    binary = (
        "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..e69de29\n"
        "GIT binary patch\nliteral 4\nLcmZ?wbhEH*\n\nliteral 0\nHcmV?d00001\n\n"
    )
    verdict = grade(_task("creditgym__spans-1"), binary)
    assert (verdict.status, verdict.score) == ("wrong", 0.0)
    assert verdict.details["patch_applied"] is False and "logo.png" in verdict.details["error"]


def test_dead_engine_is_infra_error_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    task = _task("creditgym__spans-1")
    monkeypatch.setenv("DOCKER_HOST", DEAD_HOST)
    for client in (None, docker.DockerClient(base_url=DEAD_HOST, version="1.41", timeout=5)):
        verdict = grade(task, task.gold_patch, client=client)
        assert verdict.status == "infra_error" and verdict.score is None and verdict.infra_error
        assert verdict.details["error_kind"] == "engine" and "make engine" in verdict.details["error"]
    with pytest.raises(SandboxError) as err:
        check_images([task])
    assert err.value.kind == "engine"


def test_cli_images_reports_a_dead_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from creditgym.cli import main

    monkeypatch.setenv("DOCKER_HOST", DEAD_HOST)
    with pytest.raises(SystemExit, match="engine not reachable"):
        main(["images", "check"])


# --------------------------------------------------------------------------- Docker


@pytest.fixture(scope="session")
def bundled(docker_client, base_image) -> list[SWETask]:
    tasks = load_tasks()
    run_parallel(lambda t: ensure_image(t, docker_client), tasks)
    return tasks


@pytest.fixture(scope="session")
def self_checks(bundled, docker_client) -> dict[str, tuple]:
    verdicts = run_parallel(lambda t: self_check(t, docker_client, timeout=120), bundled)
    return {t.instance_id: v for t, v in zip(bundled, verdicts, strict=True)}


@pytest.mark.docker
@pytest.mark.parametrize("instance_id", BUNDLED_IDS)
def test_gold_resolves_and_empty_does_not(self_checks, instance_id: str) -> None:
    gold, empty = self_checks[instance_id]
    assert (gold.status, gold.score, gold.details["resolution"]) == ("correct", 1.0, "RESOLVED_FULL"), gold
    assert (empty.status, empty.score, empty.details["resolution"]) == ("wrong", 0.0, "RESOLVED_NO"), empty
    task = _task(instance_id)
    # every graded test is listed with its outcome; without the fix F2P fail and P2P still pass
    assert all(gold.details["tests"][t] == "PASSED" for t in (*task.fail_to_pass, *task.pass_to_pass))
    assert sorted(empty.details["FAIL_TO_PASS"]["failure"]) == sorted(task.fail_to_pass)
    assert sorted(empty.details["PASS_TO_PASS"]["success"]) == sorted(task.pass_to_pass)
    assert empty.details["patch_applied"] and empty.details["empty_patch"]


@pytest.mark.docker
def test_images_are_labelled_at_the_base_commit(bundled, docker_client) -> None:
    from creditgym.verifiers.swe.sandbox import LABEL, DockerSandbox

    assert set(check_images(bundled, docker_client).values()) == {"present"}
    for task in bundled:
        labels = docker_client.images.get(task.image).labels
        assert labels[LABEL] == "1" and labels[TASK_LABEL] == task.instance_id
    task = bundled[0]
    with DockerSandbox(task.image, client=docker_client) as box:
        assert box.exec("git rev-parse HEAD && git status --porcelain").output.strip() == task.base_commit


@pytest.mark.docker
def test_patches_that_game_the_tests_do_not_resolve(bundled, docker_client) -> None:
    # editing the tests: textkit's test patch creates a test file, pagekit's edits an existing one
    textkit, pagekit, spans = (
        _task("creditgym__textkit-1"),
        _task("creditgym__pagekit-1"),
        _task("creditgym__spans-1"),
    )
    fake_new = _edit(
        textkit,
        "tests/test_truncation.py",
        (
            "",
            "import unittest\n\n\nclass SlugTruncationTest(unittest.TestCase):\n"
            "    def test_word_that_fits_exactly_is_kept(self):\n        pass\n\n"
            "    def test_exact_fit_with_custom_separator(self):\n        pass\n",
        ),
        new_file=True,
    )
    fake_edit = _edit(
        pagekit,
        "tests/test_paginator.py",
        (
            "    def test_empty_list_has_one_empty_page(self):",
            "    def test_orphans_at_threshold_join_previous_page(self):\n        pass\n\n"
            "    def test_iterating_pages_yields_every_item_once(self):\n        pass\n\n"
            "    def test_empty_list_has_one_empty_page(self):",
        ),
    )
    # printing fake result lines at exit, after unittest's real ones (swebench's parser keeps the last line)
    fake_lines = "".join(f"{name} ... ok\\n" for name in spans.fail_to_pass)
    fake_output = _edit(
        spans,
        "spans/__init__.py",
        (
            '__version__ = "0.2.0"\n',
            '__version__ = "0.2.0"\n\nimport atexit\nimport sys\n\n'
            f'atexit.register(lambda: sys.stderr.write("{fake_lines}"))\n',
        ),
    )
    cases = [(textkit, fake_new), (pagekit, fake_edit), (spans, fake_output)]
    for verdict in run_parallel(lambda c: grade(c[0], c[1], client=docker_client), cases):
        assert verdict.details["patch_applied"], verdict.details
        assert (verdict.status, verdict.score, verdict.details["resolution"]) == ("wrong", 0.0, "RESOLVED_NO")


@pytest.mark.docker
def test_malformed_patches_are_wrong_not_errors(bundled, docker_client) -> None:
    task = _task("creditgym__spans-1")
    garbage = "this is not a diff\n@@ -1 +1 @@\n-x\n+y\n"
    stale = _edit(task, "spans/intervals.py", ("merged: list[Interval] = []", "merged = []"))
    stale = stale.replace(
        "merged: list[Interval] = []", "merged: list[Interval] = list()"
    )  # context mismatch
    for verdict in run_parallel(lambda p: grade(task, p, client=docker_client), [garbage, stale]):
        assert (verdict.status, verdict.score) == ("wrong", 0.0)
        assert verdict.details["patch_applied"] is False
        assert "did not apply" in verdict.details["error"]


@pytest.mark.docker
def test_partial_scoring(bundled, docker_client) -> None:
    task = _task("creditgym__romanum-1")  # two F2P tests: to_roman(3999) and from_roman("VIII")
    range_fix = (
        "    if not MIN_VALUE <= number < MAX_VALUE:",
        "    if not MIN_VALUE <= number <= MAX_VALUE:",
    )
    regex_fix = ("    (IX|IV|V?I{0,2})$", "    (IX|IV|V?I{0,3})$")
    breaks_p2p = ('    (4, "IV"),', '    (4, "IIII"),')
    half = _edit(task, "romanum/convert.py", range_fix)
    both_but_broken = _edit(task, "romanum/convert.py", range_fix, regex_fix, breaks_p2p)
    jobs = [(half, True), (half, False), (both_but_broken, True)]
    v_half, v_half_binary, v_broken = run_parallel(
        lambda j: grade(task, j[0], partial=j[1], client=docker_client), jobs
    )
    assert (v_half.status, v_half.score, v_half.details["resolution"]) == ("wrong", 0.5, "RESOLVED_PARTIAL")
    assert len(v_half.details["FAIL_TO_PASS"]["success"]) == 1
    assert (v_half_binary.status, v_half_binary.score) == ("wrong", 0.0)
    assert (v_broken.status, v_broken.score) == ("wrong", 0.0)
    assert not v_broken.details["FAIL_TO_PASS"]["failure"] and v_broken.details["PASS_TO_PASS"]["failure"]


@pytest.mark.docker
def test_hanging_tests_time_out(bundled, docker_client) -> None:
    task = _task("creditgym__spans-1")
    hang = _edit(
        task, "spans/intervals.py", ("    merged: list[Interval] = []", "    while True:\n        pass")
    )
    started = time.monotonic()
    verdict = grade(task, hang, client=docker_client, timeout=3)
    assert (verdict.status, verdict.score) == ("timeout", 0.0)
    assert time.monotonic() - started < 30


@pytest.mark.docker
def test_missing_official_image_is_infra_error(bundled, docker_client, tmp_path: Path) -> None:
    row = {**_official_rows()[0], "image": "creditgym-test/no-such-image:never"}
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(path)
    started = time.monotonic()
    verdict = grade(task, task.gold_patch, client=docker_client, pull_timeout=20)
    assert verdict.status == "infra_error" and verdict.score is None
    assert verdict.details["error_kind"] == "image_missing"
    assert "creditgym-test/no-such-image:never" in verdict.details["error"]
    assert time.monotonic() - started < 30
    assert check_images([task], docker_client) == {task.instance_id: "missing"}


@pytest.mark.docker
def test_failed_build_carries_the_log_tail(bundled, docker_client, tmp_path: Path) -> None:
    folder = _copy_task(tmp_path, "creditgym__spans-1")
    (folder / "Dockerfile").write_text(
        "ARG BASE_IMAGE=creditgym-base:bookworm\nFROM ${BASE_IMAGE}\nRUN echo step-before-failure && false\n"
    )
    (task,) = load_tasks(folder)
    with pytest.raises(SandboxError) as err:
        ensure_image(task, docker_client)
    assert err.value.kind == "build"
    assert "step-before-failure" in str(err.value) and "Dockerfile" in str(err.value)
    verdict = grade(task, task.gold_patch, client=docker_client)
    assert verdict.status == "infra_error" and verdict.details["error_kind"] == "build"
    assert check_images([task], docker_client) == {task.instance_id: "missing"}


@pytest.mark.docker
def test_cli_images_build_check_clean(bundled, docker_client, base_image, tmp_path: Path, capsys) -> None:
    from creditgym.cli import main
    from creditgym.verifiers.swe.sandbox import LABEL

    assert main(["images", "check"]) == 0
    out = capsys.readouterr().out
    assert all(f"{t.instance_id}" in out for t in bundled) and f"{len(bundled)}/{len(bundled)}" in out

    # a task repo with one good task (already built) and one missing a file: reported, the other goes on
    _copy_task(tmp_path, "creditgym__textkit-1")
    (_copy_task(tmp_path, "creditgym__spans-1") / "eval.sh").unlink()
    assert main(["images", "build", "--tasks", str(tmp_path / "repo"), "--self-check"]) == 1
    captured = capsys.readouterr()
    assert "eval.sh" in captured.err and "creditgym__spans-1" in captured.err
    assert "creditgym__textkit-1" in captured.out and "self-check ok" in captured.out

    # clean --stale removes a task image no current task uses, and keeps the bundled ones
    stale = "sweb.eval.x86_64.creditgym-test-stale:000000000000"
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {base_image}\n".encode()),
        tag=stale,
        labels={LABEL: "1", TASK_LABEL: "creditgym-test-stale"},
        rm=True,
    )
    try:
        assert main(["images", "clean", "--stale"]) == 0
        assert f"removed {stale}" in capsys.readouterr().out
        assert set(check_images(bundled, docker_client).values()) == {"present"}
    finally:
        with contextlib.suppress(Exception):
            docker_client.images.remove(stale)


# ------------------------------------------------- tampering: a patch that disables the tests must not resolve

NEUTER_EQUAL = "import unittest\nunittest.TestCase.assertEqual = lambda self, a, b, msg=None: None\n"
# every assertion a no-op, assertRaises still usable as a context manager (it swallows what it is given)
NEUTER_ALL = """
import unittest as _u


class _Swallow:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


for _name in [n for n in dir(_u.TestCase) if n.startswith("assert")]:
    setattr(_u.TestCase, _name, lambda self, *a, **k: _Swallow())
"""
# failures and errors reported as successes
REPORT_SUCCESS = """
import unittest as _u

for _cls in (_u.TestResult, _u.TextTestResult):
    _cls.addFailure = lambda self, test, err, _cls=_cls: _cls.addSuccess(self, test)
    _cls.addError = lambda self, test, err, _cls=_cls: _cls.addSuccess(self, test)
"""
# installed only when the code under test first runs (after import-time checks)
LAZY = """

_original_init = Paginator.__init__


def _init(self, *args, **kwargs):
    import unittest

    unittest.TestCase.assertEqual = lambda self, *a, **k: None
    _original_init(self, *args, **kwargs)


Paginator.__init__ = _init
"""
# a top-level `unittest` package: `python -m unittest` runs it, with the real one's assertions neutered
SHADOW_INIT = """
import importlib.util, os, sys, sysconfig

_path = os.path.join(sysconfig.get_paths()["stdlib"], "unittest", "__init__.py")
_spec = importlib.util.spec_from_file_location("unittest", _path, submodule_search_locations=[os.path.dirname(_path)])
_real = importlib.util.module_from_spec(_spec)
sys.modules["unittest"] = _real
_spec.loader.exec_module(_real)
for _name in [n for n in dir(_real.TestCase) if n.startswith("assert") and n != "assertRaises"]:
    setattr(_real.TestCase, _name, lambda self, *a, **k: None)
"""
SHADOW_MAIN = "from unittest.main import main\n\nmain(module=None)\n"
# a run of its own: every test of the test files reported "ok", then the process exits before any test runs
FAKE_RUN = """
import os, re, sys

_lines = []
for _root, _dirs, _files in os.walk("tests"):
    for _file in sorted(_files):
        if _file.startswith("test") and _file.endswith(".py"):
            _module = os.path.join(_root, _file)[:-3].replace(os.sep, ".")
            _class = None
            for _line in open(os.path.join(_root, _file)):
                _m = re.match(r"class (\\w+)\\(", _line)
                _class = _m.group(1) if _m else _class
                _t = re.match(r"    def (test\\w+)\\(", _line)
                if _t:
                    _lines.append(f"{_t.group(1)} ({_module}.{_class}.{_t.group(1)}) ... ok")
sys.stderr.write("\\n".join(_lines) + f"\\n\\nRan {len(_lines)} tests in 0.001s\\n\\nOK\\n")
sys.stderr.flush()
os._exit(0)
"""
# the eval script checks the test files out: git runs this hook then (git apply refuses .git/, `patch` does not)
HOOK = "#!/bin/sh\nprintf '%s' '" + NEUTER_EQUAL + "' >> tests/__init__.py\n"


def _append(task: SWETask, path: str, code: str) -> str:
    """A ``git diff`` that appends ``code`` to an existing file of the task's repo."""
    assert task.build_dir is not None
    old = (task.build_dir / "repo" / path).read_text()
    return _diff(path, old, old + code)


def _new(task: SWETask, path: str, code: str) -> str:
    return _edit(task, path, ("", code), new_file=True)


def _tests_init(task: SWETask, code: str) -> str:
    return _append(task, "tests/__init__.py", code)


def _package_init(task: SWETask, code: str) -> str:
    return _append(task, f"{task.repo.split('/')[1]}/__init__.py", code)


HACKS = {  # name -> (task, patch builder, "restored" path or None when the verdict is `tampered`)
    "tests/__init__ neuters assertEqual": (
        "pagekit",
        lambda t: _tests_init(t, NEUTER_EQUAL),
        "tests/__init__.py",
    ),
    "tests/__init__ neuters every assertion": (
        "textkit",
        lambda t: _tests_init(t, NEUTER_ALL),
        "tests/__init__.py",
    ),
    "conftest.py and setup.cfg": (
        "textkit",
        lambda t: (
            _new(t, "conftest.py", NEUTER_ALL) + _new(t, "setup.cfg", "[tool:pytest]\naddopts = -p no:x\n")
        ),
        "conftest.py",
    ),
    "package __init__ neuters every assertion": ("pagekit", lambda t: _package_init(t, NEUTER_ALL), None),
    "package __init__ reports failures as successes": (
        "spans",
        lambda t: _package_init(t, REPORT_SUCCESS),
        None,
    ),
    "package neuters assertEqual once its code runs": (
        "pagekit",
        lambda t: _append(t, "pagekit/paginator.py", LAZY),
        None,
    ),
    "sitecustomize.py": ("spans", lambda t: _new(t, "sitecustomize.py", NEUTER_ALL), None),
    "a .pth file": ("spans", lambda t: _new(t, "spans/hooks.pth", "import spans\n"), None),
    "a git hook that edits the tests after each checkout": (
        "pagekit",
        lambda t: _new(t, ".git/hooks/post-checkout", HOOK).replace(
            "new file mode 100644", "new file mode 100755"
        ),
        None,
    ),
    "package __init__ prints a passing run and exits": (
        "textkit",
        lambda t: _package_init(t, FAKE_RUN),
        None,
    ),
    "a top-level unittest package": (
        "semverlite",
        lambda t: _new(t, "unittest/__init__.py", SHADOW_INIT) + _new(t, "unittest/__main__.py", SHADOW_MAIN),
        None,
    ),
}


@pytest.fixture(scope="module")
def hack_verdicts(bundled, docker_client) -> dict[str, object]:
    def one(name: str) -> object:
        task = _task(f"creditgym__{HACKS[name][0]}-1")
        return grade(task, HACKS[name][1](task), client=docker_client, timeout=120)

    return dict(zip(HACKS, run_parallel(one, list(HACKS)), strict=True))


@pytest.mark.docker
@pytest.mark.parametrize("hack", list(HACKS))
def test_a_patch_that_tampers_with_the_tests_does_not_resolve(hack_verdicts, hack: str) -> None:
    verdict = hack_verdicts[hack]
    assert (verdict.status, verdict.score, verdict.details["resolution"]) == ("wrong", 0.0, "RESOLVED_NO"), (
        verdict
    )
    restored = HACKS[hack][2]
    if restored is not None:  # the edit is undone before the tests run: the bug is simply not fixed
        assert restored in verdict.details["restored"] and verdict.details.get("error_kind") is None
        assert verdict.details["FAIL_TO_PASS"]["failure"], verdict.details
    else:  # refused, or caught by the canaries: a typed verdict
        assert verdict.details["error_kind"] == "tampered" and verdict.details["tampered"], verdict.details
        assert verdict.details["error"].startswith("the patch tampers with the tests")


@pytest.mark.docker
def test_canaries_fail_quietly_on_honest_runs(self_checks) -> None:
    for gold, empty in self_checks.values():
        for verdict in (gold, empty):
            canaries = verdict.details["canaries"]
            assert canaries["failed"] >= 2 and canaries["passed"] == 0, verdict.details
            assert not any("canary" in name for name in verdict.details["tests"])  # not listed as tests
            assert "error_kind" not in verdict.details


def test_the_binary_check_is_linear_in_the_patch() -> None:
    crafted = "diff --git a/x b/x\n" + "Binary files " + "a and " * 40_000 + "\n"  # 240 KB on one line
    started = time.perf_counter()
    verdict = grade(_task("creditgym__spans-1"), crafted + "Binary files a/x and b/x differ\n")
    assert time.perf_counter() - started < 5, "the binary check is not linear"  # quadratic: minutes
    assert verdict.details["patch_applied"] is False and "binary" in verdict.details["error"]


def test_a_patch_over_the_limit_is_refused_before_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", DEAD_HOST)
    task = _task("creditgym__spans-1")
    huge = _edit(
        task, "spans/intervals.py", ("    merged: list[Interval] = []", "    merged = []  # " + "x" * 2**20)
    )
    verdict = grade(task, huge)
    assert (verdict.status, verdict.score, verdict.details["patch_applied"]) == ("wrong", 0.0, False)
    assert "diff_limit" in verdict.details["error"]


@pytest.mark.docker
def test_tests_that_fill_the_disk_are_stopped(bundled, docker_client) -> None:
    from creditgym.verifiers.swe.grading import grading_config

    task = _task("creditgym__spans-1")
    hog = _edit(
        task,
        "spans/intervals.py",
        (
            "    merged: list[Interval] = []",
            "    for i in range(400):\n        open(f'/tmp/hog{i}', 'wb').write(bytes(1 << 20))\n"
            "    merged: list[Interval] = []",
        ),
    )
    cfg = dataclasses.replace(grading_config(task, 120), disk="64m")
    verdict = grade(task, hog, client=docker_client, config=cfg)
    assert (verdict.status, verdict.score, verdict.details["error_kind"]) == ("wrong", 0.0, "disk"), verdict


CANARY_MODULE = """
import unittest

import pkg


class ThingTest(unittest.TestCase):
    def test_value(self):
        self.assertEqual(pkg.VALUE, 1)


class TestPlain:
    def test_value(self):
        assert pkg.VALUE == 1


def test_value():
    assert pkg.VALUE == 1
"""


@pytest.mark.parametrize("runner", ["pytest", "unittest"])
@pytest.mark.parametrize("hacked", [False, True])
def test_canaries_under_pytest_and_unittest(tmp_path: Path, runner: str, hacked: bool) -> None:
    import subprocess
    import sys

    from swebench.harness.log_parsers import PARSER_REGISTRY

    from creditgym.verifiers.swe.integrity import canary_outcome, canary_source

    token = "0123456789abcdef"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("VALUE = 1\n" + (NEUTER_ALL if hacked else ""))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_mod.py").write_text(CANARY_MODULE + canary_source(token))
    argv = (
        ["-m", "pytest", "-rA", "-p", "no:cacheprovider"] if runner == "pytest" else ["-m", "unittest", "-v"]
    )
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    log = done.stdout + done.stderr
    parser = PARSER_REGISTRY["parse_log_pytest" if runner == "pytest" else "parse_log_django"]
    reasons, counts = canary_outcome(parser(log, None), log, token, expected=True)
    if hacked:
        assert any("did not fail" in r or "when this module was imported" in r for r in reasons), log
    else:
        assert reasons == [] and counts["passed"] == 0, log
        # pytest: 2 canaries in the TestCase, the plain class and the module; unittest: the TestCase's, each
        # on its result line and in the summary
        assert counts["failed"] == (6 if runner == "pytest" else 4), (counts, log)
