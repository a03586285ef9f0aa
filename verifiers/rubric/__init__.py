"""Rubrics: grade a response against weighted criteria (IFEval checks, your own checkers, an LLM judge).

The public API lives in `grade`; ``ifeval`` and ``local`` hold the checkers, ``judge`` the LLM-judge criterion and
``chat_client`` its OpenAI-compatible transport.
"""

from creditgym.verifiers.rubric import local  # noqa: F401  (registers its checks, with grade's register_checker)
from creditgym.verifiers.rubric.grade import (
    LLM_JUDGE,
    REWARD_MODES,
    Checker,
    CheckResult,
    Criterion,
    RewardMode,
    describe,
    grade,
    known_ids,
    register_checker,
    worker_pids,
)

__all__ = [
    "LLM_JUDGE",
    "REWARD_MODES",
    "CheckResult",
    "Checker",
    "Criterion",
    "RewardMode",
    "describe",
    "grade",
    "known_ids",
    "register_checker",
    "worker_pids",
]
