"""Pretrain the bundled tiny model (``agents/tiny/``): supervised, on procedural Math and Rubric tasks, on a CPU.

    python examples/tiny/pretrain.py [--out agents/tiny] [--seed 0] [--target-low 0.3 --target-high 0.6]
        [--rubric-fraction 0.2 --rubric-miss 0.4 --rubric-low 0.3 --rubric-high 0.65]

The model is a small Qwen2-style causal LM (tied embeddings, the bundled 2048-token tokenizer). Each training
example is exactly the prompt an env shows the policy, followed by a response and the end-of-turn token
``<|im_end|>``; the loss covers the response tokens only. Tasks come from the procedural generators' **train**
splits:

- **Math** (``creditgym/Math-v0``, ``MathEnv.prompt_tokens(task)``): a short worked response ending in
  ``\\boxed{answer}``, mostly at the env's default level 2 (two-digit addition and subtraction), some at levels 1
  and 3.
- **Rubric** (``creditgym/Rubric-v0``, ``RubricEnv.prompt_tokens(task)``: the instruction and its numbered
  criteria), ``--rubric-fraction`` of every batch: a short response written from the criteria by
  :func:`rubric_response` (about 23 tokens; the procedural tasks' own ``oracle`` runs to about 68, past the
  trainer's 48-token budget). Each criterion is deliberately missed with probability ``--rubric-miss`` (title,
  ending phrase, bullets... left out; a forbidden word or a comma put in), so the model learns to meet a criterion
  only some of the time, not all of it. Keep it below 0.5: at 0.5 greedy decoding settles on the bare
  ``"I like cats."`` and misses nearly everything.

Training stops early, on purpose, once the model is *middling* at both: every ``--eval-every`` steps it samples
(temperature 1) answers to held-out level-2 problems and held-out rubric tasks (the test splits) and stops when the
math accuracy lies in ``[--target-low, --target-high]`` and the mean partial rubric score in
``[--rubric-low, --rubric-high]``, so reinforcement learning has room to show a gain on either env. It then prints
greedy and sampled scores on 200 other held-out problems and tasks and writes the model folder (config, safetensors
weights, generation config, tokenizer) and ``info.json`` with the command, seed, steps, scores and the weights'
SHA-256.

Math answers are scored by exact match of the last ``\\boxed{...}`` with the gold integer (levels 1-3 have integer
answers), which is what the math verifier concludes for these problems. Rubric responses are scored by the env
itself (``RubricEnv.step_chunk``, graded by :mod:`creditgym.verifiers.rubric`, ``reward_mode="partial"``) with the
trainer's response budget (``TrainConfig().env_kwargs["max_new_tokens"]``, 48 tokens). Fixed seed,
``torch.set_num_threads``, deterministic algorithms: the same command on the same machine and library versions
writes the same weights (``info.json`` records their SHA-256).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from creditgym.agents.backends import HFBackend
from creditgym.agents.config import TrainConfig
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import DEFAULT_LEVEL, MathTask, ProceduralMath, last_boxed
from creditgym.envs.rubric import RubricEnv
from creditgym.envs.rubric_tasks import ProceduralRubric, RubricTask
from creditgym.envs.tokenizer import ASSETS, load_tokenizer
from creditgym.verifiers.rubric import grade

ROOT = Path(__file__).resolve().parents[2]
LEVEL_MIX = {DEFAULT_LEVEL: 0.7, 1: 0.15, 3: 0.15}  # share of training problems per difficulty level
REPORT_SEED, VALIDATION_SEED = 0, 1  # held-out sets: the final report, and the early-stopping check
TRAINER_BUDGET = int(TrainConfig().env_kwargs["max_new_tokens"])  # what `creditgym train` gives a response


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
    p.add_argument(
        "--eval-n", type=int, default=200, help="held-out problems and tasks per early-stopping check"
    )
    p.add_argument(
        "--report-n", type=int, default=200, help="held-out problems and tasks in the final report"
    )
    p.add_argument("--target-low", type=float, default=0.30, help="stop once sampled accuracy is >= this ...")
    p.add_argument("--target-high", type=float, default=0.60, help="... and <= this")
    p.add_argument("--max-new-tokens", type=int, default=64, help="math response budget when evaluating")
    p.add_argument(
        "--rubric-fraction", type=float, default=0.2, help="share of each batch that is rubric tasks"
    )
    p.add_argument(
        "--rubric-miss", type=float, default=0.4, help="chance that a training response misses each criterion"
    )
    p.add_argument(
        "--rubric-low", type=float, default=0.30, help="... and the sampled rubric score >= this ..."
    )
    p.add_argument("--rubric-high", type=float, default=0.65, help="... and <= this")
    p.add_argument(
        "--rubric-max-new-tokens",
        type=int,
        default=TRAINER_BUDGET,
        help="rubric response budget when evaluating (default: the trainer's)",
    )
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


_TOPIC = re.compile(r"(?:about|on) (.+)\.$|^Describe (.+) in a few sentences\.$")
_FILLERS = ("It is good to learn about it", "We share it with our friends", "I want to know more")


def rubric_response(task: RubricTask, miss: Collection[int] = ()) -> str:
    """A short response to a procedural rubric task meeting every criterion except those indexed in ``miss``.

    A missed criterion is left out (no title, no ending phrase, no bullets, no JSON...) or broken on purpose (a
    forbidden word, a comma, the keyword only once); the word and sentence counts and ``words_less`` cannot always
    be missed in a short answer, so they may still pass. Example (title, 2 bullets, ending)::

        <<rain>>
        I like rain.
        * point 1
        * point 2 That is all.
    """
    match = _TOPIC.search(task.instruction)
    topic = (match.group(1) or match.group(2)) if match else "it"
    args = {c.id: dict(c.kwargs) for c in task.criteria}
    kept = {c.id: i not in miss for i, c in enumerate(task.criteria)}

    def on(cid: str) -> bool:
        return kept.get(cid, False)

    def off(cid: str) -> bool:
        return kept.get(cid) is False

    keyword, second = topic.removeprefix("the "), ""
    if "keywords:existence" in args:
        keyword, second = args["keywords:existence"]["keywords"][:2]
    if "keywords:frequency" in args:
        keyword = args["keywords:frequency"]["keyword"]
    body = [f"I like {keyword} and {second}" if on("keywords:existence") else f"I like {keyword}"]
    if off("punctuation:no_comma"):
        body[0] = "Yes, " + body[0]
    if on("keywords:frequency"):
        body += [f"The {keyword} is here"] * (args["keywords:frequency"]["frequency"] - 1)
    if off("keywords:forbidden_words"):
        body.append(f"It is {args['keywords:forbidden_words']['forbidden_words'][0]}")
    if on("detectable_content:number_placeholders"):
        n = args["detectable_content:number_placeholders"]["num_placeholders"]
        body.append("Write to " + " and ".join(["[name]", "[place]", "[date]"][:n]))
    if on("detectable_format:number_highlighted_sections"):
        n = args["detectable_format:number_highlighted_sections"]["num_highlights"]
        body.append("It is " + " and ".join(["*good*", "*fun*", "*new*"][:n]))
    words = args.get("length_constraints:number_words", {})
    min_words = (
        words["num_words"] if on("length_constraints:number_words") and words["relation"] == "at least" else 0
    )
    min_sentences = (
        args["length_constraints:number_sentences"]["num_sentences"]
        if on("length_constraints:number_sentences")
        else 1
    )
    fillers = iter(_FILLERS)
    if on("change_case:english_lowercase"):
        body.append(next(fillers))  # the check also wants langdetect to say English: "i like rain." is not
    while len(body) < min_sentences or len(re.findall(r"\w+", ". ".join(body))) < min_words:
        body.append(next(fillers))
    text = ". ".join(body) + "."
    if on("detectable_format:title"):
        text = f"<<{'my note' if off('keywords:frequency') else topic}>>\n{text}"
    if on("detectable_format:number_bullet_lists"):
        n = args["detectable_format:number_bullet_lists"]["num_bullets"]
        text += "".join(f"\n* point {i + 1}" for i in range(n))
    if on("detectable_content:postscript"):
        text += "\nP.S. See you."
    if on("startend:end_checker"):
        text += " " + args["startend:end_checker"]["end_phrase"]
    if on("detectable_format:json_format"):
        text = json.dumps({"answer": text.replace("\n", " ")})
    if on("change_case:english_lowercase"):
        text = text.lower()
    if on("startend:quotation"):
        text = f'"{text}"'
    return text


class Examples:
    """Endless math examples ``(prompt ids, response ids)`` from the train split, deterministic in ``seed``."""

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


class RubricExamples:
    """Endless rubric examples ``(prompt ids, response ids)`` from the train split (see ``rubric_response``)."""

    def __init__(self, env: RubricEnv, seed: int, miss: float) -> None:
        self.env, self.tokenizer = env, env.tokenizer
        self.rng = np.random.default_rng(seed)
        self.source = ProceduralRubric(split="train")
        self.miss = miss
        self.eos = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def next_task(self) -> tuple[RubricTask, str]:
        task = self.source.sample(self.rng)
        missed = [i for i in range(len(task.criteria)) if self.rng.random() < self.miss]
        return task, rubric_response(task, missed)

    def next(self) -> tuple[list[int], list[int]]:
        task, text = self.next_task()
        response = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.env.prompt_tokens(task), [*response, self.eos]


def collate(
    pairs: Sequence[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask``, ``labels`` (-100 on prompt and padding), all ``(B, T)``."""
    width = max(len(p) + len(r) for p, r in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    for i, (prompt, response) in enumerate(pairs):
        seq = prompt + response
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(prompt) : len(seq)] = torch.tensor(response)
    return ids, mask, labels


def rubric_data_stats(env: RubricEnv, seed: int, miss: float, n: int = 1000) -> dict[str, float]:
    """What the rubric training responses score (graded like the env), and their length in tokens with EOS.

    Warns when a response written to meet every criterion misses one: the procedural generator has a criterion
    :func:`rubric_response` does not know.
    """
    examples = RubricExamples(env, seed, miss)
    scores, reference, lengths = [], [], []
    for _ in range(n):
        task, text = examples.next_task()
        scores.append(grade(text, task.criteria).score or 0.0)
        reference.append(grade(rubric_response(task), task.criteria).score or 0.0)
        lengths.append(len(env.tokenizer(text, add_special_tokens=False)["input_ids"]) + 1)
    if min(reference) < 1.0:
        print(
            f"warning: {sum(r < 1.0 for r in reference)} of {n} rubric responses written to meet every criterion "
            "miss one: teach rubric_response the new criterion",
            file=sys.stderr,
        )
    return {
        "mean_score": float(np.mean(scores)),
        "reference_score": float(np.mean(reference)),
        "mean_tokens": float(np.mean(lengths)),
        "max_tokens": float(np.max(lengths)),
        f"share_over_{TRAINER_BUDGET}_tokens": float(np.mean(np.array(lengths) > TRAINER_BUDGET)),
    }


# --------------------------------------------------------------------------------------------------------------
# evaluation


def is_correct(text: str, gold: str) -> bool:
    span = last_boxed(text)
    return span is not None and text[span[0] : span[1]].strip() == gold.strip()


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


@torch.no_grad()
def evaluate_rubric(
    model: Qwen2ForCausalLM,
    env: RubricEnv,
    tasks: Sequence[RubricTask],
    *,
    temperature: float,
    seed: int,
) -> dict[str, float]:
    """Mean partial rubric score, share passing every criterion and share ending with EOS (one sample each).

    Each response is played through ``env`` (budget: ``env.max_new_tokens``) and scored by its reward.
    """
    model.eval()
    backend = HFBackend(model, pad_token_id=int(env.tokenizer.pad_token_id))
    generator = torch.Generator().manual_seed(seed)
    outs = backend.generate(
        [env.prompt_tokens(t) for t in tasks],
        max_new_tokens=env.max_new_tokens,
        temperature=temperature,
        top_p=1.0,
        stop_token_ids=env.stop_token_ids,
        generator=generator,
    )
    scores, passed = [], []
    for out, task in zip(outs, tasks, strict=True):
        env.reset(options={"task": task})
        _, reward, _, _, info = env.step_chunk(np.asarray(out, dtype=np.int64))
        scores.append(reward)
        passed.append(info["status"] == "correct")
    ended = [bool(o) and o[-1] in env.stop_token_ids for o in outs]
    model.train()
    return {
        "score": float(np.mean(scores)),
        "all_passed": float(np.mean(passed)),
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
    if not 0.0 <= args.rubric_fraction < 1.0 or not 0.0 <= args.rubric_miss <= 1.0:
        raise SystemExit(
            f"need 0 <= --rubric-fraction < 1 and 0 <= --rubric-miss <= 1, "
            f"got {args.rubric_fraction} and {args.rubric_miss}"
        )
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    t_start = time.perf_counter()

    tok = load_tokenizer()
    env = MathEnv(tok)
    rubric_env = RubricEnv(tok, split="test", max_new_tokens=args.rubric_max_new_tokens)
    eos, pad = int(tok.convert_tokens_to_ids("<|im_end|>")), int(tok.pad_token_id)
    model = build_model(args, len(tok), eos, pad)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters, {args.layers} layers, hidden {args.hidden_size}")

    n_rubric = round(args.batch_size * args.rubric_fraction)
    examples = Examples(env, args.seed, args.short_fraction)
    rubric_examples = RubricExamples(RubricEnv(tok), args.seed + 1, args.rubric_miss)
    rubric_stats = rubric_data_stats(RubricEnv(tok), args.seed + 2, args.rubric_miss)
    print(
        f"rubric data: {n_rubric} of {args.batch_size} examples a step; training responses score "
        f"{rubric_stats['mean_score']:.3f} (with no criterion missed {rubric_stats['reference_score']:.3f}), "
        f"{rubric_stats['mean_tokens']:.1f} tokens on average"
    )
    validation = ProceduralMath(DEFAULT_LEVEL, "test").take(args.eval_n, seed=VALIDATION_SEED)
    report = ProceduralMath(DEFAULT_LEVEL, "test").take(args.report_n, seed=REPORT_SEED)
    rubric_validation = ProceduralRubric(split="test").take(args.eval_n, seed=VALIDATION_SEED)
    rubric_report = ProceduralRubric(split="test").take(args.report_n, seed=REPORT_SEED)
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
        # Math and rubric examples are padded apart (rubric prompts are ~3x longer); the loss is the mean over
        # all response tokens of the step, as if they were one batch.
        parts = [collate([examples.next() for _ in range(args.batch_size - n_rubric)], pad)]
        if n_rubric:
            parts.append(collate([rubric_examples.next() for _ in range(n_rubric)], pad))
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
            val = evaluate_math(
                model, env, validation, temperature=1.0, seed=args.seed, max_new_tokens=args.max_new_tokens
            )
            rub = evaluate_rubric(model, rubric_env, rubric_validation, temperature=1.0, seed=args.seed)
            history.append(
                {
                    "step": step,
                    "loss": loss.item(),
                    **{f"sampled_{k}": v for k, v in val.items()},
                    **{f"rubric_sampled_{k}": v for k, v in rub.items()},
                }
            )
            print(
                f"step {step:5d}  loss {loss.item():.4f}  sampled acc {val['accuracy']:.3f}  "
                f"eos {val['eos_rate']:.2f}  rubric {rub['score']:.3f} (eos {rub['eos_rate']:.2f})  "
                f"{time.perf_counter() - t_start:6.0f}s",
                flush=True,
            )
            math_ok = args.target_low <= val["accuracy"] <= args.target_high
            rubric_ok = args.rubric_low <= rub["score"] <= args.rubric_high
            if step >= args.min_steps and math_ok and rubric_ok:
                reached = True
                break
    train_seconds = time.perf_counter() - t_start
    if not reached:
        print(
            f"warning: sampled math accuracy never lay in [{args.target_low}, {args.target_high}] while the "
            f"sampled rubric score lay in [{args.rubric_low}, {args.rubric_high}]",
            file=sys.stderr,
        )

    greedy = evaluate_math(
        model, env, report, temperature=0.0, seed=args.seed, max_new_tokens=args.max_new_tokens
    )
    sampled = evaluate_math(
        model, env, report, temperature=1.0, seed=args.seed, max_new_tokens=args.max_new_tokens
    )
    other_levels = {  # greedy, for the record (level 1 has only ~28 distinct test problems)
        level: evaluate_math(
            model,
            env,
            ProceduralMath(level, "test").take(n, seed=REPORT_SEED),
            temperature=0.0,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
        )["accuracy"]
        for level, n in ((1, 20), (3, 200))
    }
    rubric_greedy = evaluate_rubric(model, rubric_env, rubric_report, temperature=0.0, seed=args.seed)
    rubric_sampled = evaluate_rubric(model, rubric_env, rubric_report, temperature=1.0, seed=args.seed)
    print(
        f"final (step {step}, {len(report)} held-out level-{DEFAULT_LEVEL} problems): "
        f"greedy accuracy {greedy['accuracy']:.3f} (eos {greedy['eos_rate']:.2f}), "
        f"sampled accuracy {sampled['accuracy']:.3f} (eos {sampled['eos_rate']:.2f})\n"
        f"final ({len(rubric_report)} held-out rubric tasks, {rubric_env.max_new_tokens}-token budget): "
        f"greedy score {rubric_greedy['score']:.3f} (all passed {rubric_greedy['all_passed']:.3f}), "
        f"sampled score {rubric_sampled['score']:.3f} (all passed {rubric_sampled['all_passed']:.3f})"
    )

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
        "rubric_target_band": [args.rubric_low, args.rubric_high],
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
            "level_mix": {str(k): v for k, v in LEVEL_MIX.items()},
            "short_fraction": args.short_fraction,
            "response_format": response_text(report[0], False),
            "rubric": {
                "examples_per_step": n_rubric,
                "tasks": "ProceduralRubric(split='train') (1-4 criteria)",
                "miss_probability_per_criterion": args.rubric_miss,
                "response_format": rubric_response(rubric_report[0]),
                **rubric_stats,
            },
        },
        "evaluation": {
            "held_out": f"ProceduralMath({DEFAULT_LEVEL}, 'test').take({args.report_n}, seed={REPORT_SEED})",
            "scoring": "exact match of the last \\boxed{} with the gold answer",
            "max_new_tokens": args.max_new_tokens,
            "greedy": greedy,
            "sampled_temperature_1": sampled,
            "greedy_accuracy_other_levels": {str(k): v for k, v in other_levels.items()},
            "rubric": {
                "held_out": f"ProceduralRubric(split='test').take({args.report_n}, seed={REPORT_SEED})",
                "scoring": "RubricEnv reward: the mean of the criterion scores (reward_mode='partial')",
                "max_new_tokens": rubric_env.max_new_tokens,
                "greedy": rubric_greedy,
                "sampled_temperature_1": rubric_sampled,
            },
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
