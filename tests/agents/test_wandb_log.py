"""``creditgym train --wandb``: off by default; offline without an API key, its run read back from wandb's own file."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from creditgym.agents.train.wandb_log import wandb_mode

pytest.importorskip("wandb")

SMALL = ["--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--eval-every", "1"]
SMALL += ["--eval-episodes", "2", "--max-new-tokens", "8"]
BLOCK = 32768  # the .wandb file is a LevelDB-style log: 32 KiB blocks of (crc32, length, type) records


def _train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", OMP_NUM_THREADS="1")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        env[name] = str(tmp_path / "wandb-home")  # nothing written outside the test's folder
    cmd = [sys.executable, "-m", "creditgym.cli", "train", *SMALL, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def wandb_records(path: Path) -> list[Any]:
    """Every record of a ``run-*.wandb`` file, as wandb's own protobuf ``Record`` messages."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, pending, records = 7, b"", []
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, or LAST of a record split over blocks
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)  # wandb writes a key either way


def _history(records: list[Any]) -> dict[int, dict[str, Any]]:
    rows = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {_key(item): json.loads(item.value_json) for item in r.history.item}
            rows[int(row["_step"])] = {k: v for k, v in row.items() if not k.startswith("_")}
    return rows


def _config(records: list[Any]) -> dict[str, Any]:
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    return {_key(item): json.loads(item.value_json) for item in run.config.update if _key(item) != "_wandb"}


def test_a_run_with_wandb_writes_an_offline_run_holding_every_logged_metric(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _train(tmp_path, "--wandb", "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    (folder,) = (out / "wandb").glob("offline-run-*")
    assert f"W&B offline run in {folder}: upload it with `wandb sync {folder}`" in res.stdout
    (file,) = folder.glob("run-*.wandb")
    records = wandb_records(file)
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    history = _history(records)
    assert sorted(history) == [0, 1, 2] == [int(m["step"]) for m in logged]
    for m in logged:  # every finite value of metrics.jsonl, at its step; nothing else
        expected = {k: v for k, v in m.items() if k != "step" and v is not None}
        got = history[int(m["step"])]
        assert got.keys() == expected.keys()
        assert all(got[k] == pytest.approx(v, rel=1e-12, abs=0) for k, v in expected.items())
    config = _config(records)
    recorded = json.loads((out / "config.json").read_text())
    assert {k: config[k] for k in recorded} == recorded and config["start_step"] == 0


def test_wandb_is_off_by_default_and_a_resumed_run_is_a_new_wandb_run_from_its_step(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _train(tmp_path, "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    assert not (out / "wandb").exists() and not (tmp_path / "wandb-home").exists() and "W&B" not in res.stdout
    res = _train(tmp_path, "--out", str(out), "--resume", "--steps", "3", "--wandb", "mine")
    assert res.returncode == 0, res.stderr[-3000:]
    (folder,) = (out / "wandb").glob("offline-run-*")
    records = wandb_records(next(folder.glob("run-*.wandb")))
    assert sorted(_history(records)) == [3] and _config(records)["start_step"] == 2
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name, run.run_group) == ("mine", "run@2", "run")


@pytest.mark.parametrize(
    ("environ", "mode"),
    [
        ({}, "offline"),
        ({"WANDB_MODE": "online"}, "offline"),  # no key: never the network
        ({"WANDB_API_KEY": "k"}, "online"),
        ({"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
        ({"WANDB_API_KEY": "k", "WANDB_MODE": "dryrun"}, "offline"),
        ({"WANDB_MODE": "disabled"}, "disabled"),
    ],
)
def test_wandb_goes_online_only_with_an_api_key(environ: dict[str, str], mode: str) -> None:
    assert wandb_mode(environ) == mode
