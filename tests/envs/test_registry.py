"""Registration, Gymnasium's and SB3's env checkers, the register example, and the packaging layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import creditgym  # noqa: F401
from creditgym.envs import FixedWindow, registered_ids

ROOT = Path(__file__).resolve().parents[2]


def test_math_is_registered() -> None:
    assert "creditgym/Math-v0" in registered_ids()


@pytest.mark.parametrize("env_id", registered_ids())
def test_gymnasium_check_env_on_every_registered_id(env_id: str) -> None:
    env = gym.make(env_id, max_new_tokens=16)
    check_env(env.unwrapped, skip_render_check=False)
    env.close()


def test_sb3_check_env_through_the_fixed_window_wrapper() -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = FixedWindow(gym.make("creditgym/Math-v0", max_new_tokens=16), window=32)
    sb3_check_env(env, warn=True, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (32,) and env.observation_space.contains(obs)


def test_fixed_window_pads_on_the_left() -> None:
    env = FixedWindow(gym.make("creditgym/Math-v0"), window=200)
    obs, _ = env.reset(seed=0)
    prompt = env.unwrapped.ledger.token_id
    assert (obs[: 200 - len(prompt)] == env.pad_token_id).all()
    assert (obs[200 - len(prompt) :] == prompt).all()


def test_register_example_runs_and_its_env_is_registered() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "register_env.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "reward=1.0 terminated=True verdict=correct" in out.stdout
    assert len((ROOT / "examples" / "register_env.py").read_text().splitlines()) < 40


@pytest.mark.parametrize("name", ["envs", "agents", "credit", "verifiers"])
def test_no_top_level_module_of_ours_is_importable(name: str, tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        "import creditgym\n"
        f"spec = importlib.util.find_spec({name!r})\n"
        "origin = getattr(spec, 'origin', None) or str(getattr(spec, 'submodule_search_locations', ''))\n"
        f"print('FOUND', origin) if spec and {str(ROOT)!r} in origin else print('ABSENT')\n"
        f"assert importlib.util.find_spec('creditgym.{name}') is not None\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ABSENT"


def test_cli_envs_lists_one_line_per_id() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "creditgym.cli", "envs"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(registered_ids()) and lines[0].startswith("creditgym/Math-v0")


def test_cli_doctor_reports_the_essentials() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "creditgym.cli", "doctor"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    for key in ("python", "torch", "gpu", "docker"):
        assert any(line.startswith(key) for line in out.stdout.splitlines()), out.stdout
