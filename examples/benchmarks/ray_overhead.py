"""Ray's overhead per run: the same small `creditgym compare` study with local subprocesses and with `--ray local`.

    python examples/benchmarks/ray_overhead.py --json runs/bench/ray_overhead.json

Both modes run the same runs with one thread each (`--workers` = cores, and `--run-cpus 1` on a cluster of this
machine's cores), so they train the same numbers; the table gives each mode's wall time for the whole study and
per run, and the difference per run (Ray's start-up, scheduling and the task's own process included).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def study(out: Path, args: argparse.Namespace, *mode: str) -> tuple[float, dict]:
    cmd = [
        sys.executable,
        "-m",
        "creditgym.cli",
        "compare",
        "--credit",
        args.credit,
        "--seeds",
        str(args.seeds),
    ]
    cmd += ["--steps", str(args.steps), "--prompts-per-step", "2", "--group-size", "2", "--eval-every", "1"]
    cmd += ["--eval-episodes", "4", "--max-new-tokens", "8", "--device", "cpu", "--out", str(out), *mode]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return wall, json.loads((out / "results.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--credit", default="grpo,rloo", help="entries (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per entry (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=2, help="steps per run (default: %(default)s)")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        modes = {"local": ("--workers", str(cores)), "ray local": ("--ray", "local", "--run-cpus", "1")}
        for name, mode in modes.items():
            wall, results = study(Path(tmp) / name.replace(" ", "-"), args, *mode)
            runs = results["runs"]
            assert all(r["status"] == "finished" for r in runs), runs
            rows[name] = {
                "study_s": wall,
                "runs": len(runs),
                "run_wall_s": sum(r["wall_s"] for r in runs) / len(runs),
                "finals": [r["final"] for r in runs],
            }
    local, ray = rows["local"], rows["ray local"]
    same = local["finals"] == ray["finals"]
    per_run = (ray["study_s"] - local["study_s"]) / ray["runs"]
    print(f"{'mode':<10} {'runs':>4} {'study (s)':>10} {'run (s)':>8}   ({cores} cores, one thread per run)")
    for name, row in rows.items():
        print(f"{name:<10} {row['runs']:>4} {row['study_s']:>10.1f} {row['run_wall_s']:>8.1f}")
    print(
        f"ray / local: {ray['study_s'] / local['study_s']:.2f}x the study's wall time, {per_run:+.1f} s per run; "
        f"same final scores: {same}"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        data = {
            "cores": cores,
            "rows": rows,
            "ratio": ray["study_s"] / local["study_s"],
            "per_run_s": per_run,
        }
        Path(args.json).write_text(json.dumps({**data, "same_finals": same}, indent=2) + "\n")


if __name__ == "__main__":
    main()
