"""The cue probe behind docs/envs/math.md's word-problem tuning (run at commit 2bd3f7b, before the cue existed).

32 distinct test questions of ``word_tasks.generate`` (seed 7), each with a cue appended, SmolLM2 greedy, 96 tokens:

    python studies/results/real-model/word-tuning/cue_probe.py MODEL "Answer in one short sentence." \
        "Write one equation, then the answer."
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import sympy
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditgym.envs import word_tasks
from creditgym.envs.math_tasks import MathTask, _task_id
from creditgym.envs.tasks import TaskList, split_of

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "studies" / "scripts"))
import real_model_bands as rb

torch.set_num_threads(1)
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
rng, base = np.random.default_rng(7), {}
while len(base) < 32:
    q, a, _ = word_tasks.generate(rng)
    if split_of(q) == "test":
        base[q] = sympy.latex(a)
for cue in sys.argv[2:]:
    tasks = TaskList([MathTask(f"{q} {cue}", a, _task_id(q), 7) for q, a in base.items()])
    fam = rb.Family("creditgym/Math-v0", {"tasks": tasks}, cue)
    r = rb.measure(
        model, tok, fam, prompts=32, samples=1, temperature=0.0, max_new_tokens=96, batch_size=32, seed=0
    )
    print(repr(cue), round(r["mean"], 3), r["interval"], r["truncated_share"], r["mean_response_tokens"])
