"""A study's record (``results.json`` of ``creditgym compare``): its form, its summary and its table.

``results.json`` keeps every run, finished or not (``status``: ``finished``, ``partial`` or ``failed``;
``steps_done`` of ``steps_planned``; the held-out ``curve``; the ``probe`` figures of a run with ``probe_every``;
``seed``; ``train_config``, the run's resolved `TrainConfig`, and its ``config_hash``), and its ``summary`` is
`summarize` of those runs, which counts finished runs only. A study with a run not finished is ``partial``, and
says so above its table (`summary_markdown`), as a pilot does. Results written before this form (`FORMAT` 1) are
read through `upgrade_results`. Pure functions of plain data: reading run folders is ``creditgym.agents.study.compare``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from creditgym.agents.study.stats import mean, paired_difference, t_interval

BASELINE = "grpo"
#: results.json's form: 2 = runs with status, steps, probe figures and config hash, and a ``partial`` flag;
#: 1 (no ``format`` key) = before.
FORMAT = 2
FINISHED, PARTIAL, FAILED = "finished", "partial", "failed"
#: A run folder's state (`run_status`) -> the run's status in results.json.
STATUS = {
    "ok": FINISHED,
    "incomplete": PARTIAL,
    "interrupted": PARTIAL,
    "missing": PARTIAL,
    "failed": FAILED,
    "stale": FAILED,
}


def upgrade_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """A study's ``config`` (``config.json``, ``results.json["config"]``) in the current form.

    Before the ``train`` mapping, a study named a few train settings as fields of its own (``env_id``,
    ``steps``, ``eval_every``, ..., ``env_kwargs``; None meant the trainer's default) and its ``workers``.
    """
    if "train" in data:
        return {k: data[k] for k in ("entries", "seeds", "train", "pilot") if k in data}
    own = ("entries", "seeds", "workers", "env_kwargs")
    train = {k: v for k, v in data.items() if k not in own and v is not None}
    if data.get("env_kwargs"):
        train["env_kwargs"] = dict(data["env_kwargs"])
    return {"entries": list(data["entries"]), "seeds": list(data["seeds"]), "train": train}


def config_hash(config: Mapping[str, Any]) -> str:
    """A stable hash of a resolved `TrainConfig` (16 hex digits of the SHA-256 of its canonical JSON): two runs
    with one hash were trained with the same settings."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=dict)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _finite(x: Any) -> Any:
    """A number for JSON: NaN and infinities (a probe figure with nothing to measure) become None."""
    return None if isinstance(x, float) and not math.isfinite(x) else x


def probe_figures(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ``probe/*`` figures a run with ``probe_every`` logged: ``[{"step": k, "figures": {name: value}}]``,
    one per probed step, the last logged row of a step winning (a resumed run logs a step again)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        figures = {k[len("probe/") :]: _finite(v) for k, v in row.items() if k.startswith("probe/")}
        if figures:
            by_step[int(row["step"])] = figures
    return [{"step": step, "figures": by_step[step]} for step in sorted(by_step)]


def upgrade_run(run: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """A ``results.json`` run in the current form. Before `FORMAT` 2 a run's ``status`` was its folder's state
    (``ok``, ``failed``, ...), and it had no steps, probe figures or config; a finished one had done all ``steps``.
    """
    if run.get("status") in (FINISHED, PARTIAL, FAILED):
        return dict(run)
    state = run["status"]
    done = steps if state == "ok" else max((int(s) for s, _ in run.get("curve") or []), default=0)
    extra = {"status": STATUS.get(state, FAILED), "state": state, "steps_done": done, "steps_planned": steps}
    return {**run, **extra, "probe": [], "config_hash": None, "train_config": None}


def upgrade_results(results: Mapping[str, Any]) -> dict[str, Any]:
    """A ``results.json`` in the current form (`FORMAT`): its config upgraded (`upgrade_config`), every run
    upgraded (`upgrade_run`), and the ``partial`` and ``pilot`` flags (a study written before had neither: it
    was complete when published). The stored ``summary`` is kept as it is."""
    config = upgrade_config(results["config"])
    runs = [upgrade_run(r, int(config["train"]["steps"])) for r in results["runs"]]
    partial = results.get("partial", any(r["status"] != FINISHED for r in runs))
    return {
        **results,
        "format": FORMAT,
        "config": config,
        "runs": runs,
        "partial": bool(partial),
        "pilot": bool(results.get("pilot", config.get("pilot", False))),
    }


def summarize(
    runs: Sequence[Mapping[str, Any]], entries: Sequence[str], baseline: str
) -> list[dict[str, Any]]:
    """One row per entry from the finished runs only (a run of either `FORMAT`): the finished seeds, final score
    with its 95% interval, the paired difference to ``baseline`` with its interval, mean wall time, and mean step
    time relative to the baseline's."""
    finished = [r for r in runs if r["status"] in (FINISHED, "ok")]

    def ok(label: str, key: str) -> dict[int, float]:
        return {r["seed"]: r[key] for r in finished if r["entry"] == label and r[key] is not None}

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
                "seeds": sorted(finals),
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
    """The summary table of ``results.json`` in Markdown (3 decimals; wall time in seconds, 1 decimal), headed by
    what the study is when it is a pilot or partial (a study of either flag cannot pass for a finished one)."""
    results = upgrade_results(results)
    cfg, base = results["config"], results["baseline"]
    seeds = ", ".join(str(s) for s in cfg["seeds"])
    env_id, steps = cfg["train"]["env_id"], cfg["train"]["steps"]
    lines = []
    if results["pilot"]:
        lines += ["**Pilot**: runs that size the study (its design), not the study's result.", ""]
    if results["partial"]:
        done = sum(r["status"] == FINISHED for r in results["runs"])
        lines += [
            f"**Partial study**: {done} of {len(results['runs'])} runs finished; the table counts finished "
            "runs only, and the study is not complete.",
            "",
        ]
    lines += [
        f"Held-out score (greedy, the env's test split) of `{env_id}` after {steps} steps, seeds "
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
    bad = [r for r in results["runs"] if r["status"] != FINISHED]
    if bad:
        lines += ["", "Runs not in the table:", ""]
        lines += [f"- `{r['entry']}` seed {r['seed']}: {_not_finished(r)} (`{r['log']}`)" for r in bad]
    return "\n".join(lines) + "\n"


def _not_finished(run: Mapping[str, Any]) -> str:
    """``failed``, ``not started`` (no run folder yet), or ``partial (k of n steps)``."""
    if run.get("state") == "missing":
        return "not started"
    if run["status"] == PARTIAL:
        return f"partial ({run['steps_done']} of {run['steps_planned']} steps)"
    return str(run["status"])
