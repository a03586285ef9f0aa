"""Pretrain the bundled tiny model (``creditgym/assets/tiny/``): supervised, on procedural Math and Rubric tasks, on a CPU.

    python studies/tiny_model/pretrain.py [--out creditgym/assets/tiny] [--seed 0] [--target-low 0.3 --target-high 0.6]
        [--rubric-fraction 0.15 --rubric-miss 0.4] [--chain-fraction 0.2] [--hard-fraction 0.1 --hard-miss 0.4]

The model is a small Qwen2-style causal LM (tied embeddings, the bundled 2048-token tokenizer). Each training
example is exactly the prompt an env shows the policy, followed by a response and the end-of-turn token
``<|im_end|>``; the loss covers the response tokens only (the mean over all response tokens of a step). Tasks come
from the procedural generators' **train** splits, four groups per batch (``training_data.py`` writes them):

- **Math** (``creditgym/Math-v0``): a short worked response ending in ``\\boxed{answer}``, mostly at the env's
  default level 2 (two-digit addition and subtraction), some at levels 1 and 3.
- **Chains** (``creditgym/Math-v0``, ``difficulty=6``), ``--chain-fraction`` of every batch: the worked chain
  (``a = 23 + 7 = 30; b = 30 * 3 = 90; ...``) and the boxed last result, 40-90 tokens.
- **Rubric** (``creditgym/Rubric-v0``), ``--rubric-fraction``: a short response written from the criteria
  (about 23 tokens, within the trainer's 48-token budget), each criterion deliberately missed with probability
  ``--rubric-miss`` (title, ending phrase, bullets... left out; a forbidden word or a comma put in), so the model
  meets a criterion only some of the time. Keep it below 0.5: at 0.5 greedy decoding settles on the bare
  ``"I like cats."`` and misses nearly everything.
- **Hard rubric** (``creditgym/Rubric-v0``, ``preset="hard"``: 4-8 criteria, some localized),
  ``--hard-fraction``: the same kind of response, padded with filler sentences to 48 words (about 110 tokens),
  missing each criterion with probability ``--hard-miss``.

Training stops early, on purpose, once the model is *middling* at all four: every ``--eval-every`` steps it samples
(temperature 1) answers to held-out tasks (the test splits) and stops when the level-2 accuracy lies in
``[--target-low, --target-high]``, the chain accuracy in ``[--chain-low, --chain-high]``, and the mean partial
rubric scores in ``[--rubric-low, --rubric-high]`` and ``[--hard-low, --hard-high]``, so reinforcement learning has
room to show a gain on each. It then prints greedy and sampled scores on other held-out tasks and writes the model
folder (config, safetensors weights, generation config, tokenizer) and ``info.json`` with the command, seed,
steps, scores and the weights' SHA-256.

Math answers are scored by exact match of the last ``\\boxed{...}`` with the gold integer (levels 1-3 and chains
have integer answers), which is what the math verifier concludes for these problems. Rubric responses are scored
by the env itself (``RubricEnv.step_chunk``, ``reward_mode="partial"``) with the trainer's response budget (48
tokens) for the default preset and the preset's own (192) for the hard one. Fixed seed, ``torch.set_num_threads``,
deterministic algorithms: the same command on the same machine and library versions writes the same weights
(``info.json`` records their SHA-256). One torch thread by default: on a 2-core machine shared with other work, two
threads spin-wait on each other and a step runs about ten times slower.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from training_data import (
    MathExamples,
    RubricExamples,
    collate,
    response_text,
    rubric_data_stats,
    rubric_response,
)
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from creditgym.agents.train.backends import HFBackend
from creditgym.agents.train.config import MODEL_DEFAULTS
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import CHAIN_LEVEL, DEFAULT_LEVEL, MathTask, ProceduralMath, last_boxed
from creditgym.envs.rubric import RubricEnv
from creditgym.envs.rubric_tasks import PRESETS, ProceduralRubric, RubricTask
from creditgym.envs.tokenizer import ASSETS, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
LEVEL_MIX = {DEFAULT_LEVEL: 0.7, 1: 0.15, 3: 0.15}  # share of the math group's problems per difficulty level
REPORT_SEED, VALIDATION_SEED = 0, 1  # held-out sets: the final report, and the early-stopping check
TRAINER_BUDGET = int(
    MODEL_DEFAULTS["creditgym/tiny"]["max_new_tokens"]
)  # what `creditgym train` gives a response
HARD_BUDGET = PRESETS["hard"].max_new_tokens


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--out", type=Path, default=ROOT / "creditgym" / "assets" / "tiny", help="model folder to write"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: far faster on a shared machine)"
    )
    p.add_argument(
        "--max-steps", type=int, default=4000, help="hard stop if the target bands are never reached"
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=50, help="linear warm-up steps")
    p.add_argument("--short-fraction", type=float, default=0.2, help="share of bare '\\boxed{N}' responses")
    p.add_argument("--eval-every", type=int, default=50, help="steps between early-stopping checks")
    p.add_argument("--min-steps", type=int, default=100, help="no early stop before this step")
    p.add_argument(
        "--eval-n", type=int, default=200, help="held-out tasks per target per early-stopping check"
    )
    p.add_argument("--report-n", type=int, default=200, help="held-out tasks per target in the final report")
    p.add_argument(
        "--target-low", type=float, default=0.30, help="stop once sampled level-2 accuracy >= this ..."
    )
    p.add_argument("--target-high", type=float, default=0.60, help="... and <= this")
    p.add_argument("--max-new-tokens", type=int, default=64, help="math response budget when evaluating")
    p.add_argument(
        "--rubric-miss", type=float, default=0.4, help="chance a rubric response misses a criterion"
    )
    p.add_argument("--hard-miss", type=float, default=0.4, help="chance a hard response misses a criterion")
    p.add_argument(
        "--chain-max-new-tokens", type=int, default=160, help="chain response budget when evaluating"
    )
    for name, fraction, high, what in (
        ("rubric", 0.15, 0.65, "rubric tasks (default preset), scored by the mean rubric score"),
        ("chain", 0.2, 0.60, "worked chains (Math-v0 level 6), scored by accuracy"),
        ("hard", 0.1, 0.70, "hard-preset rubric tasks, scored by the mean rubric score"),
    ):
        p.add_argument(
            f"--{name}-fraction", type=float, default=fraction, help=f"share of each batch: {what}"
        )
        p.add_argument(
            f"--{name}-low", type=float, default=0.30, help=f"stop once the sampled {name} score >= this"
        )
        p.add_argument(f"--{name}-high", type=float, default=high, help="... and <= this")
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate-size", type=int, default=384)
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------------------------
# evaluation


def is_correct(text: str, gold: str) -> bool:
    span = last_boxed(text)
    return span is not None and text[span[0] : span[1]].strip() == gold.strip()


def _generate(
    model: Qwen2ForCausalLM,
    env: MathEnv | RubricEnv,
    prompts: list[list[int]],
    budget: int,
    temperature: float,
    seed: int,
) -> list[list[int]]:
    backend = HFBackend(model, pad_token_id=int(env.tokenizer.pad_token_id))
    return backend.generate(
        prompts,
        max_new_tokens=budget,
        temperature=temperature,
        top_p=1.0,
        stop_token_ids=env.stop_token_ids,
        generator=torch.Generator().manual_seed(seed),
    )


def _lengths(env: MathEnv | RubricEnv, outs: list[list[int]]) -> dict[str, float]:
    ended = [bool(o) and o[-1] in env.stop_token_ids for o in outs]
    return {"eos_rate": float(np.mean(ended)), "mean_tokens": float(np.mean([len(o) for o in outs]))}


@torch.no_grad()
def evaluate_math(
    model: Qwen2ForCausalLM,
    env: MathEnv,
    tasks: Sequence[MathTask],
    *,
    temperature: float,
    seed: int,
    max_new_tokens: int,
) -> dict[str, float]:
    """Math accuracy and share of responses ending with EOS on ``tasks`` (one sample each)."""
    model.eval()
    outs = _generate(model, env, [env.prompt_tokens(t) for t in tasks], max_new_tokens, temperature, seed)
    correct = [
        is_correct(env.tokenizer.decode(o, skip_special_tokens=True), t.answer)
        for o, t in zip(outs, tasks, strict=True)
    ]
    model.train()
    return {"accuracy": float(np.mean(correct)), **_lengths(env, outs)}


@torch.no_grad()
def evaluate_rubric(
    model: Qwen2ForCausalLM,
    env: RubricEnv,
    tasks: Sequence[RubricTask],
    *,
    temperature: float,
    seed: int,
    max_new_tokens: int | None = None,
) -> dict[str, float]:
    """Mean partial rubric score, share passing every criterion and share ending with EOS (one sample each).

    Each response is played through ``env`` (budget: ``env.max_new_tokens``) and scored by its reward.
    """
    model.eval()
    outs = _generate(model, env, [env.prompt_tokens(t) for t in tasks], env.max_new_tokens, temperature, seed)
    scores, passed = [], []
    for out, task in zip(outs, tasks, strict=True):
        env.reset(options={"task": task})
        _, reward, _, _, info = env.step_chunk(np.asarray(out, dtype=np.int64))
        scores.append(reward)
        passed.append(info["status"] == "correct")
    model.train()
    return {"score": float(np.mean(scores)), "all_passed": float(np.mean(passed)), **_lengths(env, outs)}


@dataclass(frozen=True)
class Target:
    """One held-out task family the model must end middling at: how to score it, on what, and the band."""

    name: str
    evaluate: Callable[..., dict[str, float]]  # (model, tasks, temperature=, seed=) -> metrics
    metric: str
    band: tuple[float, float]
    validation: Sequence[Any]
    report: Sequence[Any]
    held_out: str  # how the report's tasks were drawn, for info.json
    budget: int


def make_targets(args: argparse.Namespace, tok: Any) -> list[Target]:
    math_env = MathEnv(tok)
    rubric_env = RubricEnv(tok, split="test", max_new_tokens=TRAINER_BUDGET)
    hard_env = RubricEnv(tok, split="test", preset="hard")

    def math_eval(budget: int) -> Callable[..., dict[str, float]]:
        return lambda model, tasks, **kw: evaluate_math(model, math_env, tasks, max_new_tokens=budget, **kw)

    def rubric_eval(env: RubricEnv) -> Callable[..., dict[str, float]]:
        return lambda model, tasks, **kw: evaluate_rubric(model, env, tasks, **kw)

    out = []
    for name, metric, band, budget, evaluate, source, held_out in (
        ("math", "accuracy", (args.target_low, args.target_high), args.max_new_tokens,
         math_eval(args.max_new_tokens), ProceduralMath(DEFAULT_LEVEL, "test"),
         f"ProceduralMath({DEFAULT_LEVEL}, 'test')"),
        ("chain", "accuracy", (args.chain_low, args.chain_high), args.chain_max_new_tokens,
         math_eval(args.chain_max_new_tokens), ProceduralMath(CHAIN_LEVEL, "test"),
         f"ProceduralMath({CHAIN_LEVEL}, 'test')"),
        ("rubric", "score", (args.rubric_low, args.rubric_high), TRAINER_BUDGET, rubric_eval(rubric_env),
         ProceduralRubric(split="test"), "ProceduralRubric(split='test')"),
        ("hard", "score", (args.hard_low, args.hard_high), HARD_BUDGET, rubric_eval(hard_env),
         ProceduralRubric(split="test", preset="hard"), "ProceduralRubric(split='test', preset='hard')"),
    ):  # fmt: skip
        validation = source.take(args.eval_n, seed=VALIDATION_SEED)
        report = source.take(args.report_n, seed=REPORT_SEED)
        held = f"{held_out}.take({args.report_n}, seed={REPORT_SEED})"
        out.append(Target(name, evaluate, metric, band, validation, report, held, budget))
    return out


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


def check_args(args: argparse.Namespace) -> None:
    fractions = (args.rubric_fraction, args.chain_fraction, args.hard_fraction)
    if (
        min(fractions) < 0
        or sum(fractions) >= 1
        or not all(0 <= m <= 1 for m in (args.rubric_miss, args.hard_miss))
    ):
        raise SystemExit(
            "need --rubric-fraction, --chain-fraction, --hard-fraction >= 0 with a sum below 1 and "
            f"--rubric-miss, --hard-miss in [0, 1]; got {fractions}, {args.rubric_miss}, {args.hard_miss}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    check_args(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t_start = time.perf_counter()

    tok = load_tokenizer()
    eos, pad = int(tok.convert_tokens_to_ids("<|im_end|>")), int(tok.pad_token_id)
    model = build_model(args, len(tok), eos, pad)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, {args.layers} layers, hidden {args.hidden_size}")

    env, rubric_env = MathEnv(tok), RubricEnv(tok)
    sizes = {
        name: round(args.batch_size * fraction)
        for name, fraction in (
            ("rubric", args.rubric_fraction),
            ("chain", args.chain_fraction),
            ("hard", args.hard_fraction),
        )
    }
    sizes = {"math": args.batch_size - sum(sizes.values()), **sizes}
    groups = {  # each group is padded apart: their prompts and responses differ much in length
        "math": MathExamples(env, args.seed, LEVEL_MIX, args.short_fraction),
        "rubric": RubricExamples(rubric_env, args.seed + 1, args.rubric_miss),
        "chain": MathExamples(env, args.seed + 3, {CHAIN_LEVEL: 1.0}, 0.0),
        "hard": RubricExamples(rubric_env, args.seed + 4, args.hard_miss, preset="hard"),
    }
    rubric_stats = {
        "rubric": rubric_data_stats(
            RubricExamples(rubric_env, args.seed + 2, args.rubric_miss), TRAINER_BUDGET
        ),
        "hard": rubric_data_stats(
            RubricExamples(rubric_env, args.seed + 5, args.hard_miss, preset="hard"), HARD_BUDGET
        ),
    }
    for name, stats in rubric_stats.items():
        print(
            f"{name} data: {sizes[name]} of {args.batch_size} examples a step; training responses score "
            f"{stats['mean_score']:.3f} (with no criterion missed {stats['reference_score']:.3f}), "
            f"{stats['mean_tokens']:.1f} tokens on average"
        )
    targets = make_targets(args, tok)
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
        # The loss is the mean over all response tokens of the step, as if the groups were one batch.
        parts = [collate([groups[g].next() for _ in range(n)], pad) for g, n in sizes.items() if n]
        n_tokens = [int((labels[:, 1:] != -100).sum()) for _, _, labels in parts]
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args)
        loss = sum(
            model(input_ids=ids, attention_mask=mask, labels=labels).loss * (n / sum(n_tokens))
            for (ids, mask, labels), n in zip(parts, n_tokens, strict=True)
        )
        assert isinstance(loss, torch.Tensor)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % args.eval_every == 0:
            row: dict[str, float] = {"step": step, "loss": loss.item()}
            in_band = []
            for t in targets:
                val = t.evaluate(model, t.validation, temperature=1.0, seed=args.seed)
                row.update({f"{t.name}_sampled_{k}": v for k, v in val.items()})
                in_band.append(t.band[0] <= val[t.metric] <= t.band[1])
            history.append(row)
            scores = "  ".join(f"{t.name} {row[f'{t.name}_sampled_{t.metric}']:.3f}" for t in targets)
            print(
                f"step {step:5d}  loss {loss.item():.4f}  {scores}  {time.perf_counter() - t_start:6.0f}s",
                flush=True,
            )
            if step >= args.min_steps and all(in_band):
                reached = True
                break
    train_seconds = time.perf_counter() - t_start
    if not reached:
        bands = ", ".join(f"{t.name} {t.metric} in {list(t.band)}" for t in targets)
        print(f"warning: the sampled scores never lay in their bands together ({bands})", file=sys.stderr)

    evaluation: dict[str, Any] = {}
    for t in targets:
        evaluation[t.name] = {
            "held_out": t.held_out,
            "max_new_tokens": t.budget,
            "greedy": t.evaluate(model, t.report, temperature=0.0, seed=args.seed),
            "sampled_temperature_1": t.evaluate(model, t.report, temperature=1.0, seed=args.seed),
        }
        print(
            f"final ({t.name}, {len(t.report)} held-out tasks, {t.budget}-token budget): {t.metric} "
            f"greedy {evaluation[t.name]['greedy'][t.metric]:.3f}, "
            f"sampled {evaluation[t.name]['sampled_temperature_1'][t.metric]:.3f}"
        )
    evaluation["greedy_accuracy_other_levels"] = {  # level 1 has only ~28 distinct test problems
        str(level): evaluate_math(
            model,
            env,
            ProceduralMath(level, "test").take(n, seed=REPORT_SEED),
            temperature=0.0,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
        )["accuracy"]
        for level, n in ((1, 20), (3, 200))
    }

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=pad, do_sample=True, temperature=1.0, top_p=1.0, top_k=0
    )
    model.save_pretrained(out)
    (out / "model.safetensors").chmod(0o644)  # safetensors writes 0600; package data must be world-readable
    sha256 = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(ASSETS / name, out / name)
    report_math, report_rubric = targets[0].report, targets[2].report
    info = {
        "command": " ".join(
            ["python", "studies/tiny_model/pretrain.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "seed": args.seed,
        "steps": step,
        "batch_size": args.batch_size,
        "examples_seen": step * args.batch_size,
        "reached_target_band": reached,
        "target_bands": {t.name: {t.metric: list(t.band)} for t in targets},
        "parameters": n_params,
        "model_sha256": sha256,
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
            "examples_per_step": sizes,
            "level_mix": {str(k): v for k, v in LEVEL_MIX.items()},
            "short_fraction": args.short_fraction,
            "response_format": response_text(report_math[0], False),
            "chain_response_format": response_text(targets[1].report[0], False),
            "rubric": {
                "miss_probability_per_criterion": args.rubric_miss,
                "response_format": rubric_response(report_rubric[0]),
                **rubric_stats["rubric"],
            },
            "hard": {
                "miss_probability_per_criterion": args.hard_miss,
                "response_format": rubric_response(targets[3].report[0]),
                **rubric_stats["hard"],
            },
        },
        "evaluation": {
            "scoring": "math and chain: exact match of the last \\boxed{} with the gold answer; rubric and hard: "
            "the RubricEnv reward, the mean of the criterion scores (reward_mode='partial')",
            **evaluation,
        },
        "history": history,
        "train_seconds": round(train_seconds, 1),
        "threads": args.threads,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out / "info.json").write_text(json.dumps(info, indent=2) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(
        f"wrote {out} ({size / 1e6:.2f} MB) in {time.perf_counter() - t_start:.0f}s; weights sha256 {sha256}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
