"""Run an agent through a registered env for N episodes and summarise what happened."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

if TYPE_CHECKING:
    from creditgym.agents.train.policy import Policy

from creditgym.agents.eval.scripted import SCRIPTED, Agent
from creditgym.agents.train.config import TrainConfig, response_budget
from creditgym.agents.train.rollout import PolicyAgent, play, truncated_share
from creditgym.agents.train.sampling import Sampling
from creditgym.envs import env_accepts, make, resolve_env_id, with_tokenizer


@dataclass
class EpisodeRecord:
    index: int
    task_id: str
    reward: float
    status: str
    terminated: bool
    truncated: bool
    infra_error: str | None
    policy_tokens: int
    response: str


@dataclass
class Report:
    env_id: str
    agent: str
    episodes: int
    accuracy: float  # mean reward over episodes without an infra error
    infra_errors: int
    statuses: dict[str, int]
    seconds: float
    records: list[EpisodeRecord] = field(default_factory=list)
    score_name: str = (
        "accuracy"  # what ``accuracy`` is called: the env's ``score_name`` (accuracy, mean score)
    )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(self.statuses.items()))
        return (
            f"# {self.agent} on {self.env_id}\n\n"
            f"| episodes | {self.score_name} | infra errors | seconds |\n|---|---|---|---|\n"
            f"| {self.episodes} | {self.accuracy:.3f} | {self.infra_errors} | {self.seconds:.1f} |\n\n"
            f"| status | episodes |\n|---|---|\n{rows}\n"
        )


def make_agent(
    spec: str, *, device: str | None = None, base_url: str | None = None, check_only: bool = False
) -> Agent:
    """``oracle``, ``empty``, ``random``, ``hf:PATH`` (anything ``--model`` takes: a folder, ``creditgym/tiny``,
    ``smollm2-135m``, ...; greedy), or ``openai:MODEL`` (any OpenAI-compatible endpoint at ``base_url``, e.g. a vLLM
    server).

    ``check_only`` checks the spec's form and makes nothing (returns None): a Ray evaluation makes the agent on
    each node, where ``PATH`` must exist."""
    known = spec in SCRIPTED or (spec.startswith(("openai:", "hf:")) and spec.partition(":")[2])
    if not known:
        raise ValueError(f"unknown agent {spec!r}; known agents: {sorted(SCRIPTED)}, hf:PATH or openai:MODEL")
    if check_only:
        return None  # type: ignore[return-value]
    if spec in SCRIPTED:
        return SCRIPTED[spec]()
    if spec.startswith("openai:"):
        from creditgym.agents.eval.remote import OpenAIAgent

        return OpenAIAgent(spec[7:], base_url=base_url)
    from creditgym.agents.train.policy import load_policy

    agent = PolicyAgent(load_policy(spec[3:], device=device), Sampling.greedy())
    agent.name = spec
    return agent


def agent_env_kwargs(env_id: str, env_kwargs: dict[str, Any] | None, agent: Agent) -> dict[str, Any]:
    """The env's keyword arguments for ``agent``: a policy's env gets the policy's tokenizer (`with_tokenizer`)."""
    if isinstance(agent, PolicyAgent):
        return with_tokenizer(env_id, dict(env_kwargs or {}), agent.policy.tokenizer, model=agent.name)
    return dict(env_kwargs or {})


def evaluate(
    env_id: str,
    agent: Agent,
    episodes: int,
    *,
    seed: int = 0,
    env_kwargs: dict | None = None,
    batch: int = 64,
) -> Report:
    """Play ``episodes`` episodes of ``env_id``; episode ``i`` is reset with seed ``seed + i``, ``batch`` at a time."""
    env = make(env_id, **agent_env_kwargs(env_id, env_kwargs, agent))
    base = env.unwrapped
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    records = []
    try:
        for lo in range(0, episodes, batch):
            envs, task_ids = [], []
            for i in range(lo, min(lo + batch, episodes)):
                _, info = base.reset(seed=seed + i)
                envs.append(base.fork())
                task_ids.append(str(info.get("task_id", i)))
            for j, ep in enumerate(play(agent, envs, list(range(len(envs))), rng=rng)):
                records.append(
                    EpisodeRecord(
                        index=lo + j,
                        task_id=task_ids[j],
                        reward=ep.reward,
                        status=str(ep.info.get("status", "unknown")),
                        terminated=ep.terminated,
                        truncated=ep.truncated,
                        infra_error=ep.infra_error,
                        policy_tokens=int(ep.env.ledger.policy_mask.sum()),
                        response=str(ep.info.get("response", "")),
                    )
                )
    finally:
        env.close()
    scored = [r.reward for r in records if r.infra_error is None]
    return Report(
        env_id=env_id,
        agent=agent.name,
        episodes=len(records),
        accuracy=float(np.mean(scored)) if scored else float("nan"),
        infra_errors=len(records) - len(scored),
        statuses=dict(Counter(r.status for r in records)),
        seconds=time.perf_counter() - t0,
        records=records,
        score_name=base.score_name,
    )


def write_report(report: Report, out_dir: str | Path) -> Path:
    """Write ``report.json`` and ``report.md`` into ``out_dir``; returns the JSON path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (out / "report.md").write_text(report.markdown())
    return out / "report.json"


# -- multi-turn agentic evaluation: one episode per task instance --------------------------------------------------


@dataclass
class InstanceRecord:
    """How one task instance went (the last attempt, when an infrastructure fault forced a retry)."""

    instance_id: str
    status: str  # "resolved" | "unresolved" | "infra_error"
    reward: float | None
    turns: int
    policy_tokens: int
    tokens: int
    seconds: float
    attempts: int
    end_reason: str | None
    infra_error: str | None
    tests: dict[str, str] = field(default_factory=dict)


def _play_instance(
    env: Any, agent: Agent, instance_id: str, seed: int, lock: Any
) -> tuple[InstanceRecord, list[dict[str, Any]]]:
    from creditgym.agents.eval.remote import AgentError

    t0 = time.perf_counter()
    base = env.unwrapped
    base.reset(seed=seed, options={"task_id": instance_id})
    try:
        with lock:
            ep = play(agent, [base], [0], rng=np.random.default_rng(seed))[0]
        info, infra, reward = ep.info, ep.infra_error, ep.reward
    except AgentError as e:  # the agent's endpoint failed: not the agent's answer
        base.close()
        info, infra, reward = {"end_reason": "agent_error"}, f"agent: {e}", 0.0
    resolved = "resolved" if info.get("resolved") else "unresolved"
    status = "infra_error" if infra is not None else resolved
    record = InstanceRecord(
        instance_id=instance_id,
        status=status,
        reward=None if infra is not None else reward,
        turns=len(getattr(base, "transcript", [])),
        policy_tokens=int(base.ledger.policy_mask.sum()),
        tokens=int(base.ledger.n),
        seconds=round(time.perf_counter() - t0, 3),
        attempts=1,
        end_reason=info.get("end_reason"),
        infra_error=infra,
        tests=dict(info.get("tests") or {}),
    )
    trajectory = [dict(step) for step in getattr(base, "transcript", [])]
    trajectory.append(
        {
            "verdict": info.get("status"),
            "reward": record.reward,
            "patch": info.get("patch"),
            "infra_error": infra,
        }
    )
    return record, trajectory


def play_with_retry(
    env: Any, agent: Agent, instance_id: str, seed: int, lock: Any = None
) -> tuple[InstanceRecord, list[dict[str, Any]]]:
    """Play one instance; an episode that ends in an infrastructure fault is played once more, from a fresh one."""
    from contextlib import nullcontext

    lock = nullcontext() if lock is None else lock
    record, trajectory = _play_instance(env, agent, instance_id, seed, lock)
    if record.status == "infra_error":
        record, trajectory = _play_instance(env, agent, instance_id, seed, lock)
        record.attempts = 2
    return record, trajectory


def _write_trajectory(out: Path | None, instance_id: str, trajectory: list[dict[str, Any]]) -> None:
    if out is not None:
        lines = "".join(json.dumps(step, default=str) + "\n" for step in trajectory)
        (out / "trajectories" / f"{instance_id}.jsonl").write_text(lines)


def evaluate_tasks(
    env_id: str,
    agent: Agent | str,
    tasks: Any,
    *,
    out_dir: str | Path | None = None,
    workers: int = 1,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    ray: str | None = None,
    base_url: str | None = None,
    run_cpus: float = 1.0,
) -> dict[str, Any]:
    """Play one episode per task instance of a multi-turn env (``creditgym/SWEBench-v0``), ``workers`` at once.

    An episode that ends in an infrastructure fault (engine down, image missing, the agent's endpoint failing) is
    retried once; if it fails again it is counted under ``infra_errors``, never as unresolved.

    With ``ray`` (a cluster address, ``auto`` or ``local``), each instance is a Ray task on a node that declares
    the ``docker`` resource (``creditgym.agents.study.ray_jobs``), holding ``run_cpus`` CPUs; ``agent`` is then a spec
    (`make_agent`, with ``base_url``) that each node makes for itself. The report is the same either way.

    Writes, when ``out_dir`` is given: ``report.json`` (``total``, ``resolved``, ``infra_errors``, per-instance
    status, turns, tokens, time), ``report.md`` (a table) and ``trajectories/<instance_id>.jsonl`` (one line per
    turn: response, action, observation; the last line holds the verdict and the patch).
    """
    from creditgym.envs.swe_tasks import load_tasks

    task_list = load_tasks(tasks)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        (out / "trajectories").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if ray is not None:
        from creditgym.agents.study.ray_jobs import evaluate_tasks_ray

        if not isinstance(agent, str):
            raise TypeError(
                "evaluate_tasks(ray=...): give the agent as a spec (oracle, hf:PATH, openai:MODEL)"
            )
        name, pairs = evaluate_tasks_ray(
            ray, env_id, agent, task_list, base_url=base_url, workers=workers, cpus=run_cpus, seed=seed,
            env_kwargs=env_kwargs,
        )  # fmt: skip
        for record, trajectory in pairs:
            _write_trajectory(out, record.instance_id, trajectory)
        records = [record for record, _ in pairs]
    else:
        if isinstance(agent, str):
            agent = make_agent(agent, base_url=base_url)
        name, records = agent.name, _play_threads(env_id, agent, task_list, out, workers, seed, env_kwargs)
    report = _task_report(env_id, name, records, time.perf_counter() - t0)
    if out is not None:
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "report.md").write_text(task_report_markdown(report))
    return report


def _play_threads(
    env_id: str,
    agent: Agent,
    task_list: list[Any],
    out: Path | None,
    workers: int,
    seed: int,
    env_kwargs: dict[str, Any] | None,
) -> list[InstanceRecord]:
    """The instances on this machine's engine, ``workers`` threads at once, one env each."""
    import queue
    import threading
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import nullcontext

    from creditgym.agents.train.rollout import PolicyAgent
    from creditgym.verifiers.swe.sandbox import install_signal_handlers

    ids = [t.instance_id for t in task_list]
    install_signal_handlers()  # sandboxes start in worker threads; SIGINT/SIGTERM must still remove them
    lock = threading.Lock() if isinstance(agent, PolicyAgent) else nullcontext()  # one model, one caller
    # One env per worker, made here: importing transformers from several threads at once is not safe.
    envs = [
        make(env_id, tasks=task_list, **agent_env_kwargs(env_id, env_kwargs, agent))
        for _ in range(max(1, min(workers, len(ids))))
    ]
    free: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for env in envs:
        free.put(env)

    def run(instance_id: str) -> InstanceRecord:
        env = free.get()
        try:
            record, trajectory = play_with_retry(env, agent, instance_id, seed, lock)
        finally:
            free.put(env)
        _write_trajectory(out, instance_id, trajectory)
        return record

    try:
        with ThreadPoolExecutor(max_workers=len(envs)) as pool:
            return list(pool.map(run, ids))
    finally:
        for env in envs:
            env.close()


def _task_report(env_id: str, agent: str, records: list[InstanceRecord], seconds: float) -> dict[str, Any]:
    resolved = sum(r.status == "resolved" for r in records)
    infra = sum(r.status == "infra_error" for r in records)
    scored = len(records) - infra
    return {
        "env_id": env_id,
        "agent": agent,
        "total": len(records),
        "resolved": resolved,
        "unresolved": scored - resolved,
        "infra_errors": infra,
        "resolve_rate": resolved / scored if scored else None,
        "seconds": round(seconds, 3),
        "instances": [asdict(r) for r in records],
    }


def task_report_markdown(report: dict[str, Any]) -> str:
    """The report as a markdown summary and one table row per instance."""
    rate = report["resolve_rate"]
    rows = "\n".join(
        f"| {r['instance_id']} | {r['status']} | {r['turns']} | {r['tokens']} | {r['seconds']:.1f} | "
        f"{r['attempts']} | {r['infra_error'] or ''} |"
        for r in report["instances"]
    )
    return (
        f"# {report['agent']} on {report['env_id']}\n\n"
        f"| total | resolved | unresolved | infra errors | resolve rate | seconds |\n|---|---|---|---|---|---|\n"
        f"| {report['total']} | {report['resolved']} | {report['unresolved']} | {report['infra_errors']} | "
        f"{'n/a' if rate is None else f'{rate:.3f}'} | {report['seconds']:.1f} |\n\n"
        f"| instance | status | turns | tokens | seconds | attempts | infra error |\n|---|---|---|---|---|---|---|\n"
        f"{rows}\n"
    )


# -- held-out evaluation of a training run ---------------------------------------------------------------------

SPLIT_EVAL_SEED = 10_000_000  # held-out episode i of an env with a test split is reset with this + i
NO_SPLIT_EVAL_SEED = 2**31  # without a split: seeds past every training reset seed (those are < 2**31)


def make_envs(cfg: TrainConfig, tokenizer: Any) -> tuple[gym.Env, gym.Env, int, str | None]:
    """The training env, the held-out env, the held-out reset seed base, and a note on how it was chosen.

    Both envs get ``tokenizer``, the policy's (`creditgym.envs.with_tokenizer`). Only what every `TokenEnv` has
    is assumed: the response budget is `response_budget`'s (passed as ``max_new_tokens`` unless it is the env's
    own), and the held-out env is the test split (``split="test"``) of an env that has one, else the same env
    reset with seeds no training reset uses.
    """
    env_id = resolve_env_id(cfg.env_id)
    kwargs = dict(cfg.env_kwargs)
    budget = response_budget(cfg)
    if budget is not None:
        kwargs["max_new_tokens"] = budget
    eval_id = resolve_env_id(cfg.eval_env_id) if cfg.eval_env_id else env_id
    eval_kwargs = {**(kwargs if eval_id == env_id else {}), **dict(cfg.eval_env_kwargs)}
    if eval_id != env_id and "max_new_tokens" in kwargs and env_accepts(eval_id, "max_new_tokens"):
        eval_kwargs.setdefault("max_new_tokens", kwargs["max_new_tokens"])
    note = None
    if "split" in eval_kwargs:
        seed_base = SPLIT_EVAL_SEED
    elif env_accepts(eval_id, "split"):
        eval_kwargs["split"], seed_base = "test", SPLIT_EVAL_SEED
    else:
        seed_base = NO_SPLIT_EVAL_SEED
        note = (
            f"env {eval_id!r} has no held-out split: evaluating on reset seeds >= {NO_SPLIT_EVAL_SEED}, which no "
            "training reset uses (its tasks may still repeat); name one with --eval-env-id / --eval-env-kw"
        )
    train_env = make(env_id, **with_tokenizer(env_id, kwargs, tokenizer, model=cfg.model))
    eval_env = make(eval_id, **with_tokenizer(eval_id, eval_kwargs, tokenizer, model=cfg.model))
    return train_env, eval_env, seed_base, note


def evaluate_policy(policy: Policy, env: gym.Env, episodes: int, seed_base: int) -> dict[str, float]:
    """Greedy mean reward on ``episodes`` held-out episodes, episode ``i`` reset with seed ``seed_base + i``, and
    the share of them that ended at a budget (``eval/truncated``: scored unfinished)."""
    base = env.unwrapped
    envs = []
    for i in range(episodes):
        base.reset(seed=seed_base + i)
        envs.append(base.fork())
    done = play(PolicyAgent(policy, Sampling.greedy()), envs, list(range(episodes)))
    kept = [ep for ep in done if ep.infra_error is None]
    return {
        "eval/accuracy": float(np.mean([ep.reward for ep in kept])) if kept else float("nan"),
        "eval/infra_errors": float(len(done) - len(kept)),
        "eval/truncated": truncated_share(kept),
    }
