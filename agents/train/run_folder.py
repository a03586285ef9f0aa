"""A run folder is a record: a run never overwrites another one, a resumed run never mixes settings, and every
file-system failure in it is one line.

- A folder holding a run's files (`RUN_FILES`) is refused unless the run is resumed (``--resume``) or cleared
  first (``--overwrite``, which deletes those files and nothing else in the folder).
- ``--resume`` with settings other than the run's is refused, naming each differing flag, except the fields of
  `RESUMABLE` (how long the run goes on and how often it evaluates, checkpoints and probes, and where it runs):
  those changes are recorded in ``history.jsonl``, one line per start of the run (the step it started at and what
  changed, from and to). ``config.json`` is written once, when the run starts, and never rewritten: what a step ran
  with is ``config.json`` with the changes of the history lines up to that step (`recorded_config`).
- An ``OSError`` while writing the folder (read-only, permission denied, ``/proc``, a file where a folder must be,
  a full disk) becomes a `RunFolderError`: ``cannot write the run folder PATH: CAUSE``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.flags import train_flag

CONFIG, HISTORY = "config.json", "history.jsonl"
#: What the trainer writes into a run folder: any of them there means the folder holds a run.
RUN_FILES: tuple[str, ...] = (
    CONFIG,
    HISTORY,
    "metrics.jsonl",
    "summary.json",
    "checkpoints",
    "final",
    "tensorboard",
    "curves.png",
    "credit.html",
    "credit.png",
    "vllm-init",
    "wandb",  # with --wandb: Weights & Biases' run folders
)
#: Fields a resumed run may change; any other difference from the run's settings is refused.
RESUMABLE: tuple[str, ...] = ("steps", "eval_every", "checkpoint_every", "probe_every", "device")


class RunFolderError(Exception):
    """The run folder cannot be used as asked (it holds another run, other settings, or cannot be written)."""


def _cause(e: OSError) -> str:
    cause = e.strerror or str(e)
    return f"{cause} ({e.filename})" if e.filename else cause


@contextlib.contextmanager
def writing(out: Path) -> Iterator[None]:
    """Turns an ``OSError`` raised inside into `RunFolderError` naming ``out`` and the cause."""
    try:
        yield
    except OSError as e:
        raise RunFolderError(f"cannot write the run folder {out}: {_cause(e)}") from e


def as_json(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as ``config.json`` holds it (mappings as objects, tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(cfg), default=dict))


def _read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a line cut short by a kill
            rows.append(json.loads(line))
    return rows


def recorded_config(out: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The settings the run in ``out`` goes on with: its ``config.json`` with every change of its history
    applied (None when the folder holds no ``config.json``)."""
    out = Path(out)
    try:
        config = json.loads((out / CONFIG).read_text())
    except (OSError, ValueError):
        return None
    for row in _read_lines(out / HISTORY):
        for name, change in (row.get("changed") or {}).items():
            config[name] = change["to"]
    return config


def resume_settings(out: str | os.PathLike[str], given: Mapping[str, Any], resume: bool) -> dict[str, Any]:
    """The `TrainConfig` fields of a run: with ``resume``, the run's recorded settings, then the flags ``given`` (a
    flag left out keeps the run's value); else, or with no recorded run, ``given`` alone."""
    recorded = recorded_config(out) if resume else None
    if recorded is None:
        return dict(given)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return {**{k: v for k, v in recorded.items() if k in known}, **given}


def _show(value: Any) -> str:
    return str(value) if isinstance(value, (int, float, str)) else json.dumps(value)


def _present(out: Path) -> list[str]:
    return [name for name in RUN_FILES if (out / name).exists()]


def prepare(out: Path, cfg: TrainConfig, *, resume: bool, overwrite: bool) -> dict[str, dict[str, Any]]:
    """Check ``out`` for a run of ``cfg`` (module docstring), clear it for ``overwrite``, create it and check it
    can be written. Returns the `RESUMABLE` fields a resume changes: ``{field: {"from": old, "to": new}}``.

    Raises:
        RunFolderError: a run there without ``resume``/``overwrite``; other settings on resume; a folder that
            cannot be written.
    """
    if resume and overwrite:
        raise RunFolderError(
            "--resume continues the run in --out and --overwrite deletes it: give one of them"
        )
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"cannot write the run folder {out}: a file is there, not a folder")
    present = _present(out) if out.is_dir() else []
    changed: dict[str, dict[str, Any]] = {}
    if present and not resume and not overwrite:
        raise RunFolderError(
            f"{out} holds a run ({', '.join(present)}): continue it with --resume, choose a fresh --out, or pass "
            "--overwrite to delete it first"
        )
    recorded = recorded_config(out) if resume else None
    if recorded is not None:
        given = as_json(cfg)
        differ = [n for n in given if n in recorded and recorded[n] != given[n]]
        refused = [n for n in differ if n not in RESUMABLE]
        if refused:
            diffs = "; ".join(
                f"{train_flag(n)}: run has {_show(recorded[n])}, given {_show(given[n])}" for n in refused
            )
            raise RunFolderError(
                f"--resume with other settings than the run in {out}: {diffs}. Resume with the run's settings "
                f"(a flag left out keeps them; only {', '.join(train_flag(n) for n in RESUMABLE)} may change), or "
                "start a new run in a fresh --out"
            )
        changed = {n: {"from": recorded[n], "to": given[n]} for n in differ}
    with writing(out):
        if overwrite:
            for name in present:
                path = out / name
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-check-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    return changed


def record_start(out: Path, cfg: TrainConfig, step: int, changed: Mapping[str, Any]) -> None:
    """Write ``config.json`` when the run starts (never again), and one ``history.jsonl`` line per start."""
    with writing(out):
        if step == 0 or not (out / CONFIG).exists():
            (out / CONFIG).write_text(json.dumps(as_json(cfg), indent=2) + "\n")
        row = {"step": step, "event": "start" if step == 0 else "resume", "changed": dict(changed)}
        with (out / HISTORY).open("a") as f:
            f.write(json.dumps(row) + "\n")
