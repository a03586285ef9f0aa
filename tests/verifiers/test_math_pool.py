"""The verifier's worker pool: deadlines from the start of work, dead workers, no leaked processes, os.fork.

Misbehaving items use the worker's private test hooks: a gold ``TEST_HOOK_PREFIX + "sleep:0.6"`` (or ``spin``,
``sigkill``, ``exit``, ``raise``) is honoured only when ``CREDITGYM_TEST_HOOKS=1`` is set when the worker starts.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from creditgym.verifiers.math import MathVerifier
from creditgym.verifiers.math.extract import TEST_HOOK_PREFIX as HOOK
from creditgym.verifiers.workers import forkserver as _forkserver
from creditgym.verifiers.workers.pool import DeadlinePool, WorkerStartError


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], within: float = 5.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.02)
    return [p for p in pids if _alive(p)]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _wait_busy(pids: list[int], ticks: int = 20, within: float = 120.0) -> None:
    """Wait until each of ``pids`` has used ``ticks`` more clock ticks of CPU: they are running, not starting."""
    start = {p: _cpu_ticks(p) for p in pids}
    deadline = time.monotonic() + within
    while any(_cpu_ticks(p) - start[p] < ticks for p in pids):
        assert time.monotonic() < deadline, "the workers never started spinning"
        time.sleep(0.02)


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CREDITGYM_TEST_HOOKS", "1")
    yield


def test_hooks_are_ignored_without_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CREDITGYM_TEST_HOOKS", raising=False)
    with MathVerifier(1) as v, pytest.raises(ValueError, match="gold"):
        v.verify("x", HOOK + "exit")


@pytest.mark.usefixtures("hooked")
def test_a_worker_that_dies_mid_item_gives_infra_error_and_the_pool_keeps_working() -> None:
    with MathVerifier(2) as v:
        verdicts = v.verify_many(
            ["x", r"\boxed{1}", "y", r"\boxed{2}"], [HOOK + "sigkill", "1", HOOK + "exit", "2"], timeout=5.0
        )
        killed, ok1, exited, ok2 = verdicts
        assert killed.status == "infra_error" and killed.score is None
        assert "died twice" in killed.details["error"] and "SIGKILL" in killed.details["error"]
        assert (
            exited.status == "infra_error"
            and exited.score is None
            and "exit code 3" in exited.details["error"]
        )
        assert ok1.status == ok2.status == "correct"
        again = v.verify_many(
            [rf"\boxed{{{i}}}" for i in range(20)], [str(i) for i in range(20)], timeout=5.0
        )
        assert [x.status for x in again] == ["correct"] * 20
        assert len(v.worker_pids()) == 2 and all(_alive(p) for p in v.worker_pids())


@pytest.mark.usefixtures("hooked")
def test_a_worker_killed_from_outside_is_replaced_and_its_item_retried_once() -> None:
    with MathVerifier(1) as v:
        assert v.verify(r"\boxed{1}", "1").status == "correct"
        (victim,) = v.worker_pids()
        killer = threading.Timer(0.3, os.kill, (victim, signal.SIGKILL))
        killer.start()
        t0 = time.monotonic()
        verdict = v.verify("x", HOOK + "sleep:1.0", timeout=5.0)
        killer.join()
        assert verdict.status == "correct", verdict  # the retry in a fresh worker succeeded
        assert verdict.details["pid"] != victim and not _alive(victim)
        assert 1.2 < time.monotonic() - t0 < 10.0  # the retry re-ran the 1 s item from its start


@pytest.mark.usefixtures("hooked")
def test_an_item_that_kills_its_worker_once_succeeds_on_the_retry(tmp_path: Path) -> None:
    marker = tmp_path / "died-once"
    with MathVerifier(1) as v:
        verdict = v.verify("x", f"{HOOK}die_once:{marker}", timeout=5.0)
    assert verdict.status == "correct"
    assert int(marker.read_text()) != verdict.details["pid"]


@pytest.mark.usefixtures("hooked")
def test_an_exception_in_the_worker_is_an_infra_error_with_its_traceback() -> None:
    with MathVerifier(1) as v:
        verdict = v.verify("x", HOOK + "raise")
    assert verdict.status == "infra_error" and verdict.score is None
    assert "RuntimeError: test hook: raise" in verdict.details["error"]


@pytest.mark.usefixtures("hooked")
def test_the_deadline_starts_when_a_worker_starts_the_item() -> None:
    with MathVerifier(1) as v:
        v.verify(r"\boxed{1}", "1")  # worker started and warm
        t0 = time.monotonic()
        verdicts = v.verify_many(["x"] * 3, [HOOK + "sleep:0.6"] * 3, timeout=1.0)
        wall = time.monotonic() - t0
    assert [x.status for x in verdicts] == ["correct"] * 3
    assert all(0.55 < x.details["elapsed"] < 1.0 for x in verdicts)
    assert wall > 1.7  # the last item finished well over 1.0 s after it was enqueued, and did not time out


@pytest.mark.usefixtures("hooked")
def test_a_stuck_item_times_out_its_worker_is_killed_and_replaced() -> None:
    with MathVerifier(2) as v:
        v.verify_many([r"\boxed{1}"] * 4, ["1"] * 4)
        before = set(v.worker_pids())
        t0 = time.monotonic()
        verdicts = v.verify_many(
            ["x", *[rf"\boxed{{{i}}}" for i in range(6)]],
            [HOOK + "spin"] + [str(i) for i in range(6)],
            timeout=0.5,
        )
        wall = time.monotonic() - t0
        stuck, *rest = verdicts
        assert stuck.status == "timeout" and stuck.score == 0.0
        assert (
            0.5 <= stuck.details["elapsed"] <= 1.0 and "deadline" in stuck.details["error"]
        )  # deadline + 0.5 s
        assert [x.status for x in rest] == ["correct"] * 6
        assert wall < 5.0  # the other items did not wait for the stuck one
        after = set(v.worker_pids())
        assert len(after) == 2 and len(before - after) == 1
        assert _wait_gone(list(before - after)) == []


def test_close_leaves_no_worker_process() -> None:
    v = MathVerifier(2)
    v.verify_many([r"\boxed{1}"] * 4, ["1"] * 4)
    pids = v.worker_pids()
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    v.close()
    assert not {p.pid for p in multiprocessing.active_children()} & set(pids)
    assert _wait_gone(pids) == []


def test_a_target_that_cannot_be_imported_fails_fast_naming_the_module() -> None:
    t0 = time.monotonic()
    with DeadlinePool("creditgym.verifiers._no_such_module:score", 2) as pool:
        with pytest.raises(
            WorkerStartError, match=r"No module named 'creditgym\.verifiers\._no_such_module'"
        ):
            pool.run(["a", "b", "c"], timeout=1.0)
        with pytest.raises(WorkerStartError):  # the next call tries again, and fails as fast
            pool.run(["a"], timeout=1.0)
    assert time.monotonic() - t0 < 60


def test_a_target_function_that_does_not_exist_fails_fast_in_the_worker() -> None:
    pool = DeadlinePool("creditgym.verifiers.math.worker:no_such_function", 1)
    with pool, pytest.raises(WorkerStartError, match="no_such_function"):
        pool.run(["a", "b"], timeout=1.0)


@pytest.mark.parametrize(
    ("python", "cause"), [("/bin/false", "exited with code 1"), ("/nonexistent/python3", "No such file")]
)
def test_a_fork_server_that_cannot_start_fails_the_first_call_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch, python: str, cause: str
) -> None:
    monkeypatch.setattr(_forkserver, "python_executable", lambda: python)
    t0 = time.monotonic()
    with MathVerifier(2) as v, pytest.raises(WorkerStartError, match=cause) as info:
        v.verify_many(["1"] * 10, ["1"] * 10)
    assert python in str(info.value)
    assert time.monotonic() - t0 < 10  # one try, not one per item


def test_a_worker_dying_before_it_is_ready_fails_the_first_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The fork server imports the module fine; looking the target up kills the worker before it is ready.
    (tmp_path / "dying_target.py").write_text(
        "import os\n\ndef __getattr__(name):\n    if name == 'dies_on_lookup':\n        os._exit(7)\n"
        "    raise AttributeError(name)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    pool = DeadlinePool("dying_target:dies_on_lookup", 2)
    with pool, pytest.raises(WorkerStartError, match=r"died before it was ready \(exit code 7\)"):
        pool.run(["a", "b", "c"], timeout=5.0)


def test_die_with_parent_kills_a_child_whose_parent_is_sigkilled(tmp_path: Path) -> None:
    middle = (
        "import functools, os, signal, subprocess, sys, time\n"
        "from creditgym.verifiers.workers.process import die_with_parent\n"
        "hook = functools.partial(die_with_parent, signal.SIGTERM, parent_pid=os.getpid())\n"
        "child = subprocess.Popen(['sleep', '600'], preexec_fn=hook)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", middle], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    assert _wait_gone([child]) == [], "the child outlived its SIGKILLed parent"


def test_a_pool_used_in_a_forked_child_leaves_the_parents_workers_alone() -> None:
    with MathVerifier(1) as v:
        assert v.verify(r"\boxed{2}", "2").status == "correct"
        parent_pids = v.worker_pids()
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            try:
                verdict = v.verify(r"\boxed{3}", "3", timeout=10.0)
                report = {"status": verdict.status, "pids": v.worker_pids()}
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            report = json.loads(pipe.read() or "{}")
        os.waitpid(child, 0)
        assert report.get("status") == "correct", report
        assert not set(report["pids"]) & set(parent_pids)  # the child started its own workers
        assert v.worker_pids() == parent_pids and all(_alive(p) for p in parent_pids)
        assert v.verify(r"\boxed{4}", "4").status == "correct"
        assert _wait_gone(report["pids"]) == []  # the child's workers went away with the child


def test_resize_changes_the_number_of_workers() -> None:
    with MathVerifier(1) as v:
        v.verify("1", "1")
        assert len(v.worker_pids()) == 1
        v.resize(3)
        v.verify_many(["1"] * 6, ["1"] * 6)
        assert len(v.worker_pids()) == 3 and v.workers == 3
        v.resize(1)
        v.verify("1", "1")
        assert len(v.worker_pids()) == 1


def test_workers_die_with_an_owner_killed_by_sigkill(tmp_path: Path) -> None:
    script = tmp_path / "owner.py"
    script.write_text(
        "import os, sys\n"
        "os.environ['CREDITGYM_TEST_HOOKS'] = '1'\n"
        "from creditgym.verifiers.math import MathVerifier\n"
        "from creditgym.verifiers.math.extract import TEST_HOOK_PREFIX as HOOK\n"
        "if __name__ == '__main__':\n"
        "    v = MathVerifier(2)\n"
        "    v.verify('1', '1')\n"
        "    print(*v.worker_pids(), flush=True)\n"
        "    v.verify_many(['x', 'y'], [HOOK + 'spin'] * 2, timeout=600)\n"
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        pids = [int(p) for p in owner.stdout.readline().split()]
        assert len(pids) == 2
        _wait_busy(pids)  # both workers are now spinning in pure Python, with no pool to stop them
    finally:
        owner.kill()
        owner.wait()
    assert _wait_gone(pids) == [], "workers outlived their SIGKILLed owner"
