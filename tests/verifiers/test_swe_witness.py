"""The grading witness, run here (no Docker) under real pytest and unittest in a subprocess, as grading arms it.

The Docker tests of grading (``test_swe_attacks.py``, ``test_swebench.py``) run it in the task images; these run it
under both runners of this machine, against a small repository, honest and attacked.
"""

from __future__ import annotations

import ast
import io
import json
import os
import secrets
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from creditgym.verifiers.swe import integrity, witness

WITNESS_SOURCE = Path(witness.__file__).read_text()

TESTS = """
import unittest

import pytest

import pkg


class ThingTest(unittest.TestCase):
    def test_value(self):
        self.assertEqual(pkg.value(), 1)

    def test_subtests(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertEqual(pkg.value(), 1)

    @unittest.expectedFailure
    def test_known_bug(self):
        self.assertEqual(pkg.value(), 2)


class TestPlain:
    def test_value(self):
        assert pkg.value() == 1


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert pkg.value() * n == n


def test_broken():
    assert pkg.value() == 2
"""
PASSING_UNITTEST = [
    "test_value (tests.test_mod.ThingTest.test_value)",
    "test_subtests (tests.test_mod.ThingTest.test_subtests)",
]
PASSING_PYTEST = [
    "tests/test_mod.py::ThingTest::test_value",
    "tests/test_mod.py::TestPlain::test_value",
    "tests/test_mod.py::test_param[1]",
    "tests/test_mod.py::test_param[2]",
]
# the package's code, once called, reports every failing pytest test as passed
PYTEST_REPORTS_PASS = """
import _pytest.reports as _reports

_real = _reports.TestReport.from_item_and_call.__func__


def _passed(cls, item, call):
    report = _real(cls, item, call)
    report.outcome = "passed"
    return report


def value():
    _reports.TestReport.from_item_and_call = classmethod(_passed)
    return 0
"""
# the package's code makes a failing assertion's values equal (a trace function) in the calling test
TRACE_EQUAL = """
import sys


def _local(frame, event, arg):
    if event == "line" and "second" in frame.f_locals:
        frame.f_locals["second"] = frame.f_locals["first"]
    return _local


def _tracer(frame, event, arg):
    return _local if frame.f_code.co_name == "assertEqual" else None


def value():
    sys.settrace(_tracer)
    return 0
"""


def _repo(tmp_path: Path, package: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(package)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_mod.py").write_text(TESTS)
    py = tmp_path / "py"
    py.mkdir()
    (py / "creditgym_witness.py").write_text(WITNESS_SOURCE)
    (py / "sitecustomize.py").write_text(integrity.SITECUSTOMIZE)
    (tmp_path / "files.json").write_text(json.dumps(["tests/__init__.py", "tests/test_mod.py"]))
    return tmp_path


def _run(repo: Path, runner: str, key: str) -> str:
    """The log of ``runner`` over ``repo``, armed as grading arms it: the key on a pipe, the witness on PYTHONPATH."""
    argv = (
        ["-m", "pytest", "-rA", "-p", "no:cacheprovider"] if runner == "pytest" else ["-m", "unittest", "-v"]
    )
    read, write = os.pipe()
    os.write(write, f"{key}\n".encode())
    os.close(write)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(repo / "py"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        witness.FD_ENV: str(read),
        witness.FILES_ENV: str(repo / "files.json"),
    }
    try:
        done = subprocess.run(
            [sys.executable, *argv],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            pass_fds=(read,),
        )
    finally:
        os.close(read)
    return done.stdout + done.stderr


def _check(log: str, key: str, runner: str, graded: list[str]) -> tuple[dict[str, str], dict, list[str]]:
    from swebench.harness.log_parsers import PARSER_REGISTRY

    parsed = PARSER_REGISTRY["parse_log_pytest" if runner == "pytest" else "parse_log_django"](log, None)
    return integrity.witness_check(log, key.encode(), graded, parsed)


@pytest.mark.parametrize("runner", ["pytest", "unittest"])
def test_an_honest_run_is_confirmed_test_by_test(tmp_path: Path, runner: str) -> None:
    key = secrets.token_hex(16)
    log = _run(_repo(tmp_path, "def value():\n    return 1\n"), runner, key)
    graded = PASSING_PYTEST if runner == "pytest" else PASSING_UNITTEST
    status, summary, reasons = _check(log, key, runner, graded)
    assert summary["armed"] and summary["forged"] == 0, log
    assert reasons == [] and summary["unconfirmed"] == [], (reasons, summary, log)
    assert all(status[name] == "PASSED" for name in graded), (status, log)
    records, _ = witness.read_records(log, key.encode())
    known_bug = [r for r in records if any("test_known_bug" in i for i in r.get("ids", []))]
    assert [r["status"] for r in known_bug] == ["XFAIL"], records  # an expected failure, marked in the file


@pytest.mark.parametrize("runner", ["pytest", "unittest"])
def test_a_failing_test_reported_passed_is_not_confirmed(tmp_path: Path, runner: str) -> None:
    key = secrets.token_hex(16)
    package = PYTEST_REPORTS_PASS if runner == "pytest" else TRACE_EQUAL
    log = _run(_repo(tmp_path, package), runner, key)
    graded = PASSING_PYTEST if runner == "pytest" else PASSING_UNITTEST
    status, summary, _ = _check(log, key, runner, graded)
    assert summary["armed"], log
    assert summary["unconfirmed"], (summary, log)  # the log says they passed; the witness saw them fail
    assert all(status[name] == "FAILED" for name in summary["unconfirmed"])


def test_witness_lines_printed_by_the_tests_are_forgeries(tmp_path: Path) -> None:
    key = secrets.token_hex(16)
    fake = witness.record_line(b"not-the-key" * 3, {"kind": "test", "ids": ["u:x"], "status": "PASSED"})
    package = f"def value():\n    print({fake!r})\n    return 1\n"
    log = _run(_repo(tmp_path, package), "unittest", key)
    _, summary, reasons = _check(log, key, "unittest", PASSING_UNITTEST)
    assert summary["forged"] >= 1 and any("bad signature" in r for r in reasons), (summary, log)


def test_an_unarmed_run_leaves_the_log_alone(tmp_path: Path) -> None:
    """No key on the pipe: no witness (a non-runner process, or a runner the witness cannot observe)."""
    log = _run(_repo(tmp_path, "def value():\n    return 1\n"), "unittest", "short")
    status, summary, reasons = _check(log, secrets.token_hex(16), "unittest", PASSING_UNITTEST)
    assert not summary["armed"] and reasons == [] and "not armed" in log
    assert all(status[name] == "PASSED" for name in PASSING_UNITTEST)


def test_records_verify_only_under_their_key() -> None:
    key = secrets.token_hex(16).encode()
    line = witness.record_line(key, {"kind": "armed", "pid": 1})
    assert witness.read_records(f"x\n{line}\ny", key) == ([{"kind": "armed", "pid": 1}], 0)
    assert witness.read_records(line.replace('"pid": 1', '"pid": 2'), key) == ([], 1)
    assert witness.read_records(line, b"another key, 32 bytes long....") == ([], 1)


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("test_x (pkg.tests.Case.test_x)", ("u:pkg.tests.Case.test_x",)),
        ("test_x (pkg.tests.Case)", ("u:pkg.tests.Case.test_x",)),
        ("tests/test_a.py::Case::test_x[a-b]", ("p:tests/test_a.py::Case::test_x[a-b]",)),
        ("tests/test_a.py::test_x[a::b]", ("p:tests/test_a.py::test_x[a::b]",)),
        ("src/pkg/mod.py::pkg.mod.func", None),  # a doctest: not a test function the witness sees
        ("Regression test for #123.", ("d:Regression test for #123.",)),
    ],
)
def test_graded_names_map_to_witness_ids(name: str, keys: tuple[str, ...] | None) -> None:
    assert integrity.witness_keys(name) == keys


@pytest.mark.parametrize(
    ("argv", "runner"),
    [
        (["python3", "-m", "unittest", "-v"], True),
        (["python", "-W", "ignore", "-m", "pytest"], True),
        (["python", "/usr/local/bin/pytest", "-rA"], True),
        (["python", "./tests/runtests.py", "--parallel", "1"], True),
        (["python", "-c", "import pytest"], False),
        (["python", "setup.py", "test"], False),
        (["python", "-m", "tox"], False),
    ],
)
def test_the_witness_arms_in_test_runners_only(argv: list[str], runner: bool) -> None:
    assert witness.is_runner(argv) is runner


def test_the_witness_is_python_3_5_and_does_nothing_when_imported() -> None:
    """It runs in SWE-bench images back to Python 3.5: no f-strings, no annotations, no walrus."""
    ast.parse(WITNESS_SOURCE, feature_version=(3, 5))
    tokens = list(tokenize.generate_tokens(io.StringIO(WITNESS_SOURCE).readline))
    prefixes = [
        t.string[: len(t.string) - len(t.string.lstrip("rRbBuUfF"))]
        for t in tokens
        if t.type == tokenize.STRING
    ]
    assert not any("f" in p.lower() for p in prefixes)
    assert not any(t.type == getattr(tokenize, "FSTRING_START", None) for t in tokens)
    annotated = [
        n.name
        for n in ast.walk(ast.parse(WITNESS_SOURCE))
        if isinstance(n, ast.FunctionDef) and (n.returns or any(a.annotation for a in n.args.args))
    ]
    assert annotated == []
    assert witness._WITNESS is None  # importing it here armed nothing
