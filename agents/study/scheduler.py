"""Where a study's ``creditgym train`` runs go: local subprocesses (`LocalRunner`) or Ray tasks
(`creditgym.agents.study.ray_jobs.RayRunner`, imported only with ``--ray``). Both take the same `RunJob` list and report
each run through the same callback, so ``compare`` keeps its bookkeeping in one place.

Stopping: the first SIGINT/SIGTERM (`GracefulStop`) lets every running child finish its step and checkpoint and
starts nothing new; a second one kills the children at once.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from creditgym.agents.train.interrupts import GracefulStop
from creditgym.verifiers.workers.process import die_with_parent

RUN_LOG = "train.log"  # per run folder, next to the trainer's own files


@dataclass(frozen=True)
class RunJob:
    """One ``creditgym train`` run: its name in messages, its folder in the study, and its flags (``--steps`` and
    the settings; the runner adds ``--out`` and, when the folder holds a checkpoint, ``--resume``)."""

    name: str
    folder: Path
    args: tuple[str, ...]


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: the exit code (None when it never ran to an exit), seconds this attempt took, whether a
    stop signal ended it, and an error the runner saw beyond the exit code (a lost Ray worker)."""

    returncode: int | None
    elapsed: float
    interrupted: bool
    error: str | None = None


#: Called once per job as it ends: the job and how it went.
Finished = Callable[[RunJob, RunOutcome], None]


class Runner(Protocol):
    """Runs jobs until all ended or a stop signal; returns whether it was stopped."""

    def describe(self) -> dict[str, Any]: ...

    def run(self, jobs: Sequence[RunJob], finished: Finished, echo: Callable[[str], None]) -> bool: ...


def has_checkpoint(folder: Path) -> bool:
    return any((folder / "checkpoints").glob("step-*"))


def train_command(job: RunJob, folder: Path) -> list[str]:
    """The child's argv: ``python -m creditgym.cli train --out FOLDER ...`` + ``--resume`` after a checkpoint, else
    ``--overwrite`` (what an attempt left before its first checkpoint cannot be resumed; `plan` checked that the
    folder's settings are the study's)."""
    argv = [sys.executable, "-m", "creditgym.cli", "train", "--out", str(folder), *job.args]
    return argv + (["--resume"] if has_checkpoint(folder) else ["--overwrite"])


def child_pythonpath(paths: Sequence[str] | None = None) -> str:
    """``PYTHONPATH`` for a child that must import what this process imports (the module of ``module:EnvId``):
    this process's ``sys.path`` entries that the interpreter does not add by itself, then any PYTHONPATH."""
    own = (os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix))
    extra = []
    for p in sys.path if paths is None else paths:
        full = os.path.realpath(p or os.getcwd())
        if not full.startswith(own) and full not in extra and os.path.isdir(full):
            extra.append(full)
    return os.pathsep.join([*extra, *filter(None, [os.environ.get("PYTHONPATH")])])


def run_threads(workers: int) -> int:
    """Threads of each of ``workers`` local runs: the cores shared out, at most the ``OMP_NUM_THREADS`` this
    process was given (on a shared machine, ``OMP_NUM_THREADS=1 creditgym compare`` keeps every run to one)."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    cap = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(cap)) if cap.isdigit() and int(cap) >= 1 else threads


def child_env(threads: int, pythonpath: str | None = None) -> dict[str, str]:
    """The environment of a run: ``threads`` BLAS/OpenMP threads, unbuffered output, this ``sys.path``."""
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": child_pythonpath() if pythonpath is None else pythonpath,
    }


def start_run(
    job: RunJob, folder: Path, env: Mapping[str, str], log: IO[bytes], pass_fds: Sequence[int] = ()
) -> subprocess.Popen[bytes]:
    """Start one ``creditgym train`` child writing into ``folder``, its output appended to ``log`` (and
    ``pass_fds`` kept open in it)."""
    argv = train_command(job, folder)
    log.write(f"\n=== creditgym compare: {' '.join(argv)}\n".encode())
    log.flush()
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(env),
        start_new_session=True,  # a terminal's Ctrl-C reaches only us; we forward one SIGTERM
        preexec_fn=functools.partial(die_with_parent, signal.SIGTERM, parent_pid=os.getpid()),
        pass_fds=tuple(pass_fds),
    )


@contextmanager
def no_orphans(
    procs: Callable[[], Sequence[subprocess.Popen[bytes]]], grace_s: float = 120.0
) -> Iterator[None]:
    """On leaving (an error included), stop the children still running: SIGTERM (they checkpoint), then SIGKILL."""
    try:
        yield
    finally:
        alive = [p for p in procs() if p.poll() is None]
        for proc in alive:
            proc.send_signal(signal.SIGTERM)
        for proc in alive:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class _Running:
    job: RunJob
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float


class LocalRunner:
    """``workers`` runs at a time as subprocesses of this one, each with `run_threads` threads."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "workers": self.workers}

    def run(self, jobs: Sequence[RunJob], finished: Finished, echo: Callable[[str], None]) -> bool:
        env = child_env(run_threads(self.workers))
        pending, running = list(jobs), []
        forwarded = False

        def end(run: _Running, interrupted: bool) -> None:
            running.remove(run)
            run.log.close()
            finished(run.job, RunOutcome(run.proc.returncode, time.monotonic() - run.started, interrupted))

        with GracefulStop() as stop, no_orphans(lambda: [r.proc for r in running]):
            try:
                while pending or running:
                    while pending and not stop.requested and len(running) < self.workers:
                        job = pending.pop(0)
                        job.folder.mkdir(parents=True, exist_ok=True)
                        how = "resuming" if has_checkpoint(job.folder) else "started"
                        log = (job.folder / RUN_LOG).open("ab")
                        running.append(
                            _Running(job, start_run(job, job.folder, env, log), log, time.monotonic())
                        )
                        echo(f"[compare] {job.name}: {how} ({job.folder / RUN_LOG})")
                    if stop.requested and not forwarded:  # children finish their step and checkpoint
                        pending.clear()
                        for run in running:
                            run.proc.send_signal(signal.SIGTERM)
                        forwarded = True
                    for run in [r for r in running if r.proc.poll() is not None]:
                        end(run, stop.requested)
                    time.sleep(0.1)
            except KeyboardInterrupt:  # the second signal: kill at once, record what ran
                for run in list(running):
                    run.proc.kill()
                    run.proc.wait()
                    end(run, True)
        return stop.requested
