"""Smoke tests for the local Docker engine and base image (see .ci/engine.sh).

Every container is started with no network and labelled
``org.creditgym.managed=true`` plus a per-session run id, and is removed in
``finally``; the tests then check that it is really gone.
"""

from __future__ import annotations

import json
import uuid

import pytest

pytestmark = pytest.mark.docker

RUN_ID = uuid.uuid4().hex[:12]
LABELS = {"org.creditgym.managed": "true", "org.creditgym.test-run": RUN_ID}


def run_python(client, image: str, code: str, timeout: int = 60, **kwargs) -> tuple[int, str]:
    """Run ``python3 -c code`` in a fresh, network-less container; return (exit code, output)."""
    container = client.containers.run(
        image,
        ["python3", "-c", code],
        detach=True,
        network_mode="none",
        network_disabled=True,
        labels=LABELS,
        **kwargs,
    )
    try:
        status = container.wait(timeout=timeout)
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        return status["StatusCode"], output
    finally:
        container.remove(force=True)


def leftovers(client) -> list:
    return client.containers.list(all=True, filters={"label": f"org.creditgym.test-run={RUN_ID}"})


def test_python_runs_in_base_image(docker_client, base_image):
    code, out = run_python(docker_client, base_image, "import sys; print('hello', sys.version_info[0] * 7)")
    assert code == 0, out
    assert out.strip() == "hello 21"
    assert leftovers(docker_client) == []


NET_PROBE = r"""
import errno, json, os, socket, time
with open("/proc/net/dev") as f:
    proc_dev = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(5)
t0 = time.monotonic()
try:
    s.connect(("1.1.1.1", 53))
    result, err = "connected", None
except OSError as exc:
    result, err = type(exc).__name__, exc.errno
finally:
    s.close()
print(json.dumps({"sys_class_net": sorted(os.listdir("/sys/class/net")), "proc_net_dev": proc_dev,
                  "result": result, "errno": err, "seconds": time.monotonic() - t0}))
"""


def test_container_has_no_network(docker_client, base_image):
    code, out = run_python(docker_client, base_image, NET_PROBE)
    assert code == 0, out
    probe = json.loads(out.strip().splitlines()[-1])
    assert probe["sys_class_net"] == ["lo"], probe
    assert probe["proc_net_dev"] == ["lo"], probe
    # No route at all: the connect must fail at once, not time out.
    assert probe["result"] != "connected", probe
    assert probe["result"] != "TimeoutError", probe
    assert probe["seconds"] < 1.0, probe
    assert leftovers(docker_client) == []


CGROUP_PROBE = r"""
import json, os
def read(*paths):
    for p in paths:
        if os.path.exists(p):
            return open(p).read().strip()
    return None
print(json.dumps({
    "memory": read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    "pids": read("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"),
    "cpu": read("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
}))
"""


def test_resource_limits_apply(docker_client, base_image):
    code, out = run_python(
        docker_client, base_image, CGROUP_PROBE, mem_limit="128m", pids_limit=64, nano_cpus=500_000_000
    )
    assert code == 0, out
    limits = json.loads(out.strip().splitlines()[-1])
    assert limits["memory"] == str(128 * 1024 * 1024), limits
    assert limits["pids"] == "64", limits
    # 0.5 CPU = a 50 ms quota per 100 ms period ("50000" on v1, "50000 100000" on v2)
    assert (limits["cpu"] or "").split()[:1] == ["50000"], limits
    assert leftovers(docker_client) == []
