"""GPU check: a short training-like loop with each generation backend, timing generation and weight sync.

    python examples/gpu_check.py [--model creditgym/tiny] [--batch 128] [--max-new-tokens 64] [--rounds 3]
                                 [--backends hf,vllm] [--dtype bfloat16] [--json runs/gpu_check.json]

For each backend (Hugging Face ``generate``; vLLM when installed) it runs ``--rounds`` rounds of:

1. sample one response per Math-v0 prompt (``Policy.sample``: generation plus the behaviour log-prob pass),
2. score them (exact match of the last ``\\boxed{}``) and take one REINFORCE step on the policy,
3. sync the new weights into the backend (a no-op for HF; ``load_weights`` for vLLM),

and prints generated tokens/s, the time of each phase, and two sanity numbers: the largest gap between the
behaviour log-probs and a fresh teacher-forced pass before the update (must be ~0), and, for vLLM, the share of
greedy responses identical to HF's after a sync (shows the sync took: bf16 kernels differ, so not always 100%).

Then it runs a short real training (``creditgym train``'s loop, ``--train-steps`` steps) with each backend and prints
its rollout tokens/s and step time. Without CUDA it exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from creditgym.agents.train.backends import HFBackend, VLLMBackend
from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.policy import Policy, load_policy
from creditgym.agents.train.trainer import Trainer
from creditgym.envs.math import MathEnv
from creditgym.envs.math_tasks import DEFAULT_LEVEL, ProceduralMath, last_boxed


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="creditgym/tiny", help="bundled name, model folder or cached hub id")
    p.add_argument("--batch", type=int, default=128, help="prompts per round")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per backend (after one warm-up round)")
    p.add_argument("--backends", default="hf,vllm", help="comma-separated: hf, vllm")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--train-steps", type=int, default=4, help="steps of the real training loop per backend")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="vLLM's share of GPU memory")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    return p.parse_args(argv)


def correct(policy: Policy, tokens: list[int], gold: str) -> float:
    text = policy.tokenizer.decode(tokens, skip_special_tokens=True)
    span = last_boxed(text)
    return float(span is not None and text[span[0] : span[1]].strip() == gold)


def run_backend(
    name: str, policy: Policy, prompts: list[list[int]], golds: list[str], args
) -> dict[str, float]:
    """Warm-up round, then ``args.rounds`` timed rounds of sample -> score -> update -> sync."""
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=args.lr)
    generator = torch.Generator(device=policy.device).manual_seed(0)
    totals = {"generate_s": 0.0, "behaviour_logprobs_s": 0.0, "update_s": 0.0, "sync_s": 0.0, "tokens": 0.0}
    max_gap, accuracy = 0.0, 0.0
    for round_ in range(args.rounds + 1):
        timed = round_ > 0
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        tokens = policy.backend.generate(
            prompts,
            max_new_tokens=args.max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            stop_token_ids=policy.stop_token_ids,
            generator=generator,
        )
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        behaviour = policy.logprobs(prompts, tokens, return_entropy=False)
        torch.cuda.synchronize()
        t2 = time.perf_counter()

        rewards = torch.tensor([correct(policy, t, g) for t, g in zip(tokens, golds, strict=True)])
        advantages = (rewards - rewards.mean()).to(policy.device)
        seqs = [p + t for p, t in zip(prompts, tokens, strict=True)]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), policy.pad_token_id, dtype=torch.long)
        att = torch.zeros_like(ids)
        resp = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, (p, s) in enumerate(zip(prompts, seqs, strict=True)):
            ids[i, : len(s)], att[i, : len(s)], resp[i, len(p) : len(s)] = torch.tensor(s), 1, True
        fwd = policy.forward_logprobs(ids, att, return_entropy=False)
        resp = resp.to(policy.device)
        gap = max(
            (fwd.logprobs[i][resp[i]].detach() - behaviour.rows()[i]).abs().max().item()
            for i in range(len(seqs))
        )
        loss = -(advantages[:, None] * fwd.logprobs * resp).sum() / resp.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        policy.backend.sync_weights(policy.model)
        torch.cuda.synchronize()
        t4 = time.perf_counter()
        if timed:
            totals["generate_s"] += t1 - t0
            totals["behaviour_logprobs_s"] += t2 - t1
            totals["update_s"] += t3 - t2
            totals["sync_s"] += t4 - t3
            totals["tokens"] += sum(len(t) for t in tokens)
            max_gap = max(max_gap, gap)
            accuracy += rewards.mean().item() / args.rounds
    rounds = args.rounds
    result = {
        "tokens_per_s": totals["tokens"] / totals["generate_s"],
        "generate_s": totals["generate_s"] / rounds,
        "behaviour_logprobs_s": totals["behaviour_logprobs_s"] / rounds,
        "update_s": totals["update_s"] / rounds,
        "sync_s": totals["sync_s"] / rounds,
        "mean_response_tokens": totals["tokens"] / (rounds * len(prompts)),
        "accuracy": accuracy,
        "max_logprob_gap": max_gap,
    }
    print(
        f"[{name}] {result['tokens_per_s']:,.0f} generated tokens/s | per round: generate {result['generate_s']:.2f}s, "
        f"behaviour log-probs {result['behaviour_logprobs_s']:.2f}s, update {result['update_s']:.2f}s, "
        f"sync {result['sync_s'] * 1e3:.1f}ms | accuracy {accuracy:.3f} | max log-prob gap {max_gap:.2e}",
        flush=True,
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine; run it on a machine with an NVIDIA GPU.")
        return 2
    dtype = getattr(torch, args.dtype)
    print(
        f"GPU: {torch.cuda.get_device_name()} | torch {torch.__version__} | model {args.model} | {args.dtype}"
    )
    env = MathEnv()
    tasks = list(ProceduralMath(DEFAULT_LEVEL, "test").take(args.batch, seed=0))
    golds = [t.answer for t in tasks]
    prompts = [env.prompt_tokens(t) for t in tasks]
    results: dict[str, dict[str, float] | str] = {}
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]

    workdir = Path(tempfile.mkdtemp(prefix="creditgym-gpu-check-"))
    for name in backends:
        policy = load_policy(args.model, device="cuda", dtype=dtype)  # fresh weights for each backend
        if name == "hf":
            policy.backend = HFBackend(policy.model, pad_token_id=policy.pad_token_id)
        elif name == "vllm":
            folder = policy.save(
                workdir / "vllm-init"
            )  # vLLM starts from a folder; later weights come by sync
            try:
                t0 = time.perf_counter()
                policy.backend = VLLMBackend(
                    folder, dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization
                )
                print(f"[vllm] engine started in {time.perf_counter() - t0:.1f}s")
            except ImportError as e:
                print(f"[vllm] skipped: {e}")
                results[name] = f"skipped: {e}"
                continue
        else:
            raise SystemExit(f"unknown backend {name!r}; known: hf, vllm")
        result = run_backend(name, policy, prompts, golds, args)
        results[name] = result
        if name == "vllm":
            # after the syncs, vLLM must sample from the trainer's weights: compare greedy answers with HF
            greedy_kwargs = {
                "max_new_tokens": args.max_new_tokens,
                "temperature": 0.0,
                "top_p": 1.0,
                "stop_token_ids": policy.stop_token_ids,
                "generator": None,
            }
            from_vllm = policy.backend.generate(prompts, **greedy_kwargs)
            from_hf = HFBackend(policy.model, pad_token_id=policy.pad_token_id).generate(
                prompts, **greedy_kwargs
            )
            agree = sum(a == b for a, b in zip(from_vllm, from_hf, strict=True)) / len(prompts)
            result["greedy_agreement_with_hf"] = agree
            print(f"[vllm] greedy responses identical to HF generate after sync: {agree:.1%}")
        del policy
        torch.cuda.empty_cache()
    for name in backends:
        if isinstance(results.get(name), str):
            continue
        cfg = TrainConfig(
            backend=name, device="cuda", steps=args.train_steps, eval_episodes=32, model=args.model
        )
        trainer = Trainer(cfg, workdir / f"train-{name}")
        rows = []
        for _ in range(cfg.steps):
            rows.append(trainer.train_step())
            trainer.step += 1
        timed = rows[1:] or rows  # the first step includes warm-up
        summary = {
            "tokens_per_s": float(sum(r["rollout/tokens_per_s"] for r in timed) / len(timed)),
            "step_s": float(sum(r["time/step_s"] for r in timed) / len(timed)),
            "reward_first_last": (rows[0]["rollout/reward"], rows[-1]["rollout/reward"]),
        }
        results[f"train-{name}"] = summary
        print(
            f"[train {name}] {summary['tokens_per_s']:,.0f} rollout tokens/s | {summary['step_s']:.2f} s/step"
        )
        del trainer
        torch.cuda.empty_cache()
    shutil.rmtree(workdir, ignore_errors=True)

    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
