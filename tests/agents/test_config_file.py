"""``creditgym train --config FILE``: TOML or JSON settings, a run's config.json accepted back, flags on top."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from creditgym.agents.train.config import TrainConfig, config_help
from creditgym.agents.train.config_file import load_config_file
from creditgym.agents.train.flags import MAPPING_FLAGS

SMALL = ["--steps", "1", "--eval-every", "1", "--eval-episodes", "2", "--max-new-tokens", "8"]


def _train(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "creditgym.cli", "train", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_a_toml_file_sets_the_run_flags_override_it_and_its_config_json_runs_again(tmp_path: Path) -> None:
    toml = tmp_path / "run.toml"
    toml.write_text(
        'env_id = "creditgym/Math-v0"\ncredit = "rloo"\nlr = 1e-4\nprompts_per_step = 2\ngroup_size = 4\n'
        "[env_kwargs]\ndifficulty = 2\n"
    )
    first = tmp_path / "first"
    res = _train("--config", str(toml), "--out", str(first), "--group-size", "2", *SMALL)
    assert res.returncode == 0, res.stderr
    config = json.loads((first / "config.json").read_text())
    assert (config["credit"], config["lr"], config["prompts_per_step"]) == ("rloo", 1e-4, 2)  # the file's
    assert config["env_kwargs"] == {"difficulty": 2}
    assert config["group_size"] == 2 and config["steps"] == 1  # the flags win over the file
    assert config["seed"] == 0  # neither: the default

    again = tmp_path / "again"
    res = _train("--config", str(first / "config.json"), "--out", str(again))
    assert res.returncode == 0, res.stderr
    assert json.loads((again / "config.json").read_text()) == config  # the same run's settings, whole


@pytest.mark.parametrize(
    ("text", "name", "message"),
    [
        ("lr = 1e-4\nsteps = 3\nfoo = 1\n", "run.toml", r"unknown settings \['foo'\]; TrainConfig's fields"),
        ('lr = "fast"\n', "run.toml", r'lr must be a number, got "fast"'),
        ("steps = 2.5\n", "run.toml", r"steps must be an integer, got 2.5"),
        ("steps = true\n", "run.toml", r"steps must be an integer, got true"),
        ("[env_kwargs\n", "run.toml", r"not valid TOML .*line 1"),
        ('{"lr": 1e-4,}', "config.json", r"not valid JSON"),
        ("[1, 2]", "config.json", r"expected a table of TrainConfig fields, got list"),
        ('env_kwargs = "x"\n', "run.toml", r'env_kwargs must be a table, got "x"'),
    ],
)
def test_a_bad_file_is_named_with_what_is_wrong(tmp_path: Path, text: str, name: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=f"--config {path}: {message}"):
        load_config_file(path)


def test_json_null_is_accepted_where_the_field_takes_none(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"max_new_tokens": null, "device": null, "lr": 3}')
    assert load_config_file(path) == {"max_new_tokens": None, "device": None, "lr": 3}


def test_the_cli_says_a_bad_or_missing_file_in_one_line(tmp_path: Path) -> None:
    res = _train("--config", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "run"))
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"creditgym train: --config {tmp_path / 'nope.toml'}: cannot read it (No such file or directory)"
    ]
    assert not (tmp_path / "run").exists()  # nothing written


def test_each_train_flag_shows_the_help_of_its_field() -> None:
    fields = [f for f in dataclasses.fields(TrainConfig)]
    assert all(f.metadata.get("help") for f in fields)  # every field carries its help
    assert config_help(TrainConfig) == {f.name: f.metadata["help"] for f in fields}
    shown = "".join(_train("--help").stdout.split())  # argparse wraps lines, at spaces and hyphens
    for f in fields:
        if f.name not in MAPPING_FLAGS:  # --env, --env-kw ...: flags of their own shape, help of their own
            assert "".join(f.metadata["help"].replace("``", "").split()) in shown, f.name
    # the docstring's Attributes section (help(), the API page) holds the same help, read back by the parser
    # that reads a config whose fields carry none
    doc_only = dataclasses.make_dataclass("DocOnly", [(f.name, object) for f in fields])
    doc_only.__doc__ = TrainConfig.__doc__
    assert config_help(doc_only) == config_help(TrainConfig)
