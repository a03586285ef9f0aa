"""The training loop: rollouts -> signals -> credit -> update. One file, top to bottom.

Each step samples ``P`` prompts x ``G`` completions through the env's chunked steps (1), computes the signals the
credit module declared through the providers it named (2, ``creditgym.agents.providers``), asks the module chosen
by name for per-token advantages (3), takes the policy loss's gradient (4, ``--loss ppo|dis``), then runs every
provider's update (5: a critic fit on the module's targets, PACT's on the updated actor's; a teacher refresh):
the actor first, then the critics. The trainer never names a module or reads a module's config: what differs
between modules lives in their declarations and their providers.

Every random draw of step ``k`` comes from generators seeded by ``(seed, k)``, and a checkpoint holds the model,
the optimizer, every provider's state and the step, so ``--resume`` after a kill continues bit-for-bit.
"""

from __future__ import annotations

import copy
import functools
import operator
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditgym import credit as credit_registry
from creditgym.agents.eval.evaluate import evaluate_policy, make_envs
from creditgym.agents.probe.run import probe_metrics
from creditgym.agents.providers import (
    ForwardRequest,
    RunContext,
    StepContext,
    build_providers,
    sequence_logprobs,
)
from creditgym.agents.train import run_folder
from creditgym.agents.train.checkpoint import resumable_checkpoint, save_checkpoint
from creditgym.agents.train.config import TrainConfig, resolve
from creditgym.agents.train.finish import float_tensors, run_summary, write_outputs
from creditgym.agents.train.interrupts import GracefulStop, RaiseOnSignals, evaluation_note
from creditgym.agents.train.loss import aggregate, get_loss, kl_penalty
from creditgym.agents.train.plots import credit_samples
from creditgym.agents.train.policy import load_policy
from creditgym.agents.train.progress import MetricsLog, RunProgress, budget_note, equal_rewards_note
from creditgym.agents.train.rollout import PolicyAgent, RolloutStats, play, truncated_share
from creditgym.agents.train.sampling import Sampling
from creditgym.agents.train.update import adamw, backward, rows_with_gradient, update_pass
from creditgym.agents.train.wandb_log import attach_wandb, require_wandb
from creditgym.credit import CREDIT, CreditOutput


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


def _step_seed(seed: int, step: int, stream: int, rank: int = 0) -> int:
    key = [seed, step, stream] if rank == 0 else [seed, step, stream, rank]  # process 0 draws as a lone one
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def _accelerator(cfg: TrainConfig) -> Any:
    """An ``accelerate.Accelerator`` when launched as several processes (``accelerate launch``, ``torchrun``)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator

    return Accelerator(cpu=cfg.device == "cpu")


class Trainer:
    """Runs :class:`TrainConfig` into the folder ``out`` (metrics, TensorBoard, checkpoints, final model, plots)."""

    def __init__(
        self, cfg: TrainConfig, out: str | Path, *, resume: bool = False, overwrite: bool = False
    ) -> None:
        self.module = credit_registry.get(cfg.credit)  # unknown names list the known ones
        cfg = resolve(cfg)  # what the run leaves to its module: the actor loss (pact: DIS)
        self.cfg, self.out, self.actor_loss = cfg, Path(out), get_loss(cfg.loss)
        self.credit_cfg = self.module.make_config(cfg.credit_kwargs)
        if self.module.group_relative and cfg.group_size < 2:
            raise ValueError(
                f"credit module {cfg.credit!r} centres each advantage on its group, so a group of "
                f"{cfg.group_size} gives every response an advantage of 0 and nothing is learned: "
                "pass --group-size 2 or more"
            )
        # before anything is loaded: a folder holding another run, or other settings on resume, is refused
        changed = run_folder.prepare(self.out, cfg, resume=resume, overwrite=overwrite)
        # Several processes (one per GPU): each samples its own prompts; DDP averages the actor's gradients.
        self.accelerator = _accelerator(cfg)
        self.rank = self.accelerator.process_index if self.accelerator is not None else 0
        self.is_main = self.rank == 0
        device = str(self.accelerator.device) if self.accelerator is not None else cfg.device
        self.policy = load_policy(cfg.model, device=device)
        # the envs get the policy's tokenizer: the sequence sampled is the sequence trained on
        self.env, self.eval_env, self.eval_seed, note = make_envs(cfg, self.policy.tokenizer)
        if note and self.is_main:
            print(f"[creditgym] {note}")
        if cfg.backend == "vllm":
            from creditgym.agents.train.backends import VLLMBackend

            folder = self.policy.save(
                self.out / "vllm-init"
            )  # vLLM starts from a folder; then weights by sync
            self.policy.backend = VLLMBackend(folder, seed=cfg.seed)
        torch.manual_seed(cfg.seed)
        self.optimizer = adamw(self.policy.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.train_module = None  # the DDP wrapper of the actor in a multi-process run
        if self.accelerator is not None:
            self.train_module, self.optimizer = self.accelerator.prepare(self.policy.model, self.optimizer)
        self.reference = (
            copy.deepcopy(self.policy.model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
        )
        run = RunContext(cfg, self.policy, self.env.unwrapped, cfg.env_id, self.accelerator)
        # one provider per declared signal, at start-up: a missing provider or parameter fails here
        self.providers = build_providers(run, self.module, self.credit_cfg)
        self.request = functools.reduce(
            operator.or_, (p.forward_request() for p in self.providers.values()), ForwardRequest()
        )  # what the step's one shared no-grad behaviour pass must return
        self.step = 0
        self.samples: list[dict[str, Any]] = []  # a few responses of the last step with their credit
        with run_folder.writing(self.out):
            self.log = MetricsLog(self.out)
            if resume:
                self._resume()
        run_folder.record_start(self.out, self.cfg, self.step, changed)

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "model": self.policy.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "providers": {name: p.state_dict() for name, p in self.providers.items()},
            "config": asdict(self.cfg),
            "history": self.log.history,
        }

    def save_checkpoint(self) -> Path:
        with run_folder.writing(self.out):
            return save_checkpoint(self.out / "checkpoints", self.step, self._state())

    def _resume(self) -> None:
        # the newest intact checkpoint: a corrupt newer one is named and skipped, never deleted
        path, state, skipped = resumable_checkpoint(self.out / "checkpoints")
        for reason in skipped:
            print(f"[creditgym] skipped a corrupt checkpoint: {reason}", flush=True)
        self.policy.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for name, provider in self.providers.items():
            provider.load_state_dict(state["providers"][name])
        self.step = int(state["step"])
        self.log = MetricsLog(self.out, state["history"])
        print(f"[creditgym] resumed from {path} at step {self.step}")

    # -- one step ------------------------------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        t_start = time.perf_counter()
        rng = np.random.default_rng(_step_seed(self.cfg.seed, self.step, 0, self.rank))
        step, metrics = self._rollouts(rng)  # 1. rollouts
        if step is None:
            return metrics
        t0 = time.perf_counter()
        signals = {name: p.compute(step) for name, p in self.providers.items()}  # 2. signals
        metrics["time/signals_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = self._credit(step, signals)  # 3. credit
        metrics["time/credit_s"] = time.perf_counter() - t0
        metrics.update(out.metrics)
        t0 = time.perf_counter()
        metrics.update(self._update_actor(step, out.advantages.detach(), rng))  # 4. update
        metrics.update(self._update_providers(step))  # 5. critics and teachers, after the actor
        self.policy.backend.sync_weights(self.policy.model)  # vLLM samples the next step from the new weights
        metrics["time/backward_s"] = time.perf_counter() - t0
        metrics["time/step_s"] = time.perf_counter() - t_start
        if self.accelerator is not None:  # the logged rollout numbers cover every process's episodes
            for key in ("rollout/reward", "rollout/accuracy"):
                value = torch.tensor(metrics[key], device=step.input_ids.device)
                metrics[key] = self.accelerator.reduce(value, reduction="mean").item()
        return metrics

    def _rollouts(self, rng: np.random.Generator) -> tuple[StepContext | None, dict[str, float]]:
        """P tasks x G completions, every group forked from one reset so that it shares its task."""
        cfg = self.cfg
        generator = torch.Generator(device=self.policy.device).manual_seed(
            _step_seed(cfg.seed, self.step, 1, self.rank)
        )
        base = self.env.unwrapped
        envs, groups = [], []
        for p in range(cfg.prompts_per_step):
            base.reset(seed=int(rng.integers(2**31)))
            envs += [base.fork() for _ in range(cfg.group_size)]
            groups += [p] * cfg.group_size
        stats = RolloutStats()
        agent = PolicyAgent(self.policy, Sampling.of(cfg, generator), stats=stats)
        try:
            episodes = play(agent, envs, groups, rng=rng, stats=stats)
        except RuntimeError as err:  # sampling from NaN/inf probabilities: the weights have diverged
            if "inf" not in str(err) and "nan" not in str(err):
                raise
            raise self._diverged(f"the policy's next-token probabilities are not finite ({err})") from err
        kept = [ep for ep in episodes if ep.infra_error is None]  # infra faults are dropped, never scored 0
        rewards = [ep.reward for ep in kept]
        metrics: dict[str, float] = {
            "step": float(self.step + 1),
            "rollout/reward": float(np.mean(rewards)) if kept else float("nan"),
            "rollout/accuracy": float(np.mean([r >= 1.0 for r in rewards])) if kept else float("nan"),
            "rollout/reward_spread": float(np.ptp(rewards)) if kept else float("nan"),
            "rollout/response_tokens": stats.policy_tokens / max(len(episodes), 1),
            "rollout/truncated": truncated_share(kept),
            "rollout/infra_errors_dropped": float(len(episodes) - len(kept)),
            "rollout/tokens_per_s": stats.policy_tokens / max(stats.generate_s, 1e-9),
            "time/generate_s": stats.generate_s,
            "time/env_verify_s": stats.env_s,
        }
        if not kept:
            return None, metrics
        return StepContext.of(self.step, kept, self.policy, self.request, generator), metrics

    def _credit(self, step: StepContext, signals: dict[str, torch.Tensor]) -> CreditOutput:
        """Per-token advantages from the module chosen by name."""
        step.credit_batch = step.make_credit_batch(signals, total_steps=self.cfg.steps)
        step.credit_out = self.module(step.credit_batch, self.credit_cfg)
        shown = step.credit_out.diagnostics.get(CREDIT, step.credit_out.advantages).detach()
        rewards = [ep.reward for ep in step.episodes]
        self.samples = credit_samples(
            rewards, step.batch.input_ids, step.batch.policy_mask, shown, self.policy.tokenizer.decode
        )
        return step.credit_out

    def _update_actor(
        self, step: StepContext, advantages: torch.Tensor, rng: np.random.Generator
    ) -> dict[str, float]:
        """The policy-gradient update (``cfg.loss``): ``epochs`` passes of ``minibatches`` AdamW steps."""
        cfg, ids, att, mask, old_lp = (
            self.cfg,
            step.input_ids,
            step.attention_mask,
            step.policy_mask,
            step.old_logprobs,
        )
        ref_lp = sequence_logprobs(self.reference, ids, att) if self.reference is not None else None
        order = torch.from_numpy(rng.permutation(ids.shape[0]))
        graph = not self.actor_loss.proportional_to_advantage or cfg.entropy_coef != 0 or ref_lp is not None
        accum: dict[str, list[float]] = {}
        for _ in range(cfg.epochs):
            for rows in torch.tensor_split(order, min(cfg.minibatches, ids.shape[0])):
                rows = rows.to(ids.device)
                m = mask[rows]
                fwd = update_pass(  # the LM head on the response's positions only
                    self.policy,
                    ids[rows],
                    att[rows],
                    m,
                    advantages[rows],
                    module=self.train_module,
                    entropy_grad=cfg.entropy_coef != 0,  # otherwise the entropy is only logged
                    graph_for_all=graph or self.accelerator is not None,
                )
                loss, metrics = self.actor_loss(fwd.logprobs, old_lp[rows], advantages[rows], m, cfg)
                metrics["actor/zero_advantage_rows"] = (
                    1.0 - rows_with_gradient(advantages[rows], m).float().mean().item()
                )
                entropy = aggregate(fwd.entropies, m, cfg.loss_agg)
                loss = loss - cfg.entropy_coef * entropy
                if ref_lp is not None:
                    kl = aggregate(
                        kl_penalty(fwd.logprobs, ref_lp[rows], m, kind=cfg.kl_kind), m, cfg.loss_agg
                    )
                    loss = loss + cfg.kl_coef * kl
                    metrics["actor/kl_ref"] = kl.item()
                if not torch.isfinite(loss):
                    raise self._diverged(
                        f"the policy loss is {loss.item()}", "lower --lr or check the rewards"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                if self.accelerator is not None:
                    self.accelerator.backward(loss)  # all-reduces the gradients across processes
                else:
                    backward(loss, self.policy.model.parameters())
                grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), cfg.max_grad_norm)
                if not torch.isfinite(grad_norm):
                    raise self._diverged(f"the gradient norm is {grad_norm.item()} (before the update)")
                self.optimizer.step()
                metrics.update({"actor/entropy": entropy.item(), "actor/grad_norm": grad_norm.item()})
                for k, v in metrics.items():
                    accum.setdefault(k, []).append(float(v))
        return {k: float(np.mean(v)) for k, v in accum.items()}

    def _diverged(self, what: str, fix: str = "lower --lr") -> TrainingDiverged:
        return TrainingDiverged(
            f"step {self.step + 1}: {what}; stopping. The last good checkpoint is kept under "
            f"{self.out / 'checkpoints'}: {fix}"
        )

    def _update_providers(self, step: StepContext) -> dict[str, float]:
        """Every provider's update after the actor's (a critic fit, a teacher refresh): PACT's order."""
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        for provider in self.providers.values():
            metrics.update(provider.update(step))
        metrics["time/critic_phase_s"] = time.perf_counter() - t0
        return metrics

    def _probe(self) -> dict[str, float]:
        """The run's module probed on a fresh batch at multiples of ``probe_every`` (``{}`` otherwise)."""
        return probe_metrics(
            self.policy,
            self.env.unwrapped,
            self.module,
            self.credit_cfg,
            self.providers,
            step=self.step,
            settings=self.cfg,
        )

    # -- the run -------------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg, log = self.cfg, self.log
        evaluate = lambda: evaluate_policy(self.policy, self.eval_env, cfg.eval_episodes, self.eval_seed)  # noqa: E731
        if self.step == 0 and self.is_main:
            try:  # the first Ctrl-C / SIGTERM of the step-0 evaluation stops the run: nothing is trained yet
                with RaiseOnSignals():  # the line says so once a signal stops this evaluation cleanly
                    print(evaluation_note(cfg.eval_episodes), flush=True)
                    first = {"step": 0.0, **evaluate(), **self._probe()}
            except KeyboardInterrupt as e:
                raise KeyboardInterrupt(
                    f"stopped by {e or 'SIGINT'} during the step-0 held-out evaluation, before any training; "
                    "start again with --overwrite"
                ) from None
            with run_folder.writing(self.out):
                log.log(first)
        stop = GracefulStop(
            "[creditgym] signal {signum}: finishing this step, then checkpointing (again to abort now)"
        )
        warned_cut = warned_equal = False
        with RunProgress(total=cfg.steps, start=self.step) as progress, stop:
            try:
                while self.step < cfg.steps and not stop.requested:
                    metrics = self.train_step()
                    self.step += 1
                    if not self.is_main:  # other processes only train; process 0 evaluates, logs, saves
                        continue
                    if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                        metrics.update(evaluate())
                    metrics.update(self._probe())  # {} unless cfg.probe_every divides the step
                    with run_folder.writing(self.out):
                        log.log(metrics)
                    progress.update(self.step, metrics)
                    if not warned_cut and (note := budget_note(metrics, cfg.max_new_tokens)):
                        print(f"[creditgym] step {self.step}: {note}", flush=True)
                        warned_cut = True  # once a run: the metric carries it from then on
                    if not warned_equal and (note := equal_rewards_note(metrics)):
                        print(f"[creditgym] step {self.step}: {note}", flush=True)
                        warned_equal = True  # once a run: rollout/reward_spread carries it from then on
                    if self.step % cfg.checkpoint_every == 0 or self.step == cfg.steps or stop.requested:
                        self.save_checkpoint()
            finally:
                log.close()
        if stop.requested:
            raise KeyboardInterrupt(f"stopped at step {self.step}; resume with --resume (checkpoint saved)")
        in_sync = self._params_in_sync()
        if not self.is_main:
            return {"is_main": False}
        score_name = self.eval_env.unwrapped.score_name
        summary = run_summary(cfg, self.log.history, self.step, self.out, score_name=score_name)
        if self.accelerator is not None:
            summary.update({"processes": self.accelerator.num_processes, "params_in_sync": in_sync})
        write_outputs(self.out, cfg, self.policy, self.providers, summary, log.history, self.samples)
        return summary

    def _params_in_sync(self) -> bool:
        """In a multi-process run, whether every process ends with the same weights, providers' included."""
        if self.accelerator is None:
            return True
        tensors = [p.detach() for p in self.policy.model.parameters()]
        for provider in self.providers.values():
            tensors += float_tensors(provider.state_dict())
        checksum = torch.stack([t.double().sum() for t in tensors]).sum()
        gathered = self.accelerator.gather(checksum.reshape(1))
        return bool(torch.all(gathered == gathered[0]))


def train(
    cfg: TrainConfig, out: str | Path, *, resume: bool = False, overwrite: bool = False, wandb: str = ""
) -> dict[str, Any]:
    """Run ``cfg`` into ``out`` and return the summary (held-out score before and after, the curve).

    ``out`` must hold no run unless ``resume`` (continue it, with its settings) or ``overwrite`` (delete it
    first): `creditgym.agents.train.run_folder`. ``wandb``: a Weights & Biases project to log to as well
    (`creditgym.agents.train.wandb_log`), or "" for none."""
    if wandb:
        require_wandb()  # before the model loads
    return attach_wandb(Trainer(cfg, out, resume=resume, overwrite=overwrite), wandb).run()
