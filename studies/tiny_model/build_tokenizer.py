"""Build creditgym's own small tokenizer (byte-level BPE) and write it to ``envs/assets/``.

The tokenizer is committed; run this only to rebuild it. It is deterministic for a given ``tokenizers`` version.

    python studies/tiny_model/build_tokenizer.py [--vocab-size 2048] [--out envs/assets]

Byte-level BPE can encode any text (tool output, code, unicode); digits are split one by one so that a tiny model
learns arithmetic digit by digit. Special tokens follow ChatML: ``<|im_start|>`` / ``<|im_end|>`` frame each chat
turn and ``<|im_end|>`` is the end-of-turn (EOS) token; ``<|endoftext|>`` separates pretraining documents and
``<|pad|>`` pads batches.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from creditgym.envs.math_tasks import generate_task
from creditgym.envs.tokenizer import CHATML_TEMPLATE, SPECIAL_TOKENS

ENGLISH = """The quick brown fox jumps over the lazy dog. Write a short answer in plain English.
Please answer in lowercase letters only. Your response should contain at least three sentences.
Wrap your entire response in JSON format. End your response with the exact phrase "Is there anything else?"
Use exactly two bullet points in markdown format, such as: * This is a point. Include the keywords water and sun.
Answer with at most fifty words. Do not include any commas in your response. Give two different responses.
Highlight at least one section with markdown, i.e. *highlighted section*. Add a postscript starting with P.S.
Describe a balanced diet for athletes. Explain why the sky is blue. Write a poem about the sea and the moon.
First repeat the request word for word without change, then give your answer. Your answer must have a title,
wrapped in double angular brackets, such as <<poem of joy>>. There should be two paragraphs separated by ***.
Summarize the story of a small town that learned to share its water during a long dry summer.
The function returns the wrong value when the list is empty. Fix the bug and run the tests again.
"""

CODE = """def add(a, b):
    return a + b

class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()

import unittest
from pathlib import Path

for i in range(10):
    print(i, file=sys.stderr)
--- a/src/calc.py
+++ b/src/calc.py
@@ -1,4 +1,4 @@
-    return a - b
+    return a + b
$ ls -la /testbed && cat README.md && python -m pytest -q tests/
<bash>grep -rn "def " src/</bash> <view>src/calc.py</view> <submit/>
"""


# English prose and Python code for the non-math merges: the standard library's own docstrings and sources.
STDLIB = (
    "argparse",
    "collections",
    "csv",
    "dataclasses",
    "difflib",
    "email.message",
    "functools",
    "json",
    "logging",
    "pathlib",
    "shutil",
    "statistics",
    "string",
    "subprocess",
    "textwrap",
    "unittest.case",
)


def _stdlib_text() -> Iterator[str]:
    for name in STDLIB:
        module = importlib.import_module(name)
        yield inspect.getsource(module)
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj)
            if doc:
                yield doc


def corpus(n_math: int = 4000, seed: int = 0) -> Iterator[str]:
    yield from _stdlib_text()
    rng = np.random.default_rng(seed)
    for i in range(n_math):
        task = generate_task(rng, 1 + i % 5)  # levels 1-5: the committed tokenizer predates the chains (6)
        yield f"{task.question}\nPut your final answer within \\boxed{{}}.\nThe answer is \\boxed{{{task.answer}}}."
    for _ in range(20):
        yield ENGLISH
        yield CODE


def build(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=2048)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[2] / "creditgym" / "assets" / "tiny"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tok = build(args.vocab_size)
    tok.save(str(args.out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "eos_token": SPECIAL_TOKENS["eos"],
        "pad_token": SPECIAL_TOKENS["pad"],
        "bos_token": None,
        "unk_token": None,
        "additional_special_tokens": [SPECIAL_TOKENS["bos_turn"], SPECIAL_TOKENS["endoftext"]],
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (args.out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {args.out}/tokenizer.json ({tok.get_vocab_size()} tokens) and tokenizer_config.json")


if __name__ == "__main__":
    main()
