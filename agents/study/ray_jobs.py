"""Studies and SWE evaluations on a Ray cluster (``--ray ADDRESS``; the ``ray`` extra). Imported only with ``--ray``.

``creditgym compare --ray``: each (entry, seed) run is a Ray task holding ``--run-cpus`` CPUs and ``--run-gpus``
GPUs, which starts the same ``creditgym train`` child as a local run. Where it writes:

- **shared filesystem** (the study folder is visible on the node at the same path; always so with ``local``):
  the child writes into the study's run folder directly; nothing is copied.
- **no shared filesystem**: the child writes into ``$TMPDIR/creditgym-ray/<study token>/runs/<entry>/seed<k>``
  on its node, started from the study's copy of the run folder (its checkpoints, for ``--resume``), and the whole
  folder comes back through Ray's object store when the child ends (also when a stop signal ended it), to be
  unpacked into the study folder. A task retried on the same node resumes from the node's newer checkpoint.

The task tells the two apart by reading a token the driver writes into the study folder. A worker or node lost
mid-run is retried ``--ray-retries`` times (the retry resumes from the last checkpoint it can see), then reported
as a failed run with the error, while the other runs go on.

``creditgym eval --ray`` (``creditgym/SWEBench-v0``): each task instance is a Ray task that needs one unit of the
custom resource ``docker``, which nodes with a Docker engine declare (``ray start --resources='{"docker": 4}'``:
at most four sandboxes at once there; ``local`` declares ``--workers`` units when an engine answers here). The
sandbox runs on that node's own engine; each task image is built (or checked) once per node, under a file lock.

Before anything starts, every node the work may land on is asked which of the packages it needs it lacks.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import io
import json
import logging
import os
import shutil
import socket
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from creditgym.agents.study.scheduler import (
    RUN_LOG,
    Finished,
    RunJob,
    RunOutcome,
    child_env,
    child_pythonpath,
    has_checkpoint,
    start_run,
)
from creditgym.agents.train.interrupts import GracefulStop

STUDY_TOKEN = ".creditgym-study"  # in the study folder: lets a task see whether it shares the driver's disk
RUN_LOCK = ".ray.lock"  # in a run folder: one trainer at a time, across a lost worker's retry
DOCKER_RESOURCE = "docker"
_INSTALL = "pip install 'creditgym[ray]'"
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")


class RayError(RuntimeError):
    """Ray is missing, the cluster does not answer, or a node lacks what the work needs (the message says which)."""


# -- the cluster ---------------------------------------------------------------------------------------------------


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayError(f"--ray needs the ray package, which is not installed here ({e}): {_INSTALL}") from e
    return ray


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """A HOST:PORT address must accept a TCP connection within ``timeout`` (Ray itself retries for a minute)."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise RayError(f"--ray {address!r}: expected HOST:PORT of a cluster's head, auto or local")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayError(
            f"no Ray cluster answers at {address} ({e.strerror or e}); start one with `ray start --head` there, "
            "or pass --ray local for a cluster in this process"
        ) from e


def connect(address: str, *, resources: Mapping[str, float] | None = None) -> Any:
    """Join the cluster at ``address`` (``auto``, ``local`` or HOST:PORT) and return the ``ray`` module.

    ``local`` starts a cluster in this process with this machine's CPUs and ``resources``; the others must
    answer within seconds.

    Raises:
        RayError: Ray is not installed, or nothing answers at ``address``.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address == "local" or address.split("://", 1)[-1].rpartition(":")[0] in _LOOPBACK:
        # A cluster on this machine: Ray would otherwise swap 127.0.0.1 for the address of the default route's
        # interface; read when ray is imported.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = _import_ray()
    if ray.is_initialized():
        return ray
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": True}
    if address == "local":
        ray.init(
            address="local",
            num_cpus=os.cpu_count() or 1,
            resources=dict(resources or {}),
            include_dashboard=False,
            object_store_memory=512 * 2**20,
            **quiet,
        )
        return ray
    if address != "auto":
        _check_reachable(address)
    try:
        ray.init(address=address, **quiet)
    except ConnectionError as e:
        raise RayError(
            f"the Ray cluster at {address!r} did not take this client ({e}); if it uses token authentication "
            "(Ray's default for new clusters), set RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, or "
            "~/.ray/auth_token) here as for any Ray client"
            if address != "auto"
            else f"no Ray cluster answers at 'auto': {e}"
        ) from e
    return ray


# Built from source so that cloudpickle ships it by value: it must run on a node that lacks creditgym.
_PROBE_SOURCE = """
def probe(packages):
    import importlib.util, socket
    return socket.gethostname(), [p for p in packages if importlib.util.find_spec(p) is None]
"""


def _probe() -> Callable[[Sequence[str]], tuple[str, list[str]]]:
    namespace: dict[str, Any] = {
        "__name__": "creditgym_ray_probe"
    }  # not an importable module: pickled by value
    exec(_PROBE_SOURCE, namespace)
    return namespace["probe"]


def check_nodes(ray: Any, packages: Sequence[str], *, resource: str | None = None) -> list[str]:
    """Ask every alive node (with ``resource``, when given) which of ``packages`` it cannot import.

    Returns:
        The node addresses asked.

    Raises:
        RayError: no such node, or a node lacks a package (names the node and the packages).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive") and (resource is None or n["Resources"].get(resource))]
    if not nodes:
        raise RayError(
            f"no node of the Ray cluster declares the {resource!r} resource; start the nodes that have a Docker "
            f"engine with `ray start ... --resources='{{\"{resource}\": 4}}'` (4 = sandboxes at once there)"
        )
    probe = ray.remote(_probe())
    refs = [
        probe.options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(list(packages))
        for n in nodes
    ]
    lacking = []
    for node, (host, missing) in zip(nodes, ray.get(refs, timeout=120), strict=True):
        if missing:
            lacking.append(f"node {node['NodeManagerAddress']} ({host}) lacks {', '.join(missing)}")
    if lacking:
        raise RayError(
            "; ".join(lacking) + f": install them on every node ({_INSTALL}, the same version as here)"
        )
    return [n["NodeManagerAddress"] for n in nodes]


# -- folders through the object store ------------------------------------------------------------------------------


def pack(folder: Path) -> bytes:
    """A folder as an uncompressed tar (checkpoints are already dense)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(folder, filter="data")


# -- compare -------------------------------------------------------------------------------------------------------


class _StopFlag:
    """Set by the driver on the first SIGINT/SIGTERM; running tasks then let their child checkpoint and stop."""

    def __init__(self) -> None:
        self.value = False

    def set(self) -> None:
        self.value = True

    def get(self) -> bool:
        return self.value


def _stop_requested(ray: Any, flag: Any) -> bool:
    try:
        return bool(ray.get(flag.get.remote(), timeout=10))
    except Exception:  # the driver is gone: its runs stop too
        return True


def _train_task(
    job: RunJob, study: str, token: str, archive: list[Any], pythonpath: str, threads: int, flag: Any
) -> dict[str, Any]:
    """One run on a Ray worker (module docstring): returns the exit code, seconds, and the folder when not shared."""
    import ray

    shared = (Path(study) / STUDY_TOKEN).is_file() and (Path(study) / STUDY_TOKEN).read_text() == token
    folder = job.folder
    if not shared:
        folder = Path(tempfile.gettempdir()) / "creditgym-ray" / token / job.folder.relative_to(study)
        if not has_checkpoint(folder) and archive:
            unpack(ray.get(archive[0]), folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = os.pathsep.join(p for p in pythonpath.split(os.pathsep) if os.path.isdir(p))
    started, stopped = time.monotonic(), False
    with (folder / RUN_LOCK).open("w") as lock, (folder / RUN_LOG).open("ab") as log:
        # The child keeps the lock too: after a lost worker, its child may still be checkpointing, and the
        # retry must not start a second trainer in the same folder until it has stopped.
        fcntl.flock(lock, fcntl.LOCK_EX)
        log.write(f"\n=== ray node {socket.gethostname()} ({ray.util.get_node_ip_address()})".encode())
        proc = start_run(job, folder, child_env(threads, paths), log, pass_fds=(lock.fileno(),))
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                if not stopped and _stop_requested(ray, flag):
                    proc.terminate()  # the trainer finishes its step and checkpoints
                    stopped = True
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    archive = None if shared else pack(folder)
    if archive is not None and proc.returncode == 0 and not stopped:
        shutil.rmtree(folder, ignore_errors=True)  # finished: the study's copy is all there is to keep
    return {
        "returncode": proc.returncode,
        "elapsed": time.monotonic() - started,
        "interrupted": stopped,
        "archive": archive,
    }


class RayRunner:
    """`Runner` of ``creditgym compare --ray``: one Ray task per run (module docstring)."""

    def __init__(self, address: str, *, cpus: float = 1.0, gpus: float = 0.0, retries: int = 2) -> None:
        if cpus <= 0 or gpus < 0 or retries < 0:
            raise ValueError(
                f"--run-cpus must be > 0, --run-gpus and --ray-retries >= 0; got {cpus}, {gpus}, {retries}"
            )
        self.address, self.cpus, self.gpus, self.retries = address, cpus, gpus, retries
        self.ray = connect(address)
        self.nodes = check_nodes(self.ray, ["creditgym", "torch", "transformers"])

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address, "run_cpus": self.cpus, "run_gpus": self.gpus}

    def run(self, jobs: Sequence[RunJob], finished: Finished, echo: Callable[[str], None]) -> bool:
        ray = self.ray
        study = _study_root(jobs)
        token = uuid.uuid4().hex
        (study / STUDY_TOKEN).write_text(token)
        flag = ray.remote(num_cpus=0)(_StopFlag).remote()
        task = ray.remote(_train_task).options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_retries=self.retries, retry_exceptions=False
        )
        threads, pythonpath = max(1, int(self.cpus)), child_pythonpath()
        refs: dict[Any, RunJob] = {}
        for job in jobs:
            archive = [ray.put(pack(job.folder))] if has_checkpoint(job.folder) else []
            refs[task.remote(job, str(study), token, archive, pythonpath, threads, flag)] = job
            echo(f"[compare] {job.name}: queued on Ray at {self.address} ({job.folder / RUN_LOG})")
        with GracefulStop() as stop:
            try:
                flagged = False
                while refs:
                    if stop.requested and not flagged:
                        flag.set.remote()
                        flagged = True
                    done, _ = ray.wait(list(refs), num_returns=1, timeout=0.2)
                    for ref in done:
                        job = refs.pop(ref)
                        finished(job, self._outcome(ray, ref, job, stop.requested))
            except KeyboardInterrupt:  # the second signal: cancel at once
                for ref, job in refs.items():
                    ray.cancel(ref, force=True)
                    finished(job, RunOutcome(None, 0.0, True))
        return stop.requested

    def _outcome(self, ray: Any, ref: Any, job: RunJob, stopping: bool) -> RunOutcome:
        try:
            result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return RunOutcome(None, 0.0, True)
        except ray.exceptions.RayError as e:  # a lost worker or node, past its retries; the task's own error
            error = f"Ray: {type(e).__name__} after {self.retries} retries: {_first_line(e)}"
            return RunOutcome(None, 0.0, stopping, error)
        if result["archive"] is not None:
            unpack(result["archive"], job.folder)
        return RunOutcome(result["returncode"], result["elapsed"], result["interrupted"])


def _study_root(jobs: Sequence[RunJob]) -> Path:
    """The study folder: the common parent of ``runs/<entry>/seed<k>``."""
    return jobs[0].folder.parents[2]


# -- SWE evaluation ------------------------------------------------------------------------------------------------

_CACHE: dict[str, Any] = {}  # per worker process: the agent, the env, the task list


def _cached(key: str, make: Callable[[], Any]) -> Any:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _localize(task: Any, driver_bundled: str) -> Any:
    """A bundled task's build folder as installed on this node (the driver's path may differ)."""
    from creditgym.envs.swe_tasks import BUNDLED_TASKS

    if task.build_dir is None or Path(task.build_dir).is_dir():
        return task
    try:
        relative = Path(task.build_dir).relative_to(driver_bundled)
    except ValueError:
        return task  # its image build reports the missing folder, as an infrastructure error
    return dataclasses.replace(task, build_dir=BUNDLED_TASKS / relative)


def image_lock_dir() -> Path:
    """Where nodes keep their image locks: a name no import can pick up (a ``creditgym`` folder on ``sys.path``,
    such as the temporary folder when a script runs from there, would shadow the package), one per user."""
    return Path(tempfile.gettempdir()) / f"creditgym-locks-{os.getuid()}"


def _image_once(task: Any) -> None:
    """Build or check the task's image once per node: a file lock serialises this node's workers."""
    from creditgym.verifiers.swe.grading import SandboxError, ensure_image

    lock = image_lock_dir() / f"image-{hashlib.sha1(task.image.encode()).hexdigest()}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            ensure_image(task)
        except SandboxError:
            pass  # the episode meets the same error and counts it as an infrastructure error
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _engine_here() -> bool:
    from creditgym.verifiers.swe.sandbox import SandboxError, docker_client

    try:
        docker_client(timeout=5).close()
    except SandboxError:
        return False
    return True


def _swe_task(
    env_id: str,
    agent_spec: str,
    base_url: str | None,
    tasks: list[Any],
    instance_id: str,
    seed: int,
    env_kwargs: dict[str, Any],
    driver_bundled: str,
) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """One instance on a node with a Docker engine: the same play (and one retry) as a local worker thread;
    returns the record, the trajectory and the agent's name."""
    import ray

    from creditgym.agents.eval.evaluate import agent_env_kwargs, make_agent, play_with_retry
    from creditgym.envs import make

    task_list = _cached(
        f"tasks:{tasks[0].hex()}", lambda: [_localize(t, driver_bundled) for t in ray.get(tasks[0])]
    )
    task = next(t for t in task_list if t.instance_id == instance_id)
    if task.image not in _CACHE:
        _image_once(task)
        _CACHE[task.image] = True
    agent = _cached(f"agent:{agent_spec}:{base_url}", lambda: make_agent(agent_spec, base_url=base_url))
    key = f"env:{env_id}:{json.dumps(env_kwargs, sort_keys=True)}:{tasks[0].hex()}"
    env = _cached(key, lambda: make(env_id, tasks=task_list, **agent_env_kwargs(env_id, env_kwargs, agent)))
    record, trajectory = play_with_retry(env, agent, instance_id, seed)
    return dataclasses.asdict(record), trajectory, agent.name


def evaluate_tasks_ray(
    address: str,
    env_id: str,
    agent_spec: str,
    task_list: Sequence[Any],
    *,
    base_url: str | None = None,
    workers: int = 1,
    cpus: float = 1.0,
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
    retries: int = 1,
) -> tuple[str, list[tuple[Any, list[dict[str, Any]]]]]:
    """One Ray task per instance on nodes declaring ``docker`` (``local``: ``workers`` of them here, when an engine
    answers): the agent's name, and the `InstanceRecord` and trajectory of each instance in ``task_list``'s order.
    An instance whose worker is lost past ``retries`` counts as an infrastructure error."""
    from creditgym.agents.eval.evaluate import InstanceRecord
    from creditgym.envs.swe_tasks import BUNDLED_TASKS

    resources = {DOCKER_RESOURCE: float(workers)} if address == "local" and _engine_here() else {}
    ray = connect(address, resources=resources)
    check_nodes(ray, ["creditgym", "docker", "swebench"], resource=DOCKER_RESOURCE)
    tasks_ref = [ray.put(list(task_list))]
    task = ray.remote(_swe_task).options(
        num_cpus=cpus, resources={DOCKER_RESOURCE: 1}, max_retries=retries, retry_exceptions=False
    )
    kwargs = dict(env_kwargs or {})
    refs = [
        task.remote(env_id, agent_spec, base_url, tasks_ref, t.instance_id, seed, kwargs, str(BUNDLED_TASKS))
        for t in task_list
    ]
    name, out = agent_spec, []
    for t, ref in zip(task_list, refs, strict=True):
        try:
            record, trajectory, name = ray.get(ref)
            out.append((InstanceRecord(**record), trajectory))
        except ray.exceptions.RayError as e:
            error = f"ray: {type(e).__name__}: {_first_line(e)}"
            lost = InstanceRecord(
                instance_id=t.instance_id, status="infra_error", reward=None, turns=0, policy_tokens=0, tokens=0,
                seconds=0.0, attempts=retries + 1, end_reason=None, infra_error=error,
            )  # fmt: skip
            out.append((lost, [{"verdict": None, "reward": None, "patch": None, "infra_error": error}]))
    return name, out


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
