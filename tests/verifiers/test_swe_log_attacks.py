"""Red-team tests of SWE grading, second round: a printed line that hangs or crashes the log's reading, and git
output that hides an edited test from the restore. Each attack is a patch graded with :func:`grade` against the
real engine; the log's readers are also played directly, without Docker.
"""

from __future__ import annotations

import difflib

import pytest

from creditgym.envs.swe_tasks import load_tasks
from creditgym.verifiers.swe import integrity, scoring, witness
from creditgym.verifiers.swe.grading import SWETask, ensure_image, grade, run_parallel

KEY = b"k" * 32


def _task(name: str) -> SWETask:
    return load_tasks("bundled", [f"creditgym__{name}-1"])[0]


def _diff(path: str, old: str, new: str, *, new_file: bool = False) -> str:
    body = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        "/dev/null" if new_file else f"a/{path}",
        f"b/{path}",
    )
    header = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if new_file else "")
    return header + "".join(body)


def _printing(task: SWETask, code: str) -> str:
    """A patch that runs ``code`` when the tests import the package (the bug is not fixed)."""
    assert task.build_dir is not None
    path = f"{task.repo.split('/')[1]}/__init__.py"
    old = (task.build_dir / "repo" / path).read_text()
    return _diff(path, old, old + code)


def _log(task: SWETask, body: str) -> str:
    """An eval log whose first graded test passed, with ``body`` printed during the run."""
    name = task.fail_to_pass[0]
    return (
        f"{integrity.START_MARKER}\n{name} ... ok\n{body}\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
    )


# --------------------------------------------------------------------------- 1. a line that hangs the reading

# Each line holds the witness's record prefix over and over, or many prefixed lines run into one long line: the
# old reader scanned to the end of the line once per occurrence (quadratic; hours for 30 MiB).
PREFIX_LINE = witness.PREFIX * 1_800_000
PREFIXED_LINES_AND_FILLER = "\n".join([witness.PREFIX] * 2_000) + "y" * 30_000_000


@pytest.mark.parametrize(
    ("log", "forged"), [(PREFIX_LINE, 1), (PREFIXED_LINES_AND_FILLER, 2_000), ("x " + PREFIX_LINE, 0)]
)
def test_the_witness_reads_each_line_once(log: str, forged: int) -> None:
    assert witness.read_records(log, KEY) == ([], forged)


def test_a_record_line_is_read_after_a_flood_of_prefixes() -> None:
    line = witness.record_line(KEY, {"kind": "armed", "pid": 1})
    log = f"{PREFIXED_LINES_AND_FILLER}\n{line}\n{PREFIX_LINE}"
    assert witness.read_records(log, KEY) == ([{"kind": "armed", "pid": 1}], 2_001)


# --------------------------------------------------------------------------- 2. a line that crashes a parser


def test_a_log_a_parser_raises_on_is_unreadable_not_an_exception() -> None:
    task = _task("spans")
    log = _log(task, ">>>>> Test Exit Code: " + "1" * 5_000)  # swebench: int() of 5,000 digits raises
    with pytest.raises(ValueError, match="4300 digits"):
        scoring.score(task, log, key=KEY, token="0" * 16, canaries_expected=False)
    scored = scoring.score_bounded(task, log, key=KEY, token="0" * 16, canaries_expected=False)
    assert not scored.readable and scored.resolution == "RESOLVED_NO", scored
    assert "4300 digits" in scored.error, scored.error
    assert set(scored.tests.values()) == {"MISSING"}, scored.tests
    assert scored.report["FAIL_TO_PASS"]["failure"] == list(task.fail_to_pass), scored.report


def test_reading_a_log_past_its_time_limit_is_unreadable() -> None:
    task = _task("spans")
    # a millisecond: less than any Python process takes to start, so the child is always killed first
    scored = scoring.score_bounded(
        task, _log(task, ""), key=KEY, token="0" * 16, canaries_expected=False, timeout=1e-3
    )
    assert not scored.readable and "took more than 0.001 s" in scored.error, scored


def test_a_log_within_the_limit_reads_as_in_process() -> None:
    task = _task("spans")
    args = {"key": KEY, "token": "0" * 16, "canaries_expected": False}
    log = _log(task, "")
    assert scoring.score_bounded(task, log, **args) == scoring.score(task, log, **args)


# --------------------------------------------------------------------------- graded against the engine


@pytest.fixture(scope="module")
def bundled(docker_client, base_image) -> list[SWETask]:
    tasks = [_task(name) for name in ("pagekit", "spans")]
    run_parallel(lambda t: ensure_image(t, docker_client), tasks)
    return tasks


PRINTED = {
    "a 30 MiB line of the witness's prefix": f"import sys\nsys.stdout.write({witness.PREFIX!r} * 1_800_000 + '\\n')\n",
    "2,000 prefixed lines and 30 MB of filler": (
        f"import sys\nsys.stdout.write('\\n'.join([{witness.PREFIX!r}] * 2000) + 'y' * 30_000_000 + '\\n')\n"
    ),
    "the exit code marker and 5,000 digits": "print('>>>>> Test Exit Code: ' + '1' * 5000, flush=True)\n",
}


@pytest.fixture(scope="module")
def printed_verdicts(bundled, docker_client) -> dict[str, object]:
    task = _task("spans")

    def one(name: str) -> object:
        return grade(task, _printing(task, PRINTED[name]), client=docker_client, timeout=120)

    return dict(zip(PRINTED, run_parallel(one, list(PRINTED)), strict=True))


@pytest.mark.docker
@pytest.mark.parametrize("attack", list(PRINTED))
def test_a_printed_line_neither_hangs_nor_crashes_the_grader(printed_verdicts, attack: str) -> None:
    verdict = printed_verdicts[attack]
    assert (verdict.status, verdict.score) == ("wrong", 0.0), verdict
    assert verdict.details["resolution"] == "RESOLVED_NO", verdict.details
    if "prefix" in attack:  # read in time: the lines are forged witness records
        assert verdict.details["error_kind"] == "tampered", verdict.details
        assert "bad signature" in verdict.details["error"], verdict.details
    else:  # swebench's parser raised: the log is unreadable, the patch's failure
        assert verdict.details["error_kind"] == "log", verdict.details
        assert "4300 digits" in verdict.details["error"], verdict.details


# --------------------------------------------------------------------------- 3. git's warnings in the changed list

# tests/__init__.py (in no test patch) fixes the bug by replacing the package's method when the tests import;
# the .gitattributes entry makes git warn, on stderr, about that very file while it lists what the patch changed.
FIX_FROM_THE_TESTS = """from pagekit.paginator import Page, Paginator


def _page(self, number):
    number = self.validate_number(number)
    bottom = (number - 1) * self.per_page
    top = bottom + self.per_page
    if top + self.orphans >= self.count:
        top = self.count
    return Page(number, list(self.items[bottom:top]), self)


Paginator.page = _page
"""


@pytest.mark.docker
def test_gits_warnings_cannot_hide_an_edited_test_from_the_restore(bundled, docker_client) -> None:
    task = _task("pagekit")
    attributes = _diff(".gitattributes", "", "tests/__init__.py text eol=crlf\n", new_file=True)
    patch = attributes + _diff("tests/__init__.py", "", FIX_FROM_THE_TESTS)
    verdict = grade(task, patch, client=docker_client, timeout=120)
    assert verdict.details.get("restored") == ["tests/__init__.py"], verdict.details
    assert (verdict.status, verdict.score) == ("wrong", 0.0), verdict
