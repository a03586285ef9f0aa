"""The training loop: masks, resume after kill -9, corrupted checkpoints, NaN, OOM back-off, bad names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from creditgym.agents.train.checkpoint import CorruptCheckpointError, latest_checkpoint, load_checkpoint
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.loss import policy_loss
from creditgym.agents.train.progress import budget_note
from creditgym.agents.train.rollout import RolloutStats, sample_with_oom_backoff, to_batch
from creditgym.agents.train.trainer import Trainer, TrainingDiverged
from creditgym.credit import available, get

SMALL = dict(
    steps=4,
    prompts_per_step=2,
    group_size=4,
    eval_every=2,
    eval_episodes=8,
    checkpoint_every=2,
    env_kwargs={"max_new_tokens": 24},
)


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if not k.startswith("time/") and "tokens_per_s" not in k} for r in rows
    ]


def test_prompt_and_env_tokens_never_receive_gradient(tmp_path: Path) -> None:
    trainer = Trainer(TrainConfig(**SMALL), tmp_path)
    from creditgym.agents.train.rollout import PolicyAgent, play
    from creditgym.agents.train.sampling import Sampling

    base = trainer.env.unwrapped
    base.reset(seed=0)
    envs = [base.fork() for _ in range(3)]
    batch = to_batch(
        play(PolicyAgent(trainer.policy, Sampling.of(trainer.cfg)), envs, [0, 0, 0]),
        trainer.policy.pad_token_id,
    )
    adv = torch.randn(batch.policy_mask.shape) * batch.policy_mask

    def grads(old: torch.Tensor, advantages: torch.Tensor) -> list[torch.Tensor]:
        trainer.policy.model.zero_grad(set_to_none=True)
        fwd = trainer.policy.forward_logprobs(batch.input_ids, batch.attention_mask)
        loss, _ = policy_loss(fwd.logprobs, old, advantages, batch.policy_mask)
        loss.backward()
        return [p.grad.clone() for p in trainer.policy.model.parameters() if p.grad is not None]

    reference = grads(batch.old_logprobs, adv)
    off = ~batch.policy_mask
    noisy_old = batch.old_logprobs + off * torch.randn(off.shape) * 5
    noisy_adv = adv + off * torch.randn(off.shape) * 5
    for a, b in zip(reference, grads(noisy_old, noisy_adv), strict=True):
        assert torch.equal(a, b)
    fwd = trainer.policy.forward_logprobs(batch.input_ids, batch.attention_mask)
    fwd.logprobs.retain_grad()
    loss, _ = policy_loss(fwd.logprobs, batch.old_logprobs, adv, batch.policy_mask)
    loss.backward()
    assert torch.all(fwd.logprobs.grad[off] == 0) and torch.any(fwd.logprobs.grad[batch.policy_mask] != 0)


def _train_args(out: Path, *extra: str) -> list[str]:
    """``train`` and the small run's flags; a flag repeated in ``extra`` overrides (argparse keeps the last)."""
    small = "--steps 4 --seed 3 --prompts-per-step 2 --group-size 4 --eval-every 2 --eval-episodes 8"
    return [
        "train",
        "--out",
        str(out),
        *small.split(),
        "--checkpoint-every",
        "2",
        "--max-new-tokens",
        "24",
        *extra,
    ]


def _train_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "creditgym.cli", *_train_args(out, *extra)]


@pytest.mark.parametrize("credit", ["grpo", "cast", "compo"])  # cast's teacher and compo's critic resume too
def test_resume_after_kill_9_reproduces_the_uninterrupted_run(tmp_path: Path, credit: str) -> None:
    full, killed = tmp_path / "full", tmp_path / "killed"
    flag = ("--credit", credit)
    assert subprocess.run(_train_cmd(full, *flag), capture_output=True, timeout=600).returncode == 0
    proc = subprocess.Popen(_train_cmd(killed, *flag), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline:  # wait until step 3 is logged: past the step-2 checkpoint, before step 4
        metrics = killed / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 4:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(killed / "checkpoints").name == "step-000002"
    res = subprocess.run(_train_cmd(killed, *flag, "--resume"), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "resumed from" in res.stdout
    assert _metrics(killed) == _metrics(full)  # bit-for-bit: every logged number of every step


def _corrupt(ckpt: Path) -> tuple[Path, bytes]:
    """Flip one byte in the middle of ``ckpt``'s state; returns the file and its corrupted bytes."""
    state = ckpt / "state.pt"
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0xFF
    state.write_bytes(bytes(data))
    return state, bytes(data)


def test_a_corrupt_newest_checkpoint_is_named_and_the_newest_intact_one_resumed(tmp_path: Path) -> None:
    assert subprocess.run(_train_cmd(tmp_path), capture_output=True, timeout=600).returncode == 0
    root = tmp_path / "checkpoints"
    newest = latest_checkpoint(root)
    assert newest is not None and newest.name == "step-000004"
    state, _ = _corrupt(newest)
    with pytest.raises(CorruptCheckpointError, match=str(state)):
        load_checkpoint(newest)
    res = subprocess.run(
        _train_cmd(tmp_path, "--resume", "--steps", "6"), capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr
    skipped = (
        f"[creditgym] skipped a corrupt checkpoint: checkpoint {newest}: {state} does not match its SHA-256 "
        f"in {newest / 'manifest.json'}"
    )
    assert skipped in res.stdout.splitlines()
    assert f"resumed from {root / 'step-000002'} at step 2" in res.stdout
    steps = [int(row["step"]) for row in _metrics(tmp_path)]
    assert steps == [0, 1, 2, 3, 4, 5, 6]  # steps 3-4 retrained from step 2, each logged once
    assert latest_checkpoint(root) == root / "step-000006"

    # every checkpoint corrupt: refused in one line naming the newest's file, nothing overwritten
    corrupted = [_corrupt(ckpt) for ckpt in (root / "step-000004", root / "step-000006")]
    res = subprocess.run(
        _train_cmd(tmp_path, "--resume", "--steps", "8"), capture_output=True, text=True, timeout=600
    )
    state6 = root / "step-000006" / "state.pt"
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"creditgym train: checkpoint {root / 'step-000006'}: {state6} does not match its SHA-256 in "
        f"{root / 'step-000006' / 'manifest.json'}; and no older intact checkpoint under {root}"
    ]
    assert all(path.read_bytes() == data for path, data in corrupted)  # untouched: nothing overwrote them


def test_a_checkpoint_is_data_never_code(tmp_path: Path) -> None:
    """A checkpoint whose state would run code when unpickled is refused (weights_only), as is an empty manifest."""
    import json as _json

    from creditgym.agents.train.checkpoint import MANIFEST, STATE, _sha256, save_checkpoint

    marker = tmp_path / "pwned"
    ckpt = save_checkpoint(tmp_path / "ckpts", 1, {"model": {}, "payload": _Payload(str(marker))})
    with pytest.raises(CorruptCheckpointError, match="not plain data"):
        load_checkpoint(ckpt)
    assert not marker.exists()  # the payload's code never ran
    manifest = ckpt / MANIFEST
    manifest.write_text(_json.dumps({"step": 1, "files": {}}))
    with pytest.raises(CorruptCheckpointError, match=f"lists no {STATE}"):
        load_checkpoint(ckpt)
    manifest.write_text(_json.dumps({"step": 1, "files": {STATE: _sha256(ckpt / STATE)}}))
    with pytest.raises(CorruptCheckpointError, match="not plain data"):
        load_checkpoint(ckpt)  # intact and listed, still refused


class _Payload:
    """Unpickling this would create a file: what a malicious checkpoint could do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.touch, (Path(self.path),))


def test_nan_loss_stops_clearly_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    trainer = Trainer(TrainConfig(**SMALL), tmp_path)
    trainer.step = 1
    good = trainer.save_checkpoint()
    with torch.no_grad():
        next(trainer.policy.model.parameters()).fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="checkpoint"):
        trainer.train_step()
    assert latest_checkpoint(tmp_path / "checkpoints") == good
    load_checkpoint(good)  # still intact


class _SmallMemoryBackend:
    """A real generation backend that runs out of memory above a batch size, like a GPU would."""

    def __init__(self, inner, limit: int) -> None:
        self.inner, self.limit, self.max_batch_size, self.calls = inner, limit, None, []

    def generate(self, prompts, **kwargs):
        size = self.max_batch_size or len(prompts)
        self.calls.append(size)
        if size > self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        out = []
        for i in range(0, len(prompts), size):
            out += self.inner.generate(prompts[i : i + size], **kwargs)
        return out

    def sync_weights(self, model) -> None:
        pass


def test_out_of_memory_on_generation_halves_the_batch(tmp_path: Path, capsys) -> None:
    trainer = Trainer(TrainConfig(**SMALL), tmp_path)
    policy = trainer.policy
    policy.backend = _SmallMemoryBackend(policy.backend, limit=2)
    stats = RolloutStats()
    prompts = [[1, 2, 3]] * 8
    out = sample_with_oom_backoff(policy, prompts, stats, max_new_tokens=4, temperature=1.0)
    assert len(out.tokens) == 8 and stats.halved_batch == [4, 2] and policy.backend.calls[:3] == [8, 4, 2]
    assert "halving the generation batch to 2" in capsys.readouterr().out


def test_bad_names_are_listed(tmp_path: Path) -> None:
    res = subprocess.run(
        _train_cmd(tmp_path, "--credit", "magic"), capture_output=True, text=True, timeout=300
    )
    assert res.returncode != 0 and "magic" in res.stderr and "grpo" in res.stderr and "rloo" in res.stderr
    res = subprocess.run(
        _train_cmd(tmp_path, "--env", "creditgym/Nope-v0"), capture_output=True, text=True, timeout=300
    )
    assert res.returncode != 0 and "creditgym/Math-v0" in res.stderr
    missing = tmp_path / "no-such-model"
    res = subprocess.run(
        _train_cmd(tmp_path, "--model", str(missing)), capture_output=True, text=True, timeout=300
    )
    assert res.returncode != 0 and str(missing) in res.stderr


@pytest.mark.parametrize("name", available())
def test_each_credit_module_trains_end_to_end(name: str, tmp_path: Path) -> None:
    cfg = TrainConfig(**{**SMALL, "steps": 2, "eval_every": 2, "credit": name})
    summary = Trainer(cfg, tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 2 and all(r.get("actor/pg_loss") is not None for r in rows[1:])
    assert any(k.startswith(f"credit/{name}/") for k in rows[1])
    module = get(name)
    assert rows[1]["time/signals_s"] is not None  # what the module declared was computed, and timed
    if module.critic:  # the value head (pact: the critic model) is trained and saved beside the model
        assert rows[1]["critic/vf_loss"] is not None
        saved = ("critic_model" if name == "pact" else "value_head") + ".safetensors"
        assert (tmp_path / "final" / saved).is_file()
    if module.critic:  # the critic was fitted after the actor update, on a share of the policy tokens
        assert rows[1]["time/critic_phase_s"] is not None and 0 < rows[1]["critic/target_mask_frac"] <= 1


def test_kl_to_the_reference_starts_at_zero(tmp_path: Path) -> None:
    trainer = Trainer(TrainConfig(**{**SMALL, "kl_coef": 0.1, "minibatches": 1}), tmp_path)
    metrics = trainer.train_step()
    assert metrics["actor/kl_ref"] == pytest.approx(0.0, abs=1e-6)  # the policy is still the reference


def test_two_processes_train_in_lockstep(tmp_path: Path) -> None:
    """The multi-device path (accelerate + DDP), run as 2 CPU processes with the gloo backend."""
    torchrun = Path(sys.executable).with_name("torchrun")
    extra = ("--device", "cpu", "--credit", "gae", "--steps", "2")
    cmd = [str(torchrun), "--nproc_per_node", "2", "-m", "creditgym.cli", *_train_args(tmp_path, *extra)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["params_in_sync"] is True  # actor and value head alike
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0.0, 1.0, 2.0]  # process 0 alone logs


def test_a_module_needing_a_missing_signal_fails_at_start_up(tmp_path: Path) -> None:
    from creditgym.envs.math import MathEnv

    class NoCounterfactual(MathEnv):
        has_counterfactual = False

    import gymnasium as gym

    gym.register("testing/NoCf-v0", entry_point=NoCounterfactual)
    with pytest.raises(
        ValueError,
        match=r"credit module 'cort', signal 'counterfactual_logprobs'.*needs a counterfactual prompt.*testing/NoCf-v0",
    ):
        Trainer(TrainConfig(**{**SMALL, "credit": "cort", "env_id": "testing/NoCf-v0"}), tmp_path)


@pytest.mark.parametrize("name", ["grpo", "cort"])
def test_cort_and_grpo_train_on_the_rubric_env(name: str, tmp_path: Path) -> None:
    cfg = TrainConfig(
        **{**SMALL, "steps": 2, "eval_every": 2, "credit": name, "env_id": "creditgym/Rubric-v0"}
    )
    summary = Trainer(cfg, tmp_path).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 2 and summary["env_id"] == "creditgym/Rubric-v0"
    assert 0.0 <= summary["eval_before"] <= 1.0 and all(r.get("actor/pg_loss") is not None for r in rows[1:])
    if name == "cort":  # the counterfactual replay (the prompt without its criteria) ran and weighted tokens
        assert rows[1]["time/signals_s"] > 0 and rows[1]["credit/cort/weight_max"] is not None


def test_the_share_of_responses_cut_by_the_budget_is_logged_and_said_once(tmp_path: Path, capsys) -> None:
    """``rollout/truncated`` is the share of a step's episodes that ended at the response budget: exactly those
    whose response filled the budget without an end-of-turn token. Above half, the run says so once."""
    budget = 3
    cfg = TrainConfig(
        steps=2, prompts_per_step=2, group_size=4, eval_every=2, eval_episodes=4, max_new_tokens=budget
    )
    trainer = Trainer(cfg, tmp_path)
    step, metrics = trainer._rollouts(np.random.default_rng(0))
    assert step is not None
    stops = set(trainer.policy.stop_token_ids)
    cut = [
        int(ep.env.ledger.policy_mask.sum()) == budget and int(ep.env.ledger.token_id[-1]) not in stops
        for ep in step.episodes
    ]
    assert [ep.truncated for ep in step.episodes] == cut
    assert metrics["rollout/truncated"] == pytest.approx(np.mean(cut))

    trainer.run()
    rows = _metrics(tmp_path)
    logged = [m["rollout/truncated"] for m in rows[1:]]
    assert len(logged) == 2 and all(0.0 <= x <= 1.0 for x in logged)
    assert [m["step"] for m in rows if "eval/truncated" in m] == [0, 2]  # the held-out episodes' share too
    assert all(0.0 <= m["eval/truncated"] <= 1.0 for m in rows if "eval/truncated" in m)
    said = capsys.readouterr().out.count("ended at their budget (--max-new-tokens 3)")
    assert said == (1 if max(logged) > 0.5 else 0)


def test_budget_note_speaks_only_above_the_share() -> None:
    assert budget_note({"rollout/truncated": 0.5}, 48) is None
    assert budget_note({"rollout/truncated": float("nan")}, 48) is None
    assert budget_note({}, 48) is None
    note = budget_note({"rollout/truncated": 0.75}, 48)
    assert note is not None and note.startswith("75% of the responses") and "--max-new-tokens 48" in note
    assert "the env's own limits" in (budget_note({"rollout/truncated": 1.0}, None) or "")
