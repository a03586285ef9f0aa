"""A model's step-0 score on each task family: is there something for RL to learn from?

For each family (a registered env id and its keyword arguments), the env is built with the model's own tokenizer
and its test split; ``--prompts`` episodes are reset with seeds 0, 1, ...; every prompt is answered ``--samples``
times through creditgym's Hugging Face backend (the trainer's sampling rule: temperature, top-p 1, no top-k) and
each response is stepped through the env, so the reward is the env's own verdict. A family whose mean reward lies
in ``--band`` (20-70% by default) gives GRPO groups with both outcomes.

    python studies/scripts/real_model_bands.py --model /tmp/smollm2 --out studies/results/real-model/bands

writes ``bands.json`` (every figure, the settings, a few responses per family) and ``bands.md`` (the table).
The interval is the 95% t-interval over prompts of each prompt's mean reward. ``--families`` picks a subset; a
run merges its rows into an existing ``bands.json`` (same family and temperature: replaced), so families can be
measured one at a time.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditgym.agents.study.stats import mean, t_interval
from creditgym.agents.train.backends import HFBackend
from creditgym.envs.math_tasks import CHAIN_LEVEL, LEVELS
from creditgym.envs.registration import make


@dataclass(frozen=True)
class Family:
    """One task family: an env id, its keyword arguments and what the table calls it."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""


FAMILIES: dict[str, Family] = {
    **{
        f"math-{level}": Family("creditgym/Math-v0", {"difficulty": level}, f"Math-v0 level {level}: {name}")
        for level, name in LEVELS.items()
        if level != CHAIN_LEVEL
    },
    "chains": Family("creditgym/Math-v0", {"difficulty": 6}, "Math-v0 level 6: worked chains"),
    "rubric-hard": Family(
        "creditgym/Rubric-v0", {"preset": "hard"}, "Rubric-v0 preset hard (partial reward)"
    ),
    "rubric": Family("creditgym/Rubric-v0", {}, "Rubric-v0 default preset (partial reward)"),
}
DEFAULT_FAMILIES = tuple(name for name in FAMILIES if name != "rubric")


def measure(
    model: Any,
    tokenizer: Any,
    family: Family,
    *,
    prompts: int,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
) -> dict[str, Any]:
    """Sample ``samples`` responses to each of ``prompts`` test prompts and grade each in the env."""
    env = make(
        family.env_id, tokenizer=tokenizer, split="test", max_new_tokens=max_new_tokens, **family.kwargs
    )
    base = env.unwrapped
    tasks, contexts = [], []
    for i in range(prompts):
        obs, _ = env.reset(seed=seed + i)
        tasks.append(base.task)
        contexts.append([int(t) for t in obs["tokens"]])
    backend = HFBackend(model, pad_token_id=tokenizer.pad_token_id, max_batch_size=batch_size)
    start = time.perf_counter()
    responses = backend.generate(
        [c for c in contexts for _ in range(samples)],
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        stop_token_ids=base.stop_token_ids,
        generator=torch.Generator().manual_seed(seed),
    )
    seconds = time.perf_counter() - start
    rewards, truncated, lengths, examples = [], 0, [], []
    for j, response in enumerate(responses):
        env.reset(options={"task": tasks[j // samples]})
        _, reward, _, trunc, info = env.step(np.asarray(response, dtype=np.int64))
        if info.get("infra_error"):
            raise RuntimeError(f"{family.env_id}: the verifier failed on response {j}: {info['infra_error']}")
        rewards.append(float(reward))
        truncated += bool(trunc)
        lengths.append(len(response))
        if j % samples == 0 and len(examples) < 3:
            examples.append(
                {"prompt": base.messages[-1]["content"], "response": info["response"], "reward": reward}
            )
    env.close()
    per_prompt = [mean(rewards[i * samples : (i + 1) * samples]) for i in range(prompts)]
    groups = [rewards[i * samples : (i + 1) * samples] for i in range(prompts)]
    interval = t_interval(per_prompt)
    return {
        "env": family.env_id,
        "env_kwargs": family.kwargs,
        "label": family.label,
        "prompts": prompts,
        "distinct_prompts": len({t.task_id for t in tasks}),
        "samples": samples,
        "temperature": temperature,
        "max_new_tokens": max_new_tokens,
        "mean": mean(per_prompt),
        "interval": list(interval) if interval else None,
        "truncated_share": truncated / len(responses),
        # prompts whose samples did not all score the same: the groups that give GRPO a non-zero advantage
        "mixed_share": mean([float(len(set(g)) > 1) for g in groups]) if samples > 1 else None,
        "mean_response_tokens": mean(lengths),
        "generate_seconds": round(seconds, 1),
        "examples": examples,
    }


def table(rows: list[dict[str, Any]], band: tuple[float, float]) -> str:
    """The markdown table of ``rows`` (one per family and temperature); the column of groups with mixed rewards
    appears where some row measured it (rows from before it was measured leave it blank)."""
    mixed = any(r.get("mixed_share") is not None for r in rows)
    lines = [
        "| family | env kwargs | temperature | budget | prompts x samples | mean reward [95% CI] | in band | "
        + ("groups with mixed rewards | " if mixed else "")
        + "truncated | tokens/response |",
        "|---|---|---:|---:|---:|---:|---|" + ("---:|" if mixed else "") + "---:|---:|",
    ]
    for r in rows:
        lo, hi = r["interval"] or (float("nan"), float("nan"))
        inside = "yes" if band[0] <= r["mean"] <= band[1] else ("below" if r["mean"] < band[0] else "above")
        kwargs = ", ".join(f"{k}={v}" for k, v in r["env_kwargs"].items())
        lines.append(
            f"| {r['family']} | `{r['env']}` {kwargs} | {r['temperature']:g} | {r['max_new_tokens']} | "
            f"{r['prompts']} x {r['samples']} ({r['distinct_prompts']} distinct) | {r['mean']:.2f} [{lo:.2f}, "
            f"{hi:.2f}] | {inside} | "
            + (f"{_share(r.get('mixed_share'))} | " if mixed else "")
            + f"{r['truncated_share']:.0%} | {r['mean_response_tokens']:.0f} |"
        )
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def save(out: Path, rows: list[dict[str, Any]], model: str, note: str, band: tuple[float, float]) -> None:
    """Write ``out.json`` and ``out.md`` (rows in family order); called after every row, so a stopped run keeps
    what it measured."""
    ordered = sorted(rows, key=lambda r: (list(FAMILIES).index(r["family"]), r["temperature"]))
    result = {
        "model": model,
        "note": note,
        "band": list(band),
        "machine": f"{platform.machine()}, torch {torch.__version__}",
        "rows": ordered,
    }
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    header = (
        f"Step-0 score of `{model}` on each family's test split ({note}). Mean reward over prompts with the 95% "
        f"t-interval over prompts; band {band[0]:.0%}-{band[1]:.0%}. Reproduce with the `command` in {out.name}.json.\n\n"
    )
    out.with_suffix(".md").write_text(header + table(ordered, band) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a Hugging Face folder (model and tokenizer)")
    parser.add_argument("--out", required=True, help="output stem: writes OUT.json and OUT.md")
    parser.add_argument("--families", nargs="+", default=list(DEFAULT_FAMILIES), choices=sorted(FAMILIES))
    parser.add_argument("--prompts", type=int, default=48, help="test prompts per family")
    parser.add_argument("--samples", type=int, default=2, help="responses per prompt")
    parser.add_argument("--temperature", type=float, nargs="+", default=[1.0], help="0 = greedy")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--band", type=float, nargs=2, default=(0.2, 0.7))
    parser.add_argument(
        "--note", default="", help="a line printed above the table (where the weights came from)"
    )
    args = parser.parse_args(argv)
    if args.prompts < 2 or args.samples < 1:
        parser.error(f"--prompts must be >= 2 and --samples >= 1, got {args.prompts} and {args.samples}")
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token_id is None:
        raise SystemExit(
            f"{args.model}: the tokenizer has no pad token; set one in its tokenizer_config.json"
        )
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path = out.with_suffix(".json")
    old = json.loads(json_path.read_text()) if json_path.exists() else {"rows": []}
    rows = {(r["family"], r["temperature"]): r for r in old["rows"]}
    for name in args.families:
        for temperature in args.temperature:
            samples = 1 if temperature == 0 else args.samples
            row = {"family": name, "command": shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]])}
            row |= measure(
                model,
                tokenizer,
                FAMILIES[name],
                prompts=args.prompts,
                samples=samples,
                temperature=temperature,
                max_new_tokens=args.max_new_tokens,
                batch_size=args.batch_size,
                seed=args.seed,
            )
            rows[(name, temperature)] = row | {"threads": args.threads}
            print(table([row], tuple(args.band)).splitlines()[-1], flush=True)
            save(out, list(rows.values()), args.model, args.note or old.get("note", ""), tuple(args.band))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
