"""CoRT's weight map measured on the probe batch of the hard rubric, and CoRT's probe rows rescored.

The probe batch is the one ``creditgym probe`` samples (PROBE_PROTOCOL.md: ``--env creditgym/Rubric-v0 --env-kw
preset=hard --max-new-tokens 192 --prompts 8 --group 4 --seed 0``, bundled model). Two commands:

``calibrate``: CoRT's two signals through the trainer's providers once, then the weights under each map: the map
of 4d4ca92 (raw delta, tau = 1, one clip-then-renormalise), raw delta with the exact projection, and the
per-response standardised delta over a grid of tau. Writes ``calibration.json`` and ``calibration.md`` here::

    OMP_NUM_THREADS=1 .venv/bin/python studies/results/probe/hard-cort-calibration/cort_probe.py calibrate

``rescore --base DIR --out DIR --credit LIST``: A* does not depend on the credit modules, so a finished probe
(``DIR/probe.json``: the batch's continuation rewards) scores other modules without sampling a continuation
again. The batch is re-sampled from the base's settings and checked token by token against the base; the
modules' advantages come from the trainer's providers as in ``creditgym probe``; the label ``cort@4d4ca92`` is
CoRT's map before its calibration (compared with the base's own ``cort`` row when it has one). Writes probe.json,
probe.md and probe.png (``creditgym probe``'s formats; ``rescored_from`` names the base, ``timing`` is the
base's) plus ``cort_weights`` (each CoRT map's weight spread and span mass on the batch) and
``paired_differences`` (each module's figures minus the first label's, with paired bootstrap intervals)::

    OMP_NUM_THREADS=1 .venv/bin/python studies/results/probe/hard-cort-calibration/cort_probe.py rescore \\
        --base studies/results/probe/hard-base --out studies/results/probe/hard-cort-after \\
        --credit 'cort@4d4ca92,cort,grpo,cort:standardize=false,cort:standardize=false;tau=1'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from creditgym.agents.probe.report import FIGURES, _figures, probe_markdown, probe_png, response_ingredients
from creditgym.agents.probe.run import (
    ProbeConfig,
    ProbeSetup,
    _plain,
    _responses,
    _seed,
    _write_json,
    module_advantages,
    probe_batch,
    score,
    setup_probe,
)
from creditgym.agents.providers import ForwardRequest, StepContext
from creditgym.agents.providers.mc import plan
from creditgym.agents.train.rollout import Episode
from creditgym.credit import CoRTConfig, CreditBatch
from creditgym.credit.cort import cort_weights, span_metrics
from creditgym.credit.grpo import GRPOConfig, grpo_advantage

HERE = Path(__file__).parent
TAUS = (0.5, 1.0, 1.5, 2.0, 2.25, 2.5, 3.0, 4.0)
BEFORE = "cort@4d4ca92"
HARD = {
    "env_id": "creditgym/Rubric-v0",
    "env_kwargs": {"preset": "hard"},
    "model": "creditgym/tiny",
    "prompts": 8,
    "group": 4,
    "max_new_tokens": 192,
    "seed": 0,
}


def weights_at_4d4ca92(delta: torch.Tensor, valid: torch.Tensor, cfg: CoRTConfig) -> torch.Tensor:
    """The map before the calibration: softmax of the raw clipped delta, clip, renormalise once (may exceed w_max)."""
    s = torch.where(valid, delta, 0.0).clamp(-cfg.delta_clip, cfg.delta_clip)
    logits = torch.where(valid, s / cfg.tau, -torch.inf)
    n = valid.sum(-1, keepdim=True)
    e = torch.where(valid, (logits - logits.amax(-1, keepdim=True)).exp(), 0.0)
    u = n * e / e.sum(-1, keepdim=True)
    w = torch.where(valid, u.clamp(cfg.w_min, cfg.w_max), 0.0)
    w = w * (n / w.sum(-1, keepdim=True))
    return torch.where(valid, w, 1.0)


def describe(w: torch.Tensor, valid: torch.Tensor, spans: torch.Tensor) -> dict[str, float]:
    """Spread of the weights over the batch's policy tokens, the top token's share per response, span mass."""
    wv = w[valid].double()
    rows = torch.where(valid, w, 0.0)[valid.any(-1)].double()
    q = wv.quantile(torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95], dtype=torch.float64)).tolist()
    return {
        "min": wv.min().item(),
        "q05": q[0],
        "q25": q[1],
        "median": q[2],
        "q75": q[3],
        "q95": q[4],
        "max": wv.max().item(),
        "share_in_0.5_2": ((wv >= 0.5) & (wv <= 2.0)).double().mean().item(),
        "top_share": (rows.amax(-1) / rows.sum(-1)).mean().item(),
        "row_mean_max_error": (rows.sum(-1) / valid[valid.any(-1)].sum(-1) - 1).abs().max().item(),
        **{k.split("/")[-1]: v for k, v in span_metrics(w, valid, spans).items()},
    }


def paired_differences(
    est: Any, advantages: dict[str, list[np.ndarray]], ref: str, *, n_boot: int, seed: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """Each module's figures minus ``ref``'s, with 95% intervals from the probe's own paired resamples of the
    responses (`bootstrap_figures`' draws: the same seed, the same responses in every resample)."""
    astar = est.token_advantages()
    b = len(astar)
    w = np.vstack([np.ones(b), np.random.default_rng(seed).multinomial(b, np.full(b, 1.0 / b), n_boot)])
    base = _figures(response_ingredients(advantages[ref], astar), w)
    out = {}
    for label, adv in advantages.items():
        if label == ref:
            continue
        figs = _figures(response_ingredients(adv, astar), w)
        entry = {}
        for key in FIGURES:
            diff = figs[key] - base[key]
            draws = diff[1:][~np.isnan(diff[1:])]
            ci = [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))] if draws.size else None
            entry[key] = {"value": None if np.isnan(diff[0]) else float(diff[0]), "ci": ci}
        out[f"{label} - {ref}"] = entry
    return out


def cort_signals(
    setup: ProbeSetup, episodes: list[Episode]
) -> tuple[StepContext, torch.Tensor, torch.Tensor]:
    """The batch's context, delta = l+ - l- (B, T) float64, and the criterion-span mask, via cort's providers."""
    _, _, providers = setup.modules[next(k for k in setup.modules if k.split(":")[0] == "cort")]
    ctx = StepContext.of(setup.step, episodes, setup.policy, ForwardRequest())
    with torch.no_grad():
        signals = {name: p.compute(ctx) for name, p in providers.items()}
    delta = (ctx.old_logprobs - signals["counterfactual_logprobs"]).double()
    return ctx, delta, signals["criterion_spans"]


def calibrate() -> None:
    cfg = ProbeConfig(**HARD, credit=("cort",))  # type: ignore[arg-type]
    setup = setup_probe(cfg)
    episodes = probe_batch(setup, cfg)
    ctx, delta, spans = cort_signals(setup, episodes)
    valid = ctx.policy_mask & torch.isfinite(delta)
    dv = delta[valid]
    per_row_sd = torch.stack([delta[b][valid[b]].std(correction=0) for b in range(len(episodes))])
    tok = setup.policy.tokenizer
    top = torch.topk(torch.where(valid, delta, -torch.inf).flatten(), 20).indices
    top_tokens = [
        {
            "delta": float(delta.flatten()[i]),
            "token": tok.decode([int(ctx.input_ids.flatten()[i])]),
            "in_span": bool(spans.flatten()[i] > 0),
        }
        for i in top.tolist()
    ]
    maps = {
        "4d4ca92: raw, tau=1, renormalise once": describe(
            weights_at_4d4ca92(delta, valid, CoRTConfig(standardize=False, tau=1.0)), valid, spans
        )
    }
    for tau in (1.0, 4.0, 8.0):
        c = CoRTConfig(standardize=False, tau=tau)
        maps[f"raw, tau={tau:g}, projected"] = describe(cort_weights(delta, valid, c), valid, spans)
    for tau in TAUS:
        c = CoRTConfig(standardize=True, tau=tau)
        maps[f"standardised, tau={tau:g}, projected"] = describe(cort_weights(delta, valid, c), valid, spans)
    in_span, outside = delta[valid & (spans > 0)], delta[valid & (spans == 0)]
    result = {
        "batch": {
            "responses": len(episodes),
            "policy_tokens": int(valid.sum()),
            "reward_mean": sum(ep.reward for ep in episodes) / len(episodes),
            "span_token_share": float(spans[valid].mean()),
            "responses_with_spans": int((spans * valid).any(-1).sum()),
        },
        "delta": {
            "mean": dv.mean().item(),
            "sd": dv.std(correction=0).item(),
            "per_response_sd_mean": per_row_sd.mean().item(),
            "max": dv.max().item(),
            "min": dv.min().item(),
            "mean_in_spans": in_span.mean().item(),
            "mean_outside_spans": outside.mean().item(),
            "top20_tokens": top_tokens,
        },
        "maps": maps,
        "defaults": {
            k: getattr(CoRTConfig(), k) for k in ("tau", "standardize", "w_min", "w_max", "delta_clip")
        },
    }
    (HERE / "calibration.json").write_text(json.dumps(result, indent=1) + "\n")
    cols = ["min", "q05", "q25", "median", "q75", "q95", "max", "share_in_0.5_2", "top_share", "span_mass"]
    lines = [
        f"Hard rubric probe batch ({len(episodes)} responses, {int(valid.sum())} policy tokens, tiny model, seed 0;"
        f" {result['batch']['span_token_share']:.3f} of the tokens inside the verdict's spans). Delta (nats): "
        f"mean {dv.mean():.2f}, sd {dv.std(correction=0):.2f} (within a response {per_row_sd.mean():.2f}), max "
        f"{dv.max():.2f}; inside the spans mean {in_span.mean():.2f}, outside {outside.mean():.2f}. Top-20 delta "
        f"tokens: {', '.join(repr(t['token']) for t in top_tokens)} ({sum(t['in_span'] for t in top_tokens)} of "
        "them inside a span).",
        "",
        "| map | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for name, d in maps.items():
        lines.append(f"| {name} | " + " | ".join(f"{d[c]:.3f}" for c in cols) + " |")
    (HERE / "calibration.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def rescore(base_dir: Path, out: Path, labels: list[str]) -> None:
    base = json.loads((base_dir / "probe.json").read_text())
    if not base.get("complete"):
        raise SystemExit(f"{base_dir / 'probe.json'} is not a finished probe (stage {base.get('stage')!r})")
    c = base["config"]
    if c["checkpoint"] is not None:
        raise SystemExit(
            "rescore re-samples the batch from the bundled model only; the base used a checkpoint"
        )
    keys = ("env_id", "env_kwargs", "model", "prompts", "group", "k", "every", "temperature", "top_p")
    modules = [x for x in labels if x != BEFORE]
    cfg = ProbeConfig(
        **{k: c[k] for k in keys},
        max_new_tokens=c["max_new_tokens"],
        seed=c["seed"],
        credit=tuple(modules if any(x.startswith("cort") for x in modules) else [*modules, "cort"]),
        bootstrap=c["bootstrap"],
        shown=c["shown"],
    )
    setup = setup_probe(cfg)
    episodes = probe_batch(setup, cfg)
    est = plan(episodes, c["k"], c["every"])
    rows = base["responses"]
    tok = setup.policy.tokenizer
    for i, row in enumerate(rows):
        tokens = [tok.decode([t]) for t in episodes[i].env.ledger.token_id[est.policy_index[i]].tolist()]
        if len(rows) != len(episodes) or tokens != row["tokens"] or list(est.starts[i]) != row["starts"]:
            raise SystemExit(f"response {i} differs from the base's: the batch did not re-sample identically")
        est.rewards[i] = np.array(row["continuation_rewards"], dtype=np.float64)  # None (JSON's NaN) -> nan
    advantages: dict[str, list[np.ndarray]] = {}
    weights: dict[str, dict[str, float]] = {}
    ctx, delta, spans = cort_signals(setup, episodes)
    valid = ctx.policy_mask & torch.isfinite(delta)
    mask = ctx.policy_mask
    for label in labels:
        if label == BEFORE:
            old_cfg = CoRTConfig(standardize=False, tau=1.0)
            w = weights_at_4d4ca92(delta, valid, old_cfg)
            batch = CreditBatch(
                ctx.batch.token_rewards,
                mask,
                ctx.batch.group_ids,
                ctx.old_logprobs,
                step=setup.step,
                total_steps=setup.run.steps,
            )
            A = grpo_advantage(batch, GRPOConfig())[0]  # (B,)
            adv = torch.where(mask, A[:, None].double() * w, 0.0)  # alpha = 1 at the probe's step
            advantages[label] = [adv[r][mask[r]].numpy() for r in range(len(episodes))]
            weights[label] = describe(w, valid, spans)
            continue
        module, credit_cfg, providers = setup.modules[label]
        advantages[label] = module_advantages(
            module,
            credit_cfg,
            providers,
            episodes,
            setup.policy,
            step=setup.step,
            total_steps=setup.run.steps,
            seed=_seed(c["seed"], 3),
        )
        if isinstance(credit_cfg, CoRTConfig):
            weights[label] = describe(cort_weights(delta, valid, credit_cfg), valid, spans)
    checks = {}
    for label, base_label in ((BEFORE, "cort"), ("grpo", "grpo")):
        if label in advantages and all(base_label in r.get("advantages", {}) for r in rows):
            gap = max(
                float(np.max(np.abs(np.asarray(r["advantages"][base_label]) - a), initial=0.0))
                for r, a in zip(rows, advantages[label], strict=True)
            )
            checks[f"{label} vs base {base_label}: max abs difference"] = gap
            if (
                label == "grpo" and gap > 1e-4
            ):  # (the base's cort row is 4d4ca92's only when the base ran there)
                raise SystemExit(f"grpo does not reproduce the base's grpo row (max difference {gap})")
    result: dict[str, Any] = {
        "complete": True,
        "rescored_from": str(base_dir),
        "reproduction_checks": checks,
        "config": {**c, "credit": labels},
        "batch": base["batch"],
        "timing": base["timing"],
        "machine": base["machine"],
        **score(est, advantages, n_boot=c["bootstrap"], seed=c["seed"]),
        "cort_weights": weights,
        "paired_differences": paired_differences(
            est, advantages, labels[0], n_boot=c["bootstrap"], seed=c["seed"]
        ),
        "responses": _responses(est, advantages),
    }
    out.mkdir(parents=True, exist_ok=True)
    result = _plain(result)
    _write_json(out / "probe.json", result)
    (out / "probe.md").write_text(probe_markdown(result))
    probe_png(result, out / "probe.png", shown=c["shown"])
    print(probe_markdown(result))
    print(json.dumps({k: result[k] for k in ("reproduction_checks", "paired_differences")}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("calibrate", help="weight spread and span mass of each map on the hard-rubric probe batch")
    p = sub.add_parser("rescore", help="score modules on a finished probe's batch and A*")
    p.add_argument("--base", type=Path, required=True, help="folder of a finished probe.json")
    p.add_argument("--out", type=Path, required=True, help="folder for probe.json, probe.md, probe.png")
    p.add_argument("--credit", required=True, help=f"comma list of modules/variants, and {BEFORE!r}")
    args = parser.parse_args()
    if args.command == "calibrate":
        calibrate()
    else:
        rescore(args.base, args.out, [x.strip() for x in args.credit.split(",") if x.strip()])


if __name__ == "__main__":
    main()
