"""``creditgym probe``: does a credit module put the credit on the tokens that decided the outcome?

One batch of ``P`` prompts x ``G`` responses is sampled from the policy. Its Monte-Carlo ground truth A* comes
from ``K`` continuations of every probed prefix (``creditgym.agents.providers.mc``; by default at `vine`'s step
boundaries). K starts at ``k`` and grows until A*'s pooled reliability has its lower bound at ``target``
or above (``creditgym.agents.probe.reliability``), or the probe stops and says which K it would need. Every listed
module computes its advantages on the same batch with the signals it declares, through the trainer's own
providers (`build_providers`; from a checkpoint, the trained module's providers get their saved state, so a
trained critic is probed as trained); ``oracle:noise=q`` entries are the positive control
(``creditgym.agents.probe.control``). ``creditgym.agents.probe.report`` scores them against A*, with 95% bootstrap
intervals clustered by prompt, beside A*'s reliability, the attainable correlation and the null baselines
(``creditgym.agents.probe.nulls``: trivial rules a module must beat to be said to find credit). The run writes ``probe.json``
(every figure, and every response's tokens, A* and advantages), ``probe.md`` (`probe_markdown` of it) and
``probe.png`` (`probe_png`). ``creditgym train --probe-every N`` logs the figures of its own module
(`probe_metrics`, at a fixed K).

Schedules (CoRT's ramp) are read at the checkpoint's step, or, without a checkpoint, at the last step of a default
run (fully on).
"""

from __future__ import annotations

import functools
import json
import operator
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from creditgym.agents.probe.control import control_figures, oracle_advantages
from creditgym.agents.probe.exact import exact_figures, exact_truth
from creditgym.agents.probe.nulls import null_advantages
from creditgym.agents.probe.progress import RolloutProgress
from creditgym.agents.probe.reliability import ProbeRefused, grow_until_reliable, reliability
from creditgym.agents.probe.report import (
    attainable,
    bootstrap_figures,
    mark_figures,
    probe_markdown,
    probe_png,
    response_ingredients,
)
from creditgym.agents.probe.setup import ProbeConfig, ProbeSetup, find_checkpoint, setup_probe
from creditgym.agents.providers import ForwardRequest, SignalProvider, StepContext
from creditgym.agents.providers.mc import (
    MCEstimate,
    check_forkable,
    check_one_turn,
    plan,
    reuse_rewards,
    sample_continuations,
)
from creditgym.agents.train.rollout import Episode, PolicyAgent, play
from creditgym.agents.train.sampling import Sampling
from creditgym.credit import MARK, CreditModule

if TYPE_CHECKING:
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.policy import Policy

__all__ = [
    "ProbeConfig",
    "ProbeSetup",
    "find_checkpoint",
    "module_advantages",
    "module_credit",
    "probe_batch",
    "probe_metrics",
    "run_probe",
    "sample_batch",
    "score",
    "setup_probe",
]


# -- the batch and the modules' advantages ---------------------------------------------------------------------


def _seed(*key: int) -> int:
    return int(np.random.SeedSequence(list(key)).generate_state(1)[0])


def _generator(policy: Policy, seed: int) -> torch.Generator:
    return torch.Generator(device=policy.device).manual_seed(seed)


def sample_batch(
    policy: Policy, env: Any, prompts: int, group: int, *, seed: int, temperature: float, top_p: float
) -> list[Episode]:
    """``prompts`` tasks x ``group`` responses, each group forked from one reset (infra faults dropped)."""
    rng = np.random.default_rng(seed)
    envs, groups = [], []
    for p in range(prompts):
        env.reset(seed=int(rng.integers(2**31)))
        envs += [env.fork() for _ in range(group)]
        groups += [p] * group
    agent = PolicyAgent(policy, Sampling(temperature, top_p, _generator(policy, seed)))
    return [ep for ep in play(agent, envs, groups, rng=rng) if ep.infra_error is None]


def probe_batch(setup: ProbeSetup, cfg: ProbeConfig) -> list[Episode]:
    """The batch `run_probe` draws for ``cfg`` (its seed, the run's temperature and top-p): a script that
    re-scores a saved ``probe.json`` gets the very responses it holds."""
    with torch.no_grad():
        return sample_batch(
            setup.policy,
            setup.env,
            cfg.prompts,
            cfg.group,
            seed=_seed(cfg.seed, 1),
            temperature=setup.run.temperature,
            top_p=setup.run.top_p,
        )


def module_advantages(*args: Any, **kwargs: Any) -> list[np.ndarray]:
    """``module``'s advantages of every policy token of each episode: `module_credit` without the marks."""
    return module_credit(*args, **kwargs)[0]


def module_credit(
    module: CreditModule[Any],
    credit_cfg: Any,
    providers: Mapping[str, SignalProvider],
    episodes: list[Episode],
    policy: Policy,
    *,
    step: int,
    total_steps: int,
    seed: int,
) -> tuple[list[np.ndarray], dict[str, list[np.ndarray]]]:
    """``module``'s advantages of every policy token of each episode, its signals computed by ``providers`` (the
    trainer's), as the trainer's credit step builds them; and the module's marks (its diagnostics
    ``"mark/<name>"``: name -> per episode, on its policy tokens)."""
    request = functools.reduce(
        operator.or_, (p.forward_request() for p in providers.values()), ForwardRequest()
    )
    ctx = StepContext.of(step, episodes, policy, request, _generator(policy, seed))
    signals = {name: p.compute(ctx) for name, p in providers.items()}
    batch = ctx.make_credit_batch(signals, total_steps=total_steps)
    out = module(batch, credit_cfg)

    def rows(x: torch.Tensor) -> list[np.ndarray]:
        x = x.double().cpu()
        return [x[row][ctx.batch.policy_mask[row]].numpy() for row in range(len(episodes))]

    marks = {key.removeprefix(MARK): rows(m) for key, m in out.diagnostics.items() if key.startswith(MARK)}
    return rows(out.advantages), marks


def score(
    est: MCEstimate, advantages: Mapping[str, list[np.ndarray]], *, n_boot: int, seed: int
) -> dict[str, Any]:
    """A*'s reliability, the attainable correlation, every module's figures and the null baselines'
    (`null_advantages`), with paired bootstrap intervals clustered by prompt."""
    astar = est.token_advantages()
    groups = [ep.group for ep in est.episodes]
    nulls = null_advantages([ep.reward for ep in est.episodes], groups, [len(a) for a in astar], est.starts)
    entries = {**advantages, **nulls}
    tables = [response_ingredients(adv, astar) for adv in entries.values()]
    rel = reliability(est, n_boot=n_boot, seed=seed, groups=groups)
    figs = dict(zip(entries, bootstrap_figures(tables, n_boot=n_boot, seed=seed, groups=groups), strict=True))
    return {
        "reliability": rel,
        "attainable": attainable(rel),
        "modules": {name: figs[name] for name in advantages},
        "nulls": {name: figs[name] for name in nulls},
        "prompts": len(set(groups)),
    }


# -- the command ------------------------------------------------------------------------------------------------


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` atomically (temporary file, then rename): a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_plain(data), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _plain(x: Any) -> Any:
    """JSON-ready: NumPy values to Python ones, NaN and infinities to None."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_plain(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _responses(
    est: MCEstimate,
    advantages: Mapping[str, list[np.ndarray]] | None,
    marks: Mapping[str, Mapping[str, list[np.ndarray]]] | None = None,
    independent: MCEstimate | None = None,
) -> list[dict[str, Any]]:
    out = []
    complete = advantages is not None
    astar, values = (est.token_advantages(), est.values()) if complete else (None, None)
    for i, ep in enumerate(est.episodes):
        tok = ep.env.tokenizer
        row: dict[str, Any] = {
            "group": ep.group,
            "reward": ep.reward,
            "tokens": [tok.decode([t]) for t in ep.env.ledger.token_id[est.policy_index[i]].tolist()],
            "starts": est.starts[i],
            "continuation_rewards": est.rewards[i],
        }
        if complete:
            row["values"] = values[i]  # type: ignore[index]
            row["astar"] = astar[i]  # type: ignore[index]
            row["advantages"] = {name: adv[i] for name, adv in advantages.items()}  # type: ignore[union-attr]
        if marks:
            row["marks"] = {label: {name: m[i] for name, m in ms.items()} for label, ms in marks.items()}
        if independent is not None:  # the positive control's own continuations
            row["control_rewards"] = independent.rewards[i]
        out.append(row)
    return out


def _sample(
    est: MCEstimate, setup: ProbeSetup, cfg: ProbeConfig, generator: torch.Generator, what: str
) -> int:
    """Sample ``est``'s missing columns with a progress bar or lines; the policy tokens generated."""
    todo = est.total - int(sum(int(n.sum()) for n in est.sampled))
    with RolloutProgress(what, todo) as bar:
        stats = sample_continuations(
            est, setup.policy, Sampling.of(setup.run, generator), rows=cfg.rows, on_progress=bar.advance
        )
    return stats.policy_tokens


def _control(
    est: MCEstimate,
    setup: ProbeSetup,
    cfg: ProbeConfig,
    saved: list[dict[str, Any]] | None,
    tokens: list[int],
) -> MCEstimate:
    """The positive control's independent continuations: at ``est``'s positions and K, reused from ``saved``
    (a reused probe's responses) when they hold them."""
    every, delimiter = cfg.steps
    independent = plan(est.episodes, est.k, every, delimiter)
    if saved is not None and all("control_rewards" in row for row in saved):
        for i, row in enumerate(saved):
            independent.rewards[i] = np.array(row["control_rewards"], dtype=np.float64)
            independent.sampled[i][:] = est.k
    else:
        generator = _generator(setup.policy, _seed(cfg.seed, 4))
        tokens.append(_sample(independent, setup, cfg, generator, f"positive control, K = {est.k}"))
    return independent


def run_probe(cfg: ProbeConfig, out: str | os.PathLike[str]) -> dict[str, Any]:
    """Run the probe into the folder ``out`` and return what ``probe.json`` holds (module docstring).

    Interrupted (Ctrl-C), it leaves ``probe.json`` with ``"complete": false`` and the rollouts done so far, then
    re-raises ``KeyboardInterrupt``. Refused (`ProbeRefused`: the target needs more than ``max_k``), it leaves
    ``"complete": false`` with ``"refused"`` (why, and the K it would need) and each round's reliability, and
    re-raises. Raises what `setup_probe` raises, before any rollout.
    """
    t_start = time.perf_counter()
    out = Path(out)
    setup = setup_probe(cfg)
    run, env_id, policy, settings = setup.run, setup.env_id, setup.policy, setup.settings
    out.mkdir(parents=True, exist_ok=True)
    t_setup = time.perf_counter()
    stage, est, rounds, tokens, reused_rollouts = "batch", None, [], [], 0
    independent: MCEstimate | None = None
    _write_json(out / "probe.json", {"complete": False, "stage": stage, "config": settings})
    try:
        with torch.no_grad():
            episodes = probe_batch(setup, cfg)
            if not episodes:
                raise RuntimeError(f"every response of the batch hit an infrastructure fault on {env_id!r}")
            check_one_turn(episodes, env_id, cfg.max_turns)
            est = plan(episodes, cfg.k, *cfg.steps)
            t_sampled, stage = time.perf_counter(), "rollouts"
            _write_json(out / "probe.json", {"complete": False, "stage": stage, "config": settings})
            saved = None if cfg.reuse is None else reuse_rewards(est, Path(cfg.reuse), settings)
            resumed = saved is not None and not saved.get("complete")
            if resumed:  # a refused or interrupted probe goes on: its rounds before its last K stand
                rounds += [r for r in saved.get("rounds", []) if r["k"] < est.k]  # type: ignore[union-attr]
                reused_rollouts = est.done
            generator = _generator(policy, _seed(cfg.seed, 2, est.k) if resumed else _seed(cfg.seed, 2))
            grow_until_reliable(
                est,
                lambda e, what: tokens.append(_sample(e, setup, cfg, generator, what)),
                rounds,
                target=cfg.target,
                max_k=cfg.max_k if saved is None or resumed else est.k,
                n_boot=cfg.bootstrap,
                seed=cfg.seed,
                reused=saved is not None and not resumed,
            )
            if resumed:
                saved = None  # from here on a probe of its own; its timing below counts this run's rollouts
            if setup.controls:
                independent = _control(est, setup, cfg, None if saved is None else saved["responses"], tokens)
            t_rollouts, stage = time.perf_counter(), "credit"
            credit = {
                label: module_credit(
                    module,
                    credit_cfg,
                    providers,
                    episodes,
                    policy,
                    step=setup.step,
                    total_steps=run.steps,
                    seed=_seed(cfg.seed, 3),
                )
                for label, (module, credit_cfg, providers) in setup.modules.items()
            }
            factors = {}
            for label, noise in setup.controls.items():  # each noise its own draws, whatever else is listed
                rng = np.random.default_rng(_seed(cfg.seed, 5, round(noise * 10**6)))
                adv, factors[label] = oracle_advantages(independent.token_advantages(), noise, rng)  # type: ignore[union-attr]
                credit[label] = (adv, {})
            advantages = {label: credit[label][0] for label in settings["credit"]}
    except (KeyboardInterrupt, ProbeRefused) as e:
        partial: dict[str, Any] = {"complete": False, "stage": stage, "config": settings, "rounds": rounds}
        partial.update({"refused": str(e)} if isinstance(e, ProbeRefused) else {"interrupted": True})
        if est is not None:
            partial.update(rollouts_done=est.done, rollouts_total=est.total, responses=_responses(est, None))
        _write_json(out / "probe.json", partial)
        raise
    t_credit = time.perf_counter()
    astar = est.token_advantages()
    figures = score(est, advantages, n_boot=cfg.bootstrap, seed=cfg.seed)
    exact = exact_truth(episodes, policy)
    if exact is not None:  # the env's reward reads known slots: score every entry, A* too, against the truth
        truth, bound = exact
        groups = [ep.group for ep in episodes]
        nulls = null_advantages([ep.reward for ep in episodes], groups, [len(a) for a in astar], est.starts)
        entries = {"A* (sampled)": astar, **advantages, **nulls}
        figures["exact"] = exact_figures(truth, entries, groups=groups, n_boot=cfg.bootstrap, seed=cfg.seed)
        figures["exact"]["error_bound"] = bound
    result = {
        "complete": True,
        "config": settings,
        "batch": {
            "responses": len(episodes),
            "policy_tokens": int(sum(len(a) for a in astar)),
            "probed_prefixes": int(sum(len(s) for s in est.starts)),
            "k": est.k,
            "rollouts": est.total,
            "control_rollouts": 0 if independent is None else independent.total,
            "reward_mean": float(np.mean([ep.reward for ep in episodes])),
            "v0_mean": float(np.mean([v[0] for v in est.values()])),
            "astar_abs_mean": float(np.mean(np.abs(np.concatenate(astar)))),
        },
        "rounds": (saved.get("rounds") or rounds) if saved else rounds,  # a reused A*: how its K was reached
        "timing": {**saved["timing"], "reused_from": cfg.reuse, "credit_s": t_credit - t_rollouts}
        if saved
        else {
            "setup_s": t_setup - t_start,
            "sample_s": t_sampled - t_setup,
            "rollouts_s": t_rollouts - t_sampled,
            "rollouts_per_s": (
                est.total - reused_rollouts + (0 if independent is None else independent.total)
            )
            / max(t_rollouts - t_sampled, 1e-9),
            "rollouts_resumed": reused_rollouts,
            "resumed_from": cfg.reuse if reused_rollouts else None,
            "rollout_tokens": sum(tokens),
            "credit_s": t_credit - t_rollouts,
            "total_s": t_credit - t_start,
        },
        "machine": {"cpus": os.cpu_count(), "device": str(policy.device), "torch": torch.__version__},
        **figures,
        "control": {
            label: control_figures(
                figures["modules"][label], figures["reliability"]["spearman"], factors[label], astar, noise
            )
            for label, noise in setup.controls.items()
        },
        "marks": {
            label: {
                name: mark_figures(
                    m, astar, n_boot=cfg.bootstrap, seed=cfg.seed, groups=[ep.group for ep in episodes]
                )
                for name, m in marks.items()
            }
            for label, (_, marks) in credit.items()
            if marks
        },
        "responses": _responses(
            est, advantages, {label: m for label, (_, m) in credit.items() if m}, independent
        ),
    }
    result = _plain(result)
    _write_json(out / "probe.json", result)
    (out / "probe.md").write_text(probe_markdown(result))
    probe_png(result, out / "probe.png", shown=cfg.shown)
    return result


# -- during training --------------------------------------------------------------------------------------------


def probe_metrics(
    policy: Policy,
    env: Any,
    module: CreditModule[Any],
    credit_cfg: Any,
    providers: Mapping[str, SignalProvider],
    *,
    step: int,
    settings: TrainConfig,
) -> dict[str, float]:
    """During training, at steps that are multiples of ``settings.probe_every``: ``module`` (with its config and
    the run's own providers: its critic, its teacher) probed on a fresh batch of ``probe_prompts x group_size``
    responses of ``env`` (unwrapped) with ``probe_k`` continuations every ``probe_stride`` tokens (a fixed K: no
    target), sampled from ``policy`` at the run's temperature and top-p, beside A*'s reliability and attainable
    correlation (``probe/reliability_*``, ``probe/attainable_*``); ``{}`` at other steps or when ``probe_every``
    is 0.

    Draws come from their own seeds (``settings.seed`` and ``step``), so training itself is unchanged by probing."""
    cfg = settings
    if not cfg.probe_every or step % cfg.probe_every:
        return {}
    t0 = time.perf_counter()
    check_forkable(env, cfg.env_id)
    sampling = {"temperature": cfg.temperature, "top_p": cfg.top_p}
    with torch.no_grad():
        seed = _seed(cfg.seed, step, 101)
        episodes = sample_batch(policy, env, cfg.probe_prompts, cfg.group_size, seed=seed, **sampling)
        est = plan(episodes, cfg.probe_k, cfg.probe_stride)
        generator = _generator(policy, _seed(cfg.seed, step, 102))
        sample_continuations(est, policy, Sampling.of(cfg, generator))
        seed = _seed(cfg.seed, step, 103)
        adv = module_advantages(
            module, credit_cfg, providers, episodes, policy, step=step, total_steps=cfg.steps, seed=seed
        )
    figs = score(est, {module.name: adv}, n_boot=0, seed=cfg.seed)
    out = {f"probe/{k}": v["value"] for k, v in figs["modules"][module.name].items()}
    for name in ("reliability", "attainable"):
        out.update({f"probe/{name}_{k}": v["value"] for k, v in figs[name].items()})
    return {
        **{k: float("nan") if v is None else float(v) for k, v in out.items()},
        "time/probe_s": time.perf_counter() - t0,
    }
