"""What a probe runs with: its settings (`ProbeConfig`) and the model, env and modules they give (`setup_probe`),
everything checked before the first rollout."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from creditgym import credit as credit_registry
from creditgym.agents.eval.evaluate import make_envs
from creditgym.agents.probe.control import DEFAULT_NOISE, ORACLE, parse_control
from creditgym.agents.providers import RunContext, SignalProvider, build_providers
from creditgym.agents.providers.mc import check_forkable
from creditgym.agents.train.checkpoint import MANIFEST, latest_checkpoint, load_checkpoint
from creditgym.agents.train.config import TrainConfig, response_budget
from creditgym.agents.train.policy import load_policy
from creditgym.credit.vine import VineConfig
from creditgym.envs import env_accepts, resolve_env_id

if TYPE_CHECKING:
    from creditgym.agents.train.policy import Policy

__all__ = ["ProbeConfig", "ProbeSetup", "find_checkpoint", "setup_probe"]


@dataclass(frozen=True)
class ProbeConfig:
    """What ``creditgym probe`` measures; each default lives here (None: the checkpoint's, else `TrainConfig`'s).

    Attributes:
        env_id: Env id (registered, or ``module:EnvId``); None: the checkpoint's, else ``TrainConfig.env_id``.
        env_kwargs: Env constructor arguments (None: the checkpoint's, else none).
        model: ``creditgym/tiny``, a named model (``smollm2-135m``; ``creditgym models`` lists them), a ``.gguf``
            file or a model folder, as in training; None: the checkpoint's, else ``TrainConfig.model``.
        credit: Modules (or variants ``name:key=value``) to score, and positive controls ``oracle:noise=q``;
            empty: every registered module and ``oracle:noise=0.5``.
        prompts: P tasks.
        group: G responses per task.
        k: Continuations per probed prefix in the first round (>= 2: the reliability splits them in two halves).
        max_k: The budget: the largest K the probe samples (with a target).
        target: K grows until the lower bound of A*'s within-response reliability reaches this (in (0, 1));
            None: K stays ``k``, whatever the reliability.
        every: Probe every ``every`` response tokens (1 = every token); None: at step boundaries (``delimiter``).
        delimiter: With ``every`` None, the text that ends a step (None: `vine`'s default).
        temperature: Sampling temperature of the batch and the continuations (None: the run's).
        top_p: Nucleus mass (None: the run's).
        max_new_tokens: Response budget (None: the run's, else the model's, else the env's: `response_budget`).
        max_turns: Turn budget of a multi-turn env (passed as ``max_turns``); a multi-turn env needs one.
        seed: Seeds the batch, the continuations and the bootstrap.
        checkpoint: A checkpoint folder, a ``creditgym train`` run folder (its latest) or its ``checkpoints/``.
        device: ``cpu``, ``cuda`` or None (CUDA when available).
        rows: Forks generated in one batch.
        bootstrap: Bootstrap resamples of the responses (>= 1 with a target: its lower bound is one).
        shown: Responses drawn in ``probe.png``.
        reuse: A complete ``probe.json`` of the same batch (same env, model, checkpoint, seed, sizes, ``k``,
            positions and sampling): its continuation rewards, hence A*, are reused and only the modules are
            computed, so new modules are scored against the very same A*. The batch must match token for token.
            A refused or interrupted probe's file resumes it: its continuations are kept, K grows from there.
        warm: Checkpoints (or run folders) whose trained module's providers (a critic, a teacher) are loaded into
            the same label here, the policy staying the probe's own: a critic warmed up by a short run, probed on
            the untrained policy's batch beside the other modules (and against a reused A*).
    """

    env_id: str | None = None
    env_kwargs: Mapping[str, Any] | None = None
    model: str | None = None
    credit: tuple[str, ...] = ()
    prompts: int = 4
    group: int = 4
    k: int = 8
    max_k: int = 64
    target: float | None = 0.5
    every: int | None = None
    delimiter: str | None = None
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
    warm: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("k", "max_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise ValueError(
                    f"{'K' if name == 'k' else name} must be an int >= 2 (the reliability of A* compares two "
                    f"halves of the K continuations), got {value!r}"
                )
        if self.target is not None and self.max_k < self.k:
            raise ValueError(f"max_k ({self.max_k}) must be >= k ({self.k}): K only grows from k up to max_k")
        if self.target is not None and not 0.0 < self.target < 1.0:
            raise ValueError(
                f"target must be in (0, 1) (a reliability's lower bound) or None (a fixed K), got {self.target!r}"
            )
        if self.target is not None and self.bootstrap < 1:
            raise ValueError("a target needs bootstrap >= 1 (it is the lower bound of a bootstrap interval)")
        for name in ("prompts", "group", "rows", "shown"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ProbeConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.every is not None and int(self.every) < 1:
            raise ValueError(
                f"every must be >= 1 (1 = every token) or None (step boundaries), got {self.every!r}"
            )
        if self.max_turns is not None and int(self.max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns!r}")
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap must be >= 0, got {self.bootstrap!r}")

    @property
    def steps(self) -> tuple[int | None, str]:
        """Where A* is probed: ``(every, delimiter)`` for `plan`, `vine`'s default delimiter when none is set."""
        return self.every, self.delimiter if self.delimiter is not None else VineConfig().delimiter


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
    state, path = None, None
    base = TrainConfig.for_model(**({"model": cfg.model} if cfg.model else {}))  # the model's defaults
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
    if cfg.env_id is not None and cfg.env_id != base.env_id:  # the run's env settings stay with its env
        env_kwargs = env_kwargs if cfg.env_kwargs is not None else {}
        base = dataclasses.replace(base, max_new_tokens=None)
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
    return dataclasses.replace(run, max_new_tokens=response_budget(run)), state, path


def _warm_states(
    paths: tuple[str, ...], labels: tuple[str, ...], model: str
) -> dict[str, tuple[dict[str, Any], Path]]:
    """label -> (saved state, checkpoint path) of each ``warm`` checkpoint: the label is the module it trained.

    Raises:
        ValueError: a checkpoint of another model, of a module not listed, or two for one module.
        FileNotFoundError: no checkpoint at a path.
    """
    warm: dict[str, tuple[dict[str, Any], Path]] = {}
    for given in paths:
        path = find_checkpoint(given)
        state = load_checkpoint(path)
        trained = TrainConfig(**state["config"])
        if trained.model != model:
            raise ValueError(
                f"warm checkpoint {path} trained {trained.model!r}, not the probed model {model!r}: its providers "
                "read that model's hidden states"
            )
        if trained.credit not in labels:
            raise ValueError(
                f"warm checkpoint {path} trained {trained.credit!r}, which is not among the probed modules "
                f"{list(labels)}: add it to --credit"
            )
        if trained.credit in warm:
            raise ValueError(
                f"two warm checkpoints for {trained.credit!r}: {warm[trained.credit][1]} and {path}"
            )
        warm[trained.credit] = (state, path)
    return warm


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
        controls: label -> noise share of each positive control (``oracle:noise=q``).
        settings: What ``probe.json`` records as its config.
    """

    run: TrainConfig
    env_id: str
    policy: Policy
    env: Any
    step: int
    modules: dict[str, tuple[Any, Any, dict[str, SignalProvider]]]
    controls: dict[str, float]
    settings: dict[str, Any]


def setup_probe(cfg: ProbeConfig) -> ProbeSetup:
    """Load the model (and checkpoint), make and check the env, build every module's providers.

    The module the checkpoint trained (the same label, e.g. ``gae``) gets the checkpoint's config fields and its
    providers' saved state (a trained critic, a teacher), as each ``warm`` checkpoint's module does from its own;
    other modules start their providers fresh.

    Raises:
        ValueError: an env that cannot fork or is multi-turn without a turn budget, a checkpoint from another
            model, an unknown module or config field, a signal the run cannot provide.
        FileNotFoundError: no model or checkpoint at the path given.
    """
    from creditgym.agents.study.compare import parse_entry

    run, state, ckpt_path = _resolve(cfg)
    env_id = resolve_env_id(run.env_id)
    policy = load_policy(run.model, device=cfg.device)
    trained = TrainConfig(**state["config"]) if state is not None else None
    if state is not None and trained is not None and ckpt_path is not None:
        _load_weights(policy, state, ckpt_path, run.model, trained.model)
    env = make_envs(run, policy.tokenizer)[0].unwrapped
    _check_env(env, env_id, cfg.max_turns)
    step = int(state["step"]) if state is not None else run.steps - 1
    modules: dict[str, tuple[Any, Any, dict[str, SignalProvider]]] = {}
    controls: dict[str, float] = {}
    labels = cfg.credit or (*credit_registry.available(), f"{ORACLE}:noise={DEFAULT_NOISE:g}")
    warm = _warm_states(cfg.warm, labels, run.model)
    saved_states = dict(warm)  # label -> (state, path) whose providers (and config) the label gets
    if state is not None and trained is not None and ckpt_path is not None:
        if trained.credit in warm:
            raise ValueError(
                f"{trained.credit!r} is both --checkpoint's module and --warm's ({warm[trained.credit][1]})"
            )
        saved_states[trained.credit] = (state, ckpt_path)
    for label in labels:
        noise = parse_control(label)
        if noise is not None:
            controls[label] = noise
            continue
        entry = parse_entry(label)
        module = credit_registry.get(entry.module)
        saved = saved_states[label][0] if label in saved_states else None
        kwargs = dict(entry.kwargs if saved is None else TrainConfig(**saved["config"]).credit_kwargs)
        credit_cfg = module.make_config(kwargs)
        mod_run = dataclasses.replace(run, credit=entry.module, credit_kwargs=kwargs)
        providers = build_providers(RunContext(mod_run, policy, env, env_id), module, credit_cfg)
        for name, provider in providers.items() if saved is not None else ():
            provider.load_state_dict(saved["providers"][name])
        modules[label] = (module, credit_cfg, providers)
    settings = {
        **dataclasses.asdict(cfg),
        "env_id": env_id,
        "env_kwargs": dict(run.env_kwargs),
        "model": run.model,
        "temperature": run.temperature,
        "top_p": run.top_p,
        "max_new_tokens": run.max_new_tokens,
        "credit": list(labels),
        "delimiter": cfg.steps[1] if cfg.every is None else None,
        "checkpoint": None if ckpt_path is None else str(ckpt_path),
        "checkpoint_step": None if state is None else step,
        "warm": {label: str(path) for label, (_, path) in warm.items()} or None,
    }
    return ProbeSetup(run, env_id, policy, env, step, modules, controls, settings)
