"""``creditgym/SWEBench-v0``: multi-turn token-level episodes in real Docker sandboxes, graded by swebench."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import creditgym  # noqa: F401  (registers the ids)
from creditgym.envs.core import Source
from creditgym.envs.swe import SWEEnv
from creditgym.envs.swe_tools import apply_patch_command, bash_action

pytestmark = pytest.mark.docker


def _turn(env: SWEEnv, text: str) -> tuple:
    ids = env.tokenizer(text, add_special_tokens=False)["input_ids"]
    return env.step(np.asarray([*ids, env.end_of_turn_id], dtype=np.int64))


@pytest.fixture(scope="module")
def tasks(docker_client, base_image):
    from creditgym.envs.swe_tasks import load_tasks
    from creditgym.verifiers.swe.images import ensure_image

    tasks = load_tasks("bundled")
    for task in tasks:
        ensure_image(task)  # built once, cached by content hash
    return tasks


@pytest.fixture()
def env(tasks):
    env = SWEEnv(tasks=tasks, max_new_tokens=768, command_timeout=20)
    yield env
    env.close()


def test_a_hand_played_episode_runs_tools_and_grades_on_submit(env: SWEEnv) -> None:
    task = env.tasks[0]
    _, info = env.reset(seed=0, options={"task_id": task.instance_id})
    assert info["task_id"] == task.instance_id
    n_prompt = env.ledger.n
    _, reward, term, trunc, info = _turn(env, "Let me look around.\nACTION: bash\ngit status --short && ls")
    assert (reward, term, trunc) == (0.0, False, False) and info["action"] == "bash"
    src, turn = env.ledger.source, env.ledger.turn
    env_rows = np.flatnonzero(src == Source.ENV)
    assert env_rows.size > 0 and env_rows[0] > n_prompt and np.all(turn[env_rows] == 1)
    observation = env.tokenizer.decode(env.ledger.token_id[env_rows].tolist())
    assert "[exit code 0]" in observation and observation.rstrip().endswith("assistant")

    _, _, term, _, info = _turn(env, "ACTION: view ../../etc/passwd")
    assert not term and "outside the repository" in info["observation"]
    _, _, term, _, info = _turn(env, "I think I know.")
    assert not term and info["observation"].startswith("Format error: no action found")

    _, reward, term, trunc, info = _turn(env, bash_action(apply_patch_command(task.gold_patch)))
    assert not term and "[exit code 0]" in info["observation"]
    _, reward, term, trunc, info = _turn(env, "ACTION: submit")
    assert (reward, term, trunc) == (1.0, True, False)
    assert info["resolved"] and info["status"] == "correct" and info["end_reason"] == "submit"
    assert set(task.fail_to_pass) <= set(info["tests"]) and info["patch"].startswith("diff --git")
    assert env.ledger.reward.sum() == 1.0 and env.ledger.reward[env.ledger.n - 1] == 1.0
    assert env._sandbox is None  # removed at the episode's end


def test_replace_edits_a_file_and_the_turn_budget_grades_what_is_there(tasks) -> None:
    env = SWEEnv(tasks=tasks, max_turns=2)
    try:
        task = tasks[0]
        env.reset(seed=0, options={"task_id": task.instance_id})
        target = next(line[6:] for line in task.gold_patch.splitlines() if line.startswith("+++ b/"))
        _, _, _, _, info = _turn(env, f"ACTION: view {target} 1-5")
        assert f"{target} (lines 1-" in info["observation"]
        first = info["observation"].splitlines()[1][7:]  # the file's first line, without its number
        _, reward, term, trunc, info = _turn(
            env,
            f"ACTION: replace {target}\n<<<<<<< SEARCH\n{first}\n=======\n{first}  # edited\n>>>>>>> REPLACE",
        )
        assert (term, trunc, info["end_reason"]) == (False, True, "max_turns")
        assert "# edited" in info["patch"] and reward == 0.0 and info["status"] == "wrong"
    finally:
        env.close()


def test_dead_engine_is_an_infra_error_not_a_zero(tasks, monkeypatch) -> None:
    env = SWEEnv(tasks=tasks)
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/creditgym-no-such-engine.sock")
    try:
        env.reset(seed=0)
        _, reward, term, trunc, info = _turn(env, "ACTION: bash\nls")
        assert (reward, term, trunc) == (0.0, False, True)
        assert info["infra_error"] and "engine" in info["infra_error"]
    finally:
        env.close()


def test_forking_is_for_fresh_episodes_only(env: SWEEnv) -> None:
    env.reset(seed=1)
    twins = [env.fork() for _ in range(2)]
    assert all(t.ledger == env.ledger and t.task is env.task for t in twins)
    _turn(env, "ACTION: bash\ntrue")
    with pytest.raises(RuntimeError, match="before its first action"):
        env.fork()


def test_tiny_model_plays_a_token_level_episode(tasks) -> None:
    from creditgym.agents.train.policy import load_policy
    from creditgym.agents.train.rollout import PolicyAgent, play
    from creditgym.agents.train.sampling import Sampling

    env = gym.make(
        "creditgym/SWEBench-v0", tasks=tasks[:1], max_new_tokens=24, max_turns=2, max_episode_tokens=2048
    ).unwrapped
    try:
        env.reset(seed=0)
        ep = play(
            PolicyAgent(load_policy("creditgym/tiny"), Sampling(temperature=1.0, top_p=1.0)), [env], [0]
        )[0]
        led = env.ledger
        policy, env_rows = led.source == Source.POLICY, led.source == Source.ENV
        assert ep.truncated and ep.infra_error is None and ep.info["end_reason"] == "max_turns"
        assert env_rows.any() and set(np.unique(led.turn[policy])) == {1, 2}
        assert np.all(led.turn[env_rows] == 1)  # the observation belongs to the turn it answers
        assert np.isfinite(led.logprob[policy]).all() and np.isnan(led.logprob[~policy]).all()
        assert led.n <= 2048 and ep.reward in (0.0, 1.0)
    finally:
        env.close()


def test_check_env_after_a_real_sandbox_episode(tasks) -> None:
    from gymnasium.utils.env_checker import check_env

    env = SWEEnv(tasks=tasks[:1], max_new_tokens=16)
    try:
        env.reset(seed=0)
        _turn(env, "ACTION: bash\necho ready")
        check_env(env, skip_render_check=True)
    finally:
        env.close()


def test_the_trainer_runs_on_the_swe_env(tasks, tmp_path) -> None:
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.trainer import Trainer

    cfg = TrainConfig(
        env_id="creditgym/SWEBench-v0",
        env_kwargs={"max_new_tokens": 16, "max_turns": 2, "max_episode_tokens": 2048},
        steps=1,
        prompts_per_step=1,
        group_size=2,
        eval_episodes=1,
    )
    summary = Trainer(cfg, tmp_path).run()
    assert summary["steps"] == 1 and summary["eval_after"] == 0.0  # the tiny model does not fix bugs
    assert (tmp_path / "final").is_dir()


def test_an_agent_action_never_crashes_the_episode(tasks) -> None:
    env = SWEEnv(tasks=tasks, max_new_tokens=256, command_timeout=20)
    try:
        env.reset(seed=0, options={"task_id": tasks[0].instance_id})
        _, _, _, _, info = _turn(env, "ACTION: bash\necho a\x00b")
        assert info["observation"].startswith("Error:") and "NUL" in info["observation"]
        _, reward, term, trunc, info = _turn(env, "ACTION: bash\nrm -rf .git && echo gone")
        assert "gone" in info["observation"] and not (term or trunc)
        _, reward, term, trunc, info = _turn(env, "ACTION: submit")  # no repository left to diff
        assert (reward, term, trunc, info["status"]) == (0.0, True, False, "wrong")
        assert (
            info["verdict"].details["error_kind"] == "diff"
            and "git diff failed" in info["verdict"].details["error"]
        )
        assert info.get("infra_error") is None and env._sandbox is None
    finally:
        env.close()


def test_file_tools_answer_big_files_and_links_out_of_the_repo(tasks, monkeypatch) -> None:
    env = SWEEnv(tasks=tasks, max_new_tokens=256, command_timeout=20, observation_tokens=160)
    seen: list[int] = []
    tokenize = type(env.tokenizer).__call__

    def recording(self, text, *args, **kwargs):
        seen.append(len(text) if isinstance(text, str) else 0)
        return tokenize(self, text, *args, **kwargs)

    try:
        env.reset(seed=0, options={"task_id": tasks[0].instance_id})
        setup = "head -c 3000000 /dev/zero | tr '\\0' x > big.txt; head -c 900000 /dev/zero | tr '\\0' y > long.txt"
        _turn(env, f"ACTION: bash\n{setup}; ln -s /etc/passwd pw; echo made")
        _, _, _, _, info = _turn(env, "ACTION: view big.txt")
        assert "Error: cannot read big.txt" in info["observation"] and "3000000 bytes" in info["observation"]
        _, _, _, _, info = _turn(env, "ACTION: view pw")
        assert "outside the repository" in info["observation"]
        _, _, _, _, info = _turn(
            env, "ACTION: replace pw\n<<<<<<< SEARCH\nroot\n=======\nhacked\n>>>>>>> REPLACE"
        )
        assert "outside the repository" in info["observation"]
        monkeypatch.setattr(type(env.tokenizer), "__call__", recording)
        _, _, _, _, info = _turn(env, "ACTION: view long.txt")  # one line of 900,000 characters
        assert "cut ...]" in info["observation"] and max(seen) <= 160 * 16 + 100
    finally:
        env.close()
