"""Reading an eval log into per-test outcomes: bounded, failure-sticky, and checked against the witness.

1. **Bounded**: a log of more than :data:`MAX_LOG_LINES` lines is first reduced to the lines that name a graded
   test (or the canary token), the markers and the exit code line, at most :data:`MAX_LOG_LINES` of them, in order
   (between two kept lines, unittest's ``ok`` continuation and a stand-in for any other ``name ... `` line are
   kept, so the django parser reads the graded tests as it would have). Only graded tests (and up to
   :data:`MAX_CANARIES` canaries) are kept in the outcomes.
2. swebench's parser (``get_logs_eval``), then **failures stick**: a graded test whose result lines contradict each
   other fails; for unittest logs, one that unittest's summary lists (``FAIL: name``) fails.
3. **The witness** (:func:`creditgym.verifiers.swe.integrity.witness_check`): a pass it did not see is a failure.
4. **Bounded in time and guarded** (:func:`score_bounded`, what the grader calls): all of it runs in a child
   process killed after :data:`PARSE_TIMEOUT_S`; a log that makes any parser raise (swebench's ``int()`` of a
   5,000-digit exit code) or run past the limit is unreadable, the patch's failure, never the grader's exception.

``swebench.harness`` is imported inside the functions: it takes about a second and calls ``load_dotenv()``.
"""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from creditgym.verifiers.swe import integrity
from creditgym.verifiers.swe.tasks import SWETask

MAX_LOG_LINES = 50_000
MAX_CANARIES = 1_000
PARSE_TIMEOUT_S = 60.0  # a 32 MiB log parses in a few seconds
_END_MARKER = ">>>>> End Test Output"
# swebench's markers: a line holding one is kept (its first and last occurrence)
_MARKERS = (
    integrity.START_MARKER,
    _END_MARKER,
    ">>>>> Test Exit Code",
    ">>>>> Patch Apply Failed",
    ">>>>> Reset Failed",
    ">>>>> Tests Errored",
    ">>>>> Tests Timed Out",
)
_UNITTEST_SUMMARY = re.compile(r"^(FAIL|ERROR): (.+)$", re.M)
_OK_LINE = re.compile(r"^[ \t]*ok", re.M)
_WORD = re.compile(r"\w+")
_ELIDED = "creditgym-elided ... "


@dataclass(frozen=True)
class Scored:
    """What an eval log says.

    Attributes:
        readable: swebench could grade the log (markers, results, a consistent exit code).
        tests: Every graded test's outcome (``MISSING`` when absent).
        report: ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (``success`` and ``failure`` lists).
        resolution: swebench's ``RESOLVED_FULL`` / ``RESOLVED_PARTIAL`` / ``RESOLVED_NO``.
        witness: The witness's summary (``armed``, ``forged``, ``unconfirmed``).
        canaries: How many canaries failed as they must, passed, or did neither.
        tampering: Why the canaries or the witness say the run was tampered with (empty: they do not).
        other_tests: How many parsed outcomes of tests that are not graded were left out.
        error: Why the log could not be read at all (a parser raised or ran past its time limit); empty when read.
    """

    readable: bool
    tests: dict[str, str]
    report: dict[str, Any]
    resolution: str
    witness: dict[str, Any] = field(default_factory=dict)
    canaries: dict[str, int] = field(default_factory=dict)
    tampering: list[str] = field(default_factory=list)
    other_tests: int = 0
    error: str = ""


def score_bounded(
    task: SWETask,
    log: str,
    *,
    key: bytes,
    token: str,
    canaries_expected: bool,
    timeout: float = PARSE_TIMEOUT_S,
) -> Scored:
    """:func:`score` in a child process killed after ``timeout`` seconds.

    The log is the patch's output: a log that makes a parser raise or run past ``timeout`` is returned as
    unreadable, every graded test ``MISSING`` and failed, with ``error`` saying why. Only a child that cannot be
    started raises.
    """
    with tempfile.TemporaryDirectory(prefix="creditgym-score-") as tmp:
        job, out = os.path.join(tmp, "job.pickle"), os.path.join(tmp, "scored.pickle")
        with open(job, "wb") as fh:
            pickle.dump((task, log, key, token, canaries_expected), fh, protocol=pickle.HIGHEST_PROTOCOL)
        cmd = [sys.executable, "-c", f"from {__name__} import _child; _child()", job, out]
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return _unreadable(task, f"reading the test log took more than {timeout:g} s (PARSE_TIMEOUT_S)")
        if done.returncode == 0 and os.path.exists(out):
            with open(out, "rb") as fh:
                scored: Scored = pickle.load(fh)  # written by our own child, from our own classes
            return scored
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return _unreadable(task, f"the test log could not be read: {said[0][:500]}")


def _unreadable(task: SWETask, error: str) -> Scored:
    report = {
        "FAIL_TO_PASS": {"success": [], "failure": list(task.fail_to_pass)},
        "PASS_TO_PASS": {"success": [], "failure": list(task.pass_to_pass)},
    }
    tests = dict.fromkeys([*task.fail_to_pass, *task.pass_to_pass], "MISSING")
    return Scored(False, tests, report, "RESOLVED_NO", error=error)


def _child() -> None:
    """The child of :func:`score_bounded`: ``argv[1]`` holds the job, the result goes to ``argv[2]``."""
    with open(sys.argv[1], "rb") as fh:
        task, log, key, token, expected = pickle.load(fh)
    scored = score(task, log, key=key, token=token, canaries_expected=expected)
    with open(sys.argv[2], "wb") as fh:
        pickle.dump(scored, fh, protocol=pickle.HIGHEST_PROTOCOL)


def score(task: SWETask, log: str, *, key: bytes, token: str, canaries_expected: bool) -> Scored:
    """Grade ``log`` by swebench's rules, bounded, failure-sticky, canaried and witnessed.

    Args:
        task: The task.
        log: The eval script's output.
        key: The witness's key.
        token: The canaries' token.
        canaries_expected: The eval script ran canaries (see ``integrity.canary_outcome``).
    """
    from swebench.harness.constants import EvalType
    from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    graded = [*task.fail_to_pass, *task.pass_to_pass]
    parsed_log = bounded(log, [*graded, token])
    spec = make_test_spec(task.instance())
    with tempfile.TemporaryDirectory(prefix="creditgym-grade-") as tmp:
        path = os.path.join(tmp, "test_output.txt")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(parsed_log)
        status_map, readable = get_logs_eval(spec, path)
    if readable:
        parser = PARSER_REGISTRY[task.log_parser]
        status_map = guard(parsed_log, status_map, lambda text: parser(text, spec), task)
    kept = {name: status_map[name] for name in graded if name in status_map}
    canaries = [name for name in status_map if token in name][:MAX_CANARIES]
    kept.update((name, status_map[name]) for name in canaries)
    other = len(status_map) - len(kept)
    tampering, canary_counts = integrity.canary_outcome(kept, log, token, expected=canaries_expected)
    kept = {name: status for name, status in kept.items() if token not in name}
    kept, witness, witness_tampering = integrity.witness_check(log, key, graded, kept)
    gold = {"FAIL_TO_PASS": list(task.fail_to_pass), "PASS_TO_PASS": list(task.pass_to_pass)}
    report = get_eval_tests_report(kept, gold, eval_type=EvalType(task.eval_type))
    report = {k: report[k] for k in ("FAIL_TO_PASS", "PASS_TO_PASS")}
    resolution = get_resolution_status(report) if readable else "RESOLVED_NO"
    for name in graded:
        kept.setdefault(name, "MISSING")
    tampering = list(dict.fromkeys([*tampering, *witness_tampering]))
    return Scored(readable, kept, report, resolution, witness, canary_counts, tampering, other)


def guard(
    log: str, status_map: dict[str, str], parser: Callable[[str], dict[str, str]], task: SWETask
) -> dict[str, str]:
    """Trust failures over success lines: code under test runs in the runner's process, so a patch can print
    result lines of its own (an ``atexit`` hook suffices) and the parser keeps the last one per test.

    A graded test whose result lines contradict each other (one passed, another failed or errored, each line
    parsed on its own) fails; for unittest logs, a graded test that unittest's own summary lists (``FAIL: name``)
    fails. Only lines naming a graded test are parsed again, so a huge log costs little more than swebench's own.
    """
    start, end = log.find(integrity.START_MARKER), log.rfind(_END_MARKER)
    section = log[start:end] if 0 <= start < end else log
    graded = {*task.fail_to_pass, *task.pass_to_pass}
    guarded = dict(status_map)
    seen: dict[str, set[str]] = {}
    for at in naming(section, graded):
        for name, status in parser(section[at : _line_end(section, at)]).items():
            seen.setdefault(name, set()).add(status)
    for name, statuses in seen.items():
        bad = statuses & {"FAILED", "ERROR"}
        if bad and "PASSED" in statuses and name in guarded:
            guarded[name] = "ERROR" if "ERROR" in bad else "FAILED"
    if task.log_parser == "parse_log_django":
        for match in _UNITTEST_SUMMARY.finditer(section):
            if match[2].strip() in graded:
                guarded[match[2].strip()] = "ERROR" if match[1] == "ERROR" else "FAILED"
    return guarded


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def naming(text: str, names: Sequence[str] | set[str], limit: int = MAX_LOG_LINES) -> list[int]:
    """Start offsets of the lines of ``text`` holding the longest word of any of ``names``, in order, at most
    ``limit`` of them (one C-speed scan per word)."""
    starts: set[int] = set()
    for word in {max(_WORD.findall(name) or [name], key=len) for name in names}:
        at = text.find(word)
        while at >= 0 and len(starts) < limit:
            starts.add(text.rfind("\n", 0, at) + 1)
            at = text.find(word, _line_end(text, at))
    return sorted(starts)[:limit]


def bounded(log: str, names: Sequence[str]) -> str:
    """``log`` itself when it has at most :data:`MAX_LOG_LINES` lines; else the lines a parser needs to grade
    ``names``: the lines naming them, the marker and exit code lines, and between two of those an ``ok`` line
    that follows the first before any other ``name ... `` line, then a stand-in for that line."""
    if log.count("\n") <= MAX_LOG_LINES:
        return log
    markers = {log.rfind("\n", 0, at) + 1 for m in _MARKERS for at in (log.find(m), log.rfind(m)) if at >= 0}
    starts = sorted({*naming(log, names), *markers})
    kept: list[str] = []
    seen: set[str] = set()
    for i, at in enumerate(starts[:MAX_LOG_LINES]):
        end = _line_end(log, at)
        line = log[at:end]
        if line not in seen:
            seen.add(line)
            kept.append(line)
        gap_end = starts[i + 1] if i + 1 < len(starts) else len(log)
        other = log.find(" ... ", end, gap_end)
        if _OK_LINE.search(log, end + 1, other if other >= 0 else gap_end):
            kept.append("ok")
        if other >= 0:
            kept.append(_ELIDED)
    return "\n".join(kept) + "\n"
