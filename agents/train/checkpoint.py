"""Atomic, verified training checkpoints.

A checkpoint is a folder ``step-000120/`` holding ``state.pt`` (model, optimizer, each signal provider's state,
step, config, metrics history) and ``manifest.json`` (the SHA-256 of every file). No RNG state is needed: the
trainer seeds every draw of step ``k`` from ``(seed, k)``. It is written into a temporary folder and renamed into
place, so a crash mid-write never leaves a half checkpoint under a real name; ``latest`` names the newest one.
Loading checks the manifest and refuses a corrupted checkpoint, naming the file, without touching the others
(`resumable_checkpoint` then falls back to the newest intact one, saying which it skipped); the state is loaded with ``weights_only=True`` (a checkpoint is data: tensors and plain values, never code).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

MANIFEST = "manifest.json"
STATE = "state.pt"


class CorruptCheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated or does not match its recorded hash."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_checkpoint(root: str | os.PathLike[str], step: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as checkpoint ``step`` under ``root`` atomically; keep the newest ``keep`` checkpoints."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-{os.getpid()}"
    latest_tmp = root / f".latest-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:  # a failed write (a full disk) leaves the earlier checkpoints as they were and no temporary files
        tmp.mkdir()
        torch.save({**state, "step": step}, tmp / STATE)
        manifest = {"step": step, "files": {STATE: _sha256(tmp / STATE)}}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        for path in (tmp / STATE, tmp / MANIFEST):
            with path.open("rb") as f:
                os.fsync(f.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        latest_tmp.write_text(final.name + "\n")
        os.replace(latest_tmp, root / "latest")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        latest_tmp.unlink(missing_ok=True)
        raise
    for old in sorted(root.glob("step-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def verify_checkpoint(path: str | os.PathLike[str]) -> None:
    """Raise :class:`CorruptCheckpointError` naming the file if ``path`` is not a complete, intact checkpoint."""
    path = Path(path)
    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"checkpoint {path}: unreadable {manifest_path} ({e})") from e
    if not isinstance(files, dict) or STATE not in files:
        raise CorruptCheckpointError(f"checkpoint {path}: {manifest_path} lists no {STATE}")
    for name, digest in files.items():
        file = path / name
        if not file.is_file():
            raise CorruptCheckpointError(f"checkpoint {path}: missing file {file}")
        if _sha256(file) != digest:
            raise CorruptCheckpointError(
                f"checkpoint {path}: {file} does not match its SHA-256 in {manifest_path}"
            )


def latest_checkpoint(root: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint folder under ``root`` (``None`` if there is none)."""
    root = Path(root)
    pointer = root / "latest"
    if pointer.is_file():
        candidate = root / pointer.read_text().strip()
        if candidate.is_dir():
            return candidate
    found = sorted(root.glob("step-*"))
    return found[-1] if found else None


def resumable_checkpoint(root: str | os.PathLike[str]) -> tuple[Path, dict[str, Any], list[str]]:
    """The newest checkpoint under ``root`` that loads, its state, and why each newer one was skipped.

    Raises:
        FileNotFoundError: ``root`` holds no checkpoint.
        CorruptCheckpointError: every checkpoint under ``root`` is corrupt (the newest one's reason is named).
    """
    root = Path(root)
    newest = latest_checkpoint(root)
    if newest is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {root}")
    older = sorted((p for p in root.glob("step-*") if p.is_dir() and p != newest), reverse=True)
    skipped: list[str] = []
    for path in (newest, *older):
        try:
            return path, load_checkpoint(path), skipped
        except CorruptCheckpointError as e:
            skipped.append(str(e))
    if len(skipped) == 1:
        raise CorruptCheckpointError(skipped[0])
    raise CorruptCheckpointError(f"{skipped[0]}; and no older intact checkpoint under {root}")


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The verified state of checkpoint folder ``path``."""
    verify_checkpoint(path)
    try:
        return torch.load(Path(path) / STATE, map_location="cpu", weights_only=True)
    except Exception as e:  # the unpickler refuses anything but tensors and plain values
        raise CorruptCheckpointError(
            f"checkpoint {path}: {Path(path) / STATE} is not plain data ({e})"
        ) from e
