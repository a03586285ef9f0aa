"""``creditgym compare``: train every (credit module or variant, seed) with one budget, report held-out scores.

Each run is a ``creditgym train`` subprocess writing into ``DIR/runs/<label-slug>/seed<k>/``, so runs are isolated,
run in parallel (``workers``), and resume: a run whose ``summary.json`` holds all the steps is reused, a run with a
checkpoint continues with ``--resume``, and a failed run is reported with its ``train.log`` while the others go on.
The held-out curve of each run is the trainer's own (``eval_every``, ``eval_episodes``: greedy, the test split).

A study entry is a module name or a variant ``name:key=value[;key=value]`` of its config (``cort:normalize=false``,
``compo:gate=shuffled``); values are JSON, falling back to a string. The label is the string as given. ``grpo`` is
the baseline of the paired differences and step-time ratios (the first entry when ``grpo`` is absent).

The report (``results.json``, ``summary.md``, ``curves.png``) is rebuilt from the run folders alone, so
``--report-only`` can redo it at any time, and ``summary_markdown(results)`` is a pure function of ``results.json``.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from creditgym.agents.config import TrainConfig

BASELINE = "grpo"
RESULTS, SUMMARY, CURVES, CONFIG = "results.json", "summary.md", "curves.png", "config.json"
RUN_RECORD, RUN_LOG = "compare.json", "train.log"  # per run folder, next to the trainer's own files

# -- entries -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One study entry: ``label`` as given, the registry ``module`` and the config fields it overrides."""

    label: str
    module: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def slug(self) -> str:
        """The label as a folder name: ``cort:normalize=false`` -> ``cort_normalize_false``."""
        return re.sub(r"[^A-Za-z0-9.-]+", "_", self.label).strip("_")


def split_entries(text: str) -> list[str]:
    """Split a comma list of entries, keeping commas inside brackets or quotes (``cast:pos_clip=[0.8,1.1]``)."""
    parts, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def _json_or_str(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def parse_entry(label: str) -> Entry:
    """Parse ``name`` or ``name:key=value[;key=value]``, checked against the module's config.

    Raises:
        ValueError: unknown module (lists the known ones), malformed ``key=value``, unknown field (lists the
            module's fields), or a value the module's config refuses.
    """
    from creditgym import credit

    name, _, spec = label.strip().partition(":")
    if name not in credit.available():
        raise ValueError(
            f"entry {label!r}: unknown credit module {name!r}; known modules: {credit.available()}"
        )
    config = credit.get(name).config
    known = [f.name for f in fields(config)]  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for pair in filter(None, (p.strip() for p in spec.split(";"))):
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"entry {label!r}: expected name:key=value[;key=value], got {pair!r}")
        if key not in known:
            raise ValueError(f"entry {label!r}: {config.__name__} has no field {key!r}; its fields: {known}")
        kwargs[key] = _json_or_str(raw.strip())
    if spec and not kwargs:
        raise ValueError(f"entry {label!r}: nothing after ':'; expected name:key=value[;key=value]")
    try:
        config(**kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"entry {label!r}: {config.__name__} refuses {kwargs}: {e}") from e
    return Entry(label.strip(), name, kwargs)


# -- statistics ----------------------------------------------------------------------------------------------------

# Two-sided 95% quantiles t_{0.975, df} of Student's t for df = 1..30 (checked against mpmath to 1e-9).
_T975 = (
    12.70620474, 4.30265273, 3.18244631, 2.77644511, 2.57058184, 2.44691185, 2.36462425, 2.30600414,
    2.26215716, 2.22813885, 2.20098516, 2.17881283, 2.16036866, 2.14478669, 2.13144955, 2.11990530,
    2.10981558, 2.10092204, 2.09302405, 2.08596345, 2.07961384, 2.07387307, 2.06865761, 2.06389856,
    2.05953855, 2.05552944, 2.05183052, 2.04840714, 2.04522964, 2.04227246,
)  # fmt: skip


def t_quantile(df: int) -> float:
    """``t_{0.975, df}``: scipy when installed, else the table (df <= 30) or a Cornish-Fisher expansion (error
    < 1e-5 beyond)."""
    if df < 1:
        raise ValueError(f"t_quantile: df must be >= 1, got {df}")
    try:
        from scipy import stats
    except ImportError:
        if df <= len(_T975):
            return _T975[df - 1]
        z = 1.959963984540054
        return (
            z
            + (z**3 + z) / (4 * df)
            + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
        )
    return float(stats.t.ppf(0.975, df))


def mean(xs: Sequence[float]) -> float:
    """The arithmetic mean of a non-empty sequence."""
    if not xs:
        raise ValueError("mean of an empty sequence")
    return math.fsum(xs) / len(xs)


def t_interval(xs: Sequence[float]) -> tuple[float, float] | None:
    """95% t-interval of the mean, ``mean -/+ t_{0.975, n-1} * s / sqrt(n)``; None when ``n < 2``."""
    n = len(xs)
    if n < 2:
        return None
    m = mean(xs)
    s = math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (n - 1))
    half = t_quantile(n - 1) * s / math.sqrt(n)
    return (m - half, m + half)


def paired_difference(
    xs: Mapping[int, float], base: Mapping[int, float]
) -> tuple[float | None, tuple[float, float] | None, int]:
    """Mean of ``xs[s] - base[s]`` over the seeds ``s`` both have, its 95% t-interval, and the number of pairs."""
    shared = sorted(set(xs) & set(base))
    diffs = [xs[s] - base[s] for s in shared]
    return (mean(diffs) if diffs else None), t_interval(diffs), len(diffs)


def curve_stats(curves: Sequence[Sequence[Sequence[float]]]) -> list[tuple[int, float, float, float]]:
    """Per evaluation step over several runs' ``[[step, score], ...]``: ``(step, mean, lo, hi)`` (lo = hi = mean
    where fewer than two runs have that step)."""
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, score in curve:
            if score is not None:
                by_step.setdefault(int(step), []).append(float(score))
    rows = []
    for step in sorted(by_step):
        m = mean(by_step[step])
        lo, hi = t_interval(by_step[step]) or (m, m)
        rows.append((step, m, lo, hi))
    return rows


# -- configuration -------------------------------------------------------------------------------------------------


def default_workers() -> int:
    """Half the CPU cores, at least one."""
    return max(1, (os.cpu_count() or 1) // 2)


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"3"`` -> ``(0, 1, 2)``; ``"0,4,7"`` -> ``(0, 4, 7)``."""
    try:
        if "," in text:
            return tuple(int(s) for s in text.split(",") if s.strip())
        return tuple(range(int(text)))
    except ValueError as e:
        raise ValueError(f"--seeds expects a count (3) or a comma list (0,4,7), got {text!r}") from e


# TrainConfig field -> `creditgym train` flag, for the settings a comparison may override (None = its default)
_OVERRIDES = {
    "eval_every": "--eval-every",
    "eval_episodes": "--eval-episodes",
    "prompts_per_step": "--prompts-per-step",
    "group_size": "--group-size",
    "lr": "--lr",
    "max_new_tokens": "--max-new-tokens",
    "model": "--model",
    "device": "--device",
}


@dataclass(frozen=True)
class CompareConfig:
    """A study: every entry trained with every seed, with the same settings and budget.

    Attributes:
        env_id: A registered env id.
        entries: Module names or variants ``name:key=value[;key=value]`` (labels, as given).
        seeds: The seeds each entry runs with.
        steps: Optimizer steps of every run.
        eval_every, eval_episodes, prompts_per_step, group_size, lr, max_new_tokens, model, device: Passed to
            every run; ``None`` keeps ``TrainConfig``'s default.
        env_kwargs: Extra env keyword arguments of every run.
        workers: Runs at a time; each gets ``cpu_count // workers`` threads.
    """

    env_id: str = TrainConfig.env_id
    entries: tuple[str, ...] = (BASELINE,)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = TrainConfig.steps
    eval_every: int | None = None
    eval_episodes: int | None = None
    prompts_per_step: int | None = None
    group_size: int | None = None
    lr: float | None = None
    max_new_tokens: int | None = None
    model: str | None = None
    device: str | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    workers: int = field(default_factory=default_workers)

    def __post_init__(self) -> None:
        import gymnasium as gym

        object.__setattr__(self, "entries", tuple(self.entries))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "env_kwargs", dict(self.env_kwargs))
        if self.env_id not in gym.registry:
            from creditgym.envs import registered_ids

            raise ValueError(
                f"CompareConfig.env_id: unknown env id {self.env_id!r}; registered: {registered_ids()}"
            )
        if not self.entries or len(set(self.entries)) != len(self.entries):
            raise ValueError(
                f"CompareConfig.entries must be non-empty and distinct, got {list(self.entries)}"
            )
        slugs = [e.slug for e in self.parsed()]  # raises on a bad entry
        if len(set(slugs)) != len(slugs):
            raise ValueError(f"CompareConfig.entries: two labels map to one folder name: {slugs}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"CompareConfig.seeds must be distinct and >= 0, got {list(self.seeds)}")
        for name in ("steps", "workers", "eval_every", "eval_episodes", "prompts_per_step", "group_size"):
            value = getattr(self, name)
            if value is not None and int(value) < 1:
                raise ValueError(f"CompareConfig.{name} must be >= 1, got {value!r}")
        if self.lr is not None and not self.lr > 0:
            raise ValueError(f"CompareConfig.lr must be > 0, got {self.lr!r}")

    def parsed(self) -> list[Entry]:
        """The entries, parsed and checked."""
        return [parse_entry(label) for label in self.entries]

    @property
    def baseline(self) -> str:
        """``grpo`` when it is an entry, else the first entry."""
        return BASELINE if BASELINE in self.entries else self.entries[0]


def save_config(cfg: CompareConfig, out: str | Path) -> Path:
    path = Path(out) / CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    return path


def load_config(out: str | Path) -> CompareConfig:
    """The study written into ``out`` by an earlier ``run_compare``."""
    path = Path(out) / CONFIG
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: run `creditgym compare` into {out} first, or pass --credit"
        )
    return CompareConfig(**json.loads(path.read_text()))


# -- one run's folder ----------------------------------------------------------------------------------------------


def run_dir(out: str | Path, entry: Entry, seed: int) -> Path:
    return Path(out) / "runs" / entry.slug / f"seed{seed}"


def train_settings(cfg: CompareConfig, entry: Entry, seed: int) -> list[str]:
    """The ``creditgym train`` flags of one run, except ``--out``, ``--steps`` and ``--resume``."""
    args = ["--env", cfg.env_id, "--credit", entry.module, "--seed", str(seed)]
    for name, flag in _OVERRIDES.items():
        value = getattr(cfg, name)
        if value is not None:
            args += [flag, str(value)]
    for key, value in cfg.env_kwargs.items():
        args += ["--env-kw", f"{key}={json.dumps(value)}"]
    for key, value in entry.kwargs.items():
        args += ["--credit-kw", f"{key}={json.dumps(value)}"]
    return args


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def _has_checkpoint(folder: Path) -> bool:
    return any((folder / "checkpoints").glob("step-*"))


def _log_tail(log: Path, lines: int = 1) -> str:
    try:
        text = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def run_status(folder: Path, settings: Sequence[str], steps: int) -> tuple[str, str | None]:
    """``(status, error)`` of a run folder: ``ok`` (all steps done), ``stale`` (other settings), ``failed`` /
    ``interrupted`` (its last attempt), ``incomplete`` (started, not finished) or ``missing``."""
    record = _read_json(folder / RUN_RECORD) or {}
    if record.get("settings") not in (None, list(settings)):
        return "stale", (
            f"{folder} was trained with other settings ({' '.join(record['settings'])}); delete it or choose "
            "another --out"
        )
    summary = _read_json(folder / "summary.json")
    if summary is not None and summary.get("steps") == steps:
        return "ok", None
    if summary is not None and summary.get("steps", 0) > steps:
        return "stale", f"{folder} holds {summary['steps']} steps, more than the {steps} asked for"
    if record.get("interrupted"):
        return "interrupted", "stopped by a signal; run the same command again to resume"
    if record.get("returncode") not in (None, 0):
        return "failed", f"exit {record['returncode']}: {_log_tail(folder / RUN_LOG)}"
    return ("incomplete", None) if folder.exists() else ("missing", None)


def read_run(out: Path, cfg: CompareConfig, entry: Entry, seed: int) -> dict[str, Any]:
    """One row of ``results.json["runs"]``, read from the run's folder (paths relative to ``out``)."""
    folder = run_dir(out, entry, seed)
    status, error = run_status(folder, train_settings(cfg, entry, seed), cfg.steps)
    summary = _read_json(folder / "summary.json") or {}
    rows = []
    if (folder / "metrics.jsonl").is_file():
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:  # a line cut short by a kill
                continue
    if "eval_curve" in summary:
        curve = [[int(s), v] for s, v in summary["eval_curve"]]
    else:
        curve = [[int(r["step"]), r["eval/accuracy"]] for r in rows if r.get("eval/accuracy") is not None]
    step_times = [r["time/step_s"] for r in rows if r.get("time/step_s") is not None]
    record = _read_json(folder / RUN_RECORD) or {}
    return {
        "entry": entry.label,
        "seed": seed,
        "final": curve[-1][1] if status == "ok" and curve else None,
        "curve": curve,
        "wall_s": record.get("wall_s"),
        "step_s": mean(step_times) if step_times else None,
        "status": status,
        "log": (folder / RUN_LOG).relative_to(out).as_posix(),
        "error": error,
    }


# -- the study -----------------------------------------------------------------------------------------------------


@dataclass
class _Job:
    entry: Entry
    seed: int
    folder: Path
    settings: list[str]
    resume: bool
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    started: float = 0.0


def _pdeathsig() -> Callable[[], None] | None:
    """On Linux, a pre-exec hook that sends SIGTERM to the child when this process dies (even by SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return lambda: libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


@contextmanager
def _signals() -> Iterator[list[int]]:
    """Count SIGINT/SIGTERM instead of dying, so the children can be stopped cleanly."""
    received: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _no_orphans(running: list[_Job], grace_s: float = 120.0) -> Iterator[None]:
    """On an unexpected error, stop the children still running: SIGTERM (they checkpoint), then SIGKILL."""
    try:
        yield
    finally:
        alive = [job.proc for job in running if job.proc is not None and job.proc.poll() is None]
        for proc in alive:
            proc.send_signal(signal.SIGTERM)
        for proc in alive:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_compare(
    cfg: CompareConfig, out: str | Path, *, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run every (entry, seed) not finished yet, then write and return the report.

    Raises:
        KeyboardInterrupt: after SIGINT/SIGTERM, once every child has checkpointed and stopped (a second signal
            kills them at once); the partial report is written first.
    """
    out = Path(out).resolve()
    save_config(cfg, out)
    jobs: list[_Job] = []
    for entry in cfg.parsed():
        for seed in cfg.seeds:
            folder = run_dir(out, entry, seed)
            settings = train_settings(cfg, entry, seed)
            status, error = run_status(folder, settings, cfg.steps)
            if status == "ok":
                echo(f"[compare] {entry.label} seed {seed}: done before, reused")
            elif status == "stale":
                echo(f"[compare] {entry.label} seed {seed}: skipped: {error}")
            else:
                jobs.append(_Job(entry, seed, folder, settings, resume=_has_checkpoint(folder)))

    threads = str(max(1, (os.cpu_count() or 1) // cfg.workers))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    hook = _pdeathsig()
    pending: list[_Job] = list(jobs)
    running: list[_Job] = []
    forwarded = 0
    with _signals() as received, _no_orphans(running):
        while pending or running:
            while pending and not received and len(running) < cfg.workers:
                job = pending.pop(0)
                job.folder.mkdir(parents=True, exist_ok=True)
                argv = [sys.executable, "-m", "creditgym.cli", "train", "--out", str(job.folder)]
                argv += ["--steps", str(cfg.steps), *job.settings] + (["--resume"] if job.resume else [])
                job.log = (job.folder / RUN_LOG).open("ab")
                job.log.write(f"\n=== creditgym compare: {' '.join(argv)}\n".encode())
                job.log.flush()
                job.started = time.monotonic()
                job.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=job.log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # a terminal's Ctrl-C reaches only us; we forward one SIGTERM
                    preexec_fn=hook,
                )
                running.append(job)
                how = "resuming" if job.resume else "started"
                echo(f"[compare] {job.entry.label} seed {job.seed}: {how} ({job.folder / RUN_LOG})")
            if len(received) > forwarded:  # 1st signal: children finish their step and checkpoint; 2nd: kill
                pending.clear()
                for job in running:
                    assert job.proc is not None
                    job.proc.send_signal(signal.SIGTERM if forwarded == 0 else signal.SIGKILL)
                forwarded = len(received)
            for job in list(running):
                assert job.proc is not None and job.log is not None
                if job.proc.poll() is None:
                    continue
                running.remove(job)
                job.log.close()
                _finish(job, cfg, interrupted=bool(received), echo=echo)
            time.sleep(0.1)
    results = write_report(cfg, out)
    if received:
        raise KeyboardInterrupt("creditgym compare: stopped; run the same command again to resume")
    return results


def _finish(job: _Job, cfg: CompareConfig, *, interrupted: bool, echo: Callable[[str], None]) -> None:
    assert job.proc is not None
    elapsed = time.monotonic() - job.started
    record = _read_json(job.folder / RUN_RECORD) or {}
    before = (record.get("wall_s") or 0.0) if job.resume and record.get("settings") == job.settings else 0.0
    wall = before + elapsed
    code = job.proc.returncode
    record = {
        "settings": job.settings,
        "wall_s": wall,
        "returncode": code,
        "interrupted": interrupted and code != 0,
    }
    _write_json(job.folder / RUN_RECORD, record)
    status, error = run_status(job.folder, job.settings, cfg.steps)
    if status == "ok":
        echo(f"[compare] {job.entry.label} seed {job.seed}: done in {elapsed:.1f}s")
    else:
        echo(
            f"[compare] {job.entry.label} seed {job.seed}: {status.upper()} ({error}); log: {job.folder / RUN_LOG}"
        )


def _machine() -> dict[str, Any]:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch_version,
        "python": platform.python_version(),
    }


def summarize(
    runs: Sequence[Mapping[str, Any]], entries: Sequence[str], baseline: str
) -> list[dict[str, Any]]:
    """One row per entry from the finished runs: final score with its 95% interval, the paired difference to
    ``baseline`` with its interval, mean wall time, and mean step time relative to the baseline's."""

    def ok(label: str, key: str) -> dict[int, float]:
        return {
            r["seed"]: r[key]
            for r in runs
            if r["entry"] == label and r["status"] == "ok" and r[key] is not None
        }

    base_finals, base_steps = ok(baseline, "final"), ok(baseline, "step_s")
    rows = []
    for label in entries:
        finals, walls, steps = ok(label, "final"), ok(label, "wall_s"), ok(label, "step_s")
        diff, diff_ci, n_paired = (
            (None, None, None) if label == baseline else paired_difference(finals, base_finals)
        )
        ci = t_interval(list(finals.values()))
        ratio = (
            mean(list(steps.values())) / mean(list(base_steps.values()))
            if steps and base_steps and mean(list(base_steps.values())) > 0
            else None
        )
        rows.append(
            {
                "entry": label,
                "n": len(finals),
                "final_mean": mean(list(finals.values())) if finals else None,
                "ci95": list(ci) if ci else None,
                "diff_vs_baseline": diff,
                "diff_ci95": list(diff_ci) if diff_ci else None,
                "n_paired": n_paired,
                "wall_s_mean": mean(list(walls.values())) if walls else None,
                "step_time_ratio": ratio,
            }
        )
    return rows


def write_report(cfg: CompareConfig, out: str | Path) -> dict[str, Any]:
    """Read every run folder under ``out`` and (re)write ``results.json``, ``summary.md`` and ``curves.png``."""
    out = Path(out).resolve()
    runs = [read_run(out, cfg, entry, seed) for entry in cfg.parsed() for seed in cfg.seeds]
    results = {
        "config": asdict(cfg),
        "baseline": cfg.baseline,
        "machine": _machine(),
        "runs": runs,
        "summary": summarize(runs, cfg.entries, cfg.baseline),
    }
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / RESULTS, results)
    (out / SUMMARY).write_text(summary_markdown(results))
    curves_png(results, out / CURVES)
    return results


# -- the report ----------------------------------------------------------------------------------------------------


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    x = 0.0 if round(x, 3) == 0 else x  # no "-0.000"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _pm(value: float | None, ci: Sequence[float] | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    half = f"{(ci[1] - ci[0]) / 2:.3f}" if ci else "n/a"
    return f"{_num(value, signed)} ± {half}"


def summary_markdown(results: Mapping[str, Any]) -> str:
    """The summary table of ``results.json`` in Markdown (3 decimals; wall time in seconds, 1 decimal)."""
    cfg, base = results["config"], results["baseline"]
    seeds = ", ".join(str(s) for s in cfg["seeds"])
    lines = [
        f"Held-out score (greedy, the env's test split) of `{cfg['env_id']}` after {cfg['steps']} steps, seeds "
        f"{seeds}: mean ± half-width of the 95% t-interval across seeds; Δ is the paired difference to `{base}` "
        f"on shared seeds; step time is the mean training step relative to `{base}`'s.",
        "",
    ]
    if base != BASELINE:
        lines += [f"`{BASELINE}` is not an entry, so the first entry, `{base}`, is the baseline.", ""]
    lines += [
        f"| entry | n | final | Δ vs `{base}` | wall (s) | step time vs `{base}` |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in results["summary"]:
        label = row["entry"].replace("|", "\\|")
        diff = "baseline" if row["entry"] == base else _pm(row["diff_vs_baseline"], row["diff_ci95"], True)
        wall = "n/a" if row["wall_s_mean"] is None else f"{row['wall_s_mean']:.1f}"
        lines.append(
            f"| `{label}` | {row['n']} | {_pm(row['final_mean'], row['ci95'])} | {diff} | {wall} | "
            f"{_num(row['step_time_ratio'])} |"
        )
    bad = [r for r in results["runs"] if r["status"] != "ok"]
    if bad:
        lines += ["", "Runs not in the table:", ""]
        lines += [f"- `{r['entry']}` seed {r['seed']}: {r['status']} (`{r['log']}`)" for r in bad]
    return "\n".join(lines) + "\n"


def curves_png(results: Mapping[str, Any], path: str | Path) -> Path:
    """Held-out score over steps: per entry the mean across seeds and a shaded 95% interval, baseline first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    base = results["baseline"]
    labels = [base] + [row["entry"] for row in results["summary"] if row["entry"] != base]
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    colors = iter(list(plt.get_cmap("tab20").colors) * 2)  # 20 distinct colours: a study has many variants
    for label in labels:
        curves = [r["curve"] for r in results["runs"] if r["entry"] == label and r["status"] == "ok"]
        stats = curve_stats(curves)
        if not stats:
            continue
        steps, m, lo, hi = (list(col) for col in zip(*stats, strict=True))
        color = "black" if label == base else next(colors)
        width, z = (2.2, 3) if label == base else (1.4, 2)
        ax.plot(steps, m, "o-", color=color, lw=width, ms=3, zorder=z, label=f"{label} (n={len(curves)})")
        ax.fill_between(steps, lo, hi, color=color, alpha=0.15 if label == base else 0.12, lw=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("held-out score")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"{results['config']['env_id']}: mean and 95% interval across seeds")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)
