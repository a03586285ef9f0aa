"""creditgym: token-level Gymnasium environments for LLM RL, and agents with pluggable token-level credit."""

__version__ = "0.1.0"

from creditgym import _moved

_moved.install()  # old module paths (creditgym.agents.trainer, ...) keep working

import creditgym.envs  # noqa: E402,F401  (registers the creditgym/ env ids)
