"""Train what you register: the README's example env (examples/register_env.py) through the CLI and Python, an env
found through a ``creditgym.envs`` entry point, an actor loss from a module outside the package, and the errors a
wrong id, kwarg or loss gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from creditgym.agents.train.config import MODEL_DEFAULTS, TrainConfig
from creditgym.agents.train.trainer import Trainer
from creditgym.envs import UnknownEnvError, make, resolve_env_id

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SMALL = "--steps 2 --prompts-per-step 2 --group-size 2 --eval-every 2 --eval-episodes 4 --checkpoint-every 2"


def _cli(args: str, *, pythonpath: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pythonpath), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "creditgym.cli", *args.split()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def _check_run(out: Path) -> None:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0.0, 1.0, 2.0]
    assert all(r["actor/pg_loss"] is not None for r in rows[1:])  # finite: NaN is logged as null
    held_out = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
    assert len(held_out) == 2 and all(0.0 <= x <= 1.0 for x in held_out)


def test_the_example_env_trains_through_the_cli_with_module_colon_id(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _cli(
        f"train --env register_env:myorg/Reverse-v0 --out {out} {SMALL}", pythonpath=EXAMPLES, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    _check_run(out)
    assert res.stdout.count("has no held-out split") == 1  # said once, with what is done instead


def test_the_example_env_trains_through_the_python_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import register_env  # noqa: F401  (registers myorg/Reverse-v0)

    cfg = TrainConfig(
        env_id="myorg/Reverse-v0", steps=2, prompts_per_step=2, group_size=2, eval_every=2, eval_episodes=4
    )
    trainer = Trainer(cfg, tmp_path)
    assert trainer.eval_seed >= 2**31  # no split: held-out resets use seeds no training reset draws
    budget = MODEL_DEFAULTS[cfg.model]["max_new_tokens"]  # it takes a budget, so it gets the model's
    assert trainer.env.unwrapped.max_new_tokens == trainer.cfg.max_new_tokens == budget
    trainer.run()
    _check_run(tmp_path)


def test_an_env_from_an_entry_point_trains(tmp_path: Path) -> None:
    """A package found through the ``creditgym.envs`` entry-point group (a dist-info on the path, as an install
    leaves it) registers its env when an id is resolved: no import in the user's code."""
    site = tmp_path / "site"
    (site / "echo_envs").mkdir(parents=True)
    (site / "echo_envs" / "__init__.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            from creditgym.envs import TokenEnv, TurnOutcome, load_tokenizer, render_chat

            TOK = load_tokenizer()

            class EchoEnv(TokenEnv):
                def __init__(self, max_new_tokens: int = 8) -> None:
                    super().__init__(TOK, max_new_tokens=max_new_tokens)

                def _begin_episode(self, options):
                    self.word = str(self.np_random.choice(["7", "42"]))
                    return render_chat(TOK, [{"role": "user", "content": f"Say {self.word}"}]), {}

                def _end_turn(self, budget_exhausted):
                    ok = self.response_text().strip() == self.word
                    return TurnOutcome(float(ok), not budget_exhausted, budget_exhausted)

            def register():
                gym.register("echoorg/Echo-v0", entry_point=EchoEnv)
            """
        )
    )
    dist = site / "echo_envs-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-envs\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[creditgym.envs]\necho = echo_envs:register\n")
    out = tmp_path / "run"
    res = _cli(f"train --env echoorg/Echo-v0 --out {out} {SMALL}", pythonpath=site, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    _check_run(out)


def test_bad_env_ids_and_kwargs_say_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        UnknownEnvError, match=r"importing module 'no_such_module' failed.*ModuleNotFoundError"
    ):
        resolve_env_id("no_such_module:myorg/Reverse-v0")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with pytest.raises(UnknownEnvError, match=r"registers no env 'myorg/Other-v0'"):
        resolve_env_id("register_env:myorg/Other-v0")
    with pytest.raises(
        UnknownEnvError, match=r"unknown env id 'nobody/Nothing-v0'; registered ids: \[.*creditgym/Math-v0"
    ):
        resolve_env_id("nobody/Nothing-v0")
    resolve_env_id("register_env:myorg/Reverse-v0")
    with pytest.raises(
        TypeError, match=r"env 'myorg/Reverse-v0' takes no keyword argument 'split'.*--env-kw"
    ):
        make("myorg/Reverse-v0", split="test")
    with pytest.raises(ValueError, match=r"takes no max_new_tokens"):
        from creditgym.agents.eval.evaluate import make_envs

        gym_id = "testing/NoBudget-v0"
        import gymnasium as gym

        from creditgym.envs import load_tokenizer
        from creditgym.envs.math import MathEnv

        gym.register(gym_id, entry_point=lambda: MathEnv(max_new_tokens=8))
        make_envs(TrainConfig(env_id=gym_id, max_new_tokens=12), load_tokenizer())
    res = _cli(
        f"train --env creditgym/Math-v0 --env-kw bogus=1 --out {tmp_path / 'r'} {SMALL}",
        pythonpath=EXAMPLES,
        cwd=tmp_path,
    )
    assert res.returncode != 0 and "takes no keyword argument 'bogus'" in res.stderr
    assert "Traceback" not in res.stderr
    res = _cli(
        f"train --credit cort --credit-kw bogus=1 --out {tmp_path / 'r'} {SMALL}",
        pythonpath=EXAMPLES,
        cwd=tmp_path,
    )
    assert res.returncode != 0 and "no config field 'bogus'" in res.stderr and "delta_clip" in res.stderr
    assert "Traceback" not in res.stderr


OUTSIDE_LOSS = '''
from creditgym.agents.train.loss import aggregate, policy_loss, register_loss


@register_loss("ppo_plus_nll", proportional_to_advantage=False)
def ppo_plus_nll(logprobs, old_logprobs, advantages, mask, cfg):
    """PPO's surrogate plus the sampled tokens' negative log-likelihood: a term with no advantage in it."""
    loss, metrics = policy_loss(logprobs, old_logprobs, advantages, mask, agg=cfg.loss_agg)
    nll = aggregate(-logprobs, mask, cfg.loss_agg)
    return loss + 0.5 * nll, {**metrics, "actor/nll": nll.item()}
'''


def test_a_loss_registered_outside_the_package_drives_the_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--loss module:name`` imports a module file that is not part of creditgym, and its loss is the one the
    update minimises: the run logs its metric and ends with other weights than the same run under ``ppo``."""
    from creditgym.agents.train import loss as loss_module

    (tmp_path / "outside_losses.py").write_text(OUTSIDE_LOSS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        loss_module, "_LOSSES", dict(loss_module._LOSSES)
    )  # the registration ends with the test
    monkeypatch.delitem(sys.modules, "outside_losses", raising=False)
    small = {"steps": 1, "prompts_per_step": 2, "group_size": 2, "eval_every": 1, "eval_episodes": 4}
    weights = {}
    for loss in ("ppo", "outside_losses:ppo_plus_nll"):
        out = tmp_path / loss.replace(":", "-")
        trainer = Trainer(TrainConfig(loss=loss, **small), out)
        trainer.run()
        weights[loss] = [p.detach().clone() for p in trainer.policy.model.parameters()]
        assert json.loads((out / "config.json").read_text())["loss"] == loss  # recorded as named: reloadable
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert ("actor/nll" in rows[-1]) == (loss != "ppo")
    assert "ppo_plus_nll" in loss_module.available_losses()
    ppo, outside = weights["ppo"], weights["outside_losses:ppo_plus_nll"]
    moved = [not torch.equal(a, b) for a, b in zip(ppo, outside, strict=True)]
    assert any(moved)  # the NLL term has a gradient on every row, whatever the advantages


def test_the_command_line_takes_a_loss_as_module_colon_name(tmp_path: Path) -> None:
    (tmp_path / "outside_losses.py").write_text(OUTSIDE_LOSS)
    out = tmp_path / "run"
    res = _cli(
        f"train --loss outside_losses:ppo_plus_nll --out {out} {SMALL}", pythonpath=tmp_path, cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr[-3000:]
    _check_run(out)
    assert json.loads((out / "config.json").read_text())["loss"] == "outside_losses:ppo_plus_nll"
    assert "actor/nll" in json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    res = _cli(f"train --loss sgd --out {tmp_path / 'r'} {SMALL}", pythonpath=EXAMPLES, cwd=tmp_path)
    assert res.returncode != 0 and "unknown actor loss 'sgd'; known losses: ['dis', 'ppo']" in res.stderr
    assert "Traceback" not in res.stderr
