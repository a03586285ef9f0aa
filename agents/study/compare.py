"""``creditgym compare``: train every (credit module or variant, seed) with one budget, report held-out scores.

A study (`CompareConfig`) is its entries, its seeds and the `TrainConfig` overrides every run shares (``train``:
field -> value, any train knob). Each run is a ``creditgym train`` child given those overrides as its flags
(`train_argv`) and writing into ``DIR/runs/<label-slug>/seed<k>/``, so runs are isolated, run in parallel, and
resume: a run whose ``summary.json`` holds all the steps is reused, a run with a checkpoint continues with
``--resume``, a run folder made with other settings is refused, and a failed run is reported with its
``train.log`` while the others go on. Where the runs go is a `Runner` (``creditgym.agents.study.scheduler``): local
subprocesses, or Ray tasks with ``--ray``. The held-out curve of each run is the trainer's own (``eval_every``,
``eval_episodes``).

A study entry is a module name or a variant ``name:key=value[;key=value]`` of its config (``cort:normalize=false``,
``compo:gate=shuffled``); values are JSON, falling back to a string. The label is the string as given. ``grpo`` is
the baseline of the paired differences and step-time ratios (the first entry when ``grpo`` is absent).

The report (``results.json``, ``summary.md``, ``curves.png``) is rebuilt from the run folders alone, so
``--report-only`` can redo it at any time, and ``summary_markdown(results)`` is a pure function of ``results.json``
(statistics: ``creditgym.agents.study.stats``; the plot: ``creditgym.agents.train.plots.study_png``).

``results.json`` is the checkable record of every run (its form, summary and table: ``creditgym.agents.study.results``).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from creditgym.agents.study.results import (
    BASELINE,
    FINISHED,
    FORMAT,
    STATUS,
    config_hash,
    probe_figures,
    summarize,
    summary_markdown,
    upgrade_config,
    upgrade_results,
)
from creditgym.agents.study.scheduler import RUN_LOG, LocalRunner, RunJob, Runner, RunOutcome
from creditgym.agents.study.stats import mean
from creditgym.agents.train.config import TrainConfig, resolve
from creditgym.agents.train.flags import json_or_str, parse_train_argv, train_argv
from creditgym.agents.train.plots import study_png
from creditgym.agents.train.run_folder import recorded_config

RESULTS, SUMMARY, CURVES, CONFIG = "results.json", "summary.md", "curves.png", "config.json"
RUN_RECORD = "compare.json"  # per run folder, next to the trainer's own files and its train.log

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


def split_entries(text: str, sep: str = ",") -> list[str]:
    """Split a comma list of entries, keeping commas inside brackets or quotes (``cast:pos_clip=[0.8,1.1]``);
    with ``sep=";"``, an entry's ``key=value`` pairs (``vine:delimiter=";"`` keeps its quoted ``;``)."""
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
        elif ch == sep and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


def parse_entry(label: str) -> Entry:
    """Parse ``name`` or ``name:key=value[;key=value]``, checked against the module's config; a value is JSON
    when it parses (a quoted one may hold ``;`` or ``,``: ``vine:delimiter=";"``), else the string itself.

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
    for pair in split_entries(spec, ";"):
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"entry {label!r}: expected name:key=value[;key=value], got {pair!r}")
        if key not in known:
            raise ValueError(f"entry {label!r}: {config.__name__} has no field {key!r}; its fields: {known}")
        kwargs[key] = json_or_str(raw.strip())
    if spec and not kwargs:
        raise ValueError(f"entry {label!r}: nothing after ':'; expected name:key=value[;key=value]")
    try:
        config(**kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"entry {label!r}: {config.__name__} refuses {kwargs}: {e}") from e
    return Entry(label.strip(), name, kwargs)


# -- configuration -------------------------------------------------------------------------------------------------


def default_workers() -> int:
    """Half the CPU cores, at least one."""
    return max(1, (os.cpu_count() or 1) // 2)


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"3"`` -> ``(0, 1, 2)``; ``"0,4,7"`` -> ``(0, 4, 7)``; ``"5,"`` -> ``(5,)`` (one seed needs the comma)."""
    try:
        if "," in text:
            return tuple(int(s) for s in text.split(",") if s.strip())
        count = int(text)
    except ValueError as e:
        raise ValueError(f"--seeds expects a count (3) or a comma list (0,4,7), got {text!r}") from e
    if count < 1:
        raise ValueError(
            f"--seeds {text} is a count of seeds and runs nothing; for seed {text} alone write '{text},'"
        )
    return tuple(range(count))


#: TrainConfig fields a study sets per run, from the entry and the seed, never in its `train` settings.
PER_RUN = ("credit", "credit_kwargs", "seed")


@dataclass(frozen=True)
class CompareConfig:
    """A study: every entry trained with every seed, with the same settings and budget.

    Attributes:
        entries: Module names or variants ``name:key=value[;key=value]`` (labels, as given).
        seeds: The seeds each entry runs with.
        train: `TrainConfig` overrides of every run (field -> value; any field but ``credit``, ``credit_kwargs``
            and ``seed``), passed to each run as its ``creditgym train`` flags. ``env_id`` and ``steps`` are
            always filled in (from `TrainConfig` when not given), so the study names them.
        pilot: A pilot (runs that size a study, not the study): its table says so.
    """

    entries: tuple[str, ...] = (BASELINE,)
    seeds: tuple[int, ...] = (0, 1, 2)
    train: Mapping[str, Any] = field(default_factory=dict)
    pilot: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self.entries))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        train = {"env_id": TrainConfig.env_id, "steps": TrainConfig.steps, **self.train}
        object.__setattr__(self, "train", train)
        per_run = sorted(set(train) & set(PER_RUN))
        if per_run:
            raise ValueError(f"CompareConfig.train: {per_run} come from each entry and seed, not the study")
        try:
            train_argv(train)  # an unknown field, or None
            TrainConfig.for_model(**train)  # the trainer's own checks of every value
        except (TypeError, ValueError) as e:
            raise ValueError(f"CompareConfig.train {train}: {e}") from e
        from creditgym.envs import resolve_env_id

        resolve_env_id(self.env_id)  # raises, naming the ids there are
        if not self.entries or len(set(self.entries)) != len(self.entries):
            raise ValueError(
                f"CompareConfig.entries must be non-empty and distinct, got {list(self.entries)}"
            )
        slugs = [e.slug for e in self.parsed()]  # raises on a bad entry
        if len(set(slugs)) != len(slugs):
            raise ValueError(f"CompareConfig.entries: two labels map to one folder name: {slugs}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"CompareConfig.seeds must be distinct and >= 0, got {list(self.seeds)}")

    @property
    def env_id(self) -> str:
        return str(self.train["env_id"])

    @property
    def steps(self) -> int:
        return int(self.train["steps"])

    def parsed(self) -> list[Entry]:
        """The entries, parsed and checked."""
        return [parse_entry(label) for label in self.entries]

    @property
    def baseline(self) -> str:
        """``grpo`` when it is an entry, else the first entry."""
        return BASELINE if BASELINE in self.entries else self.entries[0]

    def to_json(self) -> dict[str, Any]:
        out = {"entries": list(self.entries), "seeds": list(self.seeds), "train": dict(self.train)}
        return {**out, "pilot": True} if self.pilot else out  # a study's config.json as before


def save_config(cfg: CompareConfig, out: str | Path) -> Path:
    path = Path(out) / CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg.to_json(), indent=2) + "\n")
    return path


def load_config(out: str | Path) -> CompareConfig:
    """The study in ``out``: its ``config.json``, else the config inside its ``results.json`` (either form)."""
    for name, key in ((CONFIG, None), (RESULTS, "config")):
        data = _read_json(Path(out) / name)
        if data is not None:
            return CompareConfig(**upgrade_config(data if key is None else data[key]))
    raise FileNotFoundError(
        f"neither {Path(out) / CONFIG} nor {Path(out) / RESULTS} found: run `creditgym compare` into {out} "
        "first, or pass --credit"
    )


# -- one run's folder ----------------------------------------------------------------------------------------------


def run_dir(out: str | Path, entry: Entry, seed: int) -> Path:
    return Path(out) / "runs" / entry.slug / f"seed{seed}"


def train_settings(cfg: CompareConfig, entry: Entry, seed: int) -> list[str]:
    """The ``creditgym train`` flags of one run, except ``--out``, ``--steps`` and ``--resume``."""
    train = {k: v for k, v in cfg.train.items() if k != "steps"}
    return train_argv({**train, "credit": entry.module, "credit_kwargs": entry.kwargs, "seed": seed})


def same_settings(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two runs' flags say the same (in any order: older versions wrote them in another)."""
    return list(a) == list(b) or parse_train_argv(a) == parse_train_argv(b)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


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
    if record.get("settings") is not None and not same_settings(record["settings"], settings):
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
    if record.get("error"):
        return "failed", f"{record['error']}: {_log_tail(folder / RUN_LOG)}"
    if record.get("returncode") not in (None, 0):
        return "failed", f"exit {record['returncode']}: {_log_tail(folder / RUN_LOG)}"
    return ("incomplete", None) if folder.exists() else ("missing", None)


def resolved_train_config(train: Mapping[str, Any], entry: Entry, seed: int) -> dict[str, Any]:
    """The `TrainConfig` of one run, every field (defaults included), as JSON: what its ``config.json`` holds."""
    cfg = resolve(
        TrainConfig.for_model(**train, credit=entry.module, credit_kwargs=dict(entry.kwargs), seed=seed)
    )
    return json.loads(json.dumps(asdict(cfg), default=dict))


def _metrics_rows(folder: Path) -> list[dict[str, Any]]:
    rows = []
    if (folder / "metrics.jsonl").is_file():
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:  # a line cut short by a kill
                continue
    return rows


def read_run(out: Path, cfg: CompareConfig, entry: Entry, seed: int) -> dict[str, Any]:
    """One row of ``results.json["runs"]``, read from the run's folder (paths relative to ``out``)."""
    folder = run_dir(out, entry, seed)
    state, error = run_status(folder, train_settings(cfg, entry, seed), cfg.steps)
    summary = _read_json(folder / "summary.json") or {}
    rows = _metrics_rows(folder)
    if "eval_curve" in summary:
        curve = [[int(s), v] for s, v in summary["eval_curve"]]
    else:
        curve = [[int(r["step"]), r["eval/accuracy"]] for r in rows if r.get("eval/accuracy") is not None]
    steps_done = (
        int(summary["steps"]) if "steps" in summary else max((int(r["step"]) for r in rows), default=0)
    )
    step_times = [r["time/step_s"] for r in rows if r.get("time/step_s") is not None]
    record = _read_json(folder / RUN_RECORD) or {}
    ran = recorded_config(folder)  # what the trainer resolved, with the changes of its resumes
    train_config = ran if isinstance(ran, dict) else resolved_train_config(cfg.train, entry, seed)
    return {
        "entry": entry.label,
        "seed": seed,
        "status": STATUS[state],
        "state": state,
        "steps_done": steps_done,
        "steps_planned": cfg.steps,
        "final": curve[-1][1] if state == "ok" and curve else None,
        "curve": curve,
        "probe": probe_figures(rows),
        "wall_s": record.get("wall_s"),
        "step_s": mean(step_times) if step_times else None,
        "config_hash": config_hash(train_config),
        "train_config": train_config,
        "log": (folder / RUN_LOG).relative_to(out).as_posix(),
        "error": error,
    }


# -- the study -----------------------------------------------------------------------------------------------------


def plan(cfg: CompareConfig, out: Path, echo: Callable[[str], None]) -> list[RunJob]:
    """The runs still to do (missing, incomplete, failed or interrupted); finished ones are reused, runs from
    other settings skipped, each said in one line. Seed by seed (every entry's seed 0, then seed 1, ...), so that
    a study stopped part-way holds complete pairs to compare."""
    jobs = []
    for seed in cfg.seeds:
        for entry in cfg.parsed():
            folder, settings = run_dir(out, entry, seed), train_settings(cfg, entry, seed)
            status, error = run_status(folder, settings, cfg.steps)
            if status == "ok":
                echo(f"[compare] {entry.label} seed {seed}: done before, reused")
            elif status == "stale":
                echo(f"[compare] {entry.label} seed {seed}: skipped: {error}")
            else:
                args = ("--steps", str(cfg.steps), *settings)
                jobs.append(RunJob(f"{entry.label} seed {seed}", folder, args))
    return jobs


def record_run(job: RunJob, outcome: RunOutcome, steps: int, echo: Callable[[str], None]) -> None:
    """Write the run's ``compare.json`` (settings, wall time over its attempts, exit, error) and say how it went."""
    settings = list(job.args[2:])  # past --steps N
    record = _read_json(job.folder / RUN_RECORD) or {}
    before = (record.get("wall_s") or 0.0) if same_settings(record.get("settings") or [], settings) else 0.0
    record = {
        "settings": settings,
        "wall_s": before + outcome.elapsed,
        "returncode": outcome.returncode,
        "interrupted": outcome.interrupted and outcome.returncode != 0,
        "error": outcome.error,
    }
    job.folder.mkdir(parents=True, exist_ok=True)
    _write_json(job.folder / RUN_RECORD, record)
    status, error = run_status(job.folder, settings, steps)
    if status == "ok":
        echo(f"[compare] {job.name}: done in {outcome.elapsed:.1f}s")
    else:
        echo(f"[compare] {job.name}: {status.upper()} ({error}); log: {job.folder / RUN_LOG}")


def run_compare(
    cfg: CompareConfig,
    out: str | Path,
    *,
    runner: Runner | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run every (entry, seed) not finished yet, then write and return the report.

    Args:
        runner: Where the runs go: `LocalRunner` (default: half the cores) or a Ray runner.

    Raises:
        KeyboardInterrupt: after SIGINT/SIGTERM, once every run has checkpointed and stopped (a second signal
            kills them at once); the partial report is written first.
    """
    out = Path(out).resolve()
    runner = runner or LocalRunner(default_workers())
    save_config(cfg, out)
    jobs = plan(cfg, out, echo)
    stopped = False
    if jobs:
        stopped = runner.run(jobs, lambda job, outcome: record_run(job, outcome, cfg.steps, echo), echo)
    results = write_report(cfg, out, runner=runner.describe())
    if stopped:
        raise KeyboardInterrupt("creditgym compare: stopped; run the same command again to resume")
    return results


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


def write_report(
    cfg: CompareConfig, out: str | Path, *, runner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Read every run folder under ``out`` and (re)write ``results.json``, ``summary.md`` and ``curves.png``.

    A study folder without ``runs/`` (a published study: ``studies/results/*``) keeps its ``results.json``, and
    ``summary.md`` and ``curves.png`` are redrawn from it.
    """
    out = Path(out).resolve()
    if not (out / "runs").is_dir() and (out / RESULTS).is_file():
        results = json.loads((out / RESULTS).read_text())  # as published; read through upgrade_results
    else:
        if runner is None:  # --report-only: the runner the runs had
            runner = (_read_json(out / RESULTS) or {}).get("runner")
        runs = [read_run(out, cfg, entry, seed) for entry in cfg.parsed() for seed in cfg.seeds]
        results = {
            "format": FORMAT,
            "config": cfg.to_json(),
            "pilot": cfg.pilot,
            "partial": any(r["status"] != FINISHED for r in runs),
            "baseline": cfg.baseline,
            "machine": _machine(),
            "runner": dict(runner or {}),
            "runs": runs,
            "summary": summarize(runs, cfg.entries, cfg.baseline),
        }
        out.mkdir(parents=True, exist_ok=True)
        _write_json(out / RESULTS, results)
    (out / SUMMARY).write_text(summary_markdown(results))
    config = upgrade_config(results["config"])
    title = f"{config['train']['env_id']}: mean and 95% interval across seeds"
    study_png(
        upgrade_results(results)["runs"], config["entries"], results["baseline"], out / CURVES, title=title
    )
    return results
