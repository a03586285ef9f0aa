"""TRL adapter: `CreditGRPOTrainer`, a `trl.GRPOTrainer` whose advantages come from a creditgym credit module.

::

    trainer = CreditGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                credit="grpo", credit_config={"norm_by_std": False})

TRL computes one scalar advantage per completion inline in ``_generate_and_score_completions``; this subclass
lets it run, then replaces ``output["advantages"]`` by the module's per-token ones (B_local, T), which TRL's
loss accepts as is. The module runs once on the batch gathered over processes (whole groups), and this
process's rows are sliced back. What the adapter computes itself:

* rewards: TRL's per-completion rewards (gathered), summed with ``reward_weights``, on the last policy token;
  a completion every reward function returned None for is left off the mask (advantage 0, TRL's rule);
* groups: ``arange(N) // num_generations`` (TRL's contiguous groups); mask: ``completion_mask * tool_mask``;
* ``old_logprobs``: TRL's ``old_per_token_logps`` when it computed them; else (``num_iterations == 1``, its
  default, where the generating policy is the one being updated) the policy's own per-token log-probs,
  computed without grad the way TRL's loss does (in bf16 under TRL's default ``bf16=True``, as its loss sees
  them), and only for a module that reads them (``cort``, ``cast``);
* ``step`` = ``state.global_step``, ``total_steps`` = ``state.max_steps`` (the plan; ``cort``'s ramp).

What the caller must pass, by overriding `CreditGRPOTrainer.credit_signals`: every signal the module declares
(``values`` for ``gae``, ``compo``, ``pact``, from a critic trained elsewhere; ``teacher_logprobs`` for
``cast``; ``counterfactual_logprobs`` and ``criterion_spans`` for ``cort``; ``attention_stats`` for
``compo``; ``mc_values`` for ``vine``, continuations sampled from forks of each episode, which TRL, generating
from a dataset, cannot fork). Without the override such a module is refused at construction; a signal the
override does not return is a `ValueError` naming it. Out of the box ``grpo``, ``rloo`` run. The logged
``advantages`` in TRL's completion table remain TRL's scalar ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer
from trl.models.utils import disable_gradient_checkpointing

from creditgym.credit import get
from creditgym.credit.adapters._common import MissingInputError, check_signals, module_config, partial_batch
from creditgym.credit.base import CreditBatch, CreditModule, CreditOutput

__all__ = ["CreditGRPOTrainer", "MissingInputError", "last_token_rewards"]

#: Multimodal inputs of TRL's forward pass, passed on as ``_compute_loss`` does.
_FORWARD_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
_SIGNALS_HOW = (
    "return it from CreditGRPOTrainer.credit_signals(output) (override it in a subclass) as a tensor "
    "(B_local, T, ...) aligned with output['completion_ids']"
)


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
        ValueError: an unknown module or config field (listing the known ones), or a module that needs signals
            while `credit_signals` is not overridden.
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
        cfg = module_config(module, credit_config, {}, "CreditGRPOTrainer")
        if module.signals and type(self).credit_signals is CreditGRPOTrainer.credit_signals:
            check_signals(module, (), "CreditGRPOTrainer", "TRL does not compute it: " + _SIGNALS_HOW)
        self.credit_module: CreditModule[object] = module
        self.credit_config: object = cfg
        self.credit_last_batch: CreditBatch | None = None
        self.credit_last_output: CreditOutput | None = None
        self._credit_rewards_per_func: Tensor | None = None
        self._credit_reads_old_logprobs = False  # learnt at the first step (MissingInputError)
        super().__init__(*args, **kwargs)

    def credit_signals(self, output: dict[str, Any]) -> dict[str, Tensor]:
        """This process's signals for the module, name -> (B_local, T, ...) (``values`` included); override it.

        Args:
            output: the dict TRL's ``_generate_and_score_completions`` returns (``prompt_ids``,
                ``completion_ids``, ``completion_mask``, ...); index t of a signal describes
                ``completion_ids[:, t]``.
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

    @torch.no_grad()
    def _policy_logprobs(self, output: dict[str, Any]) -> Tensor:
        """(B_local, T_local) log-probs of the completion tokens under the policy, as TRL's loss computes them."""
        mode = "train" if self.model.training else "eval"
        with disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model,
                torch.cat([output["prompt_ids"], output["completion_ids"]], 1),
                torch.cat([output["prompt_mask"], output["completion_mask"]], 1),
                output["completion_ids"].size(1),
                batch_size=getattr(self.args, f"per_device_{mode}_batch_size"),
                **{k: output.get(k) for k in _FORWARD_KEYS},
            )
        return logps.float()

    def _local_signals(self, output: dict[str, Any], shape: tuple[int, int]) -> dict[str, Tensor]:
        """`credit_signals`, checked: every declared signal present, each (B_local, T_local, ...)."""
        signals = self.credit_signals(output)
        check_signals(self.credit_module, signals, "CreditGRPOTrainer", _SIGNALS_HOW)
        for name, x in signals.items():
            if not isinstance(x, Tensor) or tuple(x.shape[:2]) != shape:
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(
                    f"CreditGRPOTrainer.credit_signals: signal {name!r} must be a tensor of shape {shape} + "
                    f"(...), aligned with output['completion_ids'], got {got}"
                )
        return signals

    def _run_module(
        self, fields: dict[str, Any], absent: dict[str, str], output: dict[str, Any], T: int
    ) -> tuple[CreditBatch, CreditOutput]:
        """The module on ``fields`` and the old log-probs: TRL's when it computed them; else the policy's own
        (`_policy_logprobs`) once the module has read them (`MissingInputError` at the first step), else none."""
        old: Tensor | None = output.get("old_per_token_logps")
        if old is None and self._credit_reads_old_logprobs:
            old = self._policy_logprobs(output)
        if old is None:
            batch = partial_batch({**absent, "old_logprobs": "(computed on demand)"}, **fields)
            try:
                return batch, self.credit_module(batch, self.credit_config)
            except MissingInputError as e:
                if e.field != "old_logprobs":
                    raise
            self._credit_reads_old_logprobs = True
            old = self._policy_logprobs(output)
        batch = partial_batch(absent, **fields, old_logprobs=self._gather_padded(old.float(), T))
        return batch, self.credit_module(batch, self.credit_config)

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
        signals_local = self._local_signals(output, (B_local, T_local))
        T = int(self.accelerator.gather(torch.tensor([T_local], device=mask_local.device)).max())
        mask = self._gather_padded(mask_local, T)  # (N, T)
        signals = {k: self._gather_padded(v, T) for k, v in signals_local.items()}
        values = signals.pop("values", None)

        weights = self.reward_weights.to(rewards_per_func.device)
        unscorable = torch.isnan(rewards_per_func).all(1)  # (N,)
        rewards = (rewards_per_func * weights[None, :]).nansum(1).float()  # (N,)
        mask = mask & ~unscorable[:, None].to(mask.device)
        mode = "train" if self.model.training else "eval"
        n_gen = self.num_generations if mode == "train" else self.num_generations_eval
        N = mask.shape[0]
        plan = int(self.state.max_steps)  # TRL's training plan, 0 outside train()
        fields: dict[str, Any] = {
            "token_rewards": last_token_rewards(torch.where(unscorable, 0.0, rewards).to(mask.device), mask),
            "policy_mask": mask,
            "group_ids": torch.arange(N, device=mask.device) // n_gen,
            "values": None if values is None else values.float(),
            "signals": signals,
            "step": int(self.state.global_step),
        }
        absent: dict[str, str] = {}
        if plan >= 1:
            fields["total_steps"] = plan
        else:
            absent["total_steps"] = (
                f"credit module {self.credit_module.name!r} reads CreditBatch.total_steps, but TRL's "
                f"state.max_steps is {plan}: advantages computed outside train() have no training plan"
            )
        batch, out = self._run_module(fields, absent, output, T)
        self.credit_last_batch, self.credit_last_output = batch, out
        start = self.accelerator.process_index * B_local
        adv = out.advantages[start : start + B_local, :T_local]  # (B_local, T_local)
        output["advantages"] = adv.to(output["completion_ids"].device, torch.float32)
        for k, v in out.metrics.items():
            self._metrics[mode][k].append(v)
        return output
