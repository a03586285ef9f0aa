"""verl adapter: every credit module as a verl advantage estimator (``algorithm.adv_estimator=credit_<name>``).

::

    from creditgym.credit.adapters.verl import register_with_verl
    register_with_verl()        # inside verl's Ray TaskRunner process, before the trainer is built

    # or one estimator, called like verl's own:
    from creditgym.credit.adapters.verl import make_verl_estimator
    adv, returns = make_verl_estimator("grpo")(token_level_rewards, response_mask, index=uid, config=algo_cfg)

Argument mapping (verl -> `CreditBatch`):

* ``token_level_rewards`` (B, T) float -> ``token_rewards`` (must be 0 where ``response_mask`` is 0);
* ``response_mask`` (B, T) {0, 1} -> ``policy_mask`` (bool);
* ``index`` (B,) verl ``uid`` array (strings or any hashable; a numpy object array) -> ``group_ids``, mapped to
  ints by first appearance; None = every row its own group;
* ``values`` -> ``values``; ``old_log_probs`` -> ``old_logprobs`` (zeros when absent); ``segment_ids``;
  any keyword named like a signal of `creditgym.credit.SIGNALS` (``teacher_logprobs``, ...) -> ``signals``;
  ``step`` / ``global_steps`` and ``total_steps`` -> the schedule fields.

Module config: the module's defaults, then the verl ``AlgoConfig`` (or mapping) fields ``gamma``, ``lam`` and
``norm_adv_by_std_in_grpo`` (-> ``norm_by_std``) where the module has such a field, then the overrides given to
`make_verl_estimator`, then a ``credit`` mapping inside ``config`` if there is one. A config *instance* given to
the factory is used as is.

Returns ``(advantages, returns)`` (B, T), both 0 where the mask is 0; modules without value targets return
``(advantages, advantages)`` as verl's GRPO does.

Caveat (verl): its dispatcher passes only ``token_level_rewards, response_mask, config, index`` (and
``reward_baselines``) to a registered estimator. Critic modules (``gae``, ``compo``, ``pact``) and signal modules
(``cort``, ``cast``, ``compo``) need their inputs added as keywords by a trainer subclass (verl's v1
``_compute_advantage``: add the fields to ``select_fields`` and pass them); without them the module raises a
`ValueError` naming the missing signal.

``vine`` cannot be computed here: its ``mc_values`` signal is the mean reward of continuations sampled from each
step boundary's prefix, which needs the episode's env to fork and the policy to sample (creditgym's provider,
``creditgym.agents.mc``); an advantage estimator has neither. A verl rollout worker that samples those
continuations itself may pass ``mc_values`` (B, T, 2) as a keyword; otherwise ``vine`` raises naming the signal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from creditgym.credit import available, get
from creditgym.credit.base import SIGNALS, CreditBatch, CreditModule

__all__ = ["VerlEstimator", "group_index", "make_verl_estimator", "register_with_verl"]

#: verl AlgoConfig field -> credit config field.
_VERL_FIELDS: Mapping[str, str] = {"gamma": "gamma", "lam": "lam", "norm_adv_by_std_in_grpo": "norm_by_std"}


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
    if overrides is not None and not isinstance(overrides, Mapping):
        if not isinstance(overrides, module.config):
            raise TypeError(
                f"make_verl_estimator({module.name!r}): credit_config must be a {module.config.__name__} or a mapping, "
                f"got {type(overrides).__name__}"
            )
        return overrides
    fields = {f.name for f in dataclasses.fields(module.config)}  # type: ignore[arg-type]
    kw: dict[str, Any] = {}
    for verl_key, key in _VERL_FIELDS.items():
        v = _get(verl_config, verl_key)
        if key in fields and v is not None:
            kw[key] = bool(v) if key == "norm_by_std" else float(v)
    kw.update(dict(overrides or {}))
    credit_kw = _get(verl_config, "credit")
    if credit_kw is not None:
        kw.update(dict(credit_kw))
    return module.config(**kw)


def make_verl_estimator(name: str, credit_config: object | Mapping[str, Any] | None = None) -> VerlEstimator:
    """The credit module ``name`` as a function with verl's advantage-estimator signature.

    Args:
        name: a registered credit module (`creditgym.credit.available`).
        credit_config: the module's config instance (used as is), or field overrides on top of the defaults and the
            verl config (module docstring), or None.

    Returns:
        ``fn(token_level_rewards, response_mask, index=None, config=None, **kwargs) -> (advantages, returns)``.
    """
    module = get(name)
    if credit_config is not None and not isinstance(credit_config, (Mapping, module.config)):
        raise TypeError(
            f"make_verl_estimator({name!r}): credit_config must be a {module.config.__name__} or a mapping, "
            f"got {type(credit_config).__name__}"
        )

    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        **kwargs: Any,
    ) -> tuple[Tensor, Tensor]:
        rewards = token_level_rewards
        B = rewards.shape[0]
        device = rewards.device
        old = kwargs.get("old_log_probs")
        seg = kwargs.get("segment_ids")
        step = kwargs.get("step", kwargs.get("global_steps", 0))
        signals = {k: v for k, v in kwargs.items() if k in SIGNALS and k != "values" and v is not None}
        batch = CreditBatch(
            token_rewards=rewards,
            policy_mask=response_mask.bool(),
            group_ids=group_index(index, B, device),
            old_logprobs=torch.zeros_like(rewards) if old is None else old,
            segment_ids=None if seg is None else seg.long(),
            values=kwargs.get("values"),
            signals=signals,
            step=int(step),
            total_steps=max(int(kwargs.get("total_steps", 1)), int(step) + 1),
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
