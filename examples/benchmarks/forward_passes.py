"""How many forward passes does one training step make, and over how many tokens? Counted, by kind, per module.

    python examples/benchmarks/forward_passes.py [--model creditgym/tiny] [--credit grpo,vine] [--kl-coef 0.05]

Runs one real training step (4 prompts x 4 responses, Math-v0) per module and counts every pass through the
policy's decoder stack (a hook on ``model.base_model``) and the reference model's: ``prefill`` (the prompts, before
decoding), ``decode`` (one cached pass per generated token; its tokens are the rows still running),
``score`` (a no-grad teacher-forced pass: behaviour extras, teachers, counterfactual replays, PACT's refreshed
actor, the reference model), ``train`` (the update's pass, which the loss differentiates; a shared prompt's pass
and its rows' rest count as two) and ``train, no graph`` (the update's pass over rows without an advantage).
Prints one JSON line per module.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from typing import Any

import torch

from creditgym.agents.train import trainer as trainer_module
from creditgym.agents.train.config import TrainConfig


def count(model: str, credit: str, kl_coef: float, seed: int = 0) -> dict[str, Any]:
    """Passes and tokens of one step of ``credit`` by kind."""
    env_kwargs = {} if model == "creditgym/tiny" else {"tokenizer": model}
    cfg = TrainConfig(
        model=model,
        credit=credit,
        steps=1,
        prompts_per_step=4,
        group_size=4,
        kl_coef=kl_coef,
        eval_episodes=1,
        seed=seed,
        env_kwargs=env_kwargs,
    )
    counts: collections.Counter[str] = collections.Counter()
    updating = [False]  # inside the update's pass
    update_pass = trainer_module.update_pass

    def counted_update(*args: Any, **kwargs: Any) -> Any:
        updating[0] = True
        try:
            return update_pass(*args, **kwargs)
        finally:
            updating[0] = False

    def hook(name: str) -> Any:
        def pre(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ids, att = kwargs["input_ids"], kwargs.get("attention_mask")
            # the real tokens of this pass (the mask's last columns; any before them are a cache's)
            tokens = int(att[:, -ids.shape[1] :].sum()) if att is not None else ids.numel()
            if updating[0]:
                kind = "train" if torch.is_grad_enabled() else "train, no graph"
            elif kwargs.get("use_cache"):
                kind = "decode" if ids.shape[1] == 1 else "prefill"
            else:
                kind = "score"
            counts[f"{name} {kind} passes"] += 1
            counts[f"{name} {kind} tokens"] += tokens

        return pre

    trainer_module.update_pass = counted_update
    try:
        with tempfile.TemporaryDirectory() as out:
            trainer = trainer_module.Trainer(cfg, out)
            trainer.policy.model.base_model.register_forward_pre_hook(hook("policy"), with_kwargs=True)
            if trainer.reference is not None:
                trainer.reference.base_model.register_forward_pre_hook(hook("reference"), with_kwargs=True)
            metrics = trainer.train_step()
    finally:
        trainer_module.update_pass = update_pass
    responses = cfg.prompts_per_step * cfg.group_size
    return {
        "model": model,
        "credit": credit,
        "kl_coef": kl_coef,
        "response_tokens": metrics["rollout/response_tokens"] * responses,
        **dict(sorted(counts.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="creditgym/tiny")
    parser.add_argument("--credit", default="cast,compo,cort,gae,grpo,pact,rloo,vine")
    parser.add_argument("--kl-coef", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for credit in args.credit.split(","):
        print(json.dumps(count(args.model, credit, args.kl_coef)), flush=True)


if __name__ == "__main__":
    main()
