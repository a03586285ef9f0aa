"""Named models and the model loader's bad input: each case fails with an error that says what was wrong and
what to do. The named model ``smollm2-135m`` is installed by ``make test`` (``make model-smollm2``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from creditgym.agents.train.policy import bundled_model_path, load_policy
from creditgym.envs import load_tokenizer, with_tokenizer
from creditgym.models import (
    NAMED_MODELS,
    GGUFError,
    ModelNotInstalled,
    NamedModel,
    convert_gguf,
    model_folder,
    models_table,
    wheel_gguf,
)

SMOL = NAMED_MODELS["smollm2-135m"]


def test_the_named_model_is_installed_and_converts_once_into_the_cache() -> None:
    assert wheel_gguf(SMOL) is not None, f"install it with `{SMOL.install}`"  # fails, never skips
    folder = model_folder("smollm2-135m")
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert model_folder("smollm2-135m") == folder  # reused, not converted again
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    row = next(r for r in models_table() if r["name"] == "smollm2-135m")
    assert row["installed"] and row["cached"] and row["folder"] == str(folder)


def test_creditgym_models_lists_each_named_model_and_its_state() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "creditgym.cli", "models"], capture_output=True, text=True, check=True
    ).stdout
    assert "smollm2-135m" in out and "cached" in out and "Q4_1" in out


def test_an_unknown_name_lists_the_named_models() -> None:
    with pytest.raises(KeyError, match=r"unknown named model 'smollm9'.*smollm2-135m"):
        model_folder("smollm9")


def test_a_named_model_not_installed_gives_the_command_that_installs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREDITGYM_CACHE", str(tmp_path))
    missing = NamedModel(
        "tiny-x", "creditgym_no_such_wheel", "x.gguf", "make model-tiny-x", "org/x", "a note"
    )
    with pytest.raises(
        ModelNotInstalled, match=r"'tiny-x' is not installed.*install it with `make model-tiny-x`"
    ):
        model_folder(missing)


def test_a_gguf_of_an_architecture_transformers_cannot_dequantize_is_named(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv6")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFError, match=r"holds a 'rwkv6' model, which this transformers cannot dequantize"):
        convert_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_hub_id_without_network_says_how_to_get_the_model_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache: the id is nowhere on this machine
    with pytest.raises(FileNotFoundError, match=r"hf download HuggingFaceTB/SmolLM2-360M-Instruct.*HF_HOME"):
        load_policy("HuggingFaceTB/SmolLM2-360M-Instruct", device="cpu")


def test_a_tokenizer_larger_than_the_embedding_names_both_sizes(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    shutil.copytree(bundled_model_path(), folder)  # the tiny model (2048 rows) ...
    for name in ("tokenizer.json", "tokenizer_config.json"):  # ... with SmolLM2's tokenizer (49152 tokens)
        shutil.copy(model_folder("smollm2-135m") / name, folder / name)
    with pytest.raises(ValueError, match=r"tokenizer has 49152 tokens but its embedding has 2048 rows"):
        load_policy(folder, device="cpu")


def test_a_model_without_a_chat_template_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "no-template"
    shutil.copytree(bundled_model_path(), folder)
    policy = load_policy(folder, device="cpu")
    policy.tokenizer.chat_template = None
    with pytest.raises(ValueError, match=r"no-template'.*no chat template.*CHATML_TEMPLATE"):
        with_tokenizer("creditgym/Math-v0", {}, policy.tokenizer, model=os.fspath(folder))


def test_an_explicit_tokenizer_that_differs_from_the_models_names_both() -> None:
    smol = load_tokenizer("smollm2-135m")
    with pytest.raises(
        ValueError, match=r"tokenizer='creditgym/tiny' \(2048 tokens\).*'smollm2-135m' \(49152"
    ):
        with_tokenizer("creditgym/Math-v0", {"tokenizer": "creditgym/tiny"}, smol, model="smollm2-135m")
    same = with_tokenizer("creditgym/Math-v0", {"tokenizer": "smollm2-135m"}, smol, model="smollm2-135m")
    assert same["tokenizer"] is smol


@pytest.mark.slow
def test_two_processes_converting_at_once_share_one_complete_folder(tmp_path: Path) -> None:
    """The second process waits on the lock and reuses the first one's folder; no temporary folder is left."""
    code = "from creditgym.models import model_folder; print(model_folder('smollm2-135m'))"
    env = {**os.environ, "CREDITGYM_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    folder = tmp_path / "models" / "smollm2-135m"
    assert outs == [str(folder)] * 2
    assert sorted(p.name for p in folder.parent.iterdir()) == [".smollm2-135m.lock", "smollm2-135m"]
    policy = load_policy(folder, device="cpu")
    assert len(policy.tokenizer) == 49152


@pytest.mark.parametrize(
    "command",
    [
        "eval --env creditgym/Math-v0 --agent hf:smollm2-135m --episodes 1 --env-kw tokenizer=creditgym/tiny",
        "train --env creditgym/Math-v0 --model smollm2-135m --steps 1 --env-kw tokenizer=creditgym/tiny --out {out}",
    ],
)
def test_the_cli_refuses_an_env_tokenizer_unlike_the_models(command: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "creditgym.cli", *command.format(out=tmp_path / "run").split()]
    res = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "tokenizer='creditgym/tiny' (2048 tokens), which differs from the tokenizer of model" in res.stderr
