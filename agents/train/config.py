"""The training run's configuration: a frozen dataclass, each default in one place (no torch import here)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
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
    """Everything a run depends on; each default and its help live in its field, here and only here.

    The ``creditgym train`` flags are generated from these fields, their help from each field's
    ``metadata["help"]`` (`config_help`), so adding a knob is one edit; the ``Attributes`` section of this
    docstring is built from the same help when the module is imported.
    """

    env_id: str = field(
        default="creditgym/Math-v0",
        metadata={
            "help": (
                "Env id: a registered id, or Gymnasium's ``module:EnvId`` (the module is imported first)."
            )
        },
    )
    env_kwargs: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": (
                'Keyword arguments of the env\'s constructor (``gymnasium.make``), e.g. ``{"difficulty": 2}``.'
            )
        },
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata={
            "help": (
                "Response token budget per turn; None: not set, so the model's default (`MODEL_DEFAULTS`), "
                "else the env's own (`response_budget` decides, once)."
            )
        },
    )
    eval_env_id: str | None = field(
        default=None,
        metadata={
            "help": (
                "Env id of the held-out evaluation (default: ``env_id``, on its test split when it has one)."
            )
        },
    )
    eval_env_kwargs: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": (
                "Keyword arguments of the evaluation env (added to ``env_kwargs`` when it is the same env)."
            )
        },
    )
    credit: str = field(
        default="grpo",
        metadata={"help": "Name of the credit module (``creditgym.credit.available()``)."},
    )
    credit_kwargs: Mapping[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Fields of the module's config that differ from its defaults."},
    )
    model: str = field(
        default="creditgym/tiny",
        metadata={
            "help": (
                "``creditgym/tiny``, a named model (``smollm2-135m``, ``creditgym models``), a ``.gguf`` file, a "
                "local Hugging Face folder, or a cached hub id; a named model brings its defaults "
                "(`MODEL_DEFAULTS`)."
            )
        },
    )
    steps: int = field(default=60, metadata={"help": "Optimizer steps (one rollout batch each)."})
    seed: int = field(
        default=0,
        metadata={"help": "Seeds everything; step ``k`` draws from generators seeded with ``(seed, k)``."},
    )
    prompts_per_step: int = field(default=8, metadata={"help": "P tasks per step."})
    group_size: int = field(default=8, metadata={"help": "G completions per task."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature during training."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus mass during training."})
    lr: float = field(default=5e-5, metadata={"help": "Actor learning rate (AdamW); smollm2-135m: 1e-6."})
    critic_lr: float = field(
        default=1e-3,
        metadata={"help": "Critic learning rate (modules that train a critic)."},
    )
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay of the actor."})
    epochs: int = field(default=1, metadata={"help": "Passes over each rollout batch."})
    minibatches: int = field(
        default=2,
        metadata={"help": "Minibatches per epoch (``epochs * minibatches`` optimizer updates per step)."},
    )
    clip_low: float = field(
        default=0.2,
        metadata={"help": "The surrogate clips the ratio below at ``1 - clip_low``."},
    )
    clip_high: float = field(
        default=0.28,
        metadata={"help": "The surrogate clips the ratio above at ``1 + clip_high``."},
    )
    loss: str | None = field(
        default=None,
        metadata={
            "help": (
                "Actor loss, a registered name (`creditgym.agents.train.loss.register_loss`) or ``module:name`` "
                "(the module is imported first): ``ppo`` (the clipped surrogate, ``clip_low``/``clip_high``) or "
                "``dis`` (PACT's math update: decoupled importance sampling, the stop-gradient ratio masked "
                "outside [0.7, 6.0]); None: the credit module's own (``dis`` for pact, ``ppo`` for the others)."
            )
        },
    )
    loss_agg: str = field(
        default="token-mean",
        metadata={
            "help": ("Loss aggregation: ``token-mean``, ``seq-mean-token-mean`` or ``seq-mean-token-sum``.")
        },
    )
    kl_coef: float = field(
        default=0.0,
        metadata={
            "help": (
                "Weight of the KL penalty to a frozen copy of the initial model (0 = no reference model)."
            )
        },
    )
    kl_kind: str = field(default="k3", metadata={"help": "KL estimator: ``k1``, ``k2`` or ``k3``."})
    entropy_coef: float = field(
        default=0.0,
        metadata={"help": "Weight of an entropy bonus (entropy is logged either way)."},
    )
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping of the actor."})
    eval_every: int = field(
        default=20,
        metadata={"help": "Held-out evaluation every this many steps (and at step 0 and at the end)."},
    )
    eval_episodes: int = field(default=200, metadata={"help": "Held-out episodes (greedy decoding)."})
    checkpoint_every: int = field(
        default=20,
        metadata={"help": "Checkpoint every this many steps (and at exit)."},
    )
    device: str | None = field(
        default=None,
        metadata={"help": "``cpu``, ``cuda``, or None (CUDA when available)."},
    )
    backend: str = field(
        default="hf",
        metadata={
            "help": (
                "Who samples: ``hf`` (Hugging Face ``generate``, CPU or GPU) or ``vllm`` (GPU, the ``gpu`` extra;"
                " the trainer's weights are synced into it after every step)."
            )
        },
    )
    probe_every: int = field(
        default=0,
        metadata={
            "help": (
                "Probe the run's module against Monte-Carlo ground truth (``creditgym probe``) at step 0 and "
                "every this many steps, logging ``probe/*`` (0 = never; needs an env that forks mid-episode)."
            )
        },
    )
    probe_prompts: int = field(
        default=2,
        metadata={"help": "Tasks of each probe batch (``probe_prompts x group_size`` responses)."},
    )
    probe_k: int = field(default=8, metadata={"help": "Continuations per probed prefix in a probe (>= 2)."})
    probe_stride: int = field(
        default=1,
        metadata={"help": "A probe estimates A* every this many response tokens (1 = every token)."},
    )

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
    """Field name -> its help: each field's ``metadata["help"]`` (`TrainConfig`), or, for a dataclass whose fields
    carry none (`ProbeConfig`), its line in the ``Attributes`` section of the docstring (continuation lines joined).
    """
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(cls) if "help" in f.metadata}
    if helps:
        return helps
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


def _with_attributes(cls: type) -> str:
    """``cls``'s docstring with an ``Attributes`` section of its fields' help (for ``help()`` and the API page)."""
    lines = [inspect.cleandoc(cls.__doc__ or ""), "", "Attributes:"]
    for name, text in config_help(cls).items():
        lines += textwrap.wrap(
            f"{name}: {text}",
            110,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
    return "\n".join(lines)


TrainConfig.__doc__ = _with_attributes(TrainConfig)
