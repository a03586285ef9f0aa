"""verl adapter: every credit module as a verl advantage estimator (``algorithm.adv_estimator=credit_<name>``).

::

    register_with_verl()        # inside verl's Ray TaskRunner process, before the trainer is built
    adv, returns = make_verl_estimator("cort")(token_level_rewards, response_mask, index=uid, config=algo_cfg,
        old_log_probs=..., counterfactual_logprobs=..., criterion_spans=..., global_steps=s, total_training_steps=n)

Arguments, verl's names and response-only shapes (B, T) -> `CreditBatch`: ``token_level_rewards`` ->
``token_rewards`` (0 off the mask); ``response_mask`` {0, 1} -> ``policy_mask``; ``index`` (verl's ``uid``
array) -> ``group_ids``, numbered by first appearance (None: every row its own group); ``old_log_probs`` ->
``old_logprobs``; ``values`` -> ``values``; ``segment_ids``; each signal of `creditgym.credit.SIGNALS` by its
name; ``global_steps`` (verl's 1-based step) -> ``step = global_steps - 1``; ``total_training_steps`` (verl's
plan) -> ``total_steps``. verl's other dispatcher keywords (``reward_baselines``, ...) are ignored; any other
keyword is an error listing the accepted ones.

The estimator computes nothing itself: verl's dispatcher passes only ``token_level_rewards``, ``response_mask``,
``index`` and ``config``, which is all ``grpo`` and ``rloo`` read. Everything else comes from a trainer subclass
that calls the estimator with the batch's fields (v1 trainer: ``_compute_advantage``, whose ``select_fields``
hold ``old_log_probs`` and ``values``): ``old_log_probs`` (verl's actor computes them) for ``cort`` and
``cast``; ``values`` (verl's critic) for ``gae``, ``compo`` and ``pact``; the signals (counterfactual and
teacher replays, attention statistics, ``vine``'s ``mc_values`` sampled from forks of the episode by a rollout
worker); ``global_steps`` for ``cort`` and ``compo``, ``total_training_steps`` for ``cort``'s ramp. A missing signal is a
`ValueError` naming its keyword; a module that reads a missing old log-prob or step raises `MissingInputError`
(a ``ValueError``) naming its keyword. Nothing is filled with zeros.

Module config: defaults < verl ``AlgoConfig``'s ``gamma`` and ``lam`` (GAE's, onto a critic module's fields of
those names) and ``norm_adv_by_std_in_grpo`` (-> ``norm_by_std``) < overrides given to `make_verl_estimator` <
a ``credit`` mapping in ``config``; a config instance is used as is. An unknown field lists the known ones.
Returns ``(advantages, returns)`` (B, T), 0 off the mask; ``(advantages, advantages)`` without value targets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from creditgym.credit import SIGNALS, available, get
from creditgym.credit.adapters._common import MissingInputError, check_signals, module_config, partial_batch
from creditgym.credit.base import CreditModule

__all__ = ["MissingInputError", "VerlEstimator", "group_index", "make_verl_estimator", "register_with_verl"]

#: verl AlgoConfig field -> credit config field: GAE's discount and trace (onto a critic module's), GRPO's std.
_VERL_FIELDS: Mapping[str, str] = {"gamma": "gamma", "lam": "lam", "norm_adv_by_std_in_grpo": "norm_by_std"}
_GAE_FIELDS = ("gamma", "lam")
#: Keywords verl's dispatcher passes to some of its own estimators; accepted and ignored.
_VERL_IGNORED = ("reward_baselines", "batch", "non_tensor_batch", "sum_pi_squared", "rollout_is_weights")
_INPUTS = ("old_log_probs", "values", "segment_ids", "global_steps", "total_training_steps")
_HOW = (
    "verl's dispatcher passes only token_level_rewards, response_mask, index and config: call the estimator "
    "from a trainer subclass's advantage step with {what}"
)
_ABSENT = {
    "old_logprobs": "old_log_probs=data.batch['old_log_probs'] (the behaviour log-probs verl's actor computes)",
    "step": "global_steps=self.global_steps (verl's 1-based training step)",
    "total_steps": "total_training_steps=self.total_training_steps (verl's plan: trainer.total_training_steps, "
    "else the dataloader's length x trainer.total_epochs)",
}


class VerlEstimator(Protocol):
    """verl's advantage-estimator signature."""

    def __call__(
        self,
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor]: ...


def group_index(
    index: np.ndarray | list[Any] | Tensor | None, batch_size: int, device: torch.device
) -> Tensor:
    """verl's ``uid`` array (B,) as int64 group ids, numbered by first appearance; None -> ``arange(B)``."""
    if index is None:
        return torch.arange(batch_size, device=device)
    if isinstance(index, Tensor):
        index = index.detach().cpu().numpy()
    ids = list(np.asarray(index, dtype=object).reshape(-1))
    if len(ids) != batch_size:
        raise ValueError(f"verl estimator: index has {len(ids)} entries, expected one per row ({batch_size})")
    numbering: dict[Any, int] = {}
    out = [numbering.setdefault(u, len(numbering)) for u in ids]
    return torch.tensor(out, dtype=torch.int64, device=device)


def _get(config: Any, key: str) -> Any:
    """``config[key]`` / ``config.key`` for a mapping, DictConfig or dataclass; None when absent."""
    if config is None:
        return None
    if isinstance(config, Mapping):
        return config.get(key)
    try:
        return config.get(key)  # OmegaConf DictConfig, verl BaseConfig
    except (AttributeError, TypeError, KeyError):
        return getattr(config, key, None)


def _module_config(
    module: CreditModule[object], verl_config: Any, overrides: object | Mapping[str, Any] | None
) -> object:
    """Module defaults < verl AlgoConfig fields < factory overrides < ``verl_config.credit`` (module docstring)."""
    where = f"make_verl_estimator({module.name!r})"
    if overrides is not None and not isinstance(overrides, Mapping):
        return module_config(module, overrides, {}, where)
    base: dict[str, Any] = {}
    for verl_key, key in _VERL_FIELDS.items():
        v = _get(verl_config, verl_key)
        if v is not None and (module.critic or key not in _GAE_FIELDS):  # CAST's ``lam`` is not GAE's
            base[key] = bool(v) if key == "norm_by_std" else float(v)
    credit_kw = _get(verl_config, "credit")
    return module_config(module, {**dict(overrides or {}), **dict(credit_kw or {})}, base, where)


def _check_keywords(name: str, kwargs: Mapping[str, Any]) -> None:
    known = set(_INPUTS) | set(_VERL_IGNORED) | (set(SIGNALS) - {"values"})
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(
            f"credit_{name}: unknown keywords {unknown}; the estimator takes {list(_INPUTS)}, the signals "
            f"{sorted(set(SIGNALS) - {'values'})} by name, and ignores verl's {list(_VERL_IGNORED)}"
        )


def make_verl_estimator(name: str, credit_config: object | Mapping[str, Any] | None = None) -> VerlEstimator:
    """The credit module ``name`` as a function with verl's advantage-estimator signature.

    Args:
        name: a registered credit module (`creditgym.credit.available`).
        credit_config: the module's config instance (used as is), or field overrides on top of the defaults and the
            verl config (module docstring), or None.

    Returns:
        ``fn(token_level_rewards, response_mask, index=None, config=None, **kwargs) -> (advantages, returns)``.

    Raises:
        ValueError / TypeError: an unknown module or config field, or a config of another class (at once); a
            missing signal, an unknown keyword, or an input the module reads but was not given (when called).
    """
    module = get(name)
    _module_config(module, None, credit_config)  # a bad config fails here, not at the first step

    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor]:
        _check_keywords(name, kwargs)
        given = {k for k, v in kwargs.items() if v is not None}
        check_signals(module, given, f"credit_{name}", _HOW.format(what="{signal}=<tensor (B, T, ...)>"))
        rewards, B = token_level_rewards, token_level_rewards.shape[0]
        fields: dict[str, Any] = {}
        if kwargs.get("old_log_probs") is not None:
            fields["old_logprobs"] = kwargs["old_log_probs"]
        if kwargs.get("global_steps") is not None:
            if int(kwargs["global_steps"]) < 1:
                raise ValueError(
                    f"credit_{name}: global_steps is verl's 1-based step, got {kwargs['global_steps']}"
                )
            fields["step"] = int(kwargs["global_steps"]) - 1
        if kwargs.get("total_training_steps") is not None:
            fields["total_steps"] = int(kwargs["total_training_steps"])
        absent = {
            key: f"credit module {name!r} reads CreditBatch.{key}, which was not given: "
            + _HOW.format(what=how)
            for key, how in _ABSENT.items()
            if key not in fields
        }
        seg = kwargs.get("segment_ids")
        batch = partial_batch(
            absent,
            token_rewards=rewards,
            policy_mask=response_mask.bool(),
            group_ids=group_index(index, B, rewards.device),
            segment_ids=None if seg is None else seg.long(),
            values=kwargs.get("values"),
            signals={k: kwargs[k] for k in module.signals if k != "values"},
            **fields,
        )
        out = module(batch, _module_config(module, config, credit_config))
        returns = out.advantages if out.returns is None else out.returns
        return out.advantages, returns

    estimator.__name__ = f"credit_{name}"
    estimator.__qualname__ = f"credit_{name}"
    estimator.__doc__ = f"verl advantage estimator running the creditgym credit module {name!r}."
    return estimator


_ESTIMATORS: dict[str, VerlEstimator] = {}


def register_with_verl(
    names: list[str] | None = None, *, prefix: str = "credit_"
) -> dict[str, Callable[..., tuple[Tensor, Tensor]]]:
    """Registers ``make_verl_estimator(name)`` as verl's ``<prefix><name>`` for each module (default: all).

    Idempotent within a process (the same function object is registered again). Call it inside verl's Ray
    TaskRunner process (e.g. from a ``task_runner_class`` subclass) so the registry there sees the names.

    Returns:
        verl name -> registered function.

    Raises:
        ImportError: verl is not installed (with the install hint).
    """
    try:
        from verl.trainer.ppo.core_algos import register_adv_est
    except ImportError as e:
        raise ImportError(
            "register_with_verl needs verl (`pip install verl`, with its runtime deps ray, tensordict, omegaconf, "
            f"hydra-core, codetiming); importing verl.trainer.ppo.core_algos failed: {e}"
        ) from e
    done: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {}
    for name in available() if names is None else names:
        fn = _ESTIMATORS.setdefault(name, make_verl_estimator(name))
        register_adv_est(f"{prefix}{name}")(fn)
        done[f"{prefix}{name}"] = fn
    return done
