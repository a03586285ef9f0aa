"""TRL adapter: `CreditGRPOTrainer`, a `trl.GRPOTrainer` whose advantages come from a creditgym credit module.

::

    from creditgym.credit.adapters.trl import CreditGRPOTrainer

    trainer = CreditGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                credit="grpo", credit_config={"norm_by_std": False})
    trainer.train()

TRL computes one scalar advantage per completion (B_local,) inline in ``_generate_and_score_completions``. This
subclass lets it run, then replaces ``output["advantages"]`` by the module's per-token advantages
(B_local, T), which TRL's ``_compute_loss`` accepts as is (it only unsqueezes 1-D advantages):

* rewards: TRL's reward functions give one scalar per completion, already **gathered across processes**
  (``_calculate_rewards``); the adapter records them and sums them with ``reward_weights`` (NaN ignored). A
  completion for which every function returned None is unscorable: its row is left off the policy mask, so it
  is no sample and gets advantage 0 (TRL's rule). The scalar is put on the completion's last policy token.
* groups: TRL samples ``num_generations`` completions per prompt, contiguous in the gathered batch:
  ``group_ids = arange(N) // num_generations``.
* mask: ``completion_mask * tool_mask`` (tool/env tokens are not policy tokens).
* tensors of all processes (mask, old log-probs, signals) are padded to a common T and gathered, the module
  runs once on the global batch (so group statistics see whole groups), and this process's rows are sliced
  back (TRL's ``process_slice``) and cut to its own T.
* ``old_logprobs``: ``output["old_per_token_logps"]`` when TRL computed it, else zeros.
* signals (``values``, ``teacher_logprobs``, ...): override `CreditGRPOTrainer.credit_signals`, which gets this
  process's ``output`` and returns name -> (B_local, T) tensors. None are computed by default, so out of the
  box only modules without signals run (``grpo``, ``rloo``); a module with a critic also needs the critic
  trained elsewhere (TRL's GRPO has none). ``vine`` needs ``mc_values``, Monte-Carlo values from continuations
  sampled at each step boundary by forking the episode's env: TRL generates from a dataset with no env to fork,
  so the adapter cannot compute it (a ``credit_signals`` override that samples continuations itself could).

The logged ``advantages`` in TRL's completion table remain TRL's scalar ones (computed before the swap).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer

from creditgym.credit import get
from creditgym.credit.base import CreditBatch, CreditModule, CreditOutput

__all__ = ["CreditGRPOTrainer", "last_token_rewards"]


def last_token_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """(B, T) token rewards: ``rewards[b]`` on the last True position of ``mask[b]``, 0 elsewhere.

    Args:
        rewards: (B,) float, finite.
        mask: (B, T) bool. A row without a True entry gets no reward.
    """
    B, T = mask.shape
    t_idx = torch.arange(T, device=mask.device).expand(B, T)
    last = torch.where(mask, t_idx, -1).amax(1)  # (B,), -1 = no policy token
    out = torch.zeros(B, T, dtype=rewards.dtype, device=mask.device)
    has = last >= 0
    out[has.nonzero().flatten(), last[has]] = rewards[has]
    return out


class CreditGRPOTrainer(GRPOTrainer):
    """`trl.GRPOTrainer` with per-token advantages from the credit module ``credit`` (module docstring).

    Args:
        *args: `GRPOTrainer`'s arguments.
        credit: registered credit module name (default ``"grpo"``).
        credit_config: the module's config instance, a mapping of field overrides, or None (defaults).
        **kwargs: `GRPOTrainer`'s keyword arguments.

    Raises:
        ValueError: the module needs signals and `credit_signals` is not overridden.
        TypeError: a config of the wrong class.

    Attributes:
        credit_module: the `CreditModule`.
        credit_config: its config.
        credit_last_batch: the global `CreditBatch` of the last generation step (for inspection and tests).
        credit_last_output: the module's `CreditOutput` on it.
    """

    def __init__(
        self,
        *args: Any,
        credit: str = "grpo",
        credit_config: object | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        module = get(credit)
        if credit_config is None or isinstance(credit_config, Mapping):
            cfg = module.config(**dict(credit_config or {}))
        elif isinstance(credit_config, module.config):
            cfg = credit_config
        else:
            raise TypeError(
                f"CreditGRPOTrainer: credit_config for {credit!r} must be a {module.config.__name__} or a "
                f"mapping, got {type(credit_config).__name__}"
            )
        if module.signals and type(self).credit_signals is CreditGRPOTrainer.credit_signals:
            raise ValueError(
                f"CreditGRPOTrainer: credit module {credit!r} needs the signals {list(module.signals)}, which TRL "
                "does not compute; subclass CreditGRPOTrainer and override credit_signals(output)"
            )
        self.credit_module: CreditModule[object] = module
        self.credit_config: object = cfg
        self.credit_last_batch: CreditBatch | None = None
        self.credit_last_output: CreditOutput | None = None
        self._credit_rewards_per_func: Tensor | None = None
        super().__init__(*args, **kwargs)

    def credit_signals(self, output: dict[str, Any]) -> dict[str, Tensor]:
        """This process's signals for the module, name -> (B_local, T) (``values`` included); override it.

        Args:
            output: the dict TRL's ``_generate_and_score_completions`` returns (``prompt_ids``,
                ``completion_ids``, ``completion_mask``, ...).
        """
        return {}

    def _calculate_rewards(
        self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any
    ) -> Tensor:
        """TRL's rewards (N_global, n_funcs), recorded for the credit module."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._credit_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _gather_padded(self, x: Tensor, width: int) -> Tensor:
        """(B_local, T_local, ...) -> right-padded to ``width`` and gathered over processes (N_global, width, ...)."""
        pad = width - x.shape[1]
        if pad:
            x = torch.cat([x, x.new_zeros((x.shape[0], pad, *x.shape[2:]))], 1)
        return self.accelerator.gather(x)

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        """TRL's generation and scoring, with ``advantages`` replaced by the module's (B_local, T)."""
        output: dict[str, Any] = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._credit_rewards_per_func
        if rewards_per_func is None:
            raise RuntimeError("CreditGRPOTrainer: TRL did not call _calculate_rewards before the advantages")
        self._credit_rewards_per_func = None

        mask_local = output["completion_mask"].bool()  # (B_local, T)
        if output.get("tool_mask") is not None:
            mask_local = mask_local & output["tool_mask"].bool()
        B_local, T_local = mask_local.shape
        T = int(self.accelerator.gather(torch.tensor([T_local], device=mask_local.device)).max())
        mask = self._gather_padded(mask_local, T)  # (N, T)
        old = output.get("old_per_token_logps")
        old_g = (
            torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
            if old is None
            else self._gather_padded(old.float(), T)
        )
        signals = {k: self._gather_padded(v, T) for k, v in self.credit_signals(output).items()}
        values = signals.pop("values", None)

        weights = self.reward_weights.to(rewards_per_func.device)
        unscorable = torch.isnan(rewards_per_func).all(1)  # (N,)
        rewards = (rewards_per_func * weights[None, :]).nansum(1).float()  # (N,)
        mask = mask & ~unscorable[:, None].to(mask.device)
        mode = "train" if self.model.training else "eval"
        n_gen = self.num_generations if mode == "train" else self.num_generations_eval
        N = mask.shape[0]
        batch = CreditBatch(
            token_rewards=last_token_rewards(torch.where(unscorable, 0.0, rewards).to(mask.device), mask),
            policy_mask=mask,
            group_ids=torch.arange(N, device=mask.device) // n_gen,
            old_logprobs=old_g,
            values=None if values is None else values.float(),
            signals=signals,
            step=int(self.state.global_step),
            total_steps=max(int(self.state.max_steps), int(self.state.global_step) + 1),
        )
        out = self.credit_module(batch, self.credit_config)
        self.credit_last_batch, self.credit_last_output = batch, out
        start = self.accelerator.process_index * B_local
        adv = out.advantages[start : start + B_local, :T_local]  # (B_local, T_local)
        output["advantages"] = adv.to(output["completion_ids"].device, torch.float32)
        for k, v in out.metrics.items():
            self._metrics[mode][k].append(v)
        return output
