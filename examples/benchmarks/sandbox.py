"""What does ``DockerSandbox`` cost over the plain docker CLI? Start-to-ready, per-command and parallel times.

    python examples/benchmarks/sandbox.py [--image creditgym-base:bookworm] [--starts 5] [--commands 50]
                                          [--parallel 4] [--loop 20] [--flood 1700000] [--out PATH]

Three measurements, each against the same thing done with the ``docker`` CLI from a shell (subprocess), same image
and limits, interleaved so that load on the machine hits both sides alike:

- start-to-ready: ``DockerSandbox(image)`` + ``exec("true")`` vs ``docker run -d --rm ... sleep <lifetime>`` +
  ``docker exec CID true`` with the same limits, capabilities and ulimits (removal not timed); median of
  ``--starts``.
- per-command: ``sandbox.exec("true")`` (its own init, the watchdog, the disk check) vs ``docker exec CID true``
  on the same container; median of ``--commands``.
- parallel: ``--parallel`` sandboxes, one thread each, each running ``--loop`` short commands (wall time), vs the
  same number of threads running ``docker exec`` on those containers.

And what grading costs on a flooded log: the peak memory (tracemalloc) of reading a 32 MiB eval log of ``--flood``
fake result lines (``t1 (x.Y.t1) ... ok``) with ``scoring.score``, against swebench's own ``get_logs_eval``.

Ratios are sandbox / shell; the targets are <= 1.5 for start and per-command. Every container is labelled
``org.creditgym.benchmark`` and removed at the end. Writes the numbers as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from creditgym.verifiers.swe.sandbox import LABEL, DockerSandbox, SandboxConfig

BENCH_LABEL = "org.creditgym.benchmark"
TARGETS = {"start": 1.5, "command": 1.5}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sandbox.json"


def _docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _shell_run_args(image: str, cfg: SandboxConfig, tag: str) -> list[str]:
    """``docker run`` with the limits and isolation DockerSandbox uses."""
    return [
        "run", "-d", "--rm", "--network", "none", "--init", "--memory", cfg.memory, "--memory-swap", cfg.memory,
        "--cpus", str(cfg.cpus), "--pids-limit", str(cfg.pids), "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges", "--ulimit", f"fsize={cfg.disk_bytes}",
        "--workdir", cfg.workdir, "--label", f"{LABEL}=1", "--label", f"{BENCH_LABEL}={tag}",
        image, "sleep", f"{cfg.max_lifetime:.0f}",
    ]  # fmt: skip


def measure_start(image: str, cfg: SandboxConfig, starts: int, tag: str) -> dict[str, Any]:
    def sandbox_start() -> float:
        seconds, box = _timed(lambda: DockerSandbox(image, cfg, labels={BENCH_LABEL: tag}))
        seconds += _timed(lambda: box.exec("true"))[0]
        box.close()
        return seconds

    def shell_start() -> float:
        seconds, cid = _timed(lambda: _docker(*_shell_run_args(image, cfg, tag)))
        seconds += _timed(lambda: _docker("exec", cid, "true"))[0]
        _docker("rm", "-f", cid)
        return seconds

    sandbox_start(), shell_start()  # warm-up: imports, the client's connection pool, page cache
    ours, theirs = [], []
    for _ in range(starts):
        ours.append(sandbox_start())
        theirs.append(shell_start())
    return _row(ours, theirs)


def measure_command(box: DockerSandbox, commands: int) -> dict[str, Any]:
    box.exec("true"), _docker("exec", box.container_id, "true")
    ours, theirs = [], []
    for _ in range(commands):
        ours.append(_timed(lambda: box.exec("true"))[0])
        theirs.append(_timed(lambda: _docker("exec", box.container_id, "true"))[0])
    return _row(ours, theirs)


def measure_parallel(boxes: list[DockerSandbox], loop: int) -> dict[str, Any]:
    def wall(work: Callable[[DockerSandbox], None]) -> float:
        threads = [threading.Thread(target=work, args=(box,)) for box in boxes]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    def ours(box: DockerSandbox) -> None:
        for i in range(loop):
            assert box.exec(f"echo {i}").output == f"{i}\n"

    def theirs(box: DockerSandbox) -> None:
        for i in range(loop):
            assert _docker("exec", box.container_id, "echo", str(i)) == str(i)

    sandbox_s, shell_s = wall(ours), wall(theirs)
    n = len(boxes) * loop
    return {
        "sandboxes": len(boxes),
        "commands": n,
        "sandbox_s": sandbox_s,
        "shell_s": shell_s,
        "ratio": sandbox_s / shell_s,
        "sandbox_commands_per_s": n / sandbox_s,
        "shell_commands_per_s": n / shell_s,
    }


def measure_flood(lines: int) -> dict[str, Any]:
    """Peak memory of grading a log of ``lines`` fake result lines: creditgym's reading vs swebench's parse."""
    import tempfile
    import tracemalloc

    from swebench.harness.grading import get_logs_eval
    from swebench.harness.utils import make_test_spec

    from creditgym.envs.swe_tasks import load_tasks
    from creditgym.verifiers.swe import scoring

    task = load_tasks("bundled", ["creditgym__spans-1"])[0]
    flood = "".join(f"t{i} (x.Y.t{i}) ... ok\n" for i in range(lines))
    log = f"+ : '>>>>> Start Test Output'\n{flood}+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 0\n"
    peaks = {}
    for name in ("creditgym", "swebench"):
        tracemalloc.start()
        if name == "creditgym":
            entries = len(
                scoring.score(task, log, key=b"k" * 32, token="0" * 16, canaries_expected=False).tests
            )
        else:
            with tempfile.NamedTemporaryFile("w", suffix=".log") as fh:
                fh.write(log)
                fh.flush()
                entries = len(get_logs_eval(make_test_spec(task.instance()), fh.name)[0])
        peaks[name] = (tracemalloc.get_traced_memory()[1], entries)
        tracemalloc.stop()
    return {
        "lines": lines,
        "log_bytes": len(log),
        "creditgym_peak_bytes": peaks["creditgym"][0],
        "creditgym_entries": peaks["creditgym"][1],
        "swebench_peak_bytes": peaks["swebench"][0],
        "swebench_entries": peaks["swebench"][1],
        "ratio": peaks["creditgym"][0] / peaks["swebench"][0],
    }


def _row(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    sandbox_s, shell_s = statistics.median(ours), statistics.median(theirs)
    return {
        "n": len(ours),
        "sandbox_s": sandbox_s,
        "shell_s": shell_s,
        "ratio": sandbox_s / shell_s,
        "sandbox_min_s": min(ours),
        "shell_min_s": min(theirs),
    }


def run(image: str, starts: int, commands: int, parallel: int, loop: int, flood: int) -> dict[str, Any]:
    if shutil.which("docker") is None:
        raise SystemExit("the docker CLI is needed for the shell side of the comparison (run `make engine`)")
    cfg = SandboxConfig()
    tag = f"sandbox-{os.getpid()}"
    try:
        start = measure_start(image, cfg, starts, tag)
        boxes = [DockerSandbox(image, cfg, labels={BENCH_LABEL: tag}) for _ in range(max(parallel, 1))]
        try:
            command = measure_command(boxes[0], commands)
            par = measure_parallel(boxes, loop)
        finally:
            for box in boxes:
                box.close()
    finally:  # anything a failed run left
        left = _docker("ps", "-aq", "--filter", f"label={BENCH_LABEL}={tag}").split()
        if left:
            _docker("rm", "-f", *left)
    result: dict[str, Any] = {
        "image": image,
        "config": {"memory": cfg.memory, "cpus": cfg.cpus, "pids": cfg.pids},
        "cpus_on_host": os.cpu_count(),
        "start": start,
        "command": command,
        "parallel": par,
        "flood": measure_flood(flood),
        "targets": TARGETS,
    }
    lines = [
        "| measure | sandbox ms | docker CLI ms | ratio (sandbox / CLI) | target |",
        "|---|---|---|---|---|",
        f"| start-to-ready (median of {start['n']}) | {start['sandbox_s'] * 1e3:.0f} | {start['shell_s'] * 1e3:.0f} "
        f"| {start['ratio']:.2f} | <= {TARGETS['start']} |",
        f"| per command `true` (median of {command['n']}) | {command['sandbox_s'] * 1e3:.1f} "
        f"| {command['shell_s'] * 1e3:.1f} | {command['ratio']:.2f} | <= {TARGETS['command']} |",
        f"| {par['sandboxes']} parallel x {loop} commands (wall) | {par['sandbox_s'] * 1e3:.0f} "
        f"| {par['shell_s'] * 1e3:.0f} | {par['ratio']:.2f} | |",
        "",
        "| flooded log | creditgym | swebench's parse | ratio |",
        "|---|---|---|---|",
        f"| peak MB reading {result['flood']['log_bytes'] / 2**20:.0f} MiB ({result['flood']['lines']} lines) "
        f"| {result['flood']['creditgym_peak_bytes'] / 1e6:.1f} | {result['flood']['swebench_peak_bytes'] / 1e6:.1f} "
        f"| {result['flood']['ratio']:.3f} |",
        f"| entries kept | {result['flood']['creditgym_entries']} | {result['flood']['swebench_entries']} | |",
    ]
    result["table"] = "\n".join(lines)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--image",
        default=os.environ.get("CREDITGYM_BASE_IMAGE", "creditgym-base:bookworm"),
        help="local image",
    )
    parser.add_argument("--starts", type=int, default=5, help="timed starts per side (default: %(default)s)")
    parser.add_argument(
        "--commands", type=int, default=50, help="timed commands per side (default: %(default)s)"
    )
    parser.add_argument(
        "--parallel", type=int, default=4, help="sandboxes run at once (default: %(default)s)"
    )
    parser.add_argument(
        "--loop", type=int, default=20, help="commands per parallel sandbox (default: %(default)s)"
    )
    parser.add_argument(
        "--flood",
        type=int,
        default=1_700_000,
        help="fake result lines in the flooded log (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        "--json",
        dest="out",
        type=Path,
        default=DEFAULT_OUT,
        help="JSON results (default: %(default)s)",
    )
    args = parser.parse_args()
    result = run(args.image, args.starts, args.commands, args.parallel, args.loop, args.flood)
    print(result["table"])
    par = result["parallel"]
    print(
        f"\nparallel: {par['sandbox_commands_per_s']:.0f} commands/s through sandboxes, "
        f"{par['shell_commands_per_s']:.0f} through the docker CLI ({result['cpus_on_host']} CPUs on this host)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
