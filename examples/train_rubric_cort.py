"""Train the bundled tiny model on the rubric task with CoRT, then read what CoRT logged.

    python examples/train_rubric_cort.py          # 15 steps: 1 min 47 s on 2 CPU cores shared with other work
    python examples/train_rubric_cort.py --preset hard --steps 60 --out runs/rubric-cort-hard   # 16-24 s a step

CoRT replays each response under the same instruction with the rubric's criteria removed; the log-prob contrast
becomes per-token weights (mean 1 per response, within [w_min, w_max]) that spread the GRPO advantage over the
response, switched on by a ramp (``alpha``, 0 -> 1 over the first 5-30% of the run). It logs, per step,
``credit/cort/*`` in ``metrics.jsonl``: the weights' spread (q05, q95, max), the largest weight's share of its
response (``top_share``), and where the weight lands: ``span_mass`` (the weights' share on the tokens the rubric's
checks rest on) against ``span_tokens`` (those tokens' share of the response; uniform weights make the two equal).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from creditgym.agents.train.config import TrainConfig
from creditgym.agents.train.trainer import train
from creditgym.envs.rubric_tasks import PRESETS

# (column, metrics.jsonl key) of the CoRT table
CORT_COLUMNS = (
    ("alpha", "credit/cort/alpha"),
    ("w q05", "credit/cort/weight_q05"),
    ("w q95", "credit/cort/weight_q95"),
    ("w max", "credit/cort/weight_max"),
    ("top share", "credit/cort/top_share"),
    ("span mass", "credit/cort/span_mass"),
    ("span tokens", "credit/cort/span_tokens"),
)


def cort_rows(metrics_path: Path) -> list[dict[str, float]]:
    """One row per training step of ``metrics.jsonl``: the step, its rollout reward and CoRT's columns."""
    rows = []
    for line in metrics_path.read_text().splitlines():
        m = json.loads(line)
        if "credit/cort/alpha" in m:  # the step-0 line holds only the held-out evaluation
            rows.append(
                {"step": m["step"], "reward": m["rollout/reward"], **{c: m[k] for c, k in CORT_COLUMNS}}
            )
    return rows


def cort_table(rows: list[dict[str, float]], every: int) -> str:
    """``rows`` as a text table, every ``every``-th step and the last."""
    shown = [r for r in rows if int(r["step"]) % every == 0 or r is rows[-1]]
    names = ["step", "reward", *(c for c, _ in CORT_COLUMNS)]
    lines = ["  ".join(f"{n:>11}" for n in names)]
    lines += ["  ".join(f"{r[n]:>11.0f}" if n == "step" else f"{r[n]:>11.3f}" for n in names) for r in shown]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="default", choices=sorted(PRESETS), help="rubric task family")
    parser.add_argument("--steps", type=int, default=15, help="training steps, 8 tasks x 8 responses each")
    parser.add_argument(
        "--eval-episodes", type=int, default=100, help="held-out tasks scored before and after"
    )
    parser.add_argument("--model", default="creditgym/tiny", help="creditgym/tiny or a local model folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/rubric-cort", help="run folder")
    args = parser.parse_args()

    try:
        cfg = TrainConfig(
            env_id="creditgym/Rubric-v0",
            env_kwargs={"preset": args.preset},
            max_new_tokens=PRESETS[args.preset].max_new_tokens,  # the preset's (256 tokens, 192 for hard)
            credit="cort",  # its defaults; change one with credit_kwargs={"tau": 2.0}
            model=args.model,
            steps=args.steps,
            seed=args.seed,
            eval_episodes=args.eval_episodes,
        )
    except ValueError as e:  # e.g. --steps 0
        parser.error(str(e))
    try:
        summary = train(cfg, args.out)
    except FileNotFoundError as e:  # a --model folder that is not there
        parser.error(str(e))

    out = Path(args.out)
    rows = cort_rows(out / "metrics.jsonl")
    print(f"\nCoRT's weights per step (from {out / 'metrics.jsonl'}):")
    print(cort_table(rows, every=max(1, len(rows) // 8)))
    print(
        "span mass > span tokens: the weights favour the tokens the rubric's checks rest on; "
        "below: they favour other tokens"
    )
    print(
        f"held-out score: before {summary['eval_before']:.3f} -> after {summary['eval_after']:.3f} "
        f"(mean rubric score, greedy, {args.eval_episodes} test-split tasks, preset {args.preset})"
    )
    print(f"credit heatmap: {out / 'credit.html'} (and credit.png); curves: {out / 'curves.png'}")


if __name__ == "__main__":
    main()
