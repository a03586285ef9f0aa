"""The training run's configuration: a frozen dataclass, each default in one place (no torch import here)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Defaults that differ per model, measured on it (docs/models.md has the runs): `TrainConfig.for_model` applies
#: them, except ``max_new_tokens``, which waits for the env (`response_budget`).
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "creditgym/tiny": {"max_new_tokens": 48},
    "smollm2-135m": {"lr": 1e-6, "max_new_tokens": 48},
}

AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
KL_KINDS: tuple[str, ...] = ("k1", "k2", "k3")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run depends on; each default lives here and only here.

    The ``creditgym train`` flags and their help are generated from these fields and this docstring
    (`config_help`): one line per field in ``Attributes``, so adding a knob is one edit.

    Attributes:
        env_id: Env id: a registered id, or Gymnasium's ``module:EnvId`` (the module is imported first).
        env_kwargs: Keyword arguments of the env's constructor (``gymnasium.make``), e.g. ``{"difficulty": 2}``.
        max_new_tokens: Response token budget per turn; None: not set, so the model's default (``creditgym
            models``), else the env's own (`response_budget` decides, once).
        eval_env_id: Env id of the held-out evaluation (default: ``env_id``, on its test split when it has one).
        eval_env_kwargs: Keyword arguments of the evaluation env (added to ``env_kwargs`` when it is the same env).
        credit: Name of the credit module (``creditgym.credit.available()``).
        credit_kwargs: Fields of the module's config that differ from its defaults.
        model: ``creditgym/tiny``, a named model (``smollm2-135m``, ``creditgym models``), a ``.gguf`` file, a
            local Hugging Face folder, or a cached hub id; a named model brings its defaults (`MODEL_DEFAULTS`).
        steps: Optimizer steps (one rollout batch each).
        seed: Seeds everything; step ``k`` draws from generators seeded with ``(seed, k)``.
        prompts_per_step: P tasks per step.
        group_size: G completions per task.
        temperature: Sampling temperature during training.
        top_p: Nucleus mass during training.
        lr: Actor learning rate (AdamW); smollm2-135m: 1e-6.
        critic_lr: Critic learning rate (modules that train a critic).
        weight_decay: AdamW weight decay of the actor.
        epochs: Passes over each rollout batch.
        minibatches: Minibatches per epoch (``epochs * minibatches`` optimizer updates per step).
        clip_low: The surrogate clips the ratio below at ``1 - clip_low``.
        clip_high: The surrogate clips the ratio above at ``1 + clip_high``.
        loss: Actor loss, a registered name (`creditgym.agents.train.loss.register_loss`) or ``module:name``
            (the module is imported first): ``ppo`` (the clipped surrogate, ``clip_low``/``clip_high``) or ``dis``
            (PACT's math update: decoupled importance sampling, the stop-gradient ratio masked outside [0.7,
            6.0]); None: the credit module's own (``dis`` for pact, ``ppo`` for the others).
        loss_agg: Loss aggregation: ``token-mean``, ``seq-mean-token-mean`` or ``seq-mean-token-sum``.
        kl_coef: Weight of the KL penalty to a frozen copy of the initial model (0 = no reference model).
        kl_kind: KL estimator: ``k1``, ``k2`` or ``k3``.
        entropy_coef: Weight of an entropy bonus (entropy is logged either way).
        max_grad_norm: Gradient clipping of the actor.
        eval_every: Held-out evaluation every this many steps (and at step 0 and at the end).
        eval_episodes: Held-out episodes (greedy decoding).
        checkpoint_every: Checkpoint every this many steps (and at exit).
        device: ``cpu``, ``cuda``, or None (CUDA when available).
        backend: Who samples: ``hf`` (Hugging Face ``generate``, CPU or GPU) or ``vllm`` (GPU, the ``gpu`` extra;
            the trainer's weights are synced into it after every step).
        probe_every: Probe the run's module against Monte-Carlo ground truth (``creditgym probe``) at step 0 and
            every this many steps, logging ``probe/*`` (0 = never; needs an env that forks mid-episode).
        probe_prompts: Tasks of each probe batch (``probe_prompts x group_size`` responses).
        probe_k: Continuations per probed prefix in a probe (>= 2).
        probe_stride: A probe estimates A* every this many response tokens (1 = every token).
    """

    env_id: str = "creditgym/Math-v0"
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_new_tokens: int | None = None
    eval_env_id: str | None = None
    eval_env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    credit: str = "grpo"
    credit_kwargs: Mapping[str, Any] = field(default_factory=dict)
    model: str = "creditgym/tiny"
    steps: int = 60
    seed: int = 0
    prompts_per_step: int = 8
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    lr: float = 5e-5
    critic_lr: float = 1e-3
    weight_decay: float = 0.0
    epochs: int = 1
    minibatches: int = 2
    clip_low: float = 0.2
    clip_high: float = 0.28
    loss: str | None = None
    loss_agg: str = "token-mean"
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    entropy_coef: float = 0.0
    max_grad_norm: float = 1.0
    eval_every: int = 20
    eval_episodes: int = 200
    checkpoint_every: int = 20
    device: str | None = None
    backend: str = "hf"
    probe_every: int = 0
    probe_prompts: int = 2
    probe_k: int = 8
    probe_stride: int = 1

    @classmethod
    def for_model(cls, **fields: Any) -> TrainConfig:
        """A config whose unset fields take the defaults of its model (`MODEL_DEFAULTS`), then the class's.

        The model's ``max_new_tokens`` is not filled in here: it applies only to an env that takes a budget, which
        `response_budget` knows, and ``max_new_tokens`` stays None, "not set", until then.
        """
        model = MODEL_DEFAULTS.get(str(fields.get("model", cls.model)), {})
        return cls(**{**{k: v for k, v in model.items() if k != "max_new_tokens"}, **fields})

    def __post_init__(self) -> None:
        positive = (
            "steps",
            "prompts_per_step",
            "group_size",
            "epochs",
            "minibatches",
            "eval_every",
            "eval_episodes",
            "checkpoint_every",
        )
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_new_tokens is not None and (
            isinstance(self.max_new_tokens, bool)
            or not isinstance(self.max_new_tokens, int)
            or self.max_new_tokens < 1
        ):
            raise ValueError(
                f"TrainConfig.max_new_tokens must be an int >= 1 or None, got {self.max_new_tokens!r}"
            )
        if self.probe_every < 0 or self.probe_prompts < 1 or self.probe_k < 2 or self.probe_stride < 1:
            raise ValueError(
                "TrainConfig: need probe_every >= 0, probe_prompts >= 1, probe_k >= 2 and probe_stride >= 1, got "
                f"{self.probe_every}, {self.probe_prompts}, {self.probe_k}, {self.probe_stride}"
            )
        if self.backend not in ("hf", "vllm"):
            raise ValueError(f"TrainConfig.backend must be 'hf' or 'vllm', got {self.backend!r}")
        if self.loss_agg not in AGG_MODES:
            raise ValueError(f"TrainConfig.loss_agg must be one of {AGG_MODES}, got {self.loss_agg!r}")
        if self.loss is not None and not (
            isinstance(self.loss, str) and self.loss.rpartition(":")[2].isidentifier()
        ):
            raise ValueError(
                f"TrainConfig.loss must be an actor loss name like 'ppo', 'module:name' or None, got {self.loss!r}"
            )
        if self.kl_kind not in KL_KINDS:
            raise ValueError(f"TrainConfig.kl_kind must be one of {KL_KINDS}, got {self.kl_kind!r}")
        if not (self.lr > 0 and self.critic_lr > 0 and self.max_grad_norm > 0):
            raise ValueError("TrainConfig: lr, critic_lr and max_grad_norm must be > 0")
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ValueError(
                f"TrainConfig: need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}"
            )
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"TrainConfig: temperature must be >= 0 and top_p in (0, 1], got {self.temperature}, {self.top_p}"
            )


def response_budget(cfg: TrainConfig) -> int | None:
    """The response token budget per turn of a run of ``cfg``: the one place it is decided.

    The first of: the user's (``max_new_tokens``: ``--max-new-tokens``, a ``--config`` file,
    ``TrainConfig(max_new_tokens=...)``; or ``max_new_tokens`` in ``env_kwargs``); the model's default
    (`MODEL_DEFAULTS`), when the env's constructor takes a ``max_new_tokens``; None: the env's own (its
    constructor's default: Math-v0 256, Rubric-v0 its preset's, Planted-v0 16, SWEBench-v0 1024).

    Raises:
        ValueError: the user set a budget the env's constructor does not take, or set it twice, differently.
    """
    from creditgym.envs import env_accepts, resolve_env_id  # gymnasium: only when a run is resolved

    env_id = resolve_env_id(cfg.env_id)
    given = cfg.env_kwargs.get("max_new_tokens")
    if given is not None and cfg.max_new_tokens is not None and given != cfg.max_new_tokens:
        raise ValueError(
            f"max_new_tokens={cfg.max_new_tokens} and env_kwargs max_new_tokens={given} differ: set the budget "
            "once (--max-new-tokens)"
        )
    user = cfg.max_new_tokens if cfg.max_new_tokens is not None else given
    accepts = env_accepts(env_id, "max_new_tokens")
    if user is not None and not accepts:
        raise ValueError(
            f"env {env_id!r} takes no max_new_tokens, so max_new_tokens={user} cannot reach it; leave "
            "--max-new-tokens out, or give the env a max_new_tokens argument"
        )
    if user is not None:
        return int(user)
    model = MODEL_DEFAULTS.get(cfg.model, {}).get("max_new_tokens")
    return int(model) if model is not None and accepts else None


def resolve(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with what it leaves to others filled in: ``max_new_tokens`` None becomes `response_budget`'s, and
    ``loss`` None the credit module's actor loss (``creditgym.credit.get(cfg.credit).actor_loss``). The trainer
    runs, and records, the resolved config.

    Raises:
        ValueError: a budget the env cannot take (`response_budget`), an unknown module (the known ones listed),
            or an actor loss nobody registered (the run's or the module's; the known ones listed).
    """
    # both import torch: only when a run is resolved, not with this module
    from creditgym.agents.train.loss import get_loss
    from creditgym.credit import get

    cfg = dataclasses.replace(cfg, max_new_tokens=response_budget(cfg))
    if cfg.loss is not None:
        get_loss(cfg.loss)
        return cfg
    loss = get(cfg.credit).actor_loss
    try:
        get_loss(loss)
    except ValueError as e:
        raise ValueError(
            f"credit module {cfg.credit!r} names the actor loss {loss!r}: {e}; pass --loss"
        ) from e
    return dataclasses.replace(cfg, loss=loss)


def config_help(cls: type) -> dict[str, str]:
    """Field name -> its line in the ``Attributes`` section of ``cls``'s docstring (continuation lines joined)."""
    doc = inspect.getdoc(cls) or ""
    _, _, section = doc.partition("Attributes:\n")
    out: dict[str, str] = {}
    current = None
    for line in section.splitlines():
        if not line.strip():
            break
        head = re.match(r"^    (\w+): (.*)$", line)
        if head:
            current = head.group(1)
            out[current] = head.group(2).strip()
        elif current is not None and line.startswith("        "):
            out[current] += " " + line.strip()
    return out
