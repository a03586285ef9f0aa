"""The bundled tiny model (``creditgym/assets/tiny/``): a plain Hugging Face folder, small, middling at Math (level 2 and the
worked chains) and Rubric (the default and the hard preset)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from creditgym.agents.train.policy import bundled_model_path, load_policy
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import CHAIN_LEVEL, DEFAULT_LEVEL, ProceduralMath, last_boxed
from creditgym.envs.rubric import RubricEnv
from creditgym.envs.rubric_tasks import ProceduralRubric
from creditgym.envs.tokenizer import load_tokenizer

FILES = (
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "info.json",
)
GREEDY_FLOOR = 0.30  # measured: 0.555 greedy on 200 held-out problems, 0.66 on these 50
# The bands for the sampled (temperature 1) scores the training script recorded on 200 held-out tasks each.
BANDS = {
    "math": ("accuracy", 0.30, 0.60),
    "chain": ("accuracy", 0.30, 0.60),
    "rubric": ("score", 0.30, 0.65),
    "hard": ("score", 0.30, 0.70),
}


def test_folder_is_complete_and_small() -> None:
    folder = bundled_model_path()
    for name in FILES:
        assert (folder / name).is_file(), f"{name} missing from {folder}"
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    assert size < 10 * 2**20, f"{folder} holds {size / 2**20:.1f} MiB (limit 10)"
    info = json.loads((folder / "info.json").read_text())
    assert {"command", "seed", "steps", "evaluation", "model_sha256"} <= set(info)
    for name, (metric, low, high) in BANDS.items():
        assert low <= info["evaluation"][name]["sampled_temperature_1"][metric] <= high, name


def test_loads_with_plain_transformers_and_matches_the_env_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = bundled_model_path()
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    n_params = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n_params <= 5_000_000
    assert model.config.tie_word_embeddings and model.config.vocab_size == len(tok) == 2048
    env_tok = load_tokenizer()
    text = "What is 86 + 67?\nPut your final answer within \\boxed{}.<|im_end|>"
    assert tok(text)["input_ids"] == env_tok(text)["input_ids"]
    assert tok.eos_token_id == env_tok.eos_token_id and tok.pad_token_id == env_tok.pad_token_id
    messages = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        env_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    )


def test_greedy_accuracy_on_held_out_problems_is_above_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(2)
    policy = load_policy("creditgym/tiny", device="cpu")
    env = MathEnv(policy.tokenizer)
    tasks = list(ProceduralMath(DEFAULT_LEVEL, "test").take(50, seed=0))
    out = policy.sample([env.prompt_tokens(t) for t in tasks], max_new_tokens=64, temperature=0.0)
    texts = [policy.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
    boxed = [last_boxed(text) for text in texts]
    correct = [
        b is not None and text[b[0] : b[1]].strip() == t.answer
        for b, text, t in zip(boxed, texts, tasks, strict=True)
    ]
    accuracy = sum(correct) / len(tasks)
    assert sum(out.stopped) >= 0.9 * len(tasks), "responses should end with <|im_end|>"
    assert all(b is not None for b in boxed), "every response should hold a \\boxed{} answer"
    assert accuracy > GREEDY_FLOOR, f"greedy accuracy {accuracy:.2f} on 50 held-out problems"
    assert accuracy < 0.9, (
        f"greedy accuracy {accuracy:.2f}: the bundled model should leave RL room to improve"
    )


def test_sampled_chains_are_middling_and_written_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured: 16 of these 60 held-out chains right when sampled (0.27; 0.315 on 200), every one written out."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    policy = load_policy("creditgym/tiny", device="cpu")
    env = MathEnv(policy.tokenizer, difficulty=CHAIN_LEVEL)
    tasks = list(ProceduralMath(CHAIN_LEVEL, "test").take(60, seed=0))
    out = policy.sample(
        [env.prompt_tokens(t) for t in tasks],
        max_new_tokens=160,
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    texts = [policy.tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
    correct = []
    for text, task in zip(texts, tasks, strict=True):
        boxed = last_boxed(text)
        correct.append(boxed is not None and text[boxed[0] : boxed[1]].strip() == task.answer)
    steps_written = sum(text.startswith("a = ") and text.count(" = ") >= 6 for text in texts)
    assert sum(out.stopped) >= 0.9 * len(tasks) and steps_written >= 0.9 * len(tasks), texts[:3]
    accuracy = sum(correct) / len(tasks)
    assert 0.15 <= accuracy <= 0.75, f"sampled chain accuracy {accuracy:.2f} on 60 held-out chains"


def test_sampled_hard_rubric_scores_are_middling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured: a mean score of 0.47 on these 40 held-out hard tasks (0.507 on 200), none passing all."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    policy = load_policy("creditgym/tiny", device="cpu")
    env = RubricEnv(policy.tokenizer, preset="hard", split="test")
    tasks = list(ProceduralRubric(split="test", preset="hard").take(40, seed=0))
    out = policy.sample(
        [env.prompt_tokens(t) for t in tasks],
        max_new_tokens=env.max_new_tokens,
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    scores = []
    for tokens, task in zip(out.tokens, tasks, strict=True):
        env.reset(options={"task": task})
        scores.append(env.step_chunk(np.asarray(tokens, dtype=np.int64))[1])
    mean = float(np.mean(scores))
    assert 0.2 <= mean <= 0.8, f"mean hard rubric score {mean:.2f} on 40 held-out tasks"
    assert len(set(scores)) > 3, scores  # partial credit, task by task: not one constant answer
