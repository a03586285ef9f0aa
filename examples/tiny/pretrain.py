"""Pretrain the bundled tiny model (``agents/tiny/``): supervised learning on procedural Math problems, on a CPU.

    python examples/tiny/pretrain.py [--out agents/tiny] [--seed 0] [--target-low 0.3 --target-high 0.6]

The model is a small Qwen2-style causal LM (tied embeddings, the bundled 2048-token tokenizer). Each training
example is exactly what ``creditgym/Math-v0`` shows the policy, ``MathEnv.prompt_tokens(task)``, followed by a short
worked response ending in ``\\boxed{answer}`` and the end-of-turn token ``<|im_end|>``; the loss covers the response
tokens only. Problems come from the procedural generator's **train** split, mostly at the env's default level 2
(two-digit addition and subtraction), some at levels 1 and 3.

Training stops early, on purpose, once the model is *middling*: every ``--eval-every`` steps it samples (temperature
1) answers to held-out level-2 problems (the test split) and stops when the accuracy enters
``[--target-low, --target-high]``, so reinforcement learning has room to show a gain. It then prints greedy and
sampled accuracy on 200 other held-out problems and writes the model folder (config, safetensors weights, generation
config, tokenizer) and ``info.json`` with the command, seed, steps and accuracies.

Answers are scored by exact match of the last ``\\boxed{...}`` with the gold integer (levels 1-3 have integer
answers), which is what the math verifier concludes for these problems. Fixed seed, ``torch.set_num_threads``,
deterministic algorithms: the same command on the same machine and library versions writes the same weights.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from creditgym.agents.backends import HFBackend
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import DEFAULT_LEVEL, MathTask, ProceduralMath, last_boxed
from creditgym.envs.tokenizer import ASSETS, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
LEVEL_MIX = {DEFAULT_LEVEL: 0.7, 1: 0.15, 3: 0.15}  # share of training problems per difficulty level
REPORT_SEED, VALIDATION_SEED = 0, 1  # held-out sets: the final report, and the early-stopping check


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "agents" / "tiny", help="model folder to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument(
        "--max-steps", type=int, default=4000, help="hard stop if the target band is never reached"
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=50, help="linear warm-up steps")
    p.add_argument("--short-fraction", type=float, default=0.2, help="share of bare '\\boxed{N}' responses")
    p.add_argument("--eval-every", type=int, default=25, help="steps between early-stopping checks")
    p.add_argument("--min-steps", type=int, default=100, help="no early stop before this step")
    p.add_argument("--eval-n", type=int, default=200, help="held-out problems per early-stopping check")
    p.add_argument("--report-n", type=int, default=200, help="held-out problems in the final report")
    p.add_argument("--target-low", type=float, default=0.30, help="stop once sampled accuracy is >= this ...")
    p.add_argument("--target-high", type=float, default=0.60, help="... and <= this")
    p.add_argument("--max-new-tokens", type=int, default=64, help="response budget when evaluating")
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate-size", type=int, default=384)
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------------------------
# data


def response_text(task: MathTask, short: bool) -> str:
    """A worked answer ``"86 + 67 = 153. The answer is \\boxed{153}."``, or the bare ``"\\boxed{153}"``."""
    expr = task.question.removeprefix("What is ").removesuffix("?")
    if short or expr == task.question:
        return f"\\boxed{{{task.answer}}}"
    return f"{expr} = {task.answer}. The answer is \\boxed{{{task.answer}}}."


class Examples:
    """Endless training examples ``(prompt ids, response ids)`` from the train split, deterministic in ``seed``."""

    def __init__(self, env: MathEnv, seed: int, short_fraction: float) -> None:
        self.env, self.tokenizer = env, env.tokenizer
        self.rng = np.random.default_rng(seed)
        self.levels = list(LEVEL_MIX)
        self.weights = np.array([LEVEL_MIX[level] for level in self.levels])
        self.sources = {level: ProceduralMath(level, "train") for level in self.levels}
        self.short_fraction = short_fraction
        self.eos = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def next(self) -> tuple[list[int], list[int]]:
        level = self.levels[int(self.rng.choice(len(self.levels), p=self.weights))]
        task = self.sources[level].sample(self.rng)
        short = bool(self.rng.random() < self.short_fraction)
        response = self.tokenizer(response_text(task, short), add_special_tokens=False)["input_ids"]
        return self.env.prompt_tokens(task), [*response, self.eos]

    def batch(self, size: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``input_ids``, ``attention_mask``, ``labels`` (-100 on prompt and padding), all ``(B, T)``."""
        pairs = [self.next() for _ in range(size)]
        width = max(len(p) + len(r) for p, r in pairs)
        ids = torch.full((size, width), pad_id, dtype=torch.long)
        mask = torch.zeros((size, width), dtype=torch.long)
        labels = torch.full((size, width), -100, dtype=torch.long)
        for i, (prompt, response) in enumerate(pairs):
            seq = prompt + response
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
            labels[i, len(prompt) : len(seq)] = torch.tensor(response)
        return ids, mask, labels


# --------------------------------------------------------------------------------------------------------------
# evaluation


def is_correct(text: str, gold: str) -> bool:
    span = last_boxed(text)
    return span is not None and text[span[0] : span[1]].strip() == gold.strip()


@torch.no_grad()
def evaluate(
    model: Qwen2ForCausalLM,
    env: MathEnv,
    tasks: Sequence[MathTask],
    *,
    temperature: float,
    seed: int,
    max_new_tokens: int,
) -> dict[str, float]:
    """Accuracy and share of responses ending with EOS on ``tasks`` (one sample each)."""
    model.eval()
    tok = env.tokenizer
    backend = HFBackend(model, pad_token_id=int(tok.pad_token_id))
    generator = torch.Generator().manual_seed(seed)
    outs = backend.generate(
        [env.prompt_tokens(t) for t in tasks],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_p=1.0,
        stop_token_ids=env.stop_token_ids,
        generator=generator,
    )
    correct = [
        is_correct(tok.decode(o, skip_special_tokens=True), t.answer)
        for o, t in zip(outs, tasks, strict=True)
    ]
    ended = [bool(o) and o[-1] in env.stop_token_ids for o in outs]
    model.train()
    return {
        "accuracy": float(np.mean(correct)),
        "eos_rate": float(np.mean(ended)),
        "mean_tokens": float(np.mean([len(o) for o in outs])),
    }


# --------------------------------------------------------------------------------------------------------------
# main


def build_model(args: argparse.Namespace, vocab: int, eos: int, pad: int) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    return Qwen2ForCausalLM(config)


def lr_at(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.max_steps - args.warmup)
    return args.lr * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t_start = time.perf_counter()

    tok = load_tokenizer()
    env = MathEnv(tok)
    eos, pad = int(tok.convert_tokens_to_ids("<|im_end|>")), int(tok.pad_token_id)
    model = build_model(args, len(tok), eos, pad)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, {args.layers} layers, hidden {args.hidden_size}")

    examples = Examples(env, args.seed, args.short_fraction)
    validation = ProceduralMath(DEFAULT_LEVEL, "test").take(args.eval_n, seed=VALIDATION_SEED)
    report = ProceduralMath(DEFAULT_LEVEL, "test").take(args.report_n, seed=REPORT_SEED)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )

    model.train()
    history: list[dict[str, float]] = []
    step, reached = 0, False
    while step < args.max_steps:
        ids, mask, labels = examples.batch(args.batch_size, pad)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % args.eval_every == 0:
            val = evaluate(
                model, env, validation, temperature=1.0, seed=args.seed, max_new_tokens=args.max_new_tokens
            )
            history.append({"step": step, "loss": loss.item(), **{f"sampled_{k}": v for k, v in val.items()}})
            print(
                f"step {step:5d}  loss {loss.item():.4f}  sampled acc {val['accuracy']:.3f}  "
                f"eos {val['eos_rate']:.2f}  {time.perf_counter() - t_start:6.0f}s",
                flush=True,
            )
            if step >= args.min_steps and args.target_low <= val["accuracy"] <= args.target_high:
                reached = True
                break
    train_seconds = time.perf_counter() - t_start
    if not reached:
        print(
            f"warning: sampled accuracy never entered [{args.target_low}, {args.target_high}]",
            file=sys.stderr,
        )

    greedy = evaluate(model, env, report, temperature=0.0, seed=args.seed, max_new_tokens=args.max_new_tokens)
    sampled = evaluate(
        model, env, report, temperature=1.0, seed=args.seed, max_new_tokens=args.max_new_tokens
    )
    other_levels = {  # greedy, for the record (level 1 has only ~28 distinct test problems)
        level: evaluate(
            model,
            env,
            ProceduralMath(level, "test").take(n, seed=REPORT_SEED),
            temperature=0.0,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
        )["accuracy"]
        for level, n in ((1, 20), (3, 200))
    }
    print(
        f"final (step {step}, {len(report)} held-out level-{DEFAULT_LEVEL} problems): "
        f"greedy accuracy {greedy['accuracy']:.3f} (eos {greedy['eos_rate']:.2f}), "
        f"sampled accuracy {sampled['accuracy']:.3f} (eos {sampled['eos_rate']:.2f})"
    )

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=pad, do_sample=True, temperature=1.0, top_p=1.0, top_k=0
    )
    model.save_pretrained(out)
    (out / "model.safetensors").chmod(0o644)  # safetensors writes 0600; package data must be world-readable
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(ASSETS / name, out / name)
    info = {
        "command": " ".join(
            ["python", "examples/tiny/pretrain.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "seed": args.seed,
        "steps": step,
        "batch_size": args.batch_size,
        "examples_seen": step * args.batch_size,
        "reached_target_band": reached,
        "target_band": [args.target_low, args.target_high],
        "parameters": n_params,
        "architecture": {
            "class": "Qwen2ForCausalLM",
            "hidden_size": args.hidden_size,
            "layers": args.layers,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "intermediate_size": args.intermediate_size,
            "vocab_size": len(tok),
            "tie_word_embeddings": True,
        },
        "training_data": {
            "split": "train",
            "level_mix": {str(k): v for k, v in LEVEL_MIX.items()},
            "short_fraction": args.short_fraction,
            "response_format": response_text(report[0], False),
        },
        "evaluation": {
            "held_out": f"ProceduralMath({DEFAULT_LEVEL}, 'test').take({args.report_n}, seed={REPORT_SEED})",
            "scoring": "exact match of the last \\boxed{} with the gold answer",
            "max_new_tokens": args.max_new_tokens,
            "greedy": greedy,
            "sampled_temperature_1": sampled,
            "greedy_accuracy_other_levels": {str(k): v for k, v in other_levels.items()},
        },
        "history": history,
        "train_seconds": round(train_seconds, 1),
        "threads": args.threads,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out / "info.json").write_text(json.dumps(info, indent=2) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"wrote {out} ({size / 1e6:.2f} MB) in {time.perf_counter() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
