"""The tiny model's supervised data (see ``pretrain.py``): prompts exactly as the envs render them, responses
written from the procedural tasks of the train splits.

- Math (``MathEnv.prompt_tokens``): ``"86 + 67 = 153. The answer is \\boxed{153}."`` or the bare ``"\\boxed{153}"``;
  for a worked chain (level 6) the env's own oracle, the chain written out step by step.
- Rubric (``RubricEnv.prompt_tokens``): a short response written from the criteria by :func:`rubric_response`,
  each criterion missed on purpose with a given probability.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import torch

from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import MathTask, ProceduralMath
from creditgym.envs.rubric import RubricEnv
from creditgym.envs.rubric_tasks import ProceduralRubric, RubricTask, get_preset
from creditgym.verifiers.rubric import grade
from creditgym.verifiers.rubric.local import FIRST_SENTENCE_KEYWORD

Pair = tuple[list[int], list[int]]  # (prompt ids, response ids ending with <|im_end|>)


def response_text(task: MathTask, short: bool) -> str:
    """A worked answer ``"86 + 67 = 153. The answer is \\boxed{153}."``, the bare ``"\\boxed{153}"``, or a chain."""
    if task.solution is not None:
        return f"{task.solution} The answer is \\boxed{{{task.answer}}}."
    expr = task.question.removeprefix("What is ").removesuffix("?")
    if short or expr == task.question:
        return f"\\boxed{{{task.answer}}}"
    return f"{expr} = {task.answer}. The answer is \\boxed{{{task.answer}}}."


_TOPIC = re.compile(r"(?:about|on) (.+)\.$|^Describe (.+) in a few sentences\.$")
_FILLERS = (
    "It is good to learn about it",
    "We share it with our friends",
    "I want to know more",
    "Many people talk about it",
    "It makes the day better",
)


def rubric_response(task: RubricTask, miss: Collection[int] = (), pad_words: int = 0) -> str:
    """A short response to a procedural rubric task meeting every criterion except those indexed in ``miss``.

    Filler sentences pad it to ``pad_words`` words at least (the hard preset's long answers).

    A missed criterion is left out (no title, no ending phrase, no bullets, no JSON...) or broken on purpose (a
    forbidden word, a comma, the keyword only once, the first-sentence keyword moved to a later sentence); the
    word and sentence counts and ``words_less`` cannot always be missed in a short answer, so they may still pass.
    Example (title, 2 bullets, ending)::

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
    if on(FIRST_SENTENCE_KEYWORD):
        body[0] += f" and the {args[FIRST_SENTENCE_KEYWORD]['keyword']}"
    if off("punctuation:no_comma"):
        body[0] = "Yes, " + body[0]
    if on("keywords:frequency"):
        body += [f"The {keyword} is here"] * (args["keywords:frequency"]["frequency"] - 1)
    if off(FIRST_SENTENCE_KEYWORD):
        body.append(f"The {args[FIRST_SENTENCE_KEYWORD]['keyword']} is here")
    if off("keywords:forbidden_words"):
        body.append(f"It is {args['keywords:forbidden_words']['forbidden_words'][0]}")
    if on("detectable_content:number_placeholders"):
        n = args["detectable_content:number_placeholders"]["num_placeholders"]
        body.append("Write to " + " and ".join(["[name]", "[place]", "[date]"][:n]))
    if on("detectable_format:number_highlighted_sections"):
        n = args["detectable_format:number_highlighted_sections"]["num_highlights"]
        body.append("It is " + " and ".join(["*good*", "*fun*", "*new*"][:n]))
    words = args.get("length_constraints:number_words", {})
    min_words = max(
        pad_words,
        words["num_words"]
        if on("length_constraints:number_words") and words["relation"] == "at least"
        else 0,
    )
    min_sentences = (
        args["length_constraints:number_sentences"]["num_sentences"]
        if on("length_constraints:number_sentences")
        else 1
    )
    fillers = itertools.cycle(_FILLERS)
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


class MathExamples:
    """Endless math examples from the train split, levels drawn from ``level_mix``, deterministic in ``seed``."""

    def __init__(
        self, env: MathEnv, seed: int, level_mix: Mapping[int, float], short_fraction: float
    ) -> None:
        self.env, self.tokenizer = env, env.tokenizer
        self.rng = np.random.default_rng(seed)
        self.levels = list(level_mix)
        self.weights = np.array([level_mix[level] for level in self.levels], dtype=float)
        self.weights /= self.weights.sum()
        self.sources = {level: ProceduralMath(level, "train") for level in self.levels}
        self.short_fraction = short_fraction
        self.eos = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def next(self) -> Pair:
        level = self.levels[int(self.rng.choice(len(self.levels), p=self.weights))]
        task = self.sources[level].sample(self.rng)
        short = bool(self.rng.random() < self.short_fraction)
        response = self.tokenizer(response_text(task, short), add_special_tokens=False)["input_ids"]
        return self.env.prompt_tokens(task), [*response, self.eos]


class RubricExamples:
    """Endless rubric examples of one preset from the train split (see :func:`rubric_response`)."""

    def __init__(self, env: RubricEnv, seed: int, miss: float, preset: str = "default") -> None:
        self.env, self.tokenizer = env, env.tokenizer
        self.rng = np.random.default_rng(seed)
        self.source = ProceduralRubric(split="train", preset=preset)
        self.miss, self.pad_words = miss, get_preset(preset).oracle_words
        self.eos = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def next_task(self) -> tuple[RubricTask, str]:
        task = self.source.sample(self.rng)
        missed = [i for i in range(len(task.criteria)) if self.rng.random() < self.miss]
        return task, rubric_response(task, missed, self.pad_words)

    def next(self) -> Pair:
        task, text = self.next_task()
        response = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.env.prompt_tokens(task), [*response, self.eos]


def collate(pairs: Sequence[Pair], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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


def rubric_data_stats(examples: RubricExamples, budget: int, n: int = 500) -> dict[str, float]:
    """What ``n`` of the examples' responses score (graded like the env), and their length in tokens with EOS.

    Warns when a response written to meet every criterion misses one: the procedural generator has a criterion
    :func:`rubric_response` does not know.
    """
    scores, reference, lengths = [], [], []
    for _ in range(n):
        task, text = examples.next_task()
        scores.append(grade(text, task.criteria).score or 0.0)
        reference.append(grade(rubric_response(task, (), examples.pad_words), task.criteria).score or 0.0)
        lengths.append(len(examples.tokenizer(text, add_special_tokens=False)["input_ids"]) + 1)
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
        f"share_over_{budget}_tokens": float(np.mean(np.array(lengths) > budget)),
    }
