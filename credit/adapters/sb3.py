"""stable-baselines3 adapter: a `RolloutBuffer` whose advantages come from a creditgym credit module.

::

    from stable_baselines3 import PPO
    from creditgym.credit.adapters.sb3 import CreditRolloutBuffer

    PPO("MlpPolicy", env, rollout_buffer_class=CreditRolloutBuffer,
        rollout_buffer_kwargs={"credit": "gae"})                       # == SB3's own GAE

`CreditRolloutBuffer.compute_returns_and_advantage` replaces SB3's inline GAE by a registered critic module
(``gae``, ``compo``: PPO fits its value head on their returns). The buffer, (n_steps, n_envs) with episodes
starting anywhere, becomes a `CreditBatch` with **one row per episode piece** (one token = one env step):

* each env's column is cut at its ``episode_starts``; each piece is a left-aligned, padded row, so a module's
  trace never crosses an episode boundary;
* the last piece of an unfinished episode (``dones[e]`` False) gets ``gamma * last_values[e]`` added to its
  last reward, exactly SB3's ``delta`` there (SB3 already bootstraps time-limit truncations in ``rewards``);
* what the adapter reads from SB3: ``values`` = ``self.values`` (V(s_t), before action t), ``old_logprobs`` =
  ``self.log_probs``, ``step`` = the rollouts done so far; ``group_ids`` = one group per row, ``segment_ids``
  = the step index in the episode. ``gamma`` (and ``lam``) come from the buffer, and ``whiten=False`` (PPO
  normalises per minibatch); with ``credit="gae"`` the result equals SB3's own buffer.

What the caller must pass: ``total_steps`` (rollouts planned) for a module with a schedule, which the buffer
cannot see (a `MissingInputError` names it); a provider per signal other than ``values``
(``signal_providers={"attention_stats": fn}``, ``fn(buffer) -> (n_steps, n_envs[, K])``), refused at
construction when missing, unless the module leaves the signal unread under its config
(`CreditModule.signals_read`; zeros are passed), as ``compo`` does with a constant gate (``eta_min == eta_max``).
``vine`` cannot run here: it has no critic, and its ``mc_values`` need envs that fork mid-episode and a policy
that samples continuations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.buffers import RolloutBuffer

from creditgym.credit import get
from creditgym.credit.adapters._common import (
    MissingInputError,
    check_signals,
    module_config,
    partial_batch,
)
from creditgym.credit.base import CreditBatch, CreditModule, CreditOutput

__all__ = ["CreditRolloutBuffer", "MissingInputError", "SignalProvider", "episode_layout"]

_NO_PLAN = (
    "credit module {name!r} reads CreditBatch.total_steps (a schedule over training), which SB3's rollout buffer "
    "does not know: pass rollout_buffer_kwargs={{'total_steps': ceil(total_timesteps / (n_steps * n_envs))}}"
)

#: ``fn(buffer) -> array (n_steps, n_envs) or (n_steps, n_envs, K)``: one signal for the whole rollout.
SignalProvider = Callable[["CreditRolloutBuffer"], "np.ndarray | torch.Tensor"]


def episode_layout(episode_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Where each (step, env) entry of an SB3 buffer goes in the one-row-per-episode `CreditBatch`.

    Args:
        episode_starts: (n_steps, n_envs), nonzero where a new episode starts at that step (step 0 always starts
            a piece, whatever its flag).

    Returns:
        row: (n_steps, n_envs) int64, the row of each entry; rows are numbered env by env, in time order.
        col: (n_steps, n_envs) int64, the step index inside its episode piece.
        n_rows: number of rows (episode pieces).
        width: longest piece, the batch's T.
    """
    n_steps, n_envs = episode_starts.shape
    starts = episode_starts.T.astype(bool)  # (n_envs, n_steps)
    starts[:, 0] = True
    flat = starts.reshape(-1)
    row_flat = np.cumsum(flat) - 1  # (n_envs * n_steps,)
    start_pos = np.flatnonzero(flat)  # (n_rows,)
    col_flat = np.arange(flat.size) - start_pos[row_flat]
    row = row_flat.reshape(n_envs, n_steps).T.copy()
    col = col_flat.reshape(n_envs, n_steps).T.copy()
    return row, col, int(start_pos.size), int(col_flat.max()) + 1


class CreditRolloutBuffer(RolloutBuffer):
    """SB3 `RolloutBuffer` computing advantages and value targets with a creditgym critic module.

    Built by SB3 as ``CreditRolloutBuffer(n_steps, obs_space, act_space, device=, gamma=, gae_lambda=,
    n_envs=, **rollout_buffer_kwargs)``; the keyword arguments below go in ``rollout_buffer_kwargs``.

    Args:
        *args: SB3's positional arguments.
        credit: name of a registered critic module (``"gae"``, ``"compo"``); it must return ``returns`` and
            fit its critic by MSE (PPO's value loss).
        credit_config: None (the module's defaults with ``gamma``/``lam`` from the buffer and ``whiten=False``),
            a mapping of field overrides applied on top of those, or a config instance used as is (its
            ``gamma`` must equal the buffer's, which bootstraps unfinished episodes).
        signal_providers: signal name -> `SignalProvider`, for the module's signals other than ``values``.
        total_steps: rollouts planned, ``ceil(total_timesteps / (n_steps * n_envs))`` of ``learn``; None: a
            module that reads ``CreditBatch.total_steps`` (a schedule) raises `MissingInputError` naming it.
        **kwargs: SB3's keyword arguments (``device``, ``gamma``, ``gae_lambda``, ``n_envs``).

    Attributes:
        credit_module: the `CreditModule`.
        credit_config: the config it is called with.
        credit_metrics: the metrics of the last call (``credit/<name>/*``), e.g. for a logging callback.
        credit_calls: how many rollouts were processed (passed as ``CreditBatch.step``).

    Raises:
        ValueError: unknown module, a module without a value critic, a signal with no provider, or a config
            whose ``gamma`` differs from the buffer's.
    """

    def __init__(
        self,
        *args: Any,
        credit: str = "gae",
        credit_config: object | Mapping[str, Any] | None = None,
        signal_providers: Mapping[str, SignalProvider] | None = None,
        total_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        module = get(credit)
        if not module.critic or module.provided_by["values"].provider is not None:
            raise ValueError(
                f"CreditRolloutBuffer: credit module {credit!r} must train an MSE critic on its returns (PPO's "
                "value loss; the values signal's default provider, not one of its own), like 'gae' or 'compo'"
            )
        self.credit_module: CreditModule[object] = module
        self.credit_config: object = self._make_config(module, credit_config)
        self.signal_providers: dict[str, SignalProvider] = dict(signal_providers or {})
        unread = set(module.signals) - set(module.signals_read(self.credit_config))
        check_signals(
            module,
            {"values", *self.signal_providers, *unread},
            "CreditRolloutBuffer",
            "SB3 does not record it: pass signal_providers={{'{signal}': fn}}, fn(buffer) -> (n_steps, n_envs[, "
            "K]) array, or a credit_config under which the module does not read it",
        )
        if total_steps is not None and (
            isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1
        ):
            raise ValueError(
                f"CreditRolloutBuffer: total_steps is the number of rollouts planned, an int >= 1, got {total_steps!r}"
            )
        self.total_steps: int | None = None if total_steps is None else int(total_steps)
        self.credit_metrics: dict[str, float] = {}
        self.credit_calls: int = 0

    def _make_config(self, module: CreditModule[object], given: object | Mapping[str, Any] | None) -> object:
        """The module config: buffer-derived defaults, overridden by a mapping, or an instance as is."""
        base = {"gamma": float(self.gamma), "lam": float(self.gae_lambda), "whiten": False}
        cfg = module_config(module, given, base, "CreditRolloutBuffer")
        gamma = getattr(cfg, "gamma", None)
        if gamma is not None and abs(float(gamma) - float(self.gamma)) > 1e-12:
            raise ValueError(
                f"CreditRolloutBuffer: credit_config.gamma={gamma} differs from the buffer's gamma={self.gamma}; "
                "unfinished episodes are bootstrapped with the buffer's gamma"
            )
        return cfg

    def _signal(self, name: str) -> np.ndarray:
        """The signal ``name`` as a float64 array (n_steps, n_envs[, K]) from its provider, or zeros."""
        if name in self.signal_providers:
            x = self.signal_providers[name](self)
            x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
            if x.shape[:2] != (self.buffer_size, self.n_envs):
                raise ValueError(
                    f"CreditRolloutBuffer: signal provider {name!r} returned shape {x.shape}, expected "
                    f"({self.buffer_size}, {self.n_envs}) or ({self.buffer_size}, {self.n_envs}, K)"
                )
            return x.astype(np.float64)
        return np.zeros((self.buffer_size, self.n_envs))

    def credit_batch(
        self, last_values: torch.Tensor, dones: np.ndarray
    ) -> tuple[CreditBatch, np.ndarray, np.ndarray]:
        """The rollout as a one-row-per-episode `CreditBatch` (module docstring), plus the layout.

        Args:
            last_values: (n_envs,) or (n_envs, 1) V of the observation after the last step.
            dones: (n_envs,) whether the last step ended the episode.

        Returns:
            batch: rewards/values/old log-probs in float64, B = episode pieces, T = longest piece.
            row, col: (n_steps, n_envs) positions of each buffer entry in ``batch`` (`episode_layout`).
        """
        row, col, B, T = episode_layout(self.episode_starts)
        last_v = last_values.detach().cpu().numpy().reshape(-1).astype(np.float64)  # (n_envs,)
        done = np.asarray(dones).reshape(-1).astype(bool)

        def scatter(x: np.ndarray) -> torch.Tensor:
            out = np.zeros((B, T, *x.shape[2:]), dtype=np.float64)
            out[row, col] = x
            return torch.from_numpy(out)

        rewards = self.rewards.astype(np.float64)  # (n_steps, n_envs)
        bootstrap = np.where(done, 0.0, float(self.gamma) * last_v)  # (n_envs,)
        rewards[-1] = rewards[-1] + bootstrap
        mask = np.zeros((B, T), dtype=bool)
        mask[row, col] = True
        seg = np.zeros((B, T), dtype=np.int64)
        seg[row, col] = col
        signals = {
            name: scatter(self._signal(name)) for name in self.credit_module.signals if name != "values"
        }
        plan = {} if self.total_steps is None else {"total_steps": self.total_steps}
        absent = {} if plan else {"total_steps": _NO_PLAN.format(name=self.credit_module.name)}
        batch = partial_batch(
            absent,
            token_rewards=scatter(rewards),
            policy_mask=torch.from_numpy(mask),
            group_ids=torch.arange(B),
            old_logprobs=scatter(self.log_probs.astype(np.float64)),
            segment_ids=torch.from_numpy(seg),
            values=scatter(self.values.astype(np.float64)),
            signals=signals,
            step=self.credit_calls,
            **plan,
        )
        return batch, row, col

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        """Fills ``self.advantages`` and ``self.returns`` (n_steps, n_envs) float32 from the credit module.

        Args:
            last_values: V of the observation after the last step, one per env.
            dones: whether the last step ended the episode, one per env.
        """
        batch, row, col = self.credit_batch(last_values, dones)
        out: CreditOutput = self.credit_module(batch, self.credit_config)
        assert out.returns is not None  # checked by CreditModule for critic modules
        self.advantages = out.advantages.numpy()[row, col].astype(np.float32)
        self.returns = out.returns.numpy()[row, col].astype(np.float32)
        self.credit_metrics = dict(out.metrics)
        self.credit_calls += 1
