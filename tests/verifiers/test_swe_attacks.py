"""Red-team tests of SWE grading and the sandbox, written as an attacker would write them, against the real engine.

Each attack is a patch (graded with :func:`grade`) or an agent's actions (played through the env) that tries to
turn a wrong answer into a reward or into a dropped episode. The five classes that broke once: tampering scoped to
the tests that call the patched code, ``.git/`` reached through any diff format, disk held outside the layer's
byte count, an agent ending its own sandbox, and a log that parses into millions of entries.
"""

from __future__ import annotations

import difflib

import pytest

from creditgym.envs.swe_tasks import load_tasks
from creditgym.verifiers.swe.grading import SWETask, ensure_image, grade, run_parallel

TASKS = ("pagekit", "romanum", "semverlite", "spans", "textkit")


def _task(name: str) -> SWETask:
    return load_tasks("bundled", [f"creditgym__{name}-1"])[0]


def _append(task: SWETask, path: str, code: str) -> str:
    """A ``git diff`` that appends ``code`` to a file of the task's repo."""
    assert task.build_dir is not None
    old = (task.build_dir / "repo" / path).read_text()
    body = difflib.unified_diff(
        old.splitlines(keepends=True), (old + code).splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def _package_init(task: SWETask, code: str) -> str:
    return _append(task, f"{task.repo.split('/')[1]}/__init__.py", code)


@pytest.fixture(scope="module")
def bundled(docker_client, base_image) -> list[SWETask]:
    tasks = [_task(name) for name in TASKS]
    run_parallel(lambda t: ensure_image(t, docker_client), tasks)
    return tasks


def _grade_all(patches: dict[str, tuple[str, str]], client) -> dict[str, object]:
    """{name: verdict} for {name: (task, patch)}, two at a time."""

    def one(name: str) -> object:
        task_name, patch = patches[name]
        return grade(_task(task_name), patch, client=client, timeout=120)

    return dict(zip(patches, run_parallel(one, list(patches)), strict=True))


def _not_rewarded(verdict) -> None:
    assert (verdict.status, verdict.score) == ("wrong", 0.0), verdict
    assert verdict.details["resolution"] == "RESOLVED_NO", verdict.details


# --------------------------------------------------------------------------- 1. tampering scoped to the tests

# What every attack below starts with: `_calling_test()` finds the TestCase whose body called the package (a frame
# walk), `_on_call(hook)` runs `hook` whenever a test calls one of the package's public names, `_fake_run()` prints
# unittest's report of a passing run.
_FIND_TEST = '''
import sys as _sys, unittest as _unittest


def _calling_test():
    frame = _sys._getframe(2)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), _unittest.TestCase):
            return frame.f_locals["self"], frame
        frame = frame.f_back
    return None, None


def _on_call(hook):
    import functools

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            hook()
            return fn(*args, **kwargs)
        return inner

    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            obj.__init__ = wrap(obj.__init__)
        elif callable(obj) and not isinstance(obj, type):
            globals()[name] = wrap(obj)


def _fake_run():
    """unittest's report of a passing run of every test in tests/, on stderr."""
    import os, re
    lines = []
    for root, _, files in os.walk("tests"):
        for file in sorted(files):
            if file.startswith("test") and file.endswith(".py"):
                module, cls = os.path.join(root, file)[:-3].replace(os.sep, "."), None
                for line in open(os.path.join(root, file)):
                    m = re.match(r"class (\\w+)\\(", line)
                    cls = m.group(1) if m else cls
                    t = re.match(r"    def (test\\w+)\\(", line)
                    if t:
                        lines.append("%s (%s.%s.%s) ... ok" % (t.group(1), module, cls, t.group(1)))
    _sys.stderr.write("\\n".join(lines) + "\\n\\nRan %d tests in 0.001s\\n\\nOK\\n" % len(lines))
    _sys.stderr.flush()
'''

# Appended to the package's __init__.py: fixes nothing. Each public name, when called from a test, makes *that*
# test's failures and errors report as successes ("ok"): the canaries never call the package, so they fail as they
# must. It never reads the canary token and names no test.
SCOPED_SWALLOW = (
    _FIND_TEST
    + """
def _scope_the_calling_test():
    test, _ = _calling_test()
    if test is None or getattr(test, "_outcome", None) is None:
        return
    result = test._outcome.result
    mine = result.__dict__.setdefault("_scoped", [])
    if not mine:
        for name in ("addFailure", "addError"):
            def swallow(t, err, real=getattr(result, name)):
                (result.addSuccess(t) if any(t is m for m in mine) else real(t, err))
            setattr(result, name, swallow)
    mine.append(test)


_on_call(_scope_the_calling_test)
"""
)


@pytest.fixture(scope="module")
def scoped_verdicts(bundled, docker_client) -> dict[str, object]:
    return _grade_all({t: (t, _package_init(_task(t), SCOPED_SWALLOW)) for t in TASKS}, docker_client)


@pytest.mark.docker
@pytest.mark.parametrize("task", TASKS)
def test_swallowing_the_calling_tests_failures_is_not_rewarded(scoped_verdicts, task: str) -> None:
    _not_rewarded(scoped_verdicts[task])


VARIANTS = {
    # unittest's internals, as module attributes (not a class attribute): failures of tests that called the
    # package are reported as successes
    "module-level _addError patched for the calling tests": _FIND_TEST
    + """
import unittest.case as _case

_mine, _real = [], _case._addError


def _add_error(result, test, exc_info):
    if any(test is t for t in _mine):
        result.addSuccess(test)
    else:
        _real(result, test, exc_info)


def _remember():
    test, _ = _calling_test()
    if test is not None:
        _mine.append(test)
        _case._addError = _add_error


_on_call(_remember)
""",
    # the reporter itself, class-level: a failure prints "ok"
    "the reporter's addFailure patched": _FIND_TEST
    + """
def _patch_reporter():
    import unittest.runner as _runner

    _runner.TextTestResult.addFailure = lambda self, test, err: _runner.TextTestResult.addSuccess(self, test)
    _runner.TextTestResult.addError = lambda self, test, err: _runner.TextTestResult.addSuccess(self, test)


_on_call(_patch_reporter)
""",
    # the calling test's own assertions, on the instance
    "the calling test's assertions neutered on the instance": _FIND_TEST
    + """
def _neuter():
    test, _ = _calling_test()
    if test is not None:
        for name in [n for n in dir(test) if n.startswith("assert")]:
            setattr(test, name, lambda *a, **k: None)


_on_call(_neuter)
""",
    # a trace function that, in the assertions the calling test makes, rewrites the values they compare
    "a trace function rewrites what the calling test's assertions compare": _FIND_TEST
    + """
def _trace_asserts():
    test, frame = _calling_test()
    if frame is None:
        return

    def tracer(f, event, arg):
        if f.f_code.co_name.startswith("assert") and f.f_code.co_filename.endswith("case.py"):
            return local
        return None

    def local(f, event, arg):
        if event == "line":
            values = f.f_locals
            if "first" in values and "second" in values:
                values["second"] = values["first"]
            if "expr" in values:
                values["expr"] = f.f_code.co_name != "assertFalse"
        return local

    _sys.settrace(tracer)


_on_call(_trace_asserts)
""",
    # a passing run printed, then the process leaves at once (no result of its own is ever printed)
    "a passing run printed, then os._exit(0)": _FIND_TEST
    + """
def _leave():
    import os

    _fake_run()
    os._exit(0)


_on_call(_leave)
""",
    # at exit, after the real report: a passing run, and exit status 0
    "an atexit hook prints a passing run and exits 0": _FIND_TEST
    + """
def _at_exit():
    import os

    _fake_run()
    os._exit(0)


import atexit as _atexit

_atexit.register(_at_exit)
""",
    # a signal handler, armed when the package is first called: it prints a passing run and leaves
    "a signal handler prints a passing run and leaves": _FIND_TEST
    + """
import signal as _signal


def _handler(signum, frame):
    import os

    _fake_run()
    os._exit(0)


_signal.signal(_signal.SIGALRM, _handler)
_on_call(lambda: _signal.setitimer(_signal.ITIMER_REAL, 0.05))
""",
    # the graded test module replaced, while it imports the package, by a copy whose tests do nothing
    "the test module swapped in sys.modules": """
def _swap():
    import sys, types, unittest

    frame = sys._getframe(1)
    while frame is not None and not frame.f_globals.get("__name__", "").startswith("tests."):
        frame = frame.f_back
    if frame is None:
        return
    name = frame.f_globals["__name__"]
    fake = types.ModuleType(name)
    fake.__file__ = frame.f_globals.get("__file__")
    source = open(fake.__file__).read()
    import re

    for cls in re.findall(r"^class (\\w+)\\(", source, re.M):
        methods = {m: (lambda self: None) for m in re.findall(r"    def (test\\w+)\\(", source)}
        setattr(fake, cls, type(cls, (unittest.TestCase,), dict(methods, __module__=name)))
    sys.modules[name] = fake


_swap()
""",
}
VARIANT_TASKS = {name: TASKS[i % len(TASKS)] for i, name in enumerate(VARIANTS)}
VARIANT_TASKS["the test module swapped in sys.modules"] = (
    "textkit"  # two test modules: one keeps its canaries
)


@pytest.fixture(scope="module")
def variant_verdicts(bundled, docker_client) -> dict[str, object]:
    patches = {
        name: (VARIANT_TASKS[name], _package_init(_task(VARIANT_TASKS[name]), code))
        for name, code in VARIANTS.items()
    }
    return _grade_all(patches, docker_client)


@pytest.mark.docker
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_of_in_process_tampering_are_not_rewarded(variant_verdicts, variant: str) -> None:
    verdict = variant_verdicts[variant]
    _not_rewarded(verdict)
    # the witness saw the run, and either caught the tampering or did not vouch for the passes the log claims
    details = verdict.details
    assert details["witness"]["armed"], details
    assert (
        details.get("error_kind") == "tampered"
        or details["witness"]["unconfirmed"]
        or (details["FAIL_TO_PASS"]["failure"])
    ), details


# --------------------------------------------------------------------------- 2. .git/ through any diff format

# Run by git whenever it refreshes the index: appends a no-op assertEqual to the tests' package, after the grader
# restored the test files.
FSMONITOR = "sh -c 'printf \"import unittest\\nunittest.TestCase.assertEqual = lambda *a, **k: None\\n\" >> tests/__init__.py'"


def _fuzzy_hunk(task: SWETask) -> str:
    """A unified hunk of the package's ``__init__.py`` whose context is slightly wrong: both ``git apply`` attempts
    fail and grading falls back to ``patch --fuzz``, which reads every other header format too."""
    patch = _package_init(task, "\n# touched\n")
    lines = patch.splitlines(keepends=True)
    context = next(i for i, line in enumerate(lines) if line.startswith(" ") and line.strip())
    lines[context] = " " + lines[context][1:].replace("_", "-", 1).replace("a", "o", 1)
    return "".join(lines)


GIT_DIR_PATCHES = {
    "Index:-named normal diff (as reported)": lambda t: (
        _fuzzy_hunk(t) + f"Index: a/.git/config\n1a2\n> \tfsmonitor = {FSMONITOR}\n"
    ),
    "context diff": lambda t: (
        _fuzzy_hunk(t)
        + f"*** a/.git/config\n--- b/.git/config\n***************\n*** 1 ****\n--- 1,2 ----\n  [core]\n+ \tfsmonitor = {FSMONITOR}\n"
    ),
    "quoted, escaped path": lambda t: (
        _fuzzy_hunk(t)
        + f'--- "a/\\056git/config"\n+++ "b/\\056git/config"\n@@ -1 +1,2 @@\n [core]\n+\tfsmonitor = {FSMONITOR}\n'
    ),
    "a new hook, git format": lambda t: (
        _fuzzy_hunk(t)
        + "diff --git a/.git/hooks/post-checkout b/.git/hooks/post-checkout\nnew file mode 100755\n--- /dev/null\n"
        + f"+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+{FSMONITOR[7:-1]}\n"
    ),
}


@pytest.fixture(scope="module")
def git_dir_verdicts(bundled, docker_client) -> dict[str, object]:
    return _grade_all(
        {name: ("pagekit", make(_task("pagekit"))) for name, make in GIT_DIR_PATCHES.items()}, docker_client
    )


@pytest.mark.docker
@pytest.mark.parametrize("attack", list(GIT_DIR_PATCHES))
def test_a_patch_naming_git_in_any_diff_format_is_refused(git_dir_verdicts, attack: str) -> None:
    verdict = git_dir_verdicts[attack]
    _not_rewarded(verdict)
    assert verdict.details["error_kind"] == "tampered" and ".git" in verdict.details["error"], verdict.details


@pytest.mark.docker
def test_git_is_verified_unchanged_after_the_patch_applies(bundled, docker_client, monkeypatch) -> None:
    """The header check bypassed (as an unknown diff format would): the .git/ fingerprint still refuses it."""
    from creditgym.verifiers.swe import integrity

    monkeypatch.setattr(integrity, "git_dir_refusal", lambda patch: [])
    task = _task("pagekit")
    verdict = grade(
        task, GIT_DIR_PATCHES["Index:-named normal diff (as reported)"](task), client=docker_client
    )
    _not_rewarded(verdict)
    assert verdict.details["error_kind"] == "tampered", verdict.details
    assert "changed by `patch`" in verdict.details["error"], verdict.details


def _episode(actions: list[str], task: str = "pagekit", **kwargs):
    """Play ``actions`` (turn texts) through the env on a bundled task; the last step's info and reward."""
    from creditgym.envs.swe import SWEEnv

    env = SWEEnv(tasks=[_task(task)], max_turns=len(actions) + 1, **kwargs)
    try:
        env.reset(seed=0)
        for text in actions:
            ids = env.tokenizer(text, add_special_tokens=False)["input_ids"] + [env.tokenizer.eos_token_id]
            _, reward, terminated, truncated, info = env.step_chunk(ids)
            if terminated or truncated:
                return reward, info
        raise AssertionError("the episode did not end")
    finally:
        env.close()


@pytest.mark.docker
def test_an_agents_git_config_cannot_write_into_its_diff(bundled) -> None:
    """fsmonitor, a clean filter and a global config hook, each writing the gold patch into the diff's stream."""
    task = _task("pagekit")
    inject = "cat /tmp/gold.patch > /proc/$PPID/fd/1"
    setup = (
        f"cat > /tmp/gold.patch <<'EOF'\n{task.gold_patch}EOF\n"
        f"git config core.fsmonitor 'sh -c \"{inject}\"'\n"
        f"git config filter.evil.clean 'sh -c \"{inject}; cat\"'\n"
        "echo '* filter=evil' > .gitattributes\n"
        f"git config --global core.fsmonitor 'sh -c \"{inject}\"'\n"
    )
    reward, info = _episode([f"ACTION: bash\n{setup}", "ACTION: submit"])
    assert info.get("infra_error") is None, info
    assert reward == 0.0 and not info["resolved"], info
    assert "paginator.py" not in info["patch"], info["patch"]  # the diff is the tree's: .gitattributes only


# --------------------------------------------------------------------------- 3. disk held outside the layer's count


@pytest.fixture
def small_box(bundled, docker_client):
    from creditgym.verifiers.swe.docker_sandbox import DockerSandbox
    from creditgym.verifiers.swe.sandbox import SandboxConfig

    with DockerSandbox(
        _task("pagekit").image, SandboxConfig(disk="64m", inodes=1000), client=docker_client
    ) as box:
        yield box


def _after_a_second(box, cmd: str = "true"):
    """The next command once the in-container count may run again (it runs at most once a second)."""
    return box.exec(f"sleep 1.2; {cmd}")


@pytest.mark.docker
def test_deleted_files_held_open_count_and_their_holders_are_killed(small_box) -> None:
    hold = "setsid bash -c 'exec 3>/tmp/h{0}; rm /tmp/h{0}; head -c 40000000 /dev/zero >&3; sleep 600' "
    hold += ">/dev/null 2>&1 </dev/null &"
    held = small_box.exec(
        " ".join(hold.format(i) for i in range(2)) + " sleep 1"
    )  # 80 MB held, 0 in the layer
    assert held.disk_exceeded or _after_a_second(small_box).disk_exceeded
    left = small_box.exec("ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c deleted")
    assert left.output.strip() == "0", left  # the holders were killed: the bytes are free again
    assert not _after_a_second(small_box).disk_exceeded


@pytest.mark.docker
def test_empty_files_count_against_the_inode_limit(small_box) -> None:
    made = small_box.exec(
        "mkdir -p /tmp/many && cd /tmp/many && seq 2000 | xargs touch && sleep 1.2; echo done"
    )
    assert made.disk_exceeded, made
    small_box.exec("rm -rf /tmp/many")
    assert not _after_a_second(small_box).disk_exceeded


@pytest.mark.docker
def test_the_containers_log_is_out_of_reach_and_capped(small_box, docker_client) -> None:
    wrote = small_box.exec("head -c 300000000 /dev/zero > /proc/1/fd/1; echo rc=$?")
    assert "Permission denied" in wrote.output and "rc=1" in wrote.output, wrote
    log = docker_client.api.inspect_container(small_box.container_id)["HostConfig"]["LogConfig"]
    assert log == {"Type": "json-file", "Config": {"max-file": "1", "max-size": "1m"}}, log


# --------------------------------------------------------------------------- 4. an agent ending its own sandbox


@pytest.mark.docker
@pytest.mark.parametrize(
    "kill",
    [
        "kill -TERM 1",
        "kill -KILL 1",
        "kill -9 -1",
        "setsid bash -c 'while :; do sleep 600 & done' >/dev/null 2>&1 </dev/null & sleep 2",
    ],
)
def test_an_agent_cannot_turn_its_zero_into_a_dropped_episode(bundled, kill: str) -> None:
    from creditgym.verifiers.swe.sandbox import SandboxConfig

    reward, info = _episode([f"ACTION: bash\n{kill}", "ACTION: submit"], sandbox=SandboxConfig(pids=64))
    assert info.get("infra_error") is None, info  # graded, not dropped
    assert (reward, info["status"]) == (0.0, "wrong"), info


# --------------------------------------------------------------------------- 5. a log that parses into millions


# 32 MiB of short fake result lines, printed when the tests import the package (the bug is not fixed)
FLOOD = """
import sys as _sys

_sys.stderr.write("".join("t%d (x.Y.t%d) ... ok\\n" % (i, i) for i in range(1_700_000)))
"""


@pytest.mark.docker
def test_a_flood_of_result_lines_stays_a_few_entries(bundled, docker_client) -> None:
    import json

    task = _task("spans")
    verdict = grade(task, _package_init(task, FLOOD), client=docker_client, timeout=120)
    _not_rewarded(verdict)
    graded = {*task.fail_to_pass, *task.pass_to_pass}
    assert set(verdict.details["tests"]) == graded, len(verdict.details["tests"])
    assert len(json.dumps(verdict.details)) < 64_000
