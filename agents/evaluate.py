"""Run an agent through a registered env for N episodes and summarise what happened."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from creditgym.agents.rollout import play
from creditgym.agents.scripted import SCRIPTED, Agent


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(self.statuses.items()))
        return (
            f"# {self.agent} on {self.env_id}\n\n"
            f"| episodes | accuracy | infra errors | seconds |\n|---|---|---|---|\n"
            f"| {self.episodes} | {self.accuracy:.3f} | {self.infra_errors} | {self.seconds:.1f} |\n\n"
            f"| status | episodes |\n|---|---|\n{rows}\n"
        )


def make_agent(spec: str, *, device: str | None = None) -> Agent:
    """``oracle``, ``random``, or ``hf:PATH`` (a local model folder or ``creditgym/tiny``, greedy decoding)."""
    if spec in SCRIPTED:
        return SCRIPTED[spec]()
    if spec.startswith("hf:"):
        from creditgym.agents.policy import load_policy
        from creditgym.agents.rollout import PolicyAgent

        agent = PolicyAgent(load_policy(spec[3:], device=device), temperature=0.0)
        agent.name = spec
        return agent
    raise ValueError(f"unknown agent {spec!r}; known agents: {sorted(SCRIPTED)} or hf:PATH")


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
    env = gym.make(env_id, **(env_kwargs or {}))
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
    )


def write_report(report: Report, out_dir: str | Path) -> Path:
    """Write ``report.json`` and ``report.md`` into ``out_dir``; returns the JSON path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (out / "report.md").write_text(report.markdown())
    return out / "report.json"
