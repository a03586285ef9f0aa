"""A small process pool with a hard per-item deadline that starts when a worker starts the item.

Why not ``concurrent.futures.ProcessPoolExecutor`` or ``multiprocessing.Pool``: neither can stop one stuck task
(a sympy call that never returns) without tearing the whole pool down, a future's timeout counts from when it
was submitted, not from when a worker picked it up, and their workers re-import the user's ``__main__``. Here:

- Workers are forked by the pool's own fork server (:mod:`creditgym.verifiers.workers.forkserver`): a fresh interpreter
  that has imported only the worker modules. Workers never see the user's main module, so the pool works the
  same from a script without a main guard, ``python -c``, a heredoc piped to Python, a notebook or an embedded
  interpreter; a replacement worker is a cheap ``fork`` of an already-warm process.
- The parent sends items in small batches (each worker holds its current item plus ``prefetch`` queued ones, so
  it never waits on a round trip). A worker reports ``start`` (with its ``time.monotonic()``, which is
  system-wide on Linux) and ``done`` for every item; the deadline runs from ``start``.
- The parent waits on all worker connections with ``multiprocessing.connection.wait``. A worker past its deadline
  is killed with SIGKILL and replaced; its item becomes ``timeout``. A worker that dies on its own (segfault, OOM
  kill, external kill) is replaced and its item retried once in the replacement; a second death makes the item
  ``died``. Items queued behind a killed or dead worker are re-sent without penalty.
- Fails fast: if the first workers of a pool cannot start (the fork server or the target cannot be imported,
  no process can be forked), :meth:`DeadlinePool.run` raises :class:`WorkerStartError` naming the cause.
- No leaks: :meth:`DeadlinePool.close` stops the fork server, which kills and reaps every worker; pools still
  open at interpreter exit are closed by an ``atexit`` hook; the fork server exits with its owner and workers
  with the fork server, even after a SIGKILL; a pool used after ``os.fork`` in a child forgets the parent's
  workers instead of touching them.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from creditgym.verifiers.workers.forkserver import ForkServer, WorkerStartError, resolve

__all__ = ["DeadlinePool", "Outcome", "WorkerStartError"]

OutcomeKind = Literal["ok", "error", "timeout", "died"]

# Bytes a busy worker may have waiting unread in its socket: far below the kernel's socket buffer, so sending to
# a busy worker never blocks the parent (which must stay free to enforce deadlines).
_UNREAD_BYTES_LIMIT = 32 * 1024
_ENV_PREFIX = "CREDITGYM_"
_WORKER_ENTRY = "creditgym.verifiers.workers.pool:_worker_main"


@dataclass(frozen=True)
class Outcome:
    """What happened to one item.

    Attributes:
        kind: ``"ok"`` (``value`` is the function's return value), ``"error"`` (the function raised; ``error``
            holds the traceback), ``"timeout"`` (killed at the deadline), ``"died"`` (the worker died on it twice,
            or the pool could not start workers; ``error`` says why).
        value: The function's return value for ``"ok"``.
        elapsed: Seconds from the moment a worker started the item to its result (or to the kill).
        error: Text explaining a non-``"ok"`` outcome.
    """

    kind: OutcomeKind
    value: Any = None
    elapsed: float = 0.0
    error: str | None = None


# --------------------------------------------------------------------------------------------------- worker side


def _limit_memory(memory_mb: int) -> None:
    """Cap the address space at what the worker maps now plus ``memory_mb`` (``RLIMIT_AS``).

    Relative, because a worker inherits what its fork server imported (sympy, math-verify), which is not the
    worker's to account for.
    """
    with contextlib.suppress(Exception):  # no /proc or no resource module: run without a cap
        import resource

        with open("/proc/self/status") as status:
            vm_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
        limit = vm_kb * 1024 + memory_mb * 1024 * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or limit < soft:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _worker_main(fd: int, target: str, env: dict[str, str], memory_mb: int | None) -> None:
    """Worker loop (run by the fork server in a fresh child): receive ``("run", [(job_id, payload), ...])``
    batches on ``fd`` and run the items one at a time."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it then kills us
    conn = multiprocessing.connection.Connection(fd)
    os.environ.update(env)
    if memory_mb:
        _limit_memory(memory_mb)
    try:
        fn = resolve(target)
        conn.send(("ready", os.getpid()))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("fatal", traceback.format_exc()))
        return
    queue: deque[tuple[int, bytes]] = deque()
    while True:
        try:
            if not queue:
                queue.extend(conn.recv()[1])
            while conn.poll():
                queue.extend(conn.recv()[1])
        except (EOFError, OSError):
            return  # the parent closed our pipe: shut down
        job_id, blob = queue.popleft()
        t0 = time.monotonic()
        try:
            conn.send(("start", job_id, t0))
            try:
                reply = ("done", job_id, True, fn(pickle.loads(blob)), time.monotonic() - t0)
            except Exception:
                reply = ("done", job_id, False, traceback.format_exc(limit=20), time.monotonic() - t0)
            try:
                conn.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError, ValueError) as exc:
                conn.send(
                    ("done", job_id, False, f"result could not be pickled: {exc!r}", time.monotonic() - t0)
                )
        except OSError:
            return


# --------------------------------------------------------------------------------------------------- parent side


class _Worker:
    """The parent's view of one worker process."""

    __slots__ = (
        "conn",
        "current",
        "last_progress",
        "pid",
        "queue",
        "ready",
        "reserved",
        "sent_bytes",
        "started_at",
    )

    def __init__(self, pid: int, conn: multiprocessing.connection.Connection) -> None:
        self.pid = pid
        self.conn = conn
        self.queue: deque[int] = deque()  # indices sent to the worker and not yet started
        self.reserved: deque[int] = deque()  # indices that must go to this worker (a retry after a death)
        self.sent_bytes = 0  # payload bytes of ``queue``
        self.current: int | None = None
        self.started_at = 0.0
        self.ready = False
        self.last_progress = time.monotonic()

    @property
    def idle(self) -> bool:
        return self.current is None and not self.queue


class _Batch:
    """Book-keeping of one :meth:`DeadlinePool.run` call."""

    def __init__(self, payloads: Sequence[Any], timeout: float, first_job: int) -> None:
        self.blobs = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for p in payloads]
        self.timeout = timeout
        self.first_job = first_job
        self.results: list[Outcome | None] = [None] * len(payloads)
        self.deaths = [0] * len(payloads)
        self.pending: deque[int] = deque(range(len(payloads)))
        self.remaining = len(payloads)
        self.worker_deaths = 0

    def finish(self, index: int, outcome: Outcome) -> None:
        if self.results[index] is None:
            self.results[index] = outcome
            self.remaining -= 1


class _PoolState:
    """Everything a pool must clean up, kept apart from the pool so a finalizer can reach it."""

    def __init__(self, preload: Sequence[str]) -> None:
        self.owner_pid = os.getpid()
        self.server = ForkServer(preload)
        self.workers: list[_Worker] = []
        self.started = False  # a worker of this pool has been ready once: later start failures are not fatal

    def shutdown(self) -> None:
        if os.getpid() != self.owner_pid:  # a forked child must not touch its parent's workers
            return
        for w in self.workers:
            with contextlib.suppress(Exception):
                w.conn.close()
        self.workers = []
        self.server.close()  # the server kills and reaps every worker before it exits

    def forget(self) -> None:
        """In a child made by ``os.fork``: drop our copies of the parent's connections, touching nothing else."""
        for w in self.workers:
            with contextlib.suppress(Exception):
                w.conn.close()
        self.workers = []
        self.server.forget()


_LIVE_STATES: weakref.WeakSet[_PoolState] = weakref.WeakSet()


@atexit.register
def _close_all_pools() -> None:
    """Kill every pool's workers at exit."""
    for state in list(_LIVE_STATES):
        state.shutdown()


def _forget_all_pools() -> None:
    for state in list(_LIVE_STATES):
        if state.owner_pid != os.getpid():
            state.forget()


# A forked child drops its copies of every pool's sockets at once, so that the fork servers still see their
# owner go away (end of stream) when the owner exits while the child lives on.
os.register_at_fork(after_in_child=_forget_all_pools)


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class DeadlinePool:
    """Run ``target(payload)`` over many payloads in worker processes, each item under a hard deadline.

    Args:
        target: ``"module:function"``; the function takes one picklable payload and returns a picklable value.
            It runs in the worker's main thread.
        workers: Number of worker processes (started lazily, on the first :meth:`run`).
        preload: What the fork server prepares once, so that new workers start warm: modules to import, or
            ``"module:function"`` warm-ups to call (``target``'s module is always imported first).
        prefetch: Items queued in a worker behind the one it is running (hides the parent's round trip).
        memory_mb: Address space each worker may add to what it maps at start (``RLIMIT_AS``), or ``None``.
        stall_timeout: A worker that holds queued items but starts none for this long is treated as dead.

    Environment variables starting with ``CREDITGYM_`` are copied from the parent into each worker when it starts
    (the fork server was started earlier and would otherwise pass on a stale environment).

    Calls are serialised by a lock; one pool is not meant to be shared by concurrent callers for throughput.
    """

    def __init__(
        self,
        target: str,
        workers: int,
        *,
        preload: Sequence[str] = (),
        prefetch: int = 2,
        memory_mb: int | None = None,
        stall_timeout: float = 60.0,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if ":" not in target:
            raise ValueError(f"target must look like 'package.module:function', got {target!r}")
        self._target = target
        self._size = int(workers)
        self._prefetch = max(0, int(prefetch))
        self._memory_mb = memory_mb
        self._stall_timeout = float(stall_timeout)
        self._lock = threading.Lock()
        self._closed = False
        self._next_job = 0
        self._state = _PoolState(list(dict.fromkeys([target.partition(":")[0], *preload])))
        _LIVE_STATES.add(self._state)
        self._finalizer = weakref.finalize(self, self._state.shutdown)

    # ------------------------------------------------------------------------------------------ public

    @property
    def size(self) -> int:
        """The number of worker processes the pool keeps."""
        return self._size

    def resize(self, workers: int) -> None:
        """Change the number of workers (extra idle workers are stopped, missing ones start on the next run)."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        with self._lock:
            self._size = int(workers)

    def pids(self) -> list[int]:
        """Process ids of the current workers (for tests and diagnostics)."""
        self._check_owner()
        return [w.pid for w in self._state.workers]

    def run(self, payloads: Sequence[Any], timeout: float) -> list[Outcome]:
        """Run every payload; each gets ``timeout`` seconds from the moment a worker starts it.

        Returns one :class:`Outcome` per payload, in order. Never raises for a bad item.

        Raises:
            WorkerStartError: the pool's first workers could not start (the message names the cause).
            RuntimeError: the pool is closed.
        """
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._check_owner()
        with self._lock:
            if self._closed:
                raise RuntimeError("this pool is closed; create a new one")
            if not payloads:
                return []
            batch = _Batch(payloads, float(timeout), self._next_job)
            self._next_job += len(payloads)
            try:
                self._run(batch)
            except BaseException:
                self._abort()
                raise
            return [
                r if r is not None else Outcome("died", error="internal error: no result")
                for r in batch.results
            ]

    def close(self) -> None:
        """Kill and reap every worker. Idempotent; a closed pool cannot run again."""
        self._check_owner()
        with self._lock:
            self._closed = True
            self._state.shutdown()
            _LIVE_STATES.discard(self._state)

    def __enter__(self) -> DeadlinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ internals

    def _check_owner(self) -> None:
        """After ``os.fork``, forget (never kill) the parent's workers and start afresh in this process."""
        state = self._state
        if state.owner_pid == os.getpid():
            return
        self._lock = threading.Lock()  # another thread of the parent may have held it at the fork
        state.forget()
        state.owner_pid = os.getpid()
        _LIVE_STATES.add(state)

    def _spawn(self) -> _Worker:
        env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIX)}
        pid, conn = self._state.server.spawn(_WORKER_ENTRY, (self._target, env, self._memory_mb))
        worker = _Worker(pid, conn)
        self._state.workers.append(worker)
        return worker

    def _spawn_or_fail(self, batch: _Batch) -> _Worker | None:
        """Start a worker; if that fails, raise on a pool that never had a worker, else fail the open items."""
        try:
            return self._spawn()
        except WorkerStartError as exc:
            self._start_failed(batch, str(exc))
            return None

    def _start_failed(self, batch: _Batch, reason: str) -> None:
        if not self._state.started:
            raise WorkerStartError(reason)
        self._fail_all(batch, reason)

    @staticmethod
    def _stalled(w: _Worker) -> bool:
        """Whether the worker owes us progress although it runs nothing (not ready yet, or items unstarted)."""
        return w.current is None and bool(w.queue or w.reserved or not w.ready)

    def _discard(self, w: _Worker, *, kill: bool) -> None:
        """Remove a worker from the pool (killing it if asked); the fork server reaps it."""
        if kill:
            self._state.server.kill(w.pid)
        with contextlib.suppress(Exception):
            w.conn.close()
        if w in self._state.workers:
            self._state.workers.remove(w)

    def _abort(self) -> None:
        """After an exception inside :meth:`run` (e.g. Ctrl-C): kill workers that still hold work."""
        for w in list(self._state.workers):
            if not w.idle or w.reserved:
                self._discard(w, kill=True)

    def _run(self, batch: _Batch) -> None:
        workers = self._state.workers
        while len(workers) > self._size:  # shrink after resize(): stop idle extras
            self._discard(workers[-1], kill=True)
        while len(workers) < self._size:
            if self._spawn_or_fail(batch) is None:
                return
        while batch.remaining > 0:
            self._dispatch(batch)
            now = time.monotonic()
            wake = float("inf")
            for w in workers:
                if w.current is not None:
                    wake = min(wake, w.started_at + batch.timeout)
                elif self._stalled(w):
                    wake = min(wake, w.last_progress + self._stall_timeout)
            by_conn = {w.conn: w for w in workers}
            wait_s = None if wake == float("inf") else max(0.0, wake - now)
            for conn in multiprocessing.connection.wait(list(by_conn), wait_s):
                w = by_conn[conn]  # type: ignore[index]
                if not self._drain(w, batch):
                    self._on_death(w, batch)
            if batch.remaining <= 0:
                break
            self._enforce_deadlines(batch)

    def _dispatch(self, batch: _Batch) -> None:
        """Top every worker up to ``1 + prefetch`` items, level by level so that small batches spread out."""
        workers = list(self._state.workers)
        # A worker blocked in recv() reads any size; a busy one must not be sent more than its socket buffers.
        reads_now = {id(w): w.ready and w.idle for w in workers}
        outgoing: dict[int, list[tuple[int, bytes]]] = {id(w): [] for w in workers}
        for level in range(1 + self._prefetch):
            for w in workers:
                if len(w.queue) + (w.current is not None) > level:
                    continue
                source = w.reserved if w.reserved else batch.pending
                if not source:
                    continue
                index = source[0]
                size = len(batch.blobs[index])
                first_to_reader = reads_now[id(w)] and not outgoing[id(w)]
                if not first_to_reader and w.sent_bytes + size > _UNREAD_BYTES_LIMIT:
                    continue
                source.popleft()
                w.queue.append(index)
                w.sent_bytes += size
                outgoing[id(w)].append((batch.first_job + index, batch.blobs[index]))
        for w in workers:
            if outgoing[id(w)] and w in self._state.workers:
                try:
                    w.conn.send(("run", outgoing[id(w)]))
                except OSError:
                    self._on_death(w, batch)

    def _drain(self, w: _Worker, batch: _Batch) -> bool:
        """Handle every message the worker has sent; False if its connection is broken (it died)."""
        try:
            while w.conn.poll():
                self._handle(w, w.conn.recv(), batch)
        except (EOFError, OSError, pickle.UnpicklingError, ValueError, TypeError):
            return False
        return True

    def _handle(self, w: _Worker, msg: tuple[Any, ...], batch: _Batch) -> None:
        w.last_progress = time.monotonic()
        kind = msg[0]
        if kind == "start":
            index = msg[1] - batch.first_job
            if not w.queue or w.queue[0] != index:
                raise ValueError(f"worker {w.pid} started an item it was not sent next ({msg[1]})")
            w.queue.popleft()
            w.sent_bytes -= len(batch.blobs[index])
            w.current = index
            w.started_at = msg[2]
        elif kind == "done":
            index = msg[1] - batch.first_job
            if w.current != index:
                raise ValueError(f"worker {w.pid} finished an item it was not running ({msg[1]})")
            w.current = None
            ok, value, elapsed = msg[2], msg[3], msg[4]
            batch.finish(
                index, Outcome("ok", value, elapsed) if ok else Outcome("error", None, elapsed, str(value))
            )
        elif kind == "ready":
            w.ready = True
            self._state.started = True
        elif kind == "fatal":
            self._start_failed(batch, f"verifier worker could not start: {msg[1]}")
        else:
            raise ValueError(f"unknown message from worker {w.pid}: {kind!r}")

    def _fail_all(self, batch: _Batch, reason: str) -> None:
        for w in list(self._state.workers):
            self._discard(w, kill=True)
        for index, result in enumerate(batch.results):
            if result is None:
                batch.finish(index, Outcome("died", error=reason))
        batch.pending.clear()

    def _requeue(self, w: _Worker, batch: _Batch) -> None:
        """Put the items a lost worker had not started back in front of the queue (no penalty)."""
        batch.pending.extendleft(reversed([*w.reserved, *w.queue]))
        w.reserved.clear()
        w.queue.clear()

    def _on_death(self, w: _Worker, batch: _Batch) -> None:
        if w not in self._state.workers:
            return
        # What it sent before dying is still readable (a send to it can fail first): a start failure's reason.
        self._drain(w, batch)
        if w not in self._state.workers:  # a start failure it reported has failed the batch already
            return
        now = time.monotonic()
        self._discard(
            w, kill=True
        )  # kill: a broken connection may come from a process that has not exited yet
        how = _describe_exit(self._state.server.exit_code(w.pid, timeout=1.0))
        if not w.ready and not self._state.started:
            self._start_failed(
                batch, f"the first verifier worker (pid {w.pid}) died before it was ready ({how})"
            )
            return
        self._requeue(w, batch)
        batch.worker_deaths += 1
        if batch.worker_deaths > 2 * len(batch.results) + 4:
            self._fail_all(batch, f"verifier workers keep dying (last: {how}); giving up on this batch")
            return
        replacement = self._spawn_or_fail(batch) if batch.remaining > 0 else None
        if w.current is None:
            return
        index = w.current
        batch.deaths[index] += 1
        if batch.deaths[index] >= 2 or replacement is None:
            batch.finish(
                index,
                Outcome(
                    "died",
                    elapsed=now - w.started_at,
                    error=f"verifier worker died twice on this item (last: pid {w.pid}, {how})",
                ),
            )
        else:
            replacement.reserved.append(index)

    def _enforce_deadlines(self, batch: _Batch) -> None:
        now = time.monotonic()
        for w in list(self._state.workers):
            if w.current is not None and now >= w.started_at + batch.timeout:
                if not self._drain(w, batch):  # a result may have arrived just now
                    self._on_death(w, batch)
                    continue
                if w.current is None or time.monotonic() < w.started_at + batch.timeout:
                    continue
                index = w.current
                elapsed = time.monotonic() - w.started_at
                self._discard(w, kill=True)
                self._requeue(w, batch)
                batch.finish(
                    index,
                    Outcome("timeout", elapsed=elapsed, error=f"deadline of {batch.timeout:g} s exceeded"),
                )
                if batch.remaining > 0:
                    self._spawn_or_fail(batch)
            elif self._stalled(w) and now - w.last_progress > self._stall_timeout:
                self._on_death(w, batch)
