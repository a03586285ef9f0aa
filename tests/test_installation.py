"""The installation explains itself: a stray ``creditgym`` folder that shadows the package, or a missing optional
dependency, is one line saying what to do, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from creditgym.installation import FOLDER, check_package, extras, missing_extra

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.mark.parametrize("regular", [False, True], ids=["namespace", "with-init"])
def test_a_stray_creditgym_folder_first_on_sys_path_is_named_in_one_line(
    tmp_path: Path, regular: bool
) -> None:
    stray = tmp_path / "creditgym"
    stray.mkdir()
    (stray / "my_env.py").write_text("X = 1\n")  # an env file kept in a folder named after the package
    if regular:
        (stray / "__init__.py").write_text("")
    res = _run(["-m", "creditgym.cli", "envs"], cwd=tmp_path)  # -m: the current folder first on sys.path
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"creditgym: `import creditgym` found the folder {stray.resolve()}, ")
    assert f"not the creditgym package at {FOLDER}" in lines[0] and "rename that folder" in lines[0]
    # a script importing the package meets the same sentence, not an error about the bundled model
    res = _run(["-c", "import creditgym.envs"], cwd=tmp_path)  # -c: the current folder first too
    assert res.returncode == 1, res.stderr
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"creditgym.installation.ShadowedPackage: `import creditgym` found the folder {stray.resolve()}, "
        )
    )


def test_the_package_itself_passes_the_check() -> None:
    check_package()
    assert (FOLDER / "__init__.py").is_file() and (FOLDER / "assets" / "tiny").is_dir()


def test_a_missing_extra_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    # swebench made unimportable the way an absent package is: its import raises ModuleNotFoundError
    (tmp_path / "swebench").mkdir()
    (tmp_path / "swebench" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'swebench'\", name='swebench')\n"
    )
    res = _run(
        ["-m", "creditgym.cli", "eval", "--env", "creditgym/SWEBench-v0"], cwd=ROOT, pythonpath=tmp_path
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert lines[0] == (
        "creditgym eval: swebench is not installed: it comes with the swe extra, `pip install 'creditgym[swe]'`"
    )


def test_extras_are_read_from_the_package_metadata() -> None:
    assert {k: extras()[k] for k in ("swebench", "docker", "vllm", "stable_baselines3", "trl", "ray")} == {
        "swebench": "swe",
        "docker": "swe",
        "vllm": "gpu",
        "stable_baselines3": "sb3",
        "trl": "trl",  # also in dev, which is never the advice
        "ray": "ray",
    }
    sb3 = missing_extra(
        ModuleNotFoundError("No module named 'stable_baselines3'", name="stable_baselines3.common")
    )
    assert (
        sb3
        == "stable_baselines3 is not installed: it comes with the sb3 extra, `pip install 'creditgym[sb3]'`"
    )
    assert missing_extra(ModuleNotFoundError("No module named 'numpyy'", name="numpyy")) is None
    assert missing_extra(ModuleNotFoundError("No module named 'pytest'", name="pytest")) is None  # dev only
