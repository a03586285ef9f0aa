"""How many forward passes does one training step make, and over how many tokens? Counted, by kind, per module.

    python examples/benchmarks/forward_passes.py [--model creditgym/tiny] [--credit grpo,vine] [--kl-coef 0.05]

Runs one real training step (4 prompts x 4 responses, Math-v0) per module and counts every pass through the
policy's decoder stack (a hook on ``model.base_model``) and the reference model's: ``prefill`` (the prompts, before
decoding), ``decode`` (one cached pass per generated token; its tokens are the rows still running),
``score`` (a no-grad teacher-forced pass: behaviour extras, teachers, counterfactual replays, PACT's refreshed
actor, the reference model) and ``train`` (the pass the loss differentiates). Prints one JSON line per module.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from typing import Any

import torch

from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import Trainer


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

    def hook(name: str) -> Any:
        def pre(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ids, att = kwargs["input_ids"], kwargs.get("attention_mask")
            real = (
                int(att.sum()) if att is not None and att.shape == ids.shape else ids.numel()
            )  # padding: 0s
            if kwargs.get("use_cache"):
                kind, tokens = ("decode", ids.shape[0]) if ids.shape[1] == 1 else ("prefill", real)
            else:
                kind, tokens = ("train" if torch.is_grad_enabled() else "score"), real
            counts[f"{name} {kind} passes"] += 1
            counts[f"{name} {kind} tokens"] += tokens

        return pre

    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(cfg, out)
        trainer.policy.model.base_model.register_forward_pre_hook(hook("policy"), with_kwargs=True)
        if trainer.reference is not None:
            trainer.reference.base_model.register_forward_pre_hook(hook("reference"), with_kwargs=True)
        metrics = trainer.train_step()
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
