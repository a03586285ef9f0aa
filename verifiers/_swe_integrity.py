"""What a graded patch may not do to the tests, and the canaries that catch it doing so from inside the tests.

The policy (``creditgym.verifiers.swebench`` documents it for users):

- **Refused** (verdict ``wrong``, ``details["error_kind"] == "tampered"``): a patch that adds or changes a Python
  start-up hook (``sitecustomize.py``, ``usercustomize.py``, any ``*.pth``), adds a top-level module or package
  that shadows the standard library or a test runner (``unittest/``, ``pytest.py``...), or touches ``.git/``
  (hooks, config): no fix needs any of them, and each runs code before or instead of the tests.
- **Restored** to the base commit before the test patch is applied: every file the test patch touches, every test
  file the patch touches (under a ``tests``/``test``/``testing`` folder, or named ``test_*.py``, ``*_test.py``,
  ``tests.py``, ``conftest.py``) and the test runner's configuration (``pytest.ini``, ``tox.ini``,
  ``setup.cfg``, ``pyproject.toml``). Such edits are simply not graded.
- **Canaries**: what the patch changes in the code under test runs in the test process and can still neuter the
  framework (``TestCase.assertEqual = ...`` in the package's ``__init__.py``). Right before the tests run, every
  test module of the test patch gets code appended that (1) at import, runs two checks through ``unittest`` (one
  whose every assertion must fail, one that must error) and stops the module with a marker line if either
  passes, and (2) adds the same two checks as tests to each of the module's test classes and as module-level
  test functions, under names holding a random token. A canary reported as passing (``PASSED``/``XFAIL``)
  marks the run tampered, and so does a run in which graded tests passed while not one canary reported (a patch
  that prints a run of its own and exits). Canaries need the eval script to run the test patch's modules whole,
  as SWE-bench's scripts do; a script that selects single tests makes every run ``tampered``, which the gold
  self-check shows.

Limits: code under test runs in the test process with the tests' privileges, so a patch written against these
canaries (reading their token from the test file and printing their failures) or one that special-cases the
graded tests by name is not caught here.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence

TEST_DIRS = frozenset({"tests", "test", "testing"})
RUNNER_CONFIG = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
RUNNERS = frozenset({"pytest", "_pytest", "py", "pluggy", "nose", "nose2", "unittest2", "xdist"})
START_MARKER = ">>>>> Start Test Output"
CANARY_PREFIX = "test_zz_canary_"
_TAMPER_LINE = "CREDITGYM-CANARY {token} TAMPERED"


def is_test_file(path: str) -> bool:
    """Under a test folder, or named like a test module or ``conftest.py``."""
    parts = path.split("/")
    name = parts[-1]
    return (
        bool(TEST_DIRS.intersection(parts[:-1]))
        or name in ("conftest.py", "tests.py")
        or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))
    )


def is_test_module(path: str) -> bool:
    """A Python file a runner imports as tests (where canaries go)."""
    name = posixpath.basename(path)
    return name.endswith(".py") and (
        name.startswith("test") or name.endswith("_test.py") or name == "tests.py"
    )


def _shadowed(path: str) -> str | None:
    top = path.split("/")[0]
    module = top[:-3] if top.endswith(".py") else top if "/" in path else None
    if module and (module in sys.stdlib_module_names or module in RUNNERS):
        return module
    return None


_HEADER_PREFIXES = ("diff --git ", "--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ")


def git_dir_refusal(patch: str) -> list[str]:
    """Paths under ``.git/`` in the patch's headers: hooks, config (filters, fsmonitor) run code when the eval
    script calls git. ``git apply`` refuses them, but the ``patch`` fallback would write them."""
    reasons = []
    for line in patch.splitlines():
        prefix = next((p for p in _HEADER_PREFIXES if line.startswith(p)), None)
        if prefix is not None:
            path = line[len(prefix) :].split("\t")[0].strip().strip('"')
            if ".git" in re.split(r"[/ ]", path):
                reasons.append(f"{path}: inside the repository's .git folder (hooks and config run code)")
    return list(dict.fromkeys(reasons))


def refusal(changed: Iterable[str], added: Iterable[str]) -> list[str]:
    """Why a patch is refused: one line per offending path (empty: not refused).

    Args:
        changed: Every path the patch changed, added or deleted.
        added: The paths it created.
    """
    reasons = []
    for path in changed:
        name = posixpath.basename(path)
        if name in STARTUP_HOOKS or name.endswith(".pth"):
            reasons.append(f"{path}: a Python start-up hook (runs in every Python process, the tests' too)")
    for path in added:
        module = _shadowed(path)
        if module is not None:
            reasons.append(f"{path}: shadows the {module!r} module the tests import or run with")
    return reasons


def restored(changed: Iterable[str], test_files: Sequence[str]) -> list[str]:
    """The paths reset to the base commit before the test patch: its files, and test files the patch changed."""
    keep = dict.fromkeys(test_files)
    for path in changed:
        if is_test_file(path) or posixpath.basename(path) in RUNNER_CONFIG:
            keep.setdefault(path, None)
    return list(keep)


def reset_command(paths: Sequence[str]) -> str:
    """Shell lines that put each path back as it is at ``HEAD`` (deleting it when ``HEAD`` has none)."""
    lines = []
    for path in paths:
        q = shlex.quote(path)
        lines.append(
            f"if git cat-file -e HEAD:{q} 2>/dev/null; then git checkout -q HEAD -- {q}; else rm -rf -- {q}; fi"
        )
    return " && ".join(lines) or "true"


# Appended to test modules; Python 3.3+ syntax (SWE-bench environments go back to 3.5), no f-strings.
_CANARY = """

# creditgym grading canary {token}: checks that must fail, in this very test process (see
# creditgym.verifiers._swe_integrity). A patch that makes them pass is graded as tampering.
def _creditgym_canary_{token}(ns):
    import sys
    import unittest

    token = "{token}"

    def fails(self):
        missed = []
        checks = [
            ("assertEqual", lambda: self.assertEqual(token, token + "!")),
            ("assertNotEqual", lambda: self.assertNotEqual(token, token)),
            ("assertTrue", lambda: self.assertTrue(token == "")),
            ("assertFalse", lambda: self.assertFalse(token)),
            ("assertIs", lambda: self.assertIs(token, None)),
            ("assertIsNone", lambda: self.assertIsNone(token)),
            ("assertIsNotNone", lambda: self.assertIsNotNone(None)),
            ("assertIn", lambda: self.assertIn(token, [])),
            ("assertNotIn", lambda: self.assertNotIn(token, [token])),
            ("assertAlmostEqual", lambda: self.assertAlmostEqual(1.0, 2.0)),
            ("assertGreater", lambda: self.assertGreater(1, 2)),
            ("assertLess", lambda: self.assertLess(2, 1)),
            ("assertListEqual", lambda: self.assertListEqual([token], [])),
            ("assertDictEqual", lambda: self.assertDictEqual({{token: 1}}, {{}})),
            ("assertCountEqual", lambda: self.assertCountEqual([token], [])),
            ("assertRegex", lambda: self.assertRegex(token, "^$")),
            ("assertIsInstance", lambda: self.assertIsInstance(token, int)),
            ("assertRaises", lambda: self.assertRaises(KeyError, str, token)),
            ("assert", lambda: _plain_assert(token)),
        ]
        for name, check in checks:
            try:
                check()
            except AssertionError:
                continue
            missed.append(name)
        try:
            with self.assertRaises(KeyError):
                token.upper()
        except AssertionError:
            pass
        else:
            missed.append("assertRaises as a context manager")
        if not missed:
            self.fail("creditgym canary " + token + ": every assertion failed, as it must")
        _report("these assertions did not fail: " + ", ".join(missed))

    def errors(self):
        raise RuntimeError("creditgym canary " + token + ": this test must error")

    def _plain_assert(value):
        assert value == "", value

    def _report(what):
        line = "CREDITGYM-CANARY " + token + " TAMPERED: " + what + "\\n"
        try:
            import os
            os.write(1, line.encode("utf-8", "replace"))
        except Exception:
            sys.stdout.write(line)

    def bare(check):
        def test(*args):
            check(unittest.TestCase())
        return test

    import io

    probe = type("CreditgymProbe", (unittest.TestCase,), {{"test_fails": fails, "test_errors": errors}})
    suite = lambda: unittest.TestSuite([probe("test_fails"), probe("test_errors")])  # noqa: E731
    bare_result = unittest.TestResult()
    suite().run(bare_result)
    runner_result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite())
    for result in (bare_result, runner_result):
        recorded = set(t._testMethodName for t, _ in list(result.failures) + list(result.errors))
        if recorded != set(["test_fails", "test_errors"]) or result.wasSuccessful():
            _report("the canaries passed when this module was imported")
            raise ImportError("creditgym canary " + token + ": the test framework was tampered with")
    prefix = "{prefix}" + token + "_"
    for obj in list(ns.values()):
        if not isinstance(obj, type) or obj.__module__ != ns.get("__name__"):
            continue
        if issubclass(obj, unittest.TestCase):
            setattr(obj, prefix + "fails", fails)
            setattr(obj, prefix + "errors", errors)
        elif obj.__name__.startswith("Test") and "__init__" not in vars(obj):
            setattr(obj, prefix + "fails", bare(fails))
            setattr(obj, prefix + "errors", bare(errors))
    ns[prefix + "fails"] = bare(fails)
    ns[prefix + "errors"] = bare(errors)


_creditgym_canary_{token}(globals())
del _creditgym_canary_{token}
"""


def canary_source(token: str) -> str:
    """The code appended to every test module of the test patch (``token``: random hex, one per grading)."""
    if not re.fullmatch(r"[0-9a-f]{8,64}", token):
        raise ValueError(f"canary token must be 8-64 lowercase hex digits, got {token!r}")
    return _CANARY.format(token=token, prefix=CANARY_PREFIX)


def with_canaries(eval_script: str, modules: Sequence[str], canary_path: str) -> str:
    """``eval_script`` with a line that appends the canary to ``modules`` right before the test output starts.

    The line goes after everything the script does to the test files (checkout, test patch), so the canaries are
    in the files the tests import. A script without the start marker is returned unchanged (it cannot be graded).
    """
    lines = eval_script.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if START_MARKER in line), None)
    if at is None or not modules:
        return eval_script
    files = " ".join(shlex.quote(m) for m in modules)
    append = (
        f'for creditgym_f in {files}; do [ -f "$creditgym_f" ] && cat {shlex.quote(canary_path)} '
        '>> "$creditgym_f"; done\n'
    )
    return "".join([*lines[:at], append, *lines[at:]])


def canary_outcome(
    status_map: Mapping[str, str], log: str, token: str, *, expected: bool
) -> tuple[list[str], dict[str, int]]:
    """(why the run counts as tampered, canary counts) from the parsed outcomes and the raw log.

    Args:
        status_map: Every parsed test outcome, canaries included.
        log: The eval log.
        token: The run's canary token.
        expected: Canaries were put in test modules the eval script runs; then a run where graded tests passed
            but not one canary reported is a run the log does not describe (a patch that printed a run of its own
            and exited before the tests).
    """
    reasons = []
    marker = _TAMPER_LINE.format(token=token)
    for line in log.splitlines():
        if line.startswith(marker):
            reasons.append(line[len(marker) :].lstrip(": ").strip() or "a canary reported tampering")
    counts = {"failed": 0, "passed": 0, "other": 0}
    for name, status in status_map.items():
        if token not in name:
            continue
        if status in ("FAILED", "ERROR"):
            counts["failed"] += 1
        elif status in ("PASSED", "XFAIL"):
            counts["passed"] += 1
            reasons.append(f"canary {name} {status} (it must fail)")
        else:
            counts["other"] += 1
    passed = any(status == "PASSED" for name, status in status_map.items() if token not in name)
    if expected and passed and not any(counts.values()):
        reasons.append("tests passed but no canary ran: the log is not the test run's")
    return list(dict.fromkeys(reasons)), counts
