"""creditgym: token-level Gymnasium environments for LLM RL, and agents with pluggable token-level credit."""

__version__ = "0.1.0"

import creditgym.envs  # noqa: F401  (registers the creditgym/ env ids)
