"""A run folder is a record: never overwritten, never mixed with other settings, every failure one line."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from creditgym.agents.study.ray_jobs import image_lock_dir
from creditgym.agents.train import checkpoint as checkpoint_module
from creditgym.agents.train.checkpoint import latest_checkpoint, verify_checkpoint
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.progress import equal_rewards_note
from creditgym.agents.train.run_folder import RunFolderError, recorded_config
from creditgym.agents.train.trainer import Trainer
from creditgym.cli import main
from creditgym.credit import available, get

SMALL = "--steps 2 --prompts-per-step 2 --group-size 4 --eval-every 2 --eval-episodes 4 --checkpoint-every 1"


def _train(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "creditgym.cli", "train", "--out", str(out), *SMALL.split()]
    cmd += ["--max-new-tokens", "16", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    res = _train(out)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture
def run(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


def test_a_folder_holding_a_run_is_refused_without_resume_and_left_untouched(run: Path) -> None:
    before = _snapshot(run)
    res = _train(run)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"creditgym train: {run} holds a run")
    assert "--resume" in lines[0] and "fresh --out" in lines[0] and "--overwrite" in lines[0]
    assert _snapshot(run) == before  # step-000001 and metrics.jsonl's rows are still there
    (run / "notes.txt").write_text("mine")
    res = _train(run, "--overwrite")
    assert res.returncode == 0, res.stderr
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [0, 1, 2]  # one run, not two mixed
    assert (run / "notes.txt").read_text() == "mine"  # --overwrite deletes the run's files only
    assert len((run / "history.jsonl").read_text().splitlines()) == 1


def test_resume_with_other_settings_is_refused_naming_each_flag(run: Path) -> None:
    before = _snapshot(run)
    res = _train(
        run, "--resume", "--steps", "3", "--prompts-per-step", "4", "--group-size", "2", "--lr", "1e-3"
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    for diff in ("--prompts-per-step: run has 2, given 4", "--group-size: run has 4, given 2"):
        assert diff in lines[0]
    assert "--lr: run has 5e-05, given 0.001" in lines[0] and "--steps:" not in lines[0]
    assert _snapshot(run) == before


def test_resume_may_change_the_steps_and_records_it_without_rewriting_the_config(run: Path) -> None:
    config = (run / "config.json").read_text()
    cmd = [sys.executable, "-m", "creditgym.cli", "train", "--out", str(run), "--resume", "--steps", "3"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # flags left out: the run's own
    assert res.returncode == 0, res.stderr
    assert (run / "config.json").read_text() == config  # what steps 1-2 ran with
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    assert history == [
        {"step": 0, "event": "start", "changed": {}},
        {"step": 2, "event": "resume", "changed": {"steps": {"from": 2, "to": 3}}},
    ]
    recorded = recorded_config(run)
    assert recorded is not None and recorded["steps"] == 3 and recorded["group_size"] == 4
    assert [json.loads(r)["step"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)]).returncode != 0:
        why = "root without mount: no read-only folder to write into"
        pytest.fail(why) if os.environ.get("CI") == "true" else pytest.skip(why)  # CI can mount: it must
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_file_system_failures_at_out_are_one_line_with_exit_2(tmp_path: Path, read_only: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    cases = {
        read_only / "out": "Read-only file system" if os.geteuid() == 0 else "Permission denied",
        Path("/proc/ro-out"): "No such file or directory",
        a_file: "a file is there, not a folder",
        a_file / "out": "Not a directory",
    }
    for out, cause in cases.items():
        res = _train(out)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert lines[0].startswith(f"creditgym train: cannot write the run folder {out}: {cause}"), lines


def test_a_checkpoint_write_that_fails_keeps_the_previous_one_and_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save, calls = checkpoint_module.torch.save, []

    def full_disk(obj: object, path: Path) -> None:
        calls.append(path)
        if len(calls) == 1:
            return save(obj, path)
        Path(path).write_bytes(b"\0" * 64)  # part of the file made it before the disk filled up
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(checkpoint_module.torch, "save", full_disk)
    cfg = TrainConfig(
        steps=2, prompts_per_step=2, group_size=2, eval_every=2, eval_episodes=2, checkpoint_every=1
    )
    with pytest.raises(
        RunFolderError, match=f"cannot write the run folder {tmp_path}: No space left on device"
    ):
        Trainer(cfg, tmp_path).run()
    root = tmp_path / "checkpoints"
    assert latest_checkpoint(root) == root / "step-000001"
    verify_checkpoint(root / "step-000001")
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step-000001"]


def test_group_relative_modules_declare_it_and_refuse_a_group_of_one(tmp_path: Path) -> None:
    assert {n for n in available() if get(n).group_relative} == {
        "grpo",
        "rloo",
        "cort",
        "cast",
        "forking",
        "ktae",
        "prime",
    }
    for name in ("grpo", "rloo"):
        with pytest.raises(SystemExit) as e:
            main(["train", "--out", str(tmp_path / name), "--credit", name, "--group-size", "1"])
        assert str(e.value).startswith(f"creditgym train: credit module {name!r} centres each advantage")
        assert "--group-size 2" in str(e.value) and not (tmp_path / name).exists()


def test_a_step_whose_rewards_are_all_equal_is_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert equal_rewards_note({"rollout/reward_spread": 1.0}) is None
    assert equal_rewards_note({"rollout/reward_spread": float("nan")}) is None
    # greedy decoding of one prompt: the group's responses are one response, so every reward is the same
    cfg = TrainConfig(
        steps=2, prompts_per_step=1, group_size=2, temperature=0.0, eval_every=2, eval_episodes=2
    )
    Trainer(cfg, tmp_path).run()
    out = capsys.readouterr().out
    assert out.count("every response got the same reward") == 1
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/reward_spread"] for r in rows[1:]] == [0.0, 0.0]


def test_image_locks_live_where_no_import_finds_them() -> None:
    folder = image_lock_dir()
    assert not folder.name.isidentifier() and folder.parent == Path(__import__("tempfile").gettempdir())
    package = Path(__file__).resolve().parents[2]
    for source in package.rglob("*.py"):  # the project's own files: no hidden folder (.venv, .venv-verl, .git)
        if not any(part.startswith(".") for part in source.relative_to(package).parts):
            assert not re.search(r'gettempdir\(\)\)\s*/\s*"creditgym"', source.read_text()), source


def test_ctrl_c_during_the_step_0_evaluation_is_one_line_and_exit_130(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "creditgym.cli", "train", "--out", str(out), "--eval-episodes", "400"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:  # printed once the evaluation's signal handlers are in place
        if line.startswith("[creditgym] step 0: held-out evaluation, 400 episodes"):
            break
    else:
        pytest.fail(f"no line announced the step-0 evaluation: {proc.communicate(timeout=60)[1]}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1, err
    assert lines[0].startswith("creditgym train: stopped by SIGINT during the step-0 held-out evaluation")
