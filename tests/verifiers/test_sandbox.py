"""The Docker sandbox: limits, timeouts, output caps, files, diffs, and no leaked containers.

Tests marked ``docker`` run against the real engine (skipped locally without one, failing under ``CI=true``).
Every container they start carries ``org.creditgym.test-run=<RUN_ID>``; the module's teardown checks that none
is left and removes any that is.
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import pickle
import re
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from creditgym.verifiers.swe import docker_sandbox as sandbox_module
from creditgym.verifiers.swe.engine import FrameReader as _FrameReader
from creditgym.verifiers.swe.engine import HeadTail as _HeadTail
from creditgym.verifiers.swe.lifecycle import owner_dead as _owner_dead
from creditgym.verifiers.swe.sandbox import (
    LABEL,
    OWNER_LABEL,
    DiffError,
    DockerSandbox,
    ExecResult,
    FileTooLargeError,
    Sandbox,
    SandboxConfig,
    SandboxError,
    cleanup,
    docker_client,
    resolve_path,
)

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = uuid.uuid4().hex[:12]
RUN_LABEL = "org.creditgym.test-run"
LABELS = {RUN_LABEL: RUN_ID}
DEAD_HOST = "unix:///tmp/nonexistent.sock"
MARKER = re.compile(r"\n\[\.\.\. (\d+) bytes cut \.\.\.\]\n")
# Lists the processes in the container: "<pid> <cmdline>" per line (the base image has no ps).
PS = r"""for d in /proc/[0-9]*; do echo "${d#/proc/} $(tr '\0' ' ' < $d/cmdline 2>/dev/null)"; done"""


# --------------------------------------------------------------------------- pure parts


def test_config_defaults() -> None:
    cfg = SandboxConfig()
    assert (cfg.memory, cfg.cpus, cfg.pids, cfg.workdir) == ("1g", 1.0, 256, "/testbed")
    assert (cfg.command_timeout, cfg.output_limit, cfg.start_timeout) == (60.0, 16_384, 60.0)
    assert cfg.memory_bytes == 1024**3 and SandboxConfig(memory="256m").memory_bytes == 256 * 1024**2
    with pytest.raises(AttributeError):
        cfg.memory = "2g"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory", "lots"),
        ("memory", "1m"),
        ("cpus", 0),
        ("cpus", float("nan")),
        ("pids", 2),
        ("command_timeout", 0),
        ("command_timeout", float("inf")),
        ("output_limit", 10),
        ("workdir", "testbed"),
        ("workdir", "/testbed/"),
        ("start_timeout", -1),
    ],
)
def test_config_rejects_bad_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field) as info:
        SandboxConfig(**{field: value})  # type: ignore[arg-type]
    assert repr(value) in str(info.value) or str(value) in str(info.value)


def test_resolve_path() -> None:
    assert resolve_path("/testbed", "a/b.py") == "/testbed/a/b.py"
    assert resolve_path("/testbed", "./a/../b.py") == "/testbed/b.py"
    assert resolve_path("/testbed", "/testbed/x") == "/testbed/x"
    assert resolve_path("/testbed", ".") == "/testbed"
    assert resolve_path("/", "etc/passwd") == "/etc/passwd"
    with pytest.raises(ValueError, match=re.escape("path '../x' is outside the repository /testbed")):
        resolve_path("/testbed", "../x")
    for bad in ("/etc/passwd", "/testbed2/x", "a/../../x", "//etc/passwd"):
        with pytest.raises(ValueError, match="outside the repository"):
            resolve_path("/testbed", bad)
    for bad in ("", "a\x00b"):
        with pytest.raises(ValueError, match="non-empty"):
            resolve_path("/testbed", bad)


def test_head_tail_keeps_both_ends_and_counts_the_cut() -> None:
    small = _HeadTail(100)
    small.write(b"hello ")
    small.write(memoryview(b"world"))
    assert (small.text(), small.truncated) == ("hello world", False)

    data = b"".join(b"%06d\n" % i for i in range(100_000))  # 700,000 bytes
    capped = _HeadTail(1000)
    for i in range(0, len(data), 4093):  # chunk boundaries anywhere
        capped.write(data[i : i + 4093])
    text = capped.text()
    assert capped.truncated and capped.total == len(data)
    head, cut, tail = MARKER.split(text)
    assert head.encode() == data[:500] and tail.encode() == data[-500:]
    assert int(cut) == len(data) - 1000
    assert len(capped.tail) <= 2 * 500 + 65_536  # the tail buffer stays bounded

    exact = _HeadTail(64)
    exact.write(b"x" * 64)
    assert (exact.text(), exact.truncated) == ("x" * 64, False)
    bad = _HeadTail(64)
    bad.write("é".encode() + b"\xff")
    assert bad.text() == "é\ufffd"


def test_frame_reader_splits_frames_across_any_chunking() -> None:
    payloads = [(1, b"out-1\n"), (2, b"err\n"), (1, b""), (1, b"x" * 70_000), (2, b"last")]
    stream = b"".join(struct.pack(">BxxxL", kind, len(p)) + p for kind, p in payloads)
    for size in (1, 3, 7, 8, 9, 4096, len(stream)):
        reader, got = _FrameReader(), []
        for i in range(0, len(stream), size):
            got += [(kind, bytes(view)) for kind, view in reader.feed(stream[i : i + size])]
        joined: dict[int, bytes] = {1: b"", 2: b""}
        for kind, data in got:
            joined[kind] += data
        assert joined[1] == b"out-1\n" + b"x" * 70_000 and joined[2] == b"err\nlast", size


def test_sandbox_error_keeps_its_kind() -> None:
    err = SandboxError("gone", kind="container_died")
    assert err.kind == "container_died" and str(err) == "gone" and isinstance(err, RuntimeError)
    again = pickle.loads(pickle.dumps(err))
    assert (again.kind, str(again)) == ("container_died", "gone")
    assert SandboxError("x").kind == "engine"
    with pytest.raises(ValueError, match="kind must be one of"):
        SandboxError("x", kind="oops")


def test_owner_liveness() -> None:
    host = socket.gethostname()
    assert not _owner_dead(f"{host}:{os.getpid()}")
    assert not _owner_dead(f"some-other-host:{os.getpid()}")  # not ours to judge
    assert not _owner_dead(None) and not _owner_dead("garbage")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert _owner_dead(f"{host}:{child.pid}")


def test_dead_engine_is_an_engine_error(monkeypatch: pytest.MonkeyPatch) -> None:
    docker = pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", DEAD_HOST)
    with pytest.raises(SandboxError) as info:
        docker_client(timeout=5)
    assert info.value.kind == "engine"
    assert (
        DEAD_HOST in str(info.value) and "make engine" in str(info.value) and "DOCKER_HOST" in str(info.value)
    )

    dead = docker.DockerClient(base_url=DEAD_HOST, version="1.41", timeout=5)
    with pytest.raises(SandboxError) as info:
        DockerSandbox("creditgym-base:bookworm", client=dead)
    assert info.value.kind == "engine" and DEAD_HOST in str(info.value)
    with pytest.raises(SandboxError) as info:
        cleanup(dead)
    assert info.value.kind == "engine"
    with pytest.raises(SandboxError) as info:
        DockerSandbox("creditgym-base:bookworm")  # the default client follows DOCKER_HOST
    assert info.value.kind == "engine"


# --------------------------------------------------------------------------- against the engine


def _leftovers(client) -> list:
    return client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={RUN_ID}"})


@pytest.fixture(scope="module")
def no_leaks(docker_client) -> Iterator[None]:
    yield
    left = _leftovers(docker_client)
    for container in left:
        container.remove(force=True)
    assert left == [], f"containers left behind: {[c.name for c in left]}"


@pytest.fixture(scope="module")
def box(docker_client, base_image, no_leaks) -> Iterator[DockerSandbox]:
    """One shared sandbox with tight limits; every test leaves it answering."""
    cfg = SandboxConfig(memory="256m", pids=64, output_limit=4096, command_timeout=30)
    with DockerSandbox(base_image, cfg, client=docker_client, labels=LABELS) as sandbox:
        yield sandbox


def _processes(box: DockerSandbox) -> str:
    return box.exec(PS).output


# A job that a non-interactive shell starts in the background (`make test &`, a CI runner's script) inherits
# SIGINT *ignored*, and Python then leaves it ignored: a child would sleep through the SIGINT a test sends (the
# flaky `test_removed_when_the_owner_stops[SIGINT]`). Children start as from a foreground shell instead.
FOREGROUND = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"


def _child(code: str) -> subprocess.Popen:
    """A python child that runs ``code`` (which prints a container id) with this checkout importable."""
    return subprocess.Popen(
        [sys.executable, "-c", FOREGROUND + textwrap.dedent(code)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _gone(client, container_id: str, within: float = 10.0) -> bool:
    import docker

    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            client.containers.get(container_id)
        except docker.errors.NotFound:
            return True
        time.sleep(0.1)
    return False


CHILD_CHAINED = """
import docker, signal, sys
def mine(signum, frame):
    try:
        docker.from_env().containers.get(box.container_id)
        print("still there", flush=True)
    except docker.errors.NotFound:
        print("gone", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, mine)
"""
CHILD_START = """
import sys, time
from creditgym.verifiers.swe.sandbox import DockerSandbox
box = DockerSandbox({image!r}, labels={labels!r})
print(box.container_id, flush=True)
"""


@pytest.mark.docker
def test_is_a_sandbox_with_the_requested_limits(docker_client, box: DockerSandbox) -> None:
    assert isinstance(box, Sandbox) and box.workdir == "/testbed"
    attrs = docker_client.api.inspect_container(box.container_id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["Init"] is True
    assert host["Memory"] == host["MemorySwap"] == 256 * 1024**2
    assert host["PidsLimit"] == 64 and host["NanoCpus"] == 1_000_000_000
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL] == "1" and labels[RUN_LABEL] == RUN_ID
    assert labels[OWNER_LABEL] == f"{socket.gethostname()}:{os.getpid()}"


@pytest.mark.docker
def test_exec_runs_a_login_shell_in_workdir(box: DockerSandbox) -> None:
    res = box.exec("echo out; echo err >&2; pwd; shopt -q login_shell && echo login; exit 7")
    assert isinstance(res, ExecResult)
    assert res.exit_code == 7 and not res.timed_out and not res.truncated and not res.ok
    assert sorted(res.output.splitlines()) == sorted(["out", "err", "/testbed", "login"])
    assert box.exec("true").ok and box.exec("printf 'caf\\xc3\\xa9 \\xff'").output == "café \ufffd"


NET_PROBE = r"""python3 - <<'EOF'
import json, os, socket, time
s = socket.socket(); s.settimeout(5); t0 = time.monotonic()
try:
    s.connect(("1.1.1.1", 53)); result = "connected"
except OSError as exc:
    result = type(exc).__name__
print(json.dumps({"net": sorted(os.listdir("/sys/class/net")), "result": result, "s": time.monotonic() - t0}))
EOF"""


@pytest.mark.docker
def test_no_network(box: DockerSandbox) -> None:
    res = box.exec(NET_PROBE)
    assert res.exit_code == 0, res.output
    probe = json.loads(res.output.strip().splitlines()[-1])
    assert probe["net"] == ["lo"], probe
    assert probe["result"] not in ("connected", "TimeoutError"), probe
    assert probe["s"] < 1.0, probe


@pytest.mark.docker
def test_timeout_kills_the_command_and_the_sandbox_answers(box: DockerSandbox) -> None:
    res = box.exec("echo begun; sleep 1000", timeout=2)
    assert res.timed_out and res.exit_code is None and res.output == "begun\n"
    assert 2 <= res.seconds < 6, res.seconds
    assert box.exec("echo ok").output == "ok\n"
    assert "sleep 1000" not in _processes(box)


@pytest.mark.docker
def test_background_jobs_end_with_their_command(box: DockerSandbox) -> None:
    res = box.exec("sleep 1001 & echo started", timeout=30)
    assert res.exit_code == 0 and not res.timed_out and res.output == "started\n" and res.seconds < 5
    # Only a new session outlives its command (a server, say); at the deadline even that is killed.
    daemon = "setsid sh -c 'echo $$ > /tmp/daemon.pid; exec sleep 1002' >/dev/null 2>&1 &"
    started = "until grep -qs 1002 /proc/$(cat /tmp/daemon.pid 2>/dev/null)/cmdline; do sleep 0.05; done"
    res = box.exec(f"{daemon} {started}")  # waits until the daemon is sleep 1002, however long that takes
    assert res.exit_code == 0
    res = box.exec("setsid -w sleep 1003", timeout=1)
    assert res.timed_out and res.seconds < 6
    left = _processes(box)
    assert "sleep 1001" not in left and "sleep 1003" not in left and "sleep 1002" in left, left
    assert box.exec("kill $(cat /tmp/daemon.pid)").ok


@pytest.mark.docker
def test_a_stuck_watchdog_is_backed_up_from_outside(
    box: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Freeze the in-container watchdog (its `sleep 1.000`): past the deadline and a grace, the client kills every
    # process carrying the command's marker.
    monkeypatch.setattr(sandbox_module, "_KILL_GRACE_S", 1.0)
    freeze = r"""for d in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" = "sleep 1.000 " ] \
        && kill -STOP ${d#/proc/}; done; echo frozen; sleep 1006"""
    res = box.exec(freeze, timeout=1)
    assert res.timed_out and res.exit_code is None and res.output == "frozen\n" and 2 <= res.seconds < 8, res
    left = _processes(box)
    assert "sleep 1006" not in left and "sleep 1.000" not in left, left


@pytest.mark.docker
def test_fork_bomb_is_stopped_and_the_sandbox_answers(box: DockerSandbox) -> None:
    res = box.exec(":(){ :|:& };:", timeout=5)  # returns at once: the bomb dies with its process group
    assert res.seconds < 5 and box.exec("echo ok").output == "ok\n"
    res = box.exec("bomb() { bomb | bomb & }; bomb; sleep 1000", timeout=3)
    assert res.timed_out and res.seconds < 10, res
    assert "Resource temporarily unavailable" in res.output  # fork() failed: the pids limit held
    assert box.exec("echo ok").output == "ok\n"
    assert "bomb" not in _processes(box)


@pytest.mark.docker
def test_memory_hog_is_killed(box: DockerSandbox) -> None:
    res = box.exec("python3 -c 'x = b\"a\" * (2 * 1024**3); print(len(x))'", timeout=60)
    assert res.exit_code not in (0, None) and not res.timed_out, res
    assert res.exit_code == 137, res
    assert box.exec("echo ok").output == "ok\n"


@pytest.mark.docker
def test_huge_output_is_capped_while_streaming(box: DockerSandbox) -> None:
    n = 100_000_000
    tracemalloc.start()
    try:
        res = box.exec(f"head -c {n} /dev/zero | tr '\\0' a", timeout=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.exit_code == 0 and res.truncated and not res.timed_out
    head, cut, tail = MARKER.split(res.output)
    assert head == "a" * 2048 and tail == "a" * 2048 and int(cut) == n - 4096
    assert len(res.output.encode()) <= box.config.output_limit + len(f"\n[... {n} bytes cut ...]\n")
    assert peak < 8 * 1024**2, f"{peak / 1e6:.1f} MB held while streaming 100 MB"


@pytest.mark.docker
def test_output_keeps_head_and_tail(box: DockerSandbox) -> None:
    res = box.exec("seq 1 100000")
    expected = "".join(f"{i}\n" for i in range(1, 100_001)).encode()
    head, cut, tail = MARKER.split(res.output)
    assert res.truncated and head.encode() == expected[:2048] and tail.encode() == expected[-2048:]
    assert int(cut) == len(expected) - 4096


@pytest.mark.docker
def test_files_round_trip(box: DockerSandbox) -> None:
    blob = bytes(range(256)) * 300
    box.write_file("data/deep/blob.bin", blob)
    box.write_file("/testbed/data/note.txt", "héllo\n")
    assert box.read_file("data/deep/blob.bin") == blob
    assert box.read_file("data/note.txt") == "héllo\n".encode()
    assert box.exec("sha256sum data/deep/blob.bin").output.split()[0] == hashlib.sha256(blob).hexdigest()
    box.exec("ln -sf deep/blob.bin data/link")
    assert box.read_file("data/link") == blob
    for outside in ("../etc/passwd", "/etc/passwd", "data/../../x"):
        with pytest.raises(ValueError, match="outside the repository /testbed"):
            box.write_file(outside, "x")
        with pytest.raises(ValueError, match="outside the repository /testbed"):
            box.read_file(outside)
    with pytest.raises(FileNotFoundError):
        box.read_file("data/missing.txt")
    with pytest.raises(IsADirectoryError):
        box.read_file("data")
    box.exec("rm -rf data")


REPO_SETUP = r"""
set -e
git init -q . && git config user.email t@t && git config user.name t
printf 'line 1\nline 2\nline 3\n' > tracked.txt
printf 'to be deleted\n' > gone.txt
printf '\x00\x01\x02binary\xff' > old.bin
git add -A && git commit -qm init
git clone -q /testbed /tmp/fresh
"""


@pytest.mark.docker
def test_diff_applies_to_a_fresh_checkout(docker_client, base_image, no_leaks, tmp_path: Path) -> None:
    with DockerSandbox(base_image, client=docker_client, labels=LABELS) as box:
        setup = box.exec(REPO_SETUP)
        assert setup.exit_code == 0, setup.output
        assert box.diff() == ""
        box.write_file("tracked.txt", "line 1\nline two\nline 3\nline 4\n")
        box.write_file("new/dir/added.py", "print('new')\n")
        box.write_file("new/image.bin", bytes(range(256)) * 4)
        box.write_file("old.bin", b"\x00changed\xfe")
        box.exec("rm gone.txt")
        status_before = box.exec("git status --porcelain").output
        patch = box.diff()
        assert box.exec("git status --porcelain").output == status_before  # the index is untouched
        assert "GIT binary patch" in patch and "new/dir/added.py" in patch and "deleted file" in patch

        (tmp_path / "p.patch").write_text(patch)
        box.copy_in(tmp_path / "p.patch", "/tmp/p.patch")
        res = box.exec(
            "cd /tmp/fresh && git apply --check /tmp/p.patch && git apply /tmp/p.patch "
            "&& diff -r --exclude=.git /testbed /tmp/fresh && echo same"
        )
        assert res.exit_code == 0 and "same" in res.output.splitlines(), res.output
        assert box.exec("rm -rf /testbed/.git && true").ok
        with pytest.raises(RuntimeError, match="git diff failed"):
            box.diff()


@pytest.mark.docker
def test_copy_in_directory_and_tar(box: DockerSandbox, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "top.txt").write_text("top\n")
    box.copy_in(tmp_path, "copied")
    assert box.read_file("copied/pkg/a.py") == b"A = 1\n" and box.read_file("copied/top.txt") == b"top\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("from_tar.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"tar"))
    box.copy_in(buffer.getvalue(), "/opt/x")
    assert box.exec("cat /opt/x/from_tar.txt").output == "tar"
    box.exec("rm -rf copied /opt/x")


@pytest.mark.docker
def test_parallel_commands_on_one_sandbox(box: DockerSandbox) -> None:
    results: dict[int, str] = {}

    def work(i: int) -> None:
        for j in range(3):
            results[i * 10 + j] = box.exec(f"echo {i}-{j}").output

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i * 10 + j: f"{i}-{j}\n" for i in range(4) for j in range(3)}


@pytest.mark.docker
def test_removed_on_close_and_on_exception(docker_client, base_image, no_leaks) -> None:
    box = DockerSandbox(base_image, client=docker_client, labels=LABELS)
    cid = box.container_id
    box.close()
    box.close()  # idempotent
    assert _gone(docker_client, cid, within=0.5)
    with pytest.raises(SandboxError) as info:
        box.exec("true")
    assert info.value.kind == "container_died"

    with pytest.raises(KeyError), DockerSandbox(base_image, client=docker_client, labels=LABELS) as box:
        cid = box.container_id
        raise KeyError("boom")
    assert _gone(docker_client, cid, within=0.5)

    box = DockerSandbox(base_image, client=docker_client, labels=LABELS)
    cid = box.container_id
    del box  # dropped without close: removed when collected
    gc.collect()
    assert _gone(docker_client, cid, within=0.5)


@pytest.mark.docker
def test_dead_container_is_reported(docker_client, base_image, no_leaks) -> None:
    with DockerSandbox(base_image, client=docker_client, labels=LABELS) as box:
        docker_client.api.kill(box.container_id)
        with pytest.raises(SandboxError) as info:
            box.exec("echo hi")
        assert info.value.kind == "container_died" and box.container_id[:12] in str(info.value)
        with pytest.raises(SandboxError) as info:
            box.diff()
        assert info.value.kind == "container_died"
    assert _gone(docker_client, box.container_id, within=0.5)


@pytest.mark.docker
def test_missing_image_is_never_pulled(docker_client, no_leaks) -> None:
    image = f"creditgym-no-such-image-{RUN_ID}:latest"
    with pytest.raises(SandboxError) as info:
        DockerSandbox(image, client=docker_client, labels=LABELS)
    assert info.value.kind == "image_missing" and image in str(info.value)
    assert _leftovers(docker_client) == [] or all(c.image != image for c in _leftovers(docker_client))


@pytest.mark.docker
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "exit", "chained"])
def test_removed_when_the_owner_stops(docker_client, base_image, no_leaks, how: str) -> None:
    code = CHILD_START.format(image=base_image, labels=LABELS)
    if how == "chained":  # a handler installed before the first sandbox still runs, after the removal
        code = CHILD_CHAINED + code
    code += "sys.exit(0)\n" if how == "exit" else "time.sleep(120)\n"
    child = _child(code)
    try:
        assert child.stdout is not None
        cid = child.stdout.readline().strip()
        assert cid, child.stderr.read() if child.stderr else ""
        if how != "exit":
            child.send_signal(signal.SIGTERM if how == "chained" else getattr(signal, how))
        child.wait(timeout=60)
    finally:
        child.kill()
        child.wait()
    if how == "SIGTERM":
        assert child.returncode == -signal.SIGTERM  # the default action still happens
    if how == "chained":
        assert child.returncode == 3 and child.stdout is not None and "gone" in child.stdout.read()
    assert _gone(docker_client, cid), f"container {cid[:12]} survived {how} of its owner"


@pytest.mark.docker
def test_cleanup_removes_what_a_killed_owner_left(docker_client, box: DockerSandbox) -> None:
    child = _child(CHILD_START.format(image=box.image, labels=LABELS) + "time.sleep(120)\n")
    try:
        assert child.stdout is not None
        cid = child.stdout.readline().strip()
    finally:
        child.kill()  # SIGKILL: no handler runs
        child.wait()
    assert cid and not _gone(docker_client, cid, within=0.2)
    removed = cleanup(docker_client)
    assert cid in removed and box.container_id not in removed
    assert _gone(docker_client, cid, within=0.5)
    assert box.exec("echo alive").output == "alive\n"  # a live owner's sandbox is kept


@pytest.mark.docker
def test_benchmark_script_runs(docker_client, base_image, no_leaks, tmp_path: Path) -> None:
    out = tmp_path / "sandbox.json"
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "benchmarks" / "sandbox.py"),
        "--image",
        base_image,
        "--starts",
        "1",
        "--commands",
        "3",
        "--parallel",
        "2",
        "--loop",
        "2",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    for key in ("start", "command", "parallel"):
        assert result[key]["sandbox_s"] > 0 and result[key]["ratio"] > 0, result[key]
    assert "start-to-ready" in done.stdout and "ratio" in done.stdout
    assert docker_client.containers.list(all=True, filters={"label": "org.creditgym.benchmark"}) == []


# --------------------------------------------------------------------------- isolation and host resources


def _sleepers(box: DockerSandbox) -> list[str]:
    return [line for line in _processes(box).splitlines() if re.search(r"\bsleep 7\d\d\b", line)]


ESCAPES = {
    "a new session without the marker": "env -u CREDITGYM_EXEC setsid sleep 777 & sleep 1000",
    "a double fork without the marker": "( env -u CREDITGYM_EXEC setsid sleep 778 & ); sleep 1000",
    # the command's grandparent is the exec's init: killing it orphans the command to PID 1
    "killing its own init": (
        "read -r _ _ _ init _ < /proc/$PPID/stat; ( env -u CREDITGYM_EXEC setsid sleep 779 & ); "
        "kill -9 $init; sleep 1000"
    ),
}


@pytest.mark.docker
@pytest.mark.parametrize("escape", list(ESCAPES))
def test_a_timed_out_command_leaves_nothing_of_its_own_running(box: DockerSandbox, escape: str) -> None:
    res = box.exec(ESCAPES[escape], timeout=2)
    assert res.timed_out and res.exit_code is None and res.seconds < 8, res
    assert _sleepers(box) == []
    assert box.exec("echo ok").output == "ok\n"


@pytest.mark.docker
def test_file_tools_refuse_symlinks_out_of_the_repository(box: DockerSandbox) -> None:
    box.exec(
        "mkdir -p links && ln -sf /etc/passwd links/passwd && ln -sfn /etc links/etc && ln -sf ../../x links/up"
    )
    with pytest.raises(ValueError, match="resolves to '/etc/passwd', outside the repository /testbed"):
        box.read_file("links/passwd")
    for path in ("links/etc/creditgym-evil", "links/etc/passwd", "links/up"):
        with pytest.raises(ValueError, match="outside the repository /testbed"):
            box.write_file(path, "pwned\n")
    assert box.exec("test -e /etc/creditgym-evil || test -e /x || echo clean").output == "clean\n"
    assert "pwned" not in box.exec("cat /etc/passwd").output
    box.write_file("links/inside.txt", "in\n")  # a link that stays inside is followed, as before
    box.exec("ln -sf inside.txt links/alias")
    box.write_file("links/alias", "edited\n")
    assert box.read_file("links/inside.txt") == b"edited\n" and box.read_file("links/alias") == b"edited\n"
    box.exec("rm -rf links")


@pytest.mark.docker
def test_file_tools_keep_the_file_mode_and_refuse_directories(box: DockerSandbox) -> None:
    box.exec("mkdir -p d && printf '#!/bin/sh\\necho hi\\n' > d/run.sh && chmod 755 d/run.sh")
    box.write_file("d/run.sh", "#!/bin/sh\necho edited\n")
    assert box.exec("./d/run.sh").output == "edited\n"  # still executable
    with pytest.raises(IsADirectoryError):
        box.write_file("d", "x")
    with pytest.raises(IsADirectoryError):
        box.write_file(".", "x")
    box.exec("rm -rf d")


@pytest.mark.docker
def test_file_reads_and_diffs_crossing_into_this_process_are_capped(
    docker_client, base_image, no_leaks
) -> None:
    cfg = SandboxConfig(file_limit=64 * 1024, diff_limit=64 * 1024)
    with DockerSandbox(base_image, cfg, client=docker_client, labels=LABELS) as box:
        assert box.exec("git init -q . && head -c 8M /dev/urandom > big.bin && echo made").output == "made\n"
        tracemalloc.start()
        try:
            with pytest.raises(FileTooLargeError) as info:
                box.read_file("big.bin")
            with pytest.raises(DiffError) as diff:
                box.diff()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (
            info.value.size == 8 * 1024**2 and info.value.limit == 64 * 1024 and "sed -n" in str(info.value)
        )
        assert diff.value.reason == "too_large" and "diff_limit" in str(diff.value)
        assert peak < 4 * 1024**2, f"{peak / 1e6:.1f} MB held for an 8 MB file"
        box.write_file("small.txt", "x" * 1000)
        assert box.read_file("small.txt") == b"x" * 1000


@pytest.mark.docker
def test_disk_writes_are_bounded(docker_client, base_image, no_leaks) -> None:
    cfg = SandboxConfig(disk="64m", command_timeout=60)
    with DockerSandbox(base_image, cfg, client=docker_client, labels=LABELS) as box:
        one = box.exec("head -c 100M /dev/zero > one.bin; echo exit=$?; stat -c %s one.bin")
        lines = one.output.splitlines()  # bash's "File size limit exceeded" is stderr: it may land anywhere
        assert "exit=153" in lines and str(64 * 1024**2) in lines, one  # SIGXFSZ at 64m
        many = box.exec(
            "for i in $(seq 1 40); do head -c 16M /dev/zero > f$i.bin; sleep 0.2; done; echo done"
        )
        assert many.disk_exceeded and many.exit_code is None and not many.timed_out, many
        assert "done" not in many.output and many.seconds < 20, many
        assert box.exec("true").disk_exceeded  # still over: every command says so
        box.exec("rm -f *.bin")
        after = box.exec("echo fine")
        assert after.output == "fine\n" and not after.disk_exceeded


@pytest.mark.docker
def test_containers_hold_no_capabilities_and_cannot_gain_any(docker_client, box: DockerSandbox) -> None:
    host = docker_client.api.inspect_container(box.container_id)["HostConfig"]
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["AutoRemove"] is True
    assert {u["Name"]: u["Hard"] for u in host["Ulimits"]} == {"fsize": box.config.disk_bytes}
    status = box.exec("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status").output
    assert re.findall(r"Cap(?:Eff|Prm|Bnd):\s+(\w+)", status) == ["0" * 16] * 3 and "NoNewPrivs:\t1" in status
    denied = box.exec("touch f && chown 1234 f; echo rc=$?; mknod n c 1 3; echo rc=$?; rm -f f n")
    assert denied.output.count("rc=1") == 2, denied.output  # even root may not chown or mknod


@pytest.mark.docker
def test_capabilities_can_be_given_back(docker_client, base_image, no_leaks) -> None:
    cfg = SandboxConfig(cap_add=("CHOWN",))
    with DockerSandbox(base_image, cfg, client=docker_client, labels=LABELS) as box:
        assert box.exec("touch f && chown 1234 f && stat -c %u f").output == "1234\n"


@pytest.mark.docker
def test_the_container_stops_and_goes_at_its_max_lifetime(docker_client, base_image, no_leaks) -> None:
    box = DockerSandbox(base_image, SandboxConfig(max_lifetime=2), client=docker_client, labels=LABELS)
    try:
        assert box.exec("echo alive").output == "alive\n"
        assert _gone(docker_client, box.container_id, within=20)  # removed by the engine, not by us
        with pytest.raises(SandboxError) as info:
            box.exec("echo hi")
        assert info.value.kind == "container_died" and "max_lifetime" in str(info.value)
    finally:
        box.close()


@pytest.mark.docker
def test_the_first_sandbox_of_a_process_removes_dead_owners_containers(
    docker_client, base_image, no_leaks
) -> None:
    dead = _child(CHILD_START.format(image=base_image, labels=LABELS) + "time.sleep(120)\n")
    try:
        assert dead.stdout is not None
        left = dead.stdout.readline().strip()
    finally:
        dead.kill()  # SIGKILL: nothing of its own removes the container
        dead.wait()
    assert left and not _gone(docker_client, left, within=0.2)
    fresh = _child(CHILD_START.format(image=base_image, labels=LABELS) + "box.close()\n")
    _, err = fresh.communicate(timeout=120)
    assert fresh.returncode == 0, err
    assert _gone(docker_client, left, within=5), (
        "a fresh process's first sandbox did not remove the dead one's"
    )


@pytest.mark.docker
def test_a_nul_byte_in_a_command_is_a_clear_error(box: DockerSandbox) -> None:
    with pytest.raises(ValueError, match="NUL byte"):
        box.exec("echo a\x00b")
    assert box.exec("echo ok").output == "ok\n"
