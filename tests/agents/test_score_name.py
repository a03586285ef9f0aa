"""The held-out score is reported under the env's own name: accuracy for 0/1 rewards, mean score for partial credit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creditgym.agents.eval.evaluate import evaluate, make_agent
from creditgym.cli import main
from creditgym.envs import make


@pytest.mark.parametrize(
    ("env_id", "kwargs", "name"),
    [
        ("creditgym/Math-v0", {}, "accuracy"),
        ("creditgym/Planted-v0", {}, "accuracy"),
        ("creditgym/Rubric-v0", {}, "mean score"),
        ("creditgym/Rubric-v0", {"reward_mode": "partial"}, "mean score"),
        ("creditgym/Rubric-v0", {"reward_mode": "all_or_nothing"}, "accuracy"),
    ],
)
def test_each_env_names_its_score(env_id: str, kwargs: dict[str, str], name: str) -> None:
    env = make(env_id, **kwargs)
    assert env.unwrapped.score_name == name
    env.close()


def test_eval_reports_a_partial_credit_score_as_mean_score(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--env", "creditgym/Rubric-v0", "--agent", "oracle", "--episodes", "4"]) == 0
    assert "mean score 1.000 over 4 episodes" in capsys.readouterr().out
    report = evaluate(
        "creditgym/Rubric-v0", make_agent("oracle"), 2, env_kwargs={"reward_mode": "all_or_nothing"}
    )
    assert report.score_name == "accuracy" and "| episodes | accuracy |" in report.markdown()
    report = evaluate("creditgym/Rubric-v0", make_agent("oracle"), 2)
    assert report.score_name == "mean score" and "| episodes | mean score |" in report.markdown()


def test_training_on_rubric_reports_the_held_out_mean_score(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = "--steps 1 --prompts-per-step 2 --group-size 2 --eval-episodes 2 --max-new-tokens 8"
    argv = ["train", "--env", "creditgym/Rubric-v0", "--out", str(tmp_path / "run"), *flags.split()]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("held-out mean score: before ") for line in lines), lines
    assert not any("accuracy: before" in line for line in lines), lines
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["score_name"] == "mean score"
