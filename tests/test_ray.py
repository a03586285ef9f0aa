"""``creditgym compare --ray`` against a real Ray cluster on loopback, started and stopped here (no mock).

The cluster is ``ray start --head --block`` on 127.0.0.1 with its own ports and temp dir (other Ray clusters on
the machine are left alone); a study through it must equal the same study without Ray, a worker killed mid-run
must be retried (resuming from its checkpoint), and bad addresses or missing packages must say so at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Read when ray is imported, so set for the whole session: Ray keeps 127.0.0.1 instead of swapping in the default
# route's address, and the clusters of these tests use token authentication with a token of their own (given to
# every process by the environment), so a ``~/.ray/auth_token`` left by another cluster changes nothing.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_AUTH_MODE"] = "token"
os.environ.setdefault("RAY_AUTH_TOKEN", uuid.uuid4().hex + uuid.uuid4().hex)

try:
    import ray
except ImportError as e:  # `make test` installs the extra; under CI=true its absence is a failure
    if os.environ.get("CI", "").lower() in ("true", "1"):
        raise
    pytest.skip(
        f"the ray extra is not installed ({e}): pip install 'creditgym[ray]'", allow_module_level=True
    )

from creditgym.agents.study.ray_jobs import RayError, check_nodes, connect

pytestmark = pytest.mark.slow
RAY_BIN = Path(sys.executable).with_name("ray")
# 2 entries x 2 seeds, the tiniest budget: one thread per run, so both schedulers compute the same numbers
STUDY = (
    "--env creditgym/Math-v0 --credit grpo,rloo --seeds 2 --steps 2 --prompts-per-step 2 --group-size 2 "
    "--eval-every 1 --eval-episodes 4 --max-new-tokens 8 --device cpu"
)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _free_port_window(n: int) -> int:
    """The first port of ``n`` consecutive free ports below the kernel's ephemeral range.

    Ray's worker ports are one contiguous range; taken below ``ip_local_port_range`` they can never overlap the
    single ports ``_free_ports`` draws from the ephemeral range (an overlap makes ``ray start`` refuse to start).
    """
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for low in range(20000, ephemeral_low - n, n):
        socks: list[socket.socket] = []
        try:
            for p in range(low, low + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return low
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports below {ephemeral_low}")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A 2-CPU Ray head on 127.0.0.1 (``ray start --block`` in its own process group), its address."""
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port, client, node, objects, agent, grpc, metrics, runtime = _free_ports(8)
    low = _free_port_window(41)
    cmd = [
        str(RAY_BIN), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
        "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}",
        f"--ray-client-server-port={client}", f"--node-manager-port={node}", f"--object-manager-port={objects}",
        f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
        f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime}",
        f"--min-worker-port={low}", f"--max-worker-port={low + 40}", "--object-store-memory=200000000",
    ]  # fmt: skip
    head = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if head.poll() is not None or time.monotonic() > deadline:
                out = head.stdout.read().decode(errors="replace") if head.stdout else ""
                pytest.fail(f"ray start exited or never answered:\n{out[-3000:]}")
            time.sleep(0.5)
    yield address
    os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops the head's processes when it is stopped
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
    shutil.rmtree(temp, ignore_errors=True)


def _compare(
    out: Path, *extra: str, study: str = STUDY, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "creditgym.cli", "compare", *study.split(), "--out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _figures(results: dict) -> tuple[list, list]:
    runs = [(r["entry"], r["seed"], r["status"], r["final"], r["curve"]) for r in results["runs"]]
    keys = ("entry", "n", "final_mean", "ci95", "diff_vs_baseline", "diff_ci95", "n_paired")
    return runs, [[row[k] for k in keys] for row in results["summary"]]


def test_a_study_through_ray_equals_the_same_study_without(cluster: str, tmp_path: Path) -> None:
    local = _compare(tmp_path / "local", "--workers", str(os.cpu_count()))  # 1 thread per run, as on Ray
    assert local.returncode == 0, local.stdout + local.stderr
    through = _compare(tmp_path / "ray", "--ray", cluster, "--run-cpus", "1")
    assert through.returncode == 0, through.stdout + through.stderr
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("local", "ray"))
    assert _figures(a) == _figures(b)
    assert len(a["runs"]) == 4 and all(r["status"] == "finished" for r in b["runs"])
    assert b["runner"] == {"kind": "ray", "address": cluster, "run_cpus": 1.0, "run_gpus": 0.0}
    assert a["runner"]["kind"] == "local"
    for run in b["runs"]:  # the outputs landed in the study folder (this node shares it), with the node named
        folder = tmp_path / "ray" / Path(run["log"]).parent
        assert (folder / "summary.json").is_file() and any((folder / "checkpoints").iterdir())
        assert "=== ray node" in (folder / "train.log").read_text()
    again = _compare(tmp_path / "ray", "--ray", cluster)
    assert again.returncode == 0 and again.stdout.count("done before, reused") == 4, again.stdout


def _train_child(folder: Path, timeout: float = 240) -> int:
    """The pid of the ``creditgym train`` child writing into ``folder`` once it has written a checkpoint."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any((folder / "checkpoints").glob("step-*")):
            for proc in Path("/proc").iterdir():
                try:
                    cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"train" in cmdline and str(folder).encode() in cmdline:
                    return int(proc.name)
        time.sleep(0.2)
    raise AssertionError(f"no train child with a checkpoint in {folder} within {timeout}s")


def _parent(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def test_a_killed_ray_worker_is_retried_and_resumes(cluster: str, tmp_path: Path) -> None:
    study = (
        STUDY.replace("grpo,rloo --seeds 2 --steps 2", "grpo --seeds 1 --steps 8") + " --checkpoint-every 1"
    )
    out = tmp_path / "study"
    cmd = [
        sys.executable,
        "-m",
        "creditgym.cli",
        "compare",
        *study.split(),
        "--out",
        str(out),
        "--ray",
        cluster,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    folder = out / "runs" / "grpo" / "seed0"
    worker = _parent(_train_child(folder))
    os.kill(worker, signal.SIGKILL)  # the Ray worker running the task dies; its train child gets SIGTERM
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, log
    run = json.loads((out / "results.json").read_text())["runs"][0]
    assert run["status"] == "finished" and [s for s, _ in run["curve"]][-1] == 8
    text = (folder / "train.log").read_text()
    assert text.count("=== ray node") == 2, text  # two attempts
    attempts = [line for line in text.splitlines() if line.startswith("=== creditgym compare:")]
    assert not attempts[0].endswith("--resume") and attempts[1].endswith("--resume")


def test_an_unreachable_address_fails_within_seconds_and_starts_nothing(tmp_path: Path) -> None:
    (port,) = _free_ports(1)
    t0 = time.monotonic()
    with pytest.raises(RayError, match=f"no Ray cluster answers at 127.0.0.1:{port}.*ray start --head"):
        connect(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10 and not ray.is_initialized()
    res = _compare(tmp_path / "study", "--ray", f"127.0.0.1:{port}", timeout=120)
    assert res.returncode != 0 and f"no Ray cluster answers at 127.0.0.1:{port}" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "study").exists()  # nothing started
    res = _compare(tmp_path / "study", "--ray", "nonsense", timeout=120)
    assert res.returncode != 0 and "expected HOST:PORT" in res.stderr


def test_a_node_lacking_a_package_is_named(cluster: str) -> None:
    ray.init(address=cluster, log_to_driver=False)
    try:
        assert check_nodes(ray, ["creditgym", "torch"]) == ["127.0.0.1"]
        with pytest.raises(RayError, match=r"node 127\.0\.0\.1 \(.*\) lacks no_such_package_xyz: install"):
            check_nodes(ray, ["creditgym", "no_such_package_xyz"])
        with pytest.raises(RayError, match="no node of the Ray cluster declares the 'docker' resource"):
            check_nodes(ray, ["creditgym"], resource="docker")
    finally:
        ray.shutdown()


def test_without_the_extra_the_error_names_it(tmp_path: Path) -> None:
    code = "import sys; sys.modules['ray'] = None; from creditgym.cli import main; sys.exit(main())"
    cmd = [sys.executable, "-c", code, "compare", *STUDY.split(), "--out", str(tmp_path), "--ray", "local"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "pip install 'creditgym[ray]'" in res.stderr, res.stderr


def test_a_node_that_does_not_see_the_study_folder_sends_the_run_back(
    cluster: str, tmp_path: Path, needs: Callable[[str], None]
) -> None:
    """The command runs in a mount namespace of its own where the study folder is a private tmpfs, so the Ray
    worker (outside it) cannot see it: the run trains in the node's temp folder and comes back as an archive."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"]).returncode != 0:
        needs("`unshare -m` (root, util-linux) to hide the study folder from the Ray worker")
    study, copy = tmp_path / "study", tmp_path / "copy"
    study.mkdir()
    argv = STUDY.replace("grpo,rloo --seeds 2", "grpo --seeds 1").split()
    compare = " ".join([sys.executable, "-m", "creditgym.cli", "compare", *argv, "--out", str(study)])
    script = f"mount -t tmpfs none {study} && {compare} --ray {cluster} && cp -r {study} {copy}"
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert not any(study.iterdir())  # outside the namespace, nothing was ever written there
    run = json.loads((copy / "results.json").read_text())["runs"][0]
    assert run["status"] == "finished" and [s for s, _ in run["curve"]] == [0, 1, 2]
    folder = copy / "runs" / "grpo" / "seed0"
    assert (folder / "summary.json").is_file() and any((folder / "checkpoints").glob("step-*"))
    assert "=== ray node" in (folder / "train.log").read_text()
    token = (copy / ".creditgym-study").read_text()
    assert not (Path(tempfile.gettempdir()) / "creditgym-ray" / token / "runs" / "grpo" / "seed0").exists()


def test_ray_overhead_benchmark(tmp_path: Path) -> None:
    cmd = [sys.executable, "examples/benchmarks/ray_overhead.py", "--credit", "grpo", "--seeds", "1"]
    cmd += ["--steps", "1", "--json", str(tmp_path / "r.json")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=Path(__file__).parents[1])
    assert res.returncode == 0, res.stdout + res.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert "ray / local" in res.stdout and data["same_finals"] is True and data["ratio"] > 0
    assert data["rows"]["ray local"]["runs"] == data["rows"]["local"]["runs"] == 1
