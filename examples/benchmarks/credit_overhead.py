"""What does each credit module cost? Every module timed on the SAME recorded rollout batches, against ``grpo``.

    OMP_NUM_THREADS=1 python examples/benchmarks/credit_overhead.py [--task home] [--modules all] [--json PATH]

Sampling is the same work whatever the module, but a module's updates change what the policy samples next, so
timing whole training runs compares different batches (response lengths drift apart after the first step). Here
the rollout batches are recorded once per task from the starting weights (the bundled tiny model, ``--prompts`` x
``--group`` responses each), then every module (``name`` or a variant ``name:key=value[;key=value]``, as in
``creditgym compare``) trains from the same starting weights on exactly those batches: the trainer's own step
(signals, credit, actor update, critic phase), with only its rollout phase replaced by the replay of a recorded
batch. Each repeat (``--repeats``) builds a fresh trainer per module and interleaves their steps (step k of every
module, in an order that rotates, then step k + 1), so that load drifting on a shared machine hits every module
alike; the first ``--warmup`` steps of a trainer are not timed. The JSON records the token count and a digest of
every batch each module trained on, so that identical inputs can be checked. ``--train-kw KEY=VALUE`` sets a
`TrainConfig` field for every module (``epochs=2``, ``minibatches=4``).

Tasks (``--task``): ``chains`` (``creditgym/Math-v0 difficulty=6``, 160 new tokens), ``hard`` (the hard rubric,
``creditgym/Rubric-v0 preset=hard``, 192 new tokens), or ``home``: each module on its home task (``cort`` on the
hard rubric, every other module on the chains), ``grpo`` timed on every task used.

Columns: ``tokens/step``, policy tokens of a timed batch (the same for every module of a task); ``train / grpo``,
the module's signals + credit + update + critic phase over ``grpo``'s on the same step (mean and 95% t-interval
of these paired ratios over repeats x steps); ``step / grpo``, the same with the batch's recorded sampling time
(generation and verification) added to both, i.e. a whole training step; ``ms/token``, the module's train part
per policy token; the shares of the train part spent on signals (critic phase included) and on the credit
function. Times are read on ``--clock``: ``cpu`` (the default on CPU) is this process's CPU time, which other work
on a shared machine barely moves, ``wall`` the elapsed time (the default on a GPU). Targets (``TARGETS``): CoRT
and CAST <= 1.25x a ``grpo`` step, CompPO <= 1.2x, PACT with a critic model <= 1.6x. Quote the ratios, not the
seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditgym import credit
from creditgym.agents.providers.base import StepContext
from creditgym.agents.study.compare import Entry, parse_entry, split_entries
from creditgym.agents.study.stats import mean, t_interval
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.flags import json_or_str
from creditgym.agents.train.rollout import Episode
from creditgym.agents.train.trainer import Trainer
from creditgym.credit import CreditOutput


@dataclass(frozen=True)
class Task:
    """An env and its settings, as the probe names them (``--env``, ``--env-kw``, the token budget)."""

    env_id: str
    env_kwargs: Mapping[str, Any]
    max_new_tokens: int


TASKS: dict[str, Task] = {
    "chains": Task("creditgym/Math-v0", {"difficulty": 6}, 160),
    "hard": Task("creditgym/Rubric-v0", {"preset": "hard"}, 192),
}
HOME: dict[str, str] = {"cort": "hard"}  # every other module's home task is "chains"
#: the most a module's whole step may cost over grpo's for its credit to count as cheap
TARGETS: dict[str, float] = {"cort": 1.25, "cast": 1.25, "compo": 1.2, "pact": 1.6}
#: cpu: this process's CPU time, which other work on a shared machine barely moves (with OMP_NUM_THREADS=1 it is
#: the wall time of an idle machine; work in other processes, e.g. the math verifier's pool, is not counted)
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


@dataclass
class Recorded:
    """One rollout batch as sampled once: its episodes, what sampling it cost, its size and a digest of it."""

    episodes: list[Episode]
    seed: int
    sample_s: float
    tokens: int
    digest: str


@dataclass
class Timing:
    """One module's timed step (seconds) and the batch it trained on."""

    train_s: float = 0.0
    signals_s: float = 0.0
    credit_s: float = 0.0
    seen: list[dict[str, Any]] = field(default_factory=list)
    batch: int = 0  # the recorded batch's index
    providers: tuple[str, ...] = ()  # the signal providers the trainer ran (every phase)


def batch_digest(step: StepContext) -> tuple[int, str]:
    """Policy tokens of a step's batch and a SHA-256 of its tokens, masks and rewards (what the module trains on)."""
    b = step.batch
    h = hashlib.sha256()
    for t in (b.input_ids, b.attention_mask, b.policy_mask, b.token_rewards, b.old_logprobs, b.group_ids):
        h.update(t.contiguous().numpy().tobytes())
    return int(b.policy_mask.sum()), h.hexdigest()[:16]


class ReplayTrainer(Trainer):
    """The trainer, whose rollout phase (``Trainer._rollouts``) samples once (`record`) or replays a recording.

    Every other phase of `Trainer.train_step` (signals, credit, actor update, critic phase) is the trainer's own;
    `timed_step` times them on ``clock``.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        out: str | Path,
        batches: Sequence[Recorded] = (),
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(cfg, out)
        self.batches, self.clock = list(batches), clock
        self.seen: list[dict[str, Any]] = []
        self.phase_s: dict[str, float] = {}  # phase -> seconds, of the last step

    def record(self, n: int) -> list[Recorded]:
        """``n`` rollout batches sampled from the current weights, with the trainer's seeds of steps 0..n-1."""
        out = []
        for k in range(n):
            self.step = k
            seed = int(np.random.SeedSequence([self.cfg.seed, k]).generate_state(1)[0])
            t0 = self.clock()
            step, _ = super()._rollouts(np.random.default_rng(seed))
            if step is None:
                raise RuntimeError(f"recording batch {k}: every episode hit an infrastructure error")
            out.append(Recorded(step.episodes, seed, self.clock() - t0, *batch_digest(step)))
        self.step = 0
        return out

    def timed_step(self) -> Timing:
        """`Trainer.train_step` on the recorded batch of ``self.step``, less the replay, split by phase."""
        self.phase_s = {}
        t0 = self.clock()
        self.train_step()
        train = self.clock() - t0 - self.phase_s["replay"]
        credit_s, update_s = self.phase_s["credit"], self.phase_s["update"]
        signals_s = train - credit_s - update_s
        return Timing(train, signals_s, credit_s, [self.seen[-1]], self.step, tuple(sorted(self.providers)))

    def _timed(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = self.clock()
        result = fn(*args)
        self.phase_s[phase] = self.clock() - t0
        return result

    def _rollouts(self, rng: np.random.Generator) -> tuple[StepContext | None, dict[str, float]]:
        t0 = self.clock()
        rec = self.batches[self.step]
        generator = torch.Generator(device=self.policy.device).manual_seed(rec.seed)
        step = StepContext.of(self.step, rec.episodes, self.policy, self.request, generator)
        tokens, digest = batch_digest(step)
        self.seen.append({"tokens": tokens, "digest": digest})
        rewards = [ep.reward for ep in rec.episodes]
        metrics = {
            "step": float(self.step + 1),
            "rollout/reward": float(np.mean(rewards)),
            "rollout/accuracy": float(np.mean([r >= 1.0 for r in rewards])),
        }
        self.phase_s["replay"] = self.clock() - t0
        return step, metrics

    def _credit(self, step: StepContext, signals: dict[str, torch.Tensor]) -> CreditOutput:
        return self._timed("credit", super()._credit, step, signals)

    def _update_actor(
        self, step: StepContext, advantages: torch.Tensor, rng: np.random.Generator
    ) -> dict[str, float]:
        return self._timed("update", super()._update_actor, step, advantages, rng)


def task_config(task: Task, args: argparse.Namespace) -> TrainConfig:
    """The run's config on ``task``: the script's settings, then ``--train-kw`` (e.g. ``epochs=2``)."""
    return TrainConfig(
        **{
            "env_id": task.env_id,
            "env_kwargs": dict(task.env_kwargs),
            "max_new_tokens": args.max_new_tokens or task.max_new_tokens,
            "steps": args.warmup + args.steps,
            "seed": args.seed,
            "prompts_per_step": args.prompts,
            "group_size": args.group,
            "eval_episodes": 1,
            "device": args.device,
            **args.train_kw,
        }
    )


def key_values(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each value JSON when it parses (``epochs=2``), else the string."""
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        out[key] = json_or_str(raw)
    return out


def record(cfg: TrainConfig, n: int, clock: Callable[[], float]) -> list[Recorded]:
    with tempfile.TemporaryDirectory() as out:
        return ReplayTrainer(dataclasses.replace(cfg, credit="grpo"), out, clock=clock).record(n)


def interval(xs: Sequence[float]) -> list[float] | None:
    ci = t_interval(xs)
    return None if ci is None else [ci[0], ci[1]]


def summarize(
    entry: Entry, runs: Sequence[Timing], base: Sequence[Timing], batches: Sequence[Recorded]
) -> dict[str, Any]:
    """Means over the timed steps, and the paired ratios to grpo's same step with their 95% t-intervals."""
    pairs = list(zip(runs, base, strict=True))
    sample = [batches[r.batch].sample_s for r in runs]
    train = [r.train_s / g.train_s for r, g in pairs]
    step = [(r.train_s + s) / (g.train_s + s) for (r, g), s in zip(pairs, sample, strict=True)]
    tokens = sum(batches[r.batch].tokens for r in runs)
    target = TARGETS.get(entry.module)
    return {
        "module": entry.module,
        "kwargs": dict(entry.kwargs),
        "batches": [seen for r in runs for seen in r.seen],
        "tokens_per_step": tokens / len(runs),
        "train_s_per_step": mean([r.train_s for r in runs]),
        "step_s_per_step": mean([r.train_s + s for r, s in zip(runs, sample, strict=True)]),
        "ms_per_token": 1000 * sum(r.train_s for r in runs) / tokens,
        "train_ratio_to_grpo": mean(train),
        "train_ratio_interval": interval(train),
        "ratio_to_grpo": mean(step),
        "ratio_interval": interval(step),
        "providers": list(runs[0].providers),
        "signals_share": sum(r.signals_s for r in runs) / sum(r.train_s for r in runs),
        "credit_share": sum(r.credit_s for r in runs) / sum(r.train_s for r in runs),
        "steps_train_s": [r.train_s for r in runs],
        "target": target,
        "meets_target": None if target is None else mean(step) <= target,
    }


def measure_task(
    cfg: TrainConfig, entries: Sequence[Entry], args: argparse.Namespace
) -> tuple[list[Recorded], dict[str, dict[str, Any]]]:
    """Record the batches, then per repeat a fresh trainer per entry (the same starting weights and seed), their
    steps interleaved (step k of every entry, in an order that rotates, before step k + 1), so that load drifting
    on the machine hits the entries alike; the first ``--warmup`` steps pay one-time costs and are not timed."""
    clock = CLOCKS[args.clock]
    batches = record(cfg, args.warmup + args.steps, clock)
    timings: dict[str, list[Timing]] = {e.label: [] for e in entries}
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as out:
            trainers = {
                e.label: ReplayTrainer(
                    dataclasses.replace(cfg, credit=e.module, credit_kwargs=dict(e.kwargs)),
                    Path(out) / e.slug,
                    batches,
                    clock,
                )
                for e in entries
            }
            for k in range(len(batches)):
                shift = (r * len(batches) + k) % len(entries)
                for e in [*entries[shift:], *entries[:shift]]:
                    trainers[e.label].step = k
                    timing = trainers[e.label].timed_step()
                    if k >= args.warmup:
                        timings[e.label].append(timing)
    return batches, {e.label: summarize(e, timings[e.label], timings["grpo"], batches) for e in entries}


def fmt_ratio(m: float, ci: list[float] | None) -> str:
    return f"{m:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def print_table(
    task: str, cfg: TrainConfig, results: Mapping[str, Mapping[str, Any]], sample_s: float
) -> None:
    kw = " ".join(f"{k}={v}" for k, v in cfg.env_kwargs.items())
    print(f"\n{task}: {cfg.env_id} {kw} max_new_tokens={cfg.max_new_tokens}, sampling {sample_s:.2f} s/batch")
    head = f"{'module':<24} {'tokens/step':>11} {'train / grpo':>20} {'step / grpo':>20} {'ms/token':>9}"
    print(head + f" {'signals':>8} {'credit':>7} {'target':>7}")
    for label, r in results.items():
        target = f"<={r['target']:.2f}" if r["target"] else ""
        print(
            f"{label:<24} {r['tokens_per_step']:>11.0f} "
            f"{fmt_ratio(r['train_ratio_to_grpo'], r['train_ratio_interval']):>20} "
            f"{fmt_ratio(r['ratio_to_grpo'], r['ratio_interval']):>20} {r['ms_per_token']:>9.3f} "
            f"{r['signals_share']:>8.1%} {r['credit_share']:>7.2%} {target:>7}"
        )


def entries_by_task(labels: Sequence[str], task: str) -> dict[str, list[Entry]]:
    """Task -> its entries, ``grpo`` first on every task used (the baseline of its ratios)."""
    out: dict[str, list[Entry]] = {}
    for entry in map(parse_entry, labels):
        where = HOME.get(entry.module, "chains") if task == "home" else task
        out.setdefault(where, [])
        if entry.label != "grpo":
            out[where].append(entry)
    return {t: [parse_entry("grpo"), *es] for t, es in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["home", *TASKS], default="home")
    parser.add_argument(
        "--modules", default="all", help="entries name[:key=value;...], comma-separated, or all"
    )
    parser.add_argument("--steps", type=int, default=2, help="timed steps (recorded batches) per repeat")
    parser.add_argument("--warmup", type=int, default=1, help="untimed first steps of each trainer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="override every task's budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None)
    parser.add_argument("--clock", choices=list(CLOCKS), default=None, help="default: cpu, or wall on a GPU")
    parser.add_argument(
        "--train-kw", action="append", default=[], help="a TrainConfig field for every module"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error(
            f"need --steps >= 1, --repeats >= 1, --warmup >= 0; got {args.steps}, {args.repeats}, "
            f"{args.warmup}"
        )
    if args.clock is None:
        args.clock = "wall" if args.device != "cpu" and torch.cuda.is_available() else "cpu"
    try:
        args.train_kw = key_values(args.train_kw)
        task_config(TASKS["chains"], args)  # refuses an unknown field or a bad value now
    except (TypeError, ValueError) as err:
        parser.error(f"--train-kw: {err}")
    labels = credit.available() if args.modules == "all" else split_entries(args.modules)
    try:
        plan = entries_by_task(labels, args.task)
    except ValueError as err:  # an unknown module or field: parse_entry's message names it
        parser.error(f"--modules: {err}")
    report: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    }
    report["tasks"] = {}
    for task, entries in plan.items():
        cfg = task_config(TASKS[task], args)
        batches, results = measure_task(cfg, entries, args)
        sample_s = mean([b.sample_s for b in batches[args.warmup :]])
        print_table(task, cfg, results, sample_s)
        report["tasks"][task] = {
            "env_id": cfg.env_id,
            "env_kwargs": dict(cfg.env_kwargs),
            "max_new_tokens": cfg.max_new_tokens,
            "sample_s_per_batch": sample_s,
            "batches": [{"tokens": b.tokens, "digest": b.digest} for b in batches[args.warmup :]],
            "modules": results,
        }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
