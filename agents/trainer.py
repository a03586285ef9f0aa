"""The training loop: rollouts -> verdicts -> credit -> clipped policy-gradient update. One file, top to bottom.

Each step samples ``P`` prompts x ``G`` completions through the env's chunked steps, builds a
:class:`~creditgym.credit.CreditBatch` from the episodes' ledgers, asks the credit module chosen by name for
per-token advantages, and takes the clipped surrogate's gradient (plus the critic's for modules that train one).

Every random draw of step ``k`` comes from generators seeded by ``(seed, k)``, and a checkpoint holds the model,
the optimizers and the step, so ``--resume`` after a kill continues bit-for-bit from the last checkpoint.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from creditgym import credit as credit_registry
from creditgym.agents.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from creditgym.agents.config import TrainConfig
from creditgym.agents.loss import aggregate, kl_penalty, policy_loss, value_loss
from creditgym.agents.policy import Policy, load_policy
from creditgym.agents.rollout import Episode, PolicyAgent, RolloutStats, play, to_batch
from creditgym.agents.signals import (
    check_env_provides,
    counterfactual_logprobs,
    sequence_logprobs,
)
from creditgym.credit import CreditBatch
from creditgym.credit.compo import attention_concentration


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def _step_seed(seed: int, step: int, stream: int, rank: int = 0) -> int:
    key = (
        [seed, step, stream] if rank == 0 else [seed, step, stream, rank]
    )  # process 0 draws as a lone process
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def _accelerator(cfg: TrainConfig) -> Any:
    """An ``accelerate.Accelerator`` when launched as several processes (``accelerate launch``, ``torchrun``)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator

    return Accelerator(cpu=cfg.device == "cpu")


def _make_env(cfg: TrainConfig, **overrides: Any) -> gym.Env:
    if cfg.env_id not in gym.registry:
        from creditgym.envs import registered_ids

        raise ValueError(f"unknown env id {cfg.env_id!r}; registered ids: {registered_ids()}")
    return gym.make(cfg.env_id, **{**dict(cfg.env_kwargs), **overrides})


def evaluate_policy(policy: Policy, cfg: TrainConfig, env: gym.Env, episodes: int) -> dict[str, float]:
    """Greedy accuracy on ``episodes`` held-out tasks (the env's test split, reset with fixed seeds)."""
    base = env.unwrapped
    envs = []
    for i in range(episodes):
        base.reset(seed=10_000_000 + i)
        envs.append(base.fork())
    done = play(PolicyAgent(policy, temperature=0.0), envs, list(range(episodes)))
    scored = [ep.reward for ep in done if ep.infra_error is None]
    return {
        "eval/accuracy": float(np.mean(scored)) if scored else float("nan"),
        "eval/infra_errors": float(len(done) - len(scored)),
    }


class Trainer:
    """Runs :class:`TrainConfig` into the folder ``out`` (metrics, TensorBoard, checkpoints, final model, plots)."""

    def __init__(self, cfg: TrainConfig, out: str | Path, *, resume: bool = False) -> None:
        self.cfg, self.out = cfg, Path(out)
        self.module = credit_registry.get(cfg.credit)  # unknown names list the known ones
        self.credit_cfg = self.module.config(**dict(cfg.credit_kwargs))
        self.env = _make_env(cfg)
        self.eval_env = _make_env(cfg, split="test")
        # Several processes (one per GPU): each samples its own prompts; DDP averages the actor's gradients.
        self.accelerator = _accelerator(cfg)
        self.rank = self.accelerator.process_index if self.accelerator is not None else 0
        self.is_main = self.rank == 0
        device = str(self.accelerator.device) if self.accelerator is not None else cfg.device
        self.policy = load_policy(cfg.model, device=device, value_head=self.module.critic)
        if cfg.backend == "vllm":
            from creditgym.agents.backends import VLLMBackend

            folder = self.policy.save(
                self.out / "vllm-init"
            )  # vLLM starts from a folder; then weights by sync
            self.policy.backend = VLLMBackend(folder, seed=cfg.seed)
        torch.manual_seed(cfg.seed)
        self.optimizer = torch.optim.AdamW(
            self.policy.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        self.critic_optimizer = (
            torch.optim.AdamW(self.policy.value_head.parameters(), lr=cfg.critic_lr)
            if self.policy.value_head is not None
            else None
        )
        self.train_module = None  # the DDP wrapper of the actor in a multi-process run
        if self.accelerator is not None:
            self.train_module, self.optimizer = self.accelerator.prepare(self.policy.model, self.optimizer)
        self.reference = (
            copy.deepcopy(self.policy.model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
        )
        check_env_provides(cfg.credit, self.module.signals, self.env)  # at start-up, not at step 50
        self.teacher = (
            copy.deepcopy(self.policy.model).eval().requires_grad_(False)
            if "teacher_logprobs" in self.module.signals
            else None
        )
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.samples: list[dict[str, Any]] = []  # a few responses of the last step with their advantages
        self.out.mkdir(parents=True, exist_ok=True)
        if resume:
            self._resume()
        else:
            for stale in ("metrics.jsonl",):
                (self.out / stale).unlink(missing_ok=True)
        (self.out / "config.json").write_text(json.dumps(asdict(self.cfg), indent=2, default=dict) + "\n")

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "model": self.policy.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "value_head": None if self.policy.value_head is None else self.policy.value_head.state_dict(),
            "critic_optimizer": None if self.critic_optimizer is None else self.critic_optimizer.state_dict(),
            "teacher": None if self.teacher is None else self.teacher.state_dict(),
            "config": asdict(self.cfg),
            "history": self.history,
        }

    def save_checkpoint(self) -> Path:
        return save_checkpoint(self.out / "checkpoints", self.step, self._state())

    def _resume(self) -> None:
        path = latest_checkpoint(self.out / "checkpoints")
        if path is None:
            raise FileNotFoundError(f"--resume: no checkpoint under {self.out / 'checkpoints'}")
        state = load_checkpoint(path)  # refuses a corrupted checkpoint, naming the file
        self.policy.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.policy.value_head is not None and state["value_head"] is not None:
            self.policy.value_head.load_state_dict(state["value_head"])
            assert self.critic_optimizer is not None
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        if self.teacher is not None and state.get("teacher") is not None:
            self.teacher.load_state_dict(state["teacher"])
        self.step = int(state["step"])
        self.history = list(state["history"])
        # The killed run may have logged steps after its last checkpoint: keep only what the checkpoint knows.
        (self.out / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in self.history))
        print(f"[creditgym] resumed from {path} at step {self.step}")

    # -- one step ------------------------------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        cfg, step = self.cfg, self.step
        t_start = time.perf_counter()
        rng = np.random.default_rng(_step_seed(cfg.seed, step, 0, self.rank))
        generator = torch.Generator(device=self.policy.device).manual_seed(
            _step_seed(cfg.seed, step, 1, self.rank)
        )

        # 1. rollouts: P tasks x G completions, every group forked from one reset so it shares its task
        base = self.env.unwrapped
        envs, groups = [], []
        for p in range(cfg.prompts_per_step):
            base.reset(seed=int(rng.integers(2**31)))
            envs += [base.fork() for _ in range(cfg.group_size)]
            groups += [p] * cfg.group_size
        stats = RolloutStats()
        try:
            agent = PolicyAgent(
                self.policy, temperature=cfg.temperature, top_p=cfg.top_p, generator=generator, stats=stats
            )
            episodes = play(agent, envs, groups, rng=rng, stats=stats)
        except RuntimeError as err:  # sampling from NaN/inf probabilities: the weights have diverged
            if "inf" not in str(err) and "nan" not in str(err):
                raise
            raise TrainingDiverged(
                f"step {step + 1}: the policy's next-token probabilities are not finite ({err}); stopping. The "
                f"last good checkpoint is kept under {self.out / 'checkpoints'}: lower --lr"
            ) from err
        # infrastructure faults (a dead verifier, an unreachable engine) are dropped, never scored as 0
        kept = [ep for ep in episodes if ep.infra_error is None]
        metrics: dict[str, float] = {
            "step": float(step + 1),
            "rollout/reward": float(np.mean([ep.reward for ep in kept])) if kept else float("nan"),
            "rollout/accuracy": float(np.mean([ep.reward >= 1.0 for ep in kept])) if kept else float("nan"),
            "rollout/response_tokens": stats.policy_tokens / max(len(episodes), 1),
            "rollout/infra_errors_dropped": float(len(episodes) - len(kept)),
            "time/generate_s": stats.generate_s,
            "time/env_verify_s": stats.env_s,
        }
        if not kept:
            return metrics
        batch = to_batch(kept, self.policy.pad_token_id)
        device = self.policy.device
        ids, att, mask = (
            batch.input_ids.to(device),
            batch.attention_mask.to(device),
            batch.policy_mask.to(device),
        )
        old_lp = batch.old_logprobs.to(device)

        # 2. signals the credit module declared (only those), batched, without gradients
        t0 = time.perf_counter()
        values = None
        extra: dict[str, torch.Tensor] = {}
        need_values, need_attention = (
            "values" in self.module.signals,
            "attention_stats" in self.module.signals,
        )
        if need_values or need_attention:  # one no-grad pass serves both
            with torch.no_grad():
                fwd = self.policy.forward_logprobs(
                    ids,
                    att,
                    return_entropy=False,
                    return_values=need_values,
                    attention_layers=list(self.credit_cfg.layers) if need_attention else None,
                )
            if need_values:
                values = self._critic_values(fwd.values)
            if need_attention:  # concentration = 1 - mean normalised attention-row entropy (CompPO)
                extra["attention_stats"] = attention_concentration(fwd.attention_entropy) * mask
        if "counterfactual_logprobs" in self.module.signals:
            extra["counterfactual_logprobs"] = counterfactual_logprobs(self.policy, kept, batch).to(device)
        if "teacher_logprobs" in self.module.signals:
            assert self.teacher is not None
            extra["teacher_logprobs"] = sequence_logprobs(self.teacher, ids, att) * mask
        ref_lp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_lp = sequence_logprobs(self.reference, ids, att)
        metrics["time/signals_s"] = time.perf_counter() - t0

        # 3. credit: per-token advantages from the module chosen by name
        t0 = time.perf_counter()
        credit_batch = CreditBatch(
            token_rewards=batch.token_rewards.to(device),
            policy_mask=mask,
            group_ids=batch.group_ids.to(device),
            old_logprobs=old_lp,
            segment_ids=batch.segment_ids.to(device),
            values=values,
            signals=extra,
            step=step,
            total_steps=cfg.steps,
        )
        credit_out = self.module(credit_batch, self.credit_cfg)
        advantages = credit_out.advantages.detach()
        metrics["time/credit_s"] = time.perf_counter() - t0
        metrics.update(credit_out.metrics)
        shown = credit_out.token_credit if credit_out.token_credit is not None else advantages
        self._keep_samples(kept, batch, shown.detach())

        # 4. clipped policy-gradient update (and the critic's, for modules that train one)
        t0 = time.perf_counter()
        order = torch.from_numpy(rng.permutation(len(kept)))
        accum: dict[str, list[float]] = {}
        for _ in range(cfg.epochs):
            for rows in torch.tensor_split(order, min(cfg.minibatches, len(kept))):
                rows = rows.to(device)
                m = mask[rows]
                fwd = self.policy.forward_logprobs(
                    ids[rows],
                    att[rows],
                    return_entropy=True,
                    return_values=self.policy.value_head is not None,
                    module=self.train_module,
                )
                loss, pg_metrics = policy_loss(
                    fwd.logprobs,
                    old_lp[rows],
                    advantages[rows],
                    m,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    agg=cfg.loss_agg,
                )
                entropy = aggregate(fwd.entropies, m, cfg.loss_agg)
                loss = loss - cfg.entropy_coef * entropy
                if ref_lp is not None:
                    kl = aggregate(
                        kl_penalty(fwd.logprobs, ref_lp[rows], m, kind=cfg.kl_kind), m, cfg.loss_agg
                    )
                    loss = loss + cfg.kl_coef * kl
                    pg_metrics["actor/kl_ref"] = kl.item()
                if not torch.isfinite(loss):
                    raise TrainingDiverged(
                        f"step {step + 1}: the policy loss is {loss.item()}; stopping. The last good checkpoint is "
                        f"kept under {self.out / 'checkpoints'}: lower --lr or check the rewards"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                if self.accelerator is not None:
                    self.accelerator.backward(loss)  # all-reduces the gradients across processes
                else:
                    loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), cfg.max_grad_norm)
                if not torch.isfinite(grad_norm):
                    raise TrainingDiverged(
                        f"step {step + 1}: the gradient norm is {grad_norm.item()}; stopping before the update. "
                        f"The last good checkpoint is kept under {self.out / 'checkpoints'}: lower --lr"
                    )
                self.optimizer.step()
                pg_metrics.update({"actor/entropy": entropy.item(), "actor/grad_norm": grad_norm.item()})
                if self.critic_optimizer is not None and not self.module.critic_signals:
                    assert credit_out.returns is not None
                    v_loss, v_metrics = value_loss(
                        fwd.values, credit_out.returns[rows].detach(), m, kind=self.module.critic_loss
                    )
                    self.critic_optimizer.zero_grad(set_to_none=True)
                    v_loss.backward()
                    if self.accelerator is not None:  # the small value head is averaged by hand
                        for param in self.policy.value_head.parameters():
                            param.grad = self.accelerator.reduce(param.grad, reduction="mean")
                    self.critic_optimizer.step()
                    pg_metrics.update(v_metrics)
                for k, v in pg_metrics.items():
                    accum.setdefault(k, []).append(float(v))
        metrics.update({k: float(np.mean(v)) for k, v in accum.items()})
        if (
            self.module.critic_signals
        ):  # actor first, then the critic on targets from the updated actor (PACT)
            t1 = time.perf_counter()
            metrics.update(self._critic_phase(credit_batch, ids, att))
            metrics["time/critic_phase_s"] = time.perf_counter() - t1
        self._refresh_teacher(step + 1)
        self.policy.backend.sync_weights(self.policy.model)  # vLLM samples the next step from the new weights
        metrics["time/backward_s"] = time.perf_counter() - t0
        metrics["time/step_s"] = time.perf_counter() - t_start
        metrics["rollout/tokens_per_s"] = stats.policy_tokens / max(stats.generate_s, 1e-9)
        if self.accelerator is not None:  # the logged rollout numbers cover every process's episodes
            for key in ("rollout/reward", "rollout/accuracy"):
                value = torch.tensor(metrics[key], device=device)
                metrics[key] = self.accelerator.reduce(value, reduction="mean").item()
        return metrics

    def _critic_values(self, head_out: torch.Tensor) -> torch.Tensor:
        """The value head's output as the module reads it: V itself, or sigmoid(logit) for a BCE critic."""
        return torch.sigmoid(head_out) if self.module.critic_loss == "bce" else head_out

    def _critic_phase(
        self, credit_batch: CreditBatch, ids: torch.Tensor, att: torch.Tensor
    ) -> dict[str, float]:
        """Compute the module's critic signals with the updated actor, then fit the critic on its targets."""
        assert self.critic_optimizer is not None and self.module.critic_targets is not None
        signals = dict(credit_batch.signals)
        if "updated_logprobs" in self.module.critic_signals:
            with torch.no_grad():
                signals["updated_logprobs"] = self.policy.forward_logprobs(
                    ids, att, return_entropy=False
                ).logprobs
        phase_batch = dataclasses.replace(credit_batch, signals=signals)
        targets, target_mask = self.module.critic_targets(phase_batch, self.credit_cfg)
        out: dict[str, list[float]] = {}
        for rows in torch.tensor_split(torch.arange(ids.shape[0], device=ids.device), self.cfg.minibatches):
            fwd = self.policy.forward_logprobs(ids[rows], att[rows], return_entropy=False, return_values=True)
            v_loss, v_metrics = value_loss(
                fwd.values, targets[rows], target_mask[rows], kind=self.module.critic_loss
            )
            self.critic_optimizer.zero_grad(set_to_none=True)
            v_loss.backward()
            if self.accelerator is not None:
                for param in self.policy.value_head.parameters():
                    param.grad = self.accelerator.reduce(param.grad, reduction="mean")
            self.critic_optimizer.step()
            for k, v in v_metrics.items():
                out.setdefault(k, []).append(float(v))
        metrics = {k: float(np.mean(v)) for k, v in out.items()}
        metrics["critic/target_mask_frac"] = float(
            target_mask.sum() / credit_batch.policy_mask.sum().clamp(min=1)
        )
        return metrics

    def _refresh_teacher(self, step: int) -> None:
        """The self-teacher (CAST): a stop-gradient snapshot refreshed every N steps, or an EMA of the policy."""
        if self.teacher is None:
            return
        ema = getattr(self.credit_cfg, "teacher_ema", None)
        with torch.no_grad():
            if ema is not None:
                for t, p in zip(self.teacher.parameters(), self.policy.model.parameters(), strict=True):
                    t.mul_(ema).add_(p.detach(), alpha=1.0 - ema)
            elif step % int(self.credit_cfg.teacher_refresh_every) == 0:
                self.teacher.load_state_dict(self.policy.model.state_dict())

    def _keep_samples(self, kept: list[Episode], batch: Any, advantages: torch.Tensor, n: int = 6) -> None:
        rewards = np.array([ep.reward for ep in kept])
        picks = list(np.argsort(-rewards, kind="stable")[: n // 2]) + list(
            np.argsort(rewards, kind="stable")[: n // 2]
        )
        self.samples = []
        for row in dict.fromkeys(int(i) for i in picks):
            m = batch.policy_mask[row]
            token_ids = batch.input_ids[row][m].tolist()
            self.samples.append(
                {
                    "reward": float(rewards[row]),
                    "tokens": [self.policy.tokenizer.decode([t]) for t in token_ids],
                    "advantages": advantages[row][m.to(advantages.device)].float().cpu().tolist(),
                }
            )

    # -- the run -------------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        from creditgym.agents.progress import RunProgress

        cfg = self.cfg
        writer = _tensorboard(self.out / "tensorboard")
        first_eval = None
        if self.step == 0 and self.is_main:
            first_eval = evaluate_policy(self.policy, cfg, self.eval_env, cfg.eval_episodes)
            self._log({"step": 0.0, **first_eval}, writer)
        stop = _GracefulStop()  # Ctrl-C / SIGTERM: finish the current step, checkpoint, exit
        with RunProgress(total=cfg.steps, start=self.step) as progress, stop:
            try:
                while self.step < cfg.steps and not stop.requested:
                    metrics = self.train_step()
                    self.step += 1
                    if not self.is_main:  # other processes only train; process 0 evaluates, logs, saves
                        continue
                    if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                        metrics.update(evaluate_policy(self.policy, cfg, self.eval_env, cfg.eval_episodes))
                    self._log(metrics, writer)
                    progress.update(self.step, metrics)
                    if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps or stop.requested:
                        self.save_checkpoint()
            finally:
                if writer is not None:
                    writer.close()
        if stop.requested:
            raise KeyboardInterrupt(f"stopped at step {self.step}; resume with --resume (checkpoint saved)")
        in_sync = self._params_in_sync()
        if not self.is_main:
            return {"is_main": False}
        self.policy.save(self.out / "final")
        summary = self._summary(first_eval)
        if self.accelerator is not None:
            summary.update({"processes": self.accelerator.num_processes, "params_in_sync": in_sync})
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        from creditgym.agents.plots import credit_html, credit_png, curves_png

        curves_png(self.history, self.out / "curves.png", title=f"{cfg.credit} on {cfg.env_id}")
        credit_html(self.samples, self.out / "credit.html", title=f"{cfg.credit}: per-token advantages")
        credit_png(self.samples, self.out / "credit.png", title=f"{cfg.credit}: per-token advantages")
        return summary

    def _params_in_sync(self) -> bool:
        """In a multi-process run, whether every process ends with the same actor weights (they must)."""
        if self.accelerator is None:
            return True
        params = list(self.policy.model.parameters())
        if self.policy.value_head is not None:
            params += list(self.policy.value_head.parameters())
        checksum = torch.stack([p.detach().double().sum() for p in params]).sum()
        gathered = self.accelerator.gather(checksum.reshape(1))
        return bool(torch.all(gathered == gathered[0]))

    def _log(self, metrics: dict[str, float], writer: Any) -> None:
        clean = {k: (float(v) if math.isfinite(float(v)) else None) for k, v in metrics.items()}
        self.history.append(clean)  # type: ignore[arg-type]
        with (self.out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(clean) + "\n")
        if writer is not None:
            step = int(metrics.get("step", self.step))
            for k, v in metrics.items():
                if k != "step" and math.isfinite(float(v)):
                    writer.add_scalar(k, float(v), step)

    def _summary(self, first_eval: dict[str, float] | None) -> dict[str, Any]:
        evals = [(m["step"], m["eval/accuracy"]) for m in self.history if m.get("eval/accuracy") is not None]
        return {
            "env_id": self.cfg.env_id,
            "credit": self.cfg.credit,
            "steps": self.step,
            "seed": self.cfg.seed,
            "eval_before": evals[0][1] if evals else None,
            "eval_after": evals[-1][1] if evals else None,
            "eval_curve": evals,
            "out": str(self.out),
        }


class _GracefulStop:
    """While active, the first SIGINT/SIGTERM only sets ``requested``; a second one interrupts at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(f"[creditgym] signal {signum}: finishing this step, then checkpointing (again to abort now)")

    def __enter__(self) -> _GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _tensorboard(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is a core dependency; a broken install only loses the event files
        return None
    return SummaryWriter(str(path))


def train(cfg: TrainConfig, out: str | Path, *, resume: bool = False) -> dict[str, Any]:
    """Run ``cfg`` into ``out`` and return the summary (held-out accuracy before and after, the curve)."""
    return Trainer(cfg, out, resume=resume).run()
