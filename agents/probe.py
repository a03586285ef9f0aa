"""``creditgym probe``: does a credit module put the credit on the tokens that decided the outcome?

One batch of ``P`` prompts x ``G`` responses is sampled from the policy. Its Monte-Carlo ground truth A* comes
from ``K`` continuations of every probed prefix (``creditgym.agents.mc``). Every listed module computes its
advantages on the same batch with the signals it declares, through the trainer's own providers
(`build_providers`; from a checkpoint, the trained module's providers get their saved state, so a trained critic
is probed as trained), and ``creditgym.agents.probe_report`` scores them against A*, with 95% bootstrap intervals
over responses and the split-half reliability of A* as the ceiling. The run writes ``probe.json`` (every figure,
and every response's tokens, A* and advantages), ``probe.md`` (`probe_markdown` of it) and ``probe.png``
(`probe_png`). ``creditgym train --probe-every N`` logs the figures of its own module (`probe_metrics`).

Schedules (CoRT's ramp) are read at the checkpoint's step, or, without a checkpoint, at the last step of a default
run (fully on).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from creditgym import credit as credit_registry
from creditgym.agents.checkpoint import MANIFEST, latest_checkpoint, load_checkpoint
from creditgym.agents.config import TrainConfig
from creditgym.agents.evaluate import make_envs
from creditgym.agents.mc import (
    MCEstimate,
    check_forkable,
    check_one_turn,
    plan,
    reuse_rewards,
    sample_continuations,
)
from creditgym.agents.policy import load_policy
from creditgym.agents.probe_report import (
    bootstrap_figures,
    mark_figures,
    probe_markdown,
    probe_png,
    response_ingredients,
)
from creditgym.agents.rollout import Episode, PolicyAgent, play
from creditgym.agents.signals import ForwardRequest, RunContext, SignalProvider, StepContext, build_providers
from creditgym.credit import CreditBatch
from creditgym.envs import env_accepts, resolve_env_id

if TYPE_CHECKING:
    from creditgym.agents.policy import Policy
    from creditgym.agents.trainer import Trainer

__all__ = [
    "ProbeConfig",
    "ProbeSetup",
    "find_checkpoint",
    "module_advantages",
    "module_credit",
    "probe_batch",
    "probe_metrics",
    "run_probe",
    "sample_batch",
    "score",
    "setup_probe",
]


@dataclass(frozen=True)
class ProbeConfig:
    """What ``creditgym probe`` measures; each default lives here (None: the checkpoint's, else `TrainConfig`'s).

    Attributes:
        env_id: Env id (registered, or ``module:EnvId``); None: the checkpoint's, else ``TrainConfig.env_id``.
        env_kwargs: Env constructor arguments (None: the checkpoint's, else none).
        model: ``creditgym/tiny`` or a model folder; None: the checkpoint's, else ``TrainConfig.model``.
        credit: Modules (or variants ``name:key=value``) to score; empty: every registered module.
        prompts: P tasks.
        group: G responses per task.
        k: Continuations per probed prefix (>= 2: the reliability splits them in two halves).
        every: Probe every ``every`` response tokens (1 = every token); None: after each newline.
        temperature: Sampling temperature of the batch and the continuations (None: the run's).
        top_p: Nucleus mass (None: the run's).
        max_new_tokens: Response budget (None: the run's).
        max_turns: Turn budget of a multi-turn env (passed as ``max_turns``); a multi-turn env needs one.
        seed: Seeds the batch, the continuations and the bootstrap.
        checkpoint: A checkpoint folder, a ``creditgym train`` run folder (its latest) or its ``checkpoints/``.
        device: ``cpu``, ``cuda`` or None (CUDA when available).
        rows: Forks generated in one batch.
        bootstrap: Bootstrap resamples of the responses.
        shown: Responses drawn in ``probe.png``.
        reuse: A complete ``probe.json`` of the same batch (same env, model, checkpoint, seed, sizes, ``k``,
            ``every`` and sampling): its continuation rewards, hence A*, are reused and only the modules are
            computed, so new modules are scored against the very same A*. The batch must match token for token.
    """

    env_id: str | None = None
    env_kwargs: Mapping[str, Any] | None = None
    model: str | None = None
    credit: tuple[str, ...] = ()
    prompts: int = 4
    group: int = 4
    k: int = 16
    every: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    max_turns: int | None = None
    seed: int = 0
    checkpoint: str | None = None
    device: str | None = None
    rows: int = 256
    bootstrap: int = 1000
    shown: int = 3
    reuse: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 2:
            raise ValueError(
                f"K must be an int >= 2 (the reliability of A* compares two halves of the K continuations), got "
                f"{self.k!r}"
            )
        for name in ("prompts", "group", "rows", "shown"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ProbeConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.every is not None and int(self.every) < 1:
            raise ValueError(f"every must be >= 1 (1 = every token) or newline, got {self.every!r}")
        if self.max_turns is not None and int(self.max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns!r}")
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap must be >= 0, got {self.bootstrap!r}")


# -- the batch and the modules' advantages ---------------------------------------------------------------------


def _seed(*key: int) -> int:
    return int(np.random.SeedSequence(list(key)).generate_state(1)[0])


def _generator(policy: Policy, seed: int) -> torch.Generator:
    return torch.Generator(device=policy.device).manual_seed(seed)


def sample_batch(
    policy: Policy, env: Any, prompts: int, group: int, *, seed: int, temperature: float, top_p: float
) -> list[Episode]:
    """``prompts`` tasks x ``group`` responses, each group forked from one reset (infra faults dropped)."""
    rng = np.random.default_rng(seed)
    envs, groups = [], []
    for p in range(prompts):
        env.reset(seed=int(rng.integers(2**31)))
        envs += [env.fork() for _ in range(group)]
        groups += [p] * group
    agent = PolicyAgent(policy, temperature=temperature, top_p=top_p, generator=_generator(policy, seed))
    return [ep for ep in play(agent, envs, groups, rng=rng) if ep.infra_error is None]


def probe_batch(setup: ProbeSetup, cfg: ProbeConfig) -> list[Episode]:
    """The batch `run_probe` draws for ``cfg`` (its seed, the run's temperature and top-p): a script that
    re-scores a saved ``probe.json`` gets the very responses it holds."""
    with torch.no_grad():
        return sample_batch(
            setup.policy,
            setup.env,
            cfg.prompts,
            cfg.group,
            seed=_seed(cfg.seed, 1),
            temperature=setup.run.temperature,
            top_p=setup.run.top_p,
        )


def module_advantages(*args: Any, **kwargs: Any) -> list[np.ndarray]:
    """``module``'s advantages of every policy token of each episode: `module_credit` without the marks."""
    return module_credit(*args, **kwargs)[0]


def module_credit(
    module: Any,
    credit_cfg: Any,
    providers: Mapping[str, SignalProvider],
    episodes: list[Episode],
    policy: Policy,
    *,
    step: int,
    total_steps: int,
    seed: int,
) -> tuple[list[np.ndarray], dict[str, list[np.ndarray]]]:
    """``module``'s advantages of every policy token of each episode, its rollout-phase signals computed by
    ``providers`` (the trainer's), as the trainer's credit step builds them; and the module's ``token_marks``
    (name -> per episode, on its policy tokens)."""
    request = functools.reduce(
        operator.or_, (p.forward_request() for p in providers.values()), ForwardRequest()
    )
    ctx = StepContext.of(step, episodes, policy, request, _generator(policy, seed))
    signals = {name: p.compute(ctx) for name, p in providers.items() if p.phase == "rollout"}
    device = ctx.input_ids.device
    batch = CreditBatch(
        token_rewards=ctx.batch.token_rewards.to(device),
        policy_mask=ctx.policy_mask,
        group_ids=ctx.batch.group_ids.to(device),
        old_logprobs=ctx.old_logprobs,
        segment_ids=ctx.batch.segment_ids.to(device),
        values=signals.pop("values", None),
        signals=signals,
        step=step,
        total_steps=total_steps,
    )
    out = module(batch, credit_cfg)

    def rows(x: torch.Tensor) -> list[np.ndarray]:
        x = x.double().cpu()
        return [x[row][ctx.batch.policy_mask[row]].numpy() for row in range(len(episodes))]

    return rows(out.advantages), {name: rows(m) for name, m in out.token_marks.items()}


def score(
    est: MCEstimate, advantages: Mapping[str, list[np.ndarray]], *, n_boot: int, seed: int
) -> dict[str, Any]:
    """The ceiling (split-half A*) and every module's figures, with paired bootstrap intervals."""
    astar = est.token_advantages()
    half_a, half_b = est.split_half()
    tables = [response_ingredients(adv, astar) for adv in advantages.values()]
    ceiling = bootstrap_figures(
        [response_ingredients(half_b, half_a)], n_boot=n_boot, seed=seed, ceiling=True
    )
    figs = bootstrap_figures(tables, n_boot=n_boot, seed=seed)
    return {
        "ceiling": {k: ceiling[0][k] for k in ("spearman", "pearson")},
        "modules": dict(zip(advantages, figs, strict=True)),
    }


# -- the command ------------------------------------------------------------------------------------------------


def find_checkpoint(path: str | os.PathLike[str]) -> Path:
    """A checkpoint folder itself, the latest under a run folder or its ``checkpoints/``."""
    root = Path(path)
    if (root / MANIFEST).is_file():
        return root
    for folder in (root / "checkpoints", root):
        found = latest_checkpoint(folder) if folder.is_dir() else None
        if found is not None:
            return found
    raise FileNotFoundError(
        f"no checkpoint at {root}: expected a checkpoint folder (step-NNNNNN/ with {MANIFEST}), a creditgym "
        "train run folder, or its checkpoints/ folder"
    )


def _resolve(cfg: ProbeConfig) -> tuple[TrainConfig, dict[str, Any] | None, Path | None]:
    """The run settings (from the checkpoint when there is one, then ``cfg``), the checkpoint's state, its path."""
    state, path, base = None, None, TrainConfig()
    if cfg.checkpoint is not None:
        path = find_checkpoint(cfg.checkpoint)
        state = load_checkpoint(path)
        base = TrainConfig(**state["config"])
    given = {
        "env_id": cfg.env_id,
        "model": cfg.model,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
    }
    env_kwargs = dict(cfg.env_kwargs if cfg.env_kwargs is not None else base.env_kwargs)
    if cfg.env_id is not None and cfg.env_id != base.env_id and cfg.env_kwargs is None:
        env_kwargs = {}
    if cfg.max_turns is not None:
        env_kwargs["max_turns"] = cfg.max_turns
    run = dataclasses.replace(
        base,
        **{k: v for k, v in given.items() if v is not None},
        env_kwargs=env_kwargs,
        prompts_per_step=cfg.prompts,
        group_size=cfg.group,
        seed=cfg.seed,
    )
    return run, state, path


def _load_weights(
    policy: Policy, state: Mapping[str, Any], path: Path, model: str, trained_from: str
) -> None:
    try:
        policy.model.load_state_dict(state["model"])
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        detail = " ".join(line.strip() for line in first[:3])[:400]
        raise ValueError(
            f"checkpoint {path} is from another model: its weights do not fit {model!r} ({detail}); it was "
            f"trained from {trained_from!r}: probe it with that model (or leave --model out)"
        ) from e


def _check_env(env: Any, env_id: str, max_turns: int | None) -> None:
    if max_turns is None and env_accepts(env_id, "max_turns"):
        raise ValueError(
            f"env {env_id!r} is multi-turn (it takes max_turns): each continuation would play every remaining "
            "turn, so give a turn budget with --max-turns N"
        )
    check_forkable(env, env_id)


def _progress(total: int) -> tuple[Any, Callable[[int], None]]:
    """A rich progress bar over the rollouts (plain, silent when not on a terminal) and its advance callback."""
    from rich.progress import MofNCompleteColumn, Progress, TextColumn

    columns = (*Progress.get_default_columns()[1:], MofNCompleteColumn(), TextColumn("{task.fields[rate]}"))
    bar = Progress(TextColumn("[bold]rollouts"), *columns, disable=not sys.stdout.isatty())
    task = bar.add_task("mc", total=total, rate="")
    start = time.perf_counter()

    def advance(n: int) -> None:
        bar.advance(task, n)
        done = bar.tasks[0].completed
        bar.update(task, rate=f"{done / max(time.perf_counter() - start, 1e-9):.1f}/s")

    return bar, advance


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` atomically (temporary file, then rename): a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_plain(data), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _plain(x: Any) -> Any:
    """JSON-ready: NumPy values to Python ones, NaN and infinities to None."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _responses(
    est: MCEstimate,
    advantages: Mapping[str, list[np.ndarray]] | None,
    marks: Mapping[str, Mapping[str, list[np.ndarray]]] | None = None,
) -> list[dict[str, Any]]:
    out = []
    complete = advantages is not None
    astar, values = (est.token_advantages(), est.values()) if complete else (None, None)
    for i, ep in enumerate(est.episodes):
        tok = ep.env.tokenizer
        row: dict[str, Any] = {
            "group": ep.group,
            "reward": ep.reward,
            "tokens": [tok.decode([t]) for t in ep.env.ledger.token_id[est.policy_index[i]].tolist()],
            "starts": est.starts[i],
            "continuation_rewards": est.rewards[i],
        }
        if complete:
            row["values"] = values[i]  # type: ignore[index]
            row["astar"] = astar[i]  # type: ignore[index]
            row["advantages"] = {name: adv[i] for name, adv in advantages.items()}  # type: ignore[union-attr]
        if marks:
            row["marks"] = {label: {name: m[i] for name, m in ms.items()} for label, ms in marks.items()}
        out.append(row)
    return out


@dataclass
class ProbeSetup:
    """What a probe runs with, everything checked before the first rollout (`setup_probe`).

    Attributes:
        run: The run's settings (the checkpoint's config, then the probe's overrides).
        env_id: The registered env id.
        policy: The policy, with the checkpoint's weights when there is one.
        env: The (unwrapped) env the batch is sampled from and forked.
        step: The optimizer step the credit modules see (schedules).
        modules: label -> (credit module, its config, its providers).
        settings: What ``probe.json`` records as its config.
    """

    run: TrainConfig
    env_id: str
    policy: Policy
    env: Any
    step: int
    modules: dict[str, tuple[Any, Any, dict[str, SignalProvider]]]
    settings: dict[str, Any]


def setup_probe(cfg: ProbeConfig) -> ProbeSetup:
    """Load the model (and checkpoint), make and check the env, build every module's providers.

    The module the checkpoint trained (the same label, e.g. ``gae``) gets the checkpoint's config fields and its
    providers' saved state (a trained critic, a teacher); other modules start their providers fresh.

    Raises:
        ValueError: an env that cannot fork or is multi-turn without a turn budget, a checkpoint from another
            model, an unknown module or config field, a signal the run cannot provide.
        FileNotFoundError: no model or checkpoint at the path given.
    """
    from creditgym.agents.compare import parse_entry

    run, state, ckpt_path = _resolve(cfg)
    env_id = resolve_env_id(run.env_id)
    policy = load_policy(run.model, device=cfg.device)
    trained = TrainConfig(**state["config"]) if state is not None else None
    if state is not None and trained is not None and ckpt_path is not None:
        _load_weights(policy, state, ckpt_path, run.model, trained.model)
    env = make_envs(run)[0].unwrapped
    _check_env(env, env_id, cfg.max_turns)
    step = int(state["step"]) if state is not None else run.steps - 1
    modules: dict[str, tuple[Any, Any, dict[str, SignalProvider]]] = {}
    for label in cfg.credit or tuple(credit_registry.available()):
        entry = parse_entry(label)
        module = credit_registry.get(entry.module)
        is_trained = trained is not None and label == trained.credit
        kwargs = dict(trained.credit_kwargs if trained is not None and is_trained else entry.kwargs)
        credit_cfg = module.make_config(kwargs)
        mod_run = dataclasses.replace(run, credit=entry.module, credit_kwargs=kwargs)
        providers = build_providers(RunContext(mod_run, policy, env, env_id, module, credit_cfg))
        for name, provider in providers.items() if is_trained and state is not None else ():
            provider.load_state_dict(state["providers"][name])
        modules[label] = (module, credit_cfg, providers)
    settings = {
        **dataclasses.asdict(cfg),
        "env_id": env_id,
        "env_kwargs": dict(run.env_kwargs),
        "model": run.model,
        "temperature": run.temperature,
        "top_p": run.top_p,
        "max_new_tokens": run.max_new_tokens,
        "credit": list(modules),
        "checkpoint": None if ckpt_path is None else str(ckpt_path),
        "checkpoint_step": None if state is None else step,
    }
    return ProbeSetup(run, env_id, policy, env, step, modules, settings)


def run_probe(cfg: ProbeConfig, out: str | os.PathLike[str]) -> dict[str, Any]:
    """Run the probe into the folder ``out`` and return what ``probe.json`` holds (module docstring).

    Interrupted (Ctrl-C), it leaves ``probe.json`` with ``"complete": false`` and the rollouts done so far, then
    re-raises ``KeyboardInterrupt``. Raises what `setup_probe` raises, before any rollout.
    """
    t_start = time.perf_counter()
    out = Path(out)
    setup = setup_probe(cfg)
    run, env_id, policy, settings = setup.run, setup.env_id, setup.policy, setup.settings
    out.mkdir(parents=True, exist_ok=True)
    t_setup = time.perf_counter()
    stage, est = "batch", None
    _write_json(out / "probe.json", {"complete": False, "stage": stage, "config": settings})
    try:
        with torch.no_grad():
            episodes = probe_batch(setup, cfg)
            if not episodes:
                raise RuntimeError(f"every response of the batch hit an infrastructure fault on {env_id!r}")
            check_one_turn(episodes, env_id, cfg.max_turns)
            est = plan(episodes, cfg.k, cfg.every)
            t_sampled, stage = time.perf_counter(), "rollouts"
            _write_json(out / "probe.json", {"complete": False, "stage": stage, "config": settings})
            reused = None if cfg.reuse is None else reuse_rewards(est, Path(cfg.reuse), settings)
            if reused is None:
                bar, advance = _progress(est.total)
                with bar:
                    stats = sample_continuations(
                        est,
                        policy,
                        temperature=run.temperature,
                        top_p=run.top_p,
                        generator=_generator(policy, _seed(cfg.seed, 2)),
                        rows=cfg.rows,
                        on_progress=advance,
                    )
            t_rollouts, stage = time.perf_counter(), "credit"
            credit = {
                label: module_credit(
                    module,
                    credit_cfg,
                    providers,
                    episodes,
                    policy,
                    step=setup.step,
                    total_steps=run.steps,
                    seed=_seed(cfg.seed, 3),
                )
                for label, (module, credit_cfg, providers) in setup.modules.items()
            }
            advantages = {label: adv for label, (adv, _) in credit.items()}
    except KeyboardInterrupt:
        partial: dict[str, Any] = {"complete": False, "interrupted": True, "stage": stage, "config": settings}
        if est is not None:
            partial.update(rollouts_done=est.done, rollouts_total=est.total, responses=_responses(est, None))
        _write_json(out / "probe.json", partial)
        raise
    t_credit = time.perf_counter()
    astar = est.token_advantages()
    result = {
        "complete": True,
        "config": settings,
        "batch": {
            "responses": len(episodes),
            "policy_tokens": int(sum(len(a) for a in astar)),
            "probed_prefixes": int(sum(len(s) for s in est.starts)),
            "rollouts": est.total,
            "reward_mean": float(np.mean([ep.reward for ep in episodes])),
            "v0_mean": float(np.mean([v[0] for v in est.values()])),
            "astar_abs_mean": float(np.mean(np.abs(np.concatenate(astar)))),
        },
        "timing": {**reused, "credit_s": t_credit - t_rollouts}
        if reused
        else {
            "setup_s": t_setup - t_start,
            "sample_s": t_sampled - t_setup,
            "rollouts_s": t_rollouts - t_sampled,
            "rollouts_per_s": est.total / max(t_rollouts - t_sampled, 1e-9),
            "rollout_tokens": stats.policy_tokens,
            "credit_s": t_credit - t_rollouts,
            "total_s": t_credit - t_start,
        },
        "machine": {"cpus": os.cpu_count(), "device": str(policy.device), "torch": torch.__version__},
        **score(est, advantages, n_boot=cfg.bootstrap, seed=cfg.seed),
        "marks": {
            label: {
                name: mark_figures(m, astar, n_boot=cfg.bootstrap, seed=cfg.seed) for name, m in marks.items()
            }
            for label, (_, marks) in credit.items()
            if marks
        },
        "responses": _responses(est, advantages, {label: m for label, (_, m) in credit.items() if m}),
    }
    result = _plain(result)
    _write_json(out / "probe.json", result)
    (out / "probe.md").write_text(probe_markdown(result))
    probe_png(result, out / "probe.png", shown=cfg.shown)
    return result


# -- during training --------------------------------------------------------------------------------------------


def probe_metrics(trainer: Trainer) -> dict[str, float]:
    """At steps that are multiples of ``cfg.probe_every``: the run's module probed on a fresh batch of
    ``probe_prompts x group_size`` responses with ``probe_k`` continuations every ``probe_stride`` tokens, with
    the trainer's own providers (its critic, its teacher); ``{}`` at other steps or when ``probe_every`` is 0.

    Draws come from their own seeds, so training itself is unchanged by probing."""
    cfg = trainer.cfg
    if not cfg.probe_every or trainer.step % cfg.probe_every:
        return {}
    t0 = time.perf_counter()
    env, policy = trainer.env.unwrapped, trainer.policy
    check_forkable(env, cfg.env_id)
    with torch.no_grad():
        episodes = sample_batch(
            policy,
            env,
            cfg.probe_prompts,
            cfg.group_size,
            seed=_seed(cfg.seed, trainer.step, 101),
            temperature=cfg.temperature,
            top_p=cfg.top_p,
        )
        est = plan(episodes, cfg.probe_k, cfg.probe_stride)
        sample_continuations(
            est,
            policy,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            generator=_generator(policy, _seed(cfg.seed, trainer.step, 102)),
        )
        adv = module_advantages(
            trainer.module,
            trainer.credit_cfg,
            trainer.providers,
            episodes,
            policy,
            step=trainer.step,
            total_steps=cfg.steps,
            seed=_seed(cfg.seed, trainer.step, 103),
        )
    figs = score(est, {cfg.credit: adv}, n_boot=0, seed=cfg.seed)
    out = {f"probe/{k}": v["value"] for k, v in figs["modules"][cfg.credit].items()}
    out.update({f"probe/ceiling_{k}": v["value"] for k, v in figs["ceiling"].items()})
    return {
        **{k: float("nan") if v is None else float(v) for k, v in out.items()},
        "time/probe_s": time.perf_counter() - t0,
    }
