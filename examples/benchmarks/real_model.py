"""creditgym on a real model: rollout tokens/s against plain ``generate``, a GRPO step against TRL's, peak memory.

    python examples/benchmarks/real_model.py [--model smollm2-135m] [--threads 1] [--rounds 3] [--json PATH]

Four measurements on ``--model`` (a named model, a Hugging Face folder), on Math-v0 prompts rendered with the
model's own tokenizer and chat template, ``--prompts`` tasks x ``--group`` responses of at most
``--max-new-tokens`` tokens, ``--threads`` torch threads:

1. **Rollouts.** ``Policy.sample`` (the Hugging Face backend, behaviour log-probs included) against plain
   ``model.generate`` (sampling, ``top_k=0``) on the same left-padded batch, alternating, ``--rounds`` times.
   Tokens are counted up to each row's first stop token, on both sides.
2. **A GRPO step.** creditgym's trainer (``grpo``, one optimizer step over the batch) and TRL's ``GRPOTrainer``
   (same model, prompts, verifier, batch, response budget, learning rate, clip norm; ``beta = 0``, one iteration,
   one optimizer step), each in its own subprocess, the sides stepping in turn: a warm-up step each, then
   ``--rounds`` timed steps each. The prompts are the very tasks creditgym's step ``k`` draws, handed to TRL as
   text (the script checks that TRL's tokens equal creditgym's); TRL's reward is creditgym's math verifier.
   creditgym runs as it comes (rows whose advantage is 0 everywhere run forward without a graph), or with
   ``--every-row`` with every row's graph kept and differentiated, the work TRL does on those rows; each reply
   says how many rows had no advantage.
3. **The probe's continuations.** ``--probe-k`` forks of each step-0 response's prefixes (cut at a third and at
   two thirds of the response), generated the way ``creditgym probe`` generates them (``backend.generate``: one
   batch, no log-probs; identical prefixes prefilled once) against plain ``model.generate`` on the same
   left-padded rows, alternating.
4. **Peak memory**: each subprocess's maximum resident set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``,
   model loading included).
5. **The optimizer step**: ``torch.optim.AdamW`` over the model's parameters (random gradients), its fused kernel
   (what the trainer and TRL use) against the for-loop one torch picks on a CPU by default, alternating.

Times are wall-clock and this process's CPU time (with one thread, CPU time is what other work on a shared
machine moves least); ratios are creditgym over the reference, per round, reported as mean [min, max].
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ENV_ID = "creditgym/Math-v0"
REPLY = "@real_model "


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> dict[str, float]:
    wall, cpu = _clock()
    return {"wall_s": wall - start[0], "cpu_s": cpu - start[1]}


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _config(args: argparse.Namespace, folder: str) -> Any:
    from creditgym.agents.train.config import TrainConfig

    return TrainConfig(
        model=args.model,
        env_id=ENV_ID,
        env_kwargs={"tokenizer": folder},
        credit="grpo",
        prompts_per_step=args.prompts,
        group_size=args.group,
        max_new_tokens=args.max_new_tokens,
        minibatches=1,  # one optimizer step over the batch, as TRL takes below
        steps=args.rounds + 1,
        eval_episodes=1,
        seed=args.seed,
    )


def _step_tasks(args: argparse.Namespace, folder: str) -> list[tuple[list[int], str]]:
    """(prompt tokens, gold answer) of the tasks creditgym's trainer draws at steps 0..rounds, in its order."""
    from transformers import AutoTokenizer

    from creditgym.agents.eval.evaluate import make_envs
    from creditgym.agents.train.trainer import _step_seed

    env = make_envs(_config(args, folder), AutoTokenizer.from_pretrained(folder))[0].unwrapped
    out = []
    for step in range(args.rounds + 1):
        rng = np.random.default_rng(_step_seed(args.seed, step, 0))
        for _ in range(args.prompts):
            env.reset(seed=int(rng.integers(2**31)))
            out.append((env.ledger.token_id.tolist(), str(env.current_task.answer)))
    return out


# -- 1. rollouts -------------------------------------------------------------------------------------------------


def _alternate(
    policy: Any, prompts: list[list[int]], args: argparse.Namespace, ours: Any, what: str
) -> dict[str, Any]:
    """``ours(seed)`` (token lists) against plain ``model.generate`` on ``prompts`` left-padded, alternating."""
    from transformers import GenerationConfig

    stops = sorted(policy.stop_token_ids)
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), policy.pad_token_id)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :], att[i, width - len(p) :] = torch.tensor(p), 1
    rule = GenerationConfig(
        do_sample=True,
        top_k=0,
        top_p=1.0,
        temperature=1.0,
        max_new_tokens=args.max_new_tokens,
        eos_token_id=stops,
        pad_token_id=policy.pad_token_id,
    )
    drawn: dict[str, list[list[int]]] = {}

    def plain(seed: int) -> dict[str, float]:
        # the global seed the backend derives from a generator seeded with `seed`: both sides draw the same tokens
        torch.manual_seed(
            int(torch.randint(0, 2**63 - 1, (1,), generator=torch.Generator().manual_seed(seed)))
        )
        start = _clock()
        with torch.no_grad():
            out = policy.model.generate(input_ids=ids, attention_mask=att, generation_config=rule)
        took = _since(start)
        rows = [
            r[: next((j + 1 for j, t in enumerate(r) if t in stops), len(r))] for r in out[:, width:].tolist()
        ]
        drawn["generate"] = rows
        return {"tokens": sum(len(r) for r in rows), **took}

    def timed(seed: int) -> dict[str, float]:
        start = _clock()
        tokens = ours(seed)
        took = _since(start)
        drawn["creditgym"] = tokens
        return {"tokens": sum(len(t) for t in tokens), **took}

    plain(0), timed(0)  # warm-up
    rounds = []
    for r in range(args.rounds):
        rounds.append({"generate": plain(r + 1), "creditgym": timed(r + 1)})
        rounds[-1]["same_tokens"] = drawn["generate"] == drawn["creditgym"]
        _say(f"{what} round {r + 1}: {_rates(rounds[-1])}, same tokens: {rounds[-1]['same_tokens']}")
    return {"batch": len(prompts), "rounds": rounds}


def rollouts(args: argparse.Namespace, folder: str) -> dict[str, Any]:
    """``Policy.sample`` against plain ``generate`` on step 0's batch, alternating."""
    from creditgym.agents.train.policy import load_policy

    policy = load_policy(args.model, device="cpu")
    prompts = [p for p, _ in _step_tasks(args, folder)[: args.prompts] for _ in range(args.group)]

    def ours(seed: int) -> list[list[int]]:
        out = policy.sample(
            prompts, max_new_tokens=args.max_new_tokens, generator=torch.Generator().manual_seed(seed)
        )
        return out.tokens

    return _alternate(policy, prompts, args, ours, "rollouts")


def continuations(args: argparse.Namespace, folder: str) -> dict[str, Any]:
    """The probe's continuations: ``--probe-k`` forks of each prefix of step 0's responses cut at a third and
    two thirds of their length, generated as the probe does (``backend.generate``, one batch, no log-probs),
    against plain ``generate`` on the same left-padded rows, alternating."""
    from creditgym.agents.train.policy import load_policy

    policy = load_policy(args.model, device="cpu")
    prompts = [p for p, _ in _step_tasks(args, folder)[: args.prompts] for _ in range(args.group)]
    first = policy.sample(
        prompts, max_new_tokens=args.max_new_tokens, generator=torch.Generator().manual_seed(0)
    )
    prefixes = [
        list(p) + list(r[:cut])
        for p, r in zip(prompts, first.tokens, strict=True)
        for cut in (len(r) // 3, 2 * len(r) // 3)
        for _ in range(args.probe_k)
    ]

    def ours(seed: int) -> list[list[int]]:
        return policy.backend.generate(
            prefixes,
            max_new_tokens=args.max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            stop_token_ids=policy.stop_token_ids,
            generator=torch.Generator().manual_seed(seed),
        )

    return _alternate(policy, prefixes, args, ours, "continuations")


def _rates(row: dict[str, dict[str, float]]) -> str:
    sides = ("generate", "creditgym")
    return ", ".join(f"{k} {row[k]['tokens'] / row[k]['cpu_s']:.1f} tok/s (CPU)" for k in sides)


# -- 2. steps, in two worker processes --------------------------------------------------------------------------


SIDES = ("creditgym", "creditgym-every-row", "trl")  # the step comparison runs one creditgym side and TRL


def worker(args: argparse.Namespace, folder: str) -> None:
    """One side of the step comparison: a step per ``step`` line on stdin, a JSON line back for each."""
    torch.set_num_threads(args.threads)
    if args.worker == "trl":
        _trl_side(args, folder)
        return
    step = _creditgym_side(args, folder, every_row=args.worker == "creditgym-every-row")
    for line in sys.stdin:
        if line.strip() != "step":
            break
        _reply(step())
    _reply({"max_rss_mb": _max_rss_mb()})


def _reply(obj: dict[str, Any]) -> None:
    print(REPLY + json.dumps(obj), flush=True)  # marked: TRL prints its own logs on stdout


def _creditgym_side(args: argparse.Namespace, folder: str, every_row: bool) -> Any:
    from creditgym.agents.train import trainer as trainer_module
    from creditgym.agents.train.update import update_pass

    if every_row:  # every row's graph kept and differentiated, as TRL's loss does
        trainer_module.update_pass = lambda *a, **kw: update_pass(*a, **{**kw, "graph_for_all": True})
    trainer = trainer_module.Trainer(_config(args, folder), tempfile.mkdtemp(prefix="real_model_"))

    def step() -> dict[str, Any]:
        start = _clock()
        m = trainer.train_step()
        trainer.step += 1
        took = _since(start)
        tokens = m["rollout/response_tokens"] * args.prompts * args.group
        phases = {k.removeprefix("time/"): v for k, v in m.items() if k.startswith("time/")}
        return {
            **took,
            "response_tokens": tokens,
            "reward": m["rollout/reward"],
            # rows whose advantage is 0 everywhere: their pass runs without a graph (no backward through them)
            "zero_advantage_rows": m["actor/zero_advantage_rows"],
            "phases": phases,
        }

    return step


def _trl_side(args: argparse.Namespace, folder: str) -> None:
    """TRL's ``GRPOTrainer`` on the same tasks, stepped one optimizer step at a time by a callback."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from creditgym.verifiers.math import verify

    cfg = _config(args, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tasks = _step_tasks(args, folder)
    texts = [tok.decode(p) for p, _ in tasks]
    same = all(
        tok(t, add_special_tokens=False)["input_ids"] == p for t, (p, _) in zip(texts, tasks, strict=True)
    )
    data = datasets.Dataset.from_dict({"prompt": texts, "answer": [a for _, a in tasks]})

    def correct(completions: list[str], answer: list[str], **kw: Any) -> list[float]:
        return [float(verify(c, a).score or 0.0) for c, a in zip(completions, answer, strict=True)]

    batch = args.prompts * args.group
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="real_model_trl_"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        max_steps=args.rounds + 1,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        lr_scheduler_type="constant",
        beta=0.0,
        num_iterations=1,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=0,
        shuffle_dataset=False,
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        seed=args.seed,
        disable_tqdm=True,
    )

    class Turns(TrainerCallback):
        """Waits for the parent's ``step`` line before each step, answers after it."""

        def on_step_begin(self, *a: Any, **kw: Any) -> None:
            if sys.stdin.readline().strip() != "step":
                raise SystemExit(0)
            self.start = _clock()

        def on_step_end(self, *a: Any, **kw: Any) -> None:
            _reply({**_since(self.start), "prompt_tokens_identical": same})

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32),
        reward_funcs=correct,
        args=config,
        train_dataset=data,
        processing_class=tok,
        callbacks=[Turns()],
    )

    trainer.train()
    sys.stdin.readline()  # the parent's last line
    _reply({"max_rss_mb": _max_rss_mb()})


class _Worker:
    def __init__(self, side: str, argv: list[str], threads: int) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
        self.side = side
        self.proc = subprocess.Popen(
            [sys.executable, "-W", "ignore", __file__, *argv, "--worker", side],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def send(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        while True:
            reply = self.proc.stdout.readline()
            if not reply:
                raise RuntimeError(f"the {self.side} worker exited (exit code {self.proc.wait()})")
            if reply.startswith(REPLY):
                return json.loads(reply.removeprefix(REPLY))


def steps(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """creditgym's and TRL's steps, in turn: a warm-up each, then ``rounds`` rounds."""
    ours = "creditgym-every-row" if args.every_row else "creditgym"
    sides = {name: _Worker(name, argv, args.threads) for name in (ours, "trl")}
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds + 1):
        row = {name: w.send("step") for name, w in sides.items()}
        if r:
            rounds.append(row)
        _say(
            f"step round {r} {'(warm-up)' if r == 0 else ''}: "
            + ", ".join(f"{k} {v['wall_s']:.1f} s wall, {v['cpu_s']:.1f} s CPU" for k, v in row.items())
        )
    memory = {name: w.send("exit")["max_rss_mb"] for name, w in sides.items()}
    for w in sides.values():
        w.proc.wait(timeout=120)
    return {"rounds": rounds, "max_rss_mb": memory}


# -- report -------------------------------------------------------------------------------------------------------


def _ratio(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def summarize(roll: dict[str, Any], step: dict[str, Any], cont: dict[str, Any]) -> dict[str, Any]:
    rate = lambda d, clock: d["tokens"] / d[clock]  # noqa: E731
    out: dict[str, Any] = {}
    for clock in ("cpu_s", "wall_s"):
        for name, part in (("rollout", roll), ("continuation", cont)):
            if part["rounds"]:
                out[f"{name}_speed_{clock[:-2]}"] = _ratio(
                    [rate(r["creditgym"], clock) / rate(r["generate"], clock) for r in part["rounds"]]
                )
        for side in [s for s in SIDES[:-1] if step["rounds"] and s in step["rounds"][0]]:
            key = "step_time" + side.removeprefix("creditgym").replace("-", "_")
            out[f"{key}_{clock[:-2]}"] = _ratio([r[side][clock] / r["trl"][clock] for r in step["rounds"]])
    return out


def optimizers(args: argparse.Namespace) -> dict[str, Any]:
    """AdamW's fused step against its for-loop one over the model's parameters, alternating."""
    from creditgym.agents.train.policy import load_policy

    params = list(load_policy(args.model, device="cpu").model.parameters())
    generator = torch.Generator().manual_seed(0)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator) * 1e-3
    kinds = {"fused": {"fused": True}, "for-loop": {"foreach": False}}
    optims = {k: torch.optim.AdamW(params, lr=1e-6, **kw) for k, kw in kinds.items()}
    rounds = []
    for r in range(args.rounds + 1):
        row = {}
        for name, opt in optims.items():
            start = _clock()
            opt.step()
            row[name] = _since(start)
        if r:  # round 0 allocates the moments
            rounds.append(row)
    _say(
        "optimizer: " + ", ".join(f"{k} {np.mean([r[k]['cpu_s'] for r in rounds]):.2f} s CPU" for k in kinds)
    )
    return {"parameters": sum(p.numel() for p in params), "rounds": rounds}


def _say(text: str) -> None:
    print(f"[real_model] {text}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-rollouts", action="store_true", help="only the step comparison")
    parser.add_argument("--skip-steps", action="store_true", help="only the rollout comparison")
    parser.add_argument(
        "--probe-k", type=int, default=8, help="forks per prefix in the continuation comparison"
    )
    parser.add_argument("--skip-continuations", action="store_true", help="no continuation comparison")
    parser.add_argument("--skip-optimizer", action="store_true", help="no optimizer-step comparison")
    parser.add_argument(
        "--every-row", action="store_true", help="creditgym's step keeps and differentiates every row's graph"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        worker(args, args.folder)
        return
    from creditgym.agents.train.policy import BUNDLED_MODEL, bundled_model_path
    from creditgym.models import resolve_model

    # a named model's cache folder (converted on first use), found without loading the model here: this
    # process stays small beside the workers
    folder = resolve_model(args.model)
    folder = str(bundled_model_path()) if folder == BUNDLED_MODEL else folder
    argv = ["--folder", folder] + [
        f"--{k.replace('_', '-')}={getattr(args, k)}"
        for k in ("model", "prompts", "group", "max_new_tokens", "threads", "rounds", "seed")
    ]
    roll = {"rounds": []} if args.skip_rollouts else rollouts(args, folder)
    cont = {"rounds": []} if args.skip_continuations else continuations(args, folder)
    step = {"rounds": [], "max_rss_mb": {}} if args.skip_steps else steps(args, argv)
    optim = {"rounds": []} if args.skip_optimizer else optimizers(args)
    result = {
        "command": "python examples/benchmarks/real_model.py " + " ".join(sys.argv[1:]),
        "model": args.model,
        "settings": {
            k: getattr(args, k)
            for k in ("prompts", "group", "max_new_tokens", "threads", "rounds", "every_row")
        },
        "load_average": os.getloadavg(),
        "torch": torch.__version__,
        "rollouts": roll,
        "continuations": cont,
        "steps": step,
        "optimizer": optim,
        "ratios": summarize(roll, step, cont),
    }
    _print(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


def _print(result: dict[str, Any]) -> None:
    step = result["steps"]["rounds"]
    print(f"{'measure':<38} {'creditgym':>12} {'reference':>12} {'ratio (mean [min, max])':>26}")
    for clock in ("cpu_s", "wall_s"):
        for name, key in (("rollout", "rollouts"), ("continuation", "continuations")):
            part = result[key]["rounds"]
            if not part:
                continue
            ours = np.mean([r["creditgym"]["tokens"] / r["creditgym"][clock] for r in part])
            ref = np.mean([r["generate"]["tokens"] / r["generate"][clock] for r in part])
            q = result["ratios"][f"{name}_speed_{clock[:-2]}"]
            print(
                f"{name + ' tok/s (' + clock[:-2] + ') vs generate':<38} {ours:>12.1f} {ref:>12.1f} "
                f"{q['mean']:>12.2f}x [{q['min']:.2f}, {q['max']:.2f}]"
            )
        for side in [s for s in SIDES[:-1] if step and s in step[0]]:
            label = "GRPO step" + side.removeprefix("creditgym").replace("-", " ")
            ours = np.mean([r[side][clock] for r in step])
            ref = np.mean([r["trl"][clock] for r in step])
            q = _ratio([r[side][clock] / r["trl"][clock] for r in step])
            print(
                f"{label + ' s (' + clock[:-2] + ') vs TRL':<38} {ours:>12.1f} {ref:>12.1f} "
                f"{q['mean']:>12.2f}x [{q['min']:.2f}, {q['max']:.2f}]"
            )
    if step:
        zero = [r[s]["zero_advantage_rows"] for r in step for s in SIDES[:-1] if s in r]
        print(f"{'rows with no advantage, per round':<38} {', '.join(f'{z:.0%}' for z in zero):>12}")
    mem = result["steps"]["max_rss_mb"]
    for side in [s for s in SIDES[:-1] if s in mem]:
        print(
            f"{'peak RSS MiB' + side.removeprefix('creditgym').replace('-', ' ') + ' vs TRL':<38} "
            f"{mem[side]:>12.0f} {mem['trl']:>12.0f} {mem[side] / mem['trl']:>12.2f}x"
        )
    optim = result["optimizer"]["rounds"]
    if optim:
        ours, ref = (np.mean([r[k]["cpu_s"] for r in optim]) for k in ("fused", "for-loop"))
        q = _ratio([r["fused"]["cpu_s"] / r["for-loop"]["cpu_s"] for r in optim])
        print(
            f"{'AdamW step s (cpu), fused vs for-loop':<38} {ours:>12.2f} {ref:>12.2f} "
            f"{q['mean']:>12.2f}x [{q['min']:.2f}, {q['max']:.2f}]"
        )


if __name__ == "__main__":
    main()
