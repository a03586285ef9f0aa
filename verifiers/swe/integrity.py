"""What a graded patch may not do to the tests, and the two observers that catch it doing so from inside them.

The policy (``creditgym.verifiers.swe.grading`` documents it for users; the red-team table and the limits are
in ``docs/envs/swe-security.md``):

- **Refused** (verdict ``wrong``, ``details["error_kind"] == "tampered"``): a patch that adds or changes a Python
  start-up hook (``sitecustomize.py``, ``usercustomize.py``, any ``*.pth``), adds a top-level module or package
  that shadows the standard library or a test runner (``unittest/``, ``pytest.py``...), or touches ``.git/``
  (hooks, config): no fix needs any of them, and each runs code before or instead of the tests.
- **Restored** to the base commit before the test patch is applied: every file the test patch touches, every test
  file the patch touches (under a ``tests``/``test``/``testing`` folder, or named ``test_*.py``, ``*_test.py``,
  ``tests.py``, ``conftest.py``) and the test runner's configuration (``pytest.ini``, ``tox.ini``,
  ``setup.cfg``, ``pyproject.toml``). Such edits are simply not graded.
- **Canaries** (:func:`canary_source`): checks appended to the test patch's modules whose every assertion must
  fail, run at import and as tests of each test class under names holding a random token. One that passes, or a
  run whose graded tests passed while not one canary reported, marks the run tampered.
- **The witness** (``creditgym.verifiers.swe.witness``; :func:`with_witness`, :func:`witness_check`): set up in
  the test runner's process before any code of the repository, it records what each test body did; a graded
  pass it did not see is a failure, and a probe of the test's own assertions that did not fail is tampering.
  Canaries catch what breaks the framework for every test; the witness catches what is scoped to the tests that
  call the patched code (reporting, exit, output, trace functions, a swapped test module).
"""

from __future__ import annotations

import codecs
import contextlib
import posixpath
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from creditgym.verifiers.swe import witness

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


# Every line a diff names a file on: git's, unified (---/+++), context (***/---), `Index:` (what GNU patch reads
# for normal-format and ed diffs), the `diff` command line itself, renames and copies.
_FILE_LINE = re.compile(
    r"^(?:diff --git |diff |--- |\+\+\+ |\*\*\* |Index:|Prereq:|rename from |rename to |copy from |copy to )(.*)$",
    re.M,
)


def _unquote(path: str) -> str:
    """A C-style quoted path (git's and GNU patch's ``"a/\\056git"``) as the bytes it names, decoded."""
    if len(path) >= 2 and path[0] == path[-1] == '"':
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            return codecs.escape_decode(path[1:-1].encode("utf-8"))[0].decode("utf-8", "replace")
    return path


def git_dir_refusal(patch: str) -> list[str]:
    """The file names in the patch's headers, in any diff format, that lie under a ``.git`` folder: its hooks and
    config (filters, fsmonitor) run code whenever git runs. ``git apply`` refuses them; ``patch`` would not."""
    reasons = []
    for match in _FILE_LINE.finditer(patch):
        for word in re.findall(r'"(?:[^"\\]|\\.)*"|\S+', match[1]):
            path = _unquote(word)
            if ".git" in re.split(r"[/\\]", path):
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
# creditgym.verifiers.swe.integrity). A patch that makes them pass is graded as tampering.
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
    at = log.find(marker)
    while at >= 0 and len(reasons) < 20:  # str.find: a flooded log is never split into lines
        if at == 0 or log[at - 1] in "\r\n":
            end = log.find("\n", at)
            line = log[at : end if end >= 0 else len(log)]
            reasons.append(line[len(marker) :].lstrip(": ").strip() or "a canary reported tampering")
        at = log.find(marker, at + len(marker))
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


_UNITTEST_NAME = re.compile(r"^(\w+) \(([\w.]+)\)$")


def witness_keys(name: str) -> tuple[str, ...] | None:
    """The witness ids that vouch for the graded test ``name``, or None for a test the witness cannot see.

    ``"test_x (pkg.tests.Case.test_x)"`` (or the older ``"test_x (pkg.tests.Case)"``): a unittest test;
    ``"tests/test_a.py::Case::test_x[p]"``: a pytest item of a test file; any other name: the first docstring line
    unittest prints in its place (``d:``, looked for only in runs that ran unittest tests).
    """
    match = _UNITTEST_NAME.match(name)
    if match:
        method, dotted = match.groups()
        return (f"u:{dotted}" if dotted.endswith("." + method) else f"u:{dotted}.{method}",)
    path, _, rest = name.split("[", 1)[0].partition("::")
    if rest:
        parts = rest.split("::")
        if path.endswith(".py") and is_test_file(path) and all(p.isidentifier() for p in parts):
            return (f"p:{name}",)
        return None
    return (f"d:{name}",)


def witness_check(
    log: str, key: bytes, graded: Sequence[str], status_map: dict[str, str]
) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """(``status_map`` with every pass the witness did not see turned ``FAILED``, a summary, tampering reasons).

    Without the witness's ``armed`` record (an interpreter or runner it does not observe), the log alone grades.
    A graded test passes only if every record of it is a genuine body that passed (``PASSED``/``XFAIL``) with
    its probes failing as they must and no trace function; a probe that passed, or a witness line with a bad
    signature, is tampering.
    """
    wanted = {k: name for name in graded for k in witness_keys(name) or ()}
    seen = {"unittest": False}

    def keep(record: dict[str, Any]) -> bool:
        ids = record.get("ids") or []
        seen["unittest"] = seen["unittest"] or any(str(i).startswith("u:") for i in ids)
        return record.get("kind") != "test" or any(i in wanted for i in ids)

    records, forged = witness.read_records(log, key, keep)
    reasons = (
        [f"{forged} witness line(s) with a bad signature: printed by the code under test"] if forged else []
    )
    armed = any(r.get("kind") == "armed" for r in records)
    summary: dict[str, Any] = {"armed": armed, "forged": forged, "unconfirmed": []}
    if not armed:
        return status_map, summary, reasons
    by_key: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        for i in record.get("ids") or []:
            by_key.setdefault(i, []).append(record)
    guarded = dict(status_map)
    for name in graded:
        keys = witness_keys(name)
        if keys is None or (keys[0].startswith("d:") and not seen["unittest"]):
            continue
        mine = [r for k in keys for r in by_key.get(k, [])]
        for record in mine:
            if record.get("missed"):
                reasons.append(
                    f"{name}: these assertions did not fail: {', '.join(map(str, record['missed']))}"
                )
        confirmed = bool(mine) and all(
            r.get("status") in witness.PASSING and r.get("genuine") and not r.get("flags") for r in mine
        )
        if guarded.get(name) in witness.PASSING and not confirmed:
            guarded[name] = "FAILED"
            summary["unconfirmed"].append(name)
    return guarded, summary, list(dict.fromkeys(reasons))


# Runs in every Python process of the test command (Python 3.5+): arms the witness, then the image's own
# sitecustomize (Debian's, conda's), which this one shadows on PYTHONPATH.
SITECUSTOMIZE = '''"""creditgym grading: the witness (creditgym_witness), then the image's own sitecustomize."""
import os
import sys

try:
    import creditgym_witness

    creditgym_witness.install()
except Exception as exc:  # never break the tests: an unarmed run is graded from its log alone
    sys.stderr.write("creditgym: the grading witness is not armed: %r\\n" % (exc,))
_here = os.path.dirname(os.path.abspath(__file__))
_path, _self = sys.path[:], sys.modules.pop("sitecustomize")
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
finally:
    sys.path[:] = _path
    sys.modules.setdefault("sitecustomize", _self)
'''


def with_witness(eval_script: str, py_dir: str, files_path: str) -> str:
    """``eval_script`` that reads the witness key from its stdin first and hands it to the test command.

    The key goes from the first line of stdin (read before anything else runs) through a pipe on fd 9 that the
    witness drains; it is never in a file, an argument or the environment. Right before the start marker, the
    script puts ``py_dir`` (the witness and its ``sitecustomize``) first on ``PYTHONPATH``. A script without the
    marker is returned with only the read (it runs unobserved).
    """
    read = "IFS= read -r creditgym_key; exec </dev/null\n"
    lines = eval_script.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if START_MARKER in line), None)
    if at is None:
        return read + eval_script
    arm = (
        '{ creditgym_flags=$-; set +x; } 2>/dev/null; exec 9< <(printf "%s\\n" "$creditgym_key"); '
        f"unset creditgym_key; export {witness.FD_ENV}=9 {witness.FILES_ENV}={shlex.quote(files_path)} "
        f'PYTHONPATH={shlex.quote(py_dir)}"${{PYTHONPATH:+:$PYTHONPATH}}"; '
        "case $creditgym_flags in *x*) set -x;; esac\n"
    )
    return "".join([read, *lines[:at], arm, *lines[at:]])
