"""Where a training step's memory goes: resident memory after each phase of a `grpo` step, and the peak within it.

    python examples/benchmarks/memory.py [--model smollm2-135m] [--steps 3] [--json PATH]

Runs ``--steps`` training steps (``--prompts`` x ``--group`` responses of at most ``--max-new-tokens`` tokens on
Math-v0, one optimizer step over the batch, one torch thread) twice, each in a subprocess: once with the C
library's allocator as it comes, once with ``MALLOC_MMAP_THRESHOLD_`` fixed (glibc then returns every large freed
block to the system at once, instead of raising its threshold and keeping such blocks for reuse). For each phase
of each step (rollouts, the train pass's forward, backward, the optimizer step) it reads the resident set size
after the phase and the peak reached during it (``VmHWM`` in ``/proc/self/status``, reset before each phase
through ``/proc/self/clear_refs``; Linux only), and each step's CPU time (user and system, so the page faults a
returned block costs when it is taken again count). Every row of the batch goes through the train pass with its
graph, as if each had an advantage (the trainer skips the graph of rows without one): the most a step holds.
Prints a table per run and writes every figure to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STATUS = Path("/proc/self/status")
PHASES = ("rollouts", "forward", "backward", "optimizer step")


def _memory_mb() -> tuple[float, float]:
    """(resident now, peak since the last reset), MiB."""
    text = STATUS.read_text()
    rss, hwm = (int(re.search(rf"{key}:\s+(\d+)", text).group(1)) / 1024 for key in ("VmRSS", "VmHWM"))  # type: ignore[union-attr]
    return rss, hwm


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak resident set size to the current one


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The phases of ``args.steps`` steps in this process: ``{"init": {...}, "steps": [{phase: {...}}]}``."""
    import torch

    from creditgym.agents.train import trainer as trainer_module
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.update import update_pass

    torch.set_num_threads(1)
    # every row through one pass with its graph, as if each had an advantage: the most a step holds
    trainer_module.update_pass = lambda *a, **kw: update_pass(*a, **{**kw, "graph_for_all": True})
    cfg = TrainConfig(
        model=args.model,
        env_id="creditgym/Math-v0",
        credit="grpo",
        prompts_per_step=args.prompts,
        group_size=args.group,
        max_new_tokens=args.max_new_tokens,
        minibatches=1,
        steps=args.steps,
        eval_episodes=1,
        seed=0,
    )
    trainer = trainer_module.Trainer(cfg, tempfile.mkdtemp(prefix="memory_"))
    rss, peak = _memory_mb()
    record: dict[str, Any] = {"init": {"rss_mb": rss, "peak_mb": peak}, "steps": []}
    current: dict[str, dict[str, float]] = {}

    def mark(phase: str) -> None:
        rss, peak = _memory_mb()
        current[phase] = {"rss_mb": rss, "peak_mb": peak}
        _reset_peak()

    policy, optimizer = trainer.policy, trainer.optimizer
    forward, step, backward = policy.forward_logprobs, optimizer.step, torch.Tensor.backward

    def timed_forward(*a: Any, **kw: Any) -> Any:
        mark("rollouts")  # everything before the train pass: sampling, verification, credit
        return forward(*a, **kw)

    def timed_backward(self: torch.Tensor, *a: Any, **kw: Any) -> None:
        mark("forward")
        backward(self, *a, **kw)
        mark("backward")

    def timed_step(*a: Any, **kw: Any) -> Any:
        out = step(*a, **kw)
        mark("optimizer step")
        return out

    policy.forward_logprobs, optimizer.step = timed_forward, timed_step  # type: ignore[method-assign]
    torch.Tensor.backward = timed_backward  # type: ignore[method-assign]
    _reset_peak()
    for _ in range(args.steps):
        cpu = time.process_time()
        trainer.train_step()
        trainer.step += 1
        record["steps"].append({phase: current[phase] for phase in PHASES})
        record["steps"][-1]["cpu_s"] = time.process_time() - cpu  # user + system: page faults included
    return record


def _table(label: str, record: dict[str, Any]) -> str:
    lines = [
        f"{label}: after loading, {record['init']['rss_mb']:,.0f} MiB resident",
        f"{'step':>4} " + " ".join(f"{p + ' (now / peak)':>28}" for p in PHASES) + f"{'CPU s':>8}",
    ]
    for k, phases in enumerate(record["steps"], 1):
        cells = (f"{phases[p]['rss_mb']:>13,.0f} / {phases[p]['peak_mb']:>,.0f}" for p in PHASES)
        lines.append(f"{k:>4} " + " ".join(f"{c:>28}" for c in cells) + f"{phases['cpu_s']:>8.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--mmap-threshold", type=int, default=128 * 1024, help="bytes, for the second run")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not STATUS.exists():
        raise SystemExit("memory.py reads /proc/self/status: it runs on Linux only")
    if args.worker:
        print(json.dumps(measure(args)))
        return
    worker = [
        sys.executable,
        "-W",
        "ignore",
        __file__,
        *(argv if argv is not None else sys.argv[1:]),
        "--worker",
    ]
    runs = {
        "glibc as it comes": {},
        f"MALLOC_MMAP_THRESHOLD_={args.mmap_threshold}": {"MALLOC_MMAP_THRESHOLD_": str(args.mmap_threshold)},
    }
    results = {}
    for label, extra in runs.items():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", **extra}
        out = subprocess.run(worker, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"memory.py: the run '{label}' failed:\n{out.stderr[-3000:]}")
        results[label] = json.loads(out.stdout.strip().splitlines()[-1])
        print(_table(label, results[label]), flush=True)
    if args.json is not None:
        settings = {k: v for k, v in vars(args).items() if k not in ("json", "worker")}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"settings": settings, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
