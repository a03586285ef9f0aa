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

from creditgym.agents.scripted import Agent


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
    seconds: float
    response: str


@dataclass
class Report:
    env_id: str
    agent: str
    episodes: int
    accuracy: float  # mean reward over episodes without an infra error
    infra_errors: int
    statuses: dict[str, int]
    records: list[EpisodeRecord] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(self.statuses.items()))
        return (
            f"# {self.agent} on {self.env_id}\n\n"
            f"| episodes | accuracy | infra errors |\n|---|---|---|\n"
            f"| {self.episodes} | {self.accuracy:.3f} | {self.infra_errors} |\n\n"
            f"| status | episodes |\n|---|---|\n{rows}\n"
        )


def evaluate(
    env_id: str, agent: Agent, episodes: int, *, seed: int = 0, env_kwargs: dict | None = None
) -> Report:
    """Play ``episodes`` episodes of ``env_id`` with ``agent``; episode ``i`` is reset with seed ``seed + i``."""
    env = gym.make(env_id, **(env_kwargs or {}))
    rng = np.random.default_rng(seed)
    records = []
    try:
        for i in range(episodes):
            t0 = time.perf_counter()
            _, reset_info = env.reset(seed=seed + i)
            total, info, terminated, truncated = 0.0, {}, False, False
            while not (terminated or truncated):
                tokens = agent.respond(env.unwrapped, rng)
                _, reward, terminated, truncated, info = env.step(tokens)
                total += float(reward)
            base = env.unwrapped
            records.append(
                EpisodeRecord(
                    index=i,
                    task_id=str(reset_info.get("task_id", i)),
                    reward=total,
                    status=str(info.get("status", "unknown")),
                    terminated=bool(terminated),
                    truncated=bool(truncated),
                    infra_error=info.get("infra_error"),
                    policy_tokens=int(base.ledger.policy_mask.sum()),
                    seconds=time.perf_counter() - t0,
                    response=str(info.get("response", "")),
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
        records=records,
    )


def write_report(report: Report, out_dir: str | Path) -> Path:
    """Write ``report.json`` and ``report.md`` into ``out_dir``; returns the JSON path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (out / "report.md").write_text(report.markdown())
    return out / "report.json"
