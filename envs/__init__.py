"""Token-level Gymnasium environments. Importing ``creditgym`` registers every id under ``creditgym/``.

Third-party packages register their own envs the same way (see ``examples/register_env.py``).
"""

from gymnasium.envs.registration import register, registry

from creditgym.envs.core import Ledger, Source, TokenEnv, TurnOutcome
from creditgym.envs.math_tasks import MathTask, ProceduralMath, load_dataset_dir, load_jsonl
from creditgym.envs.tokenizer import default_stop_token_ids, load_tokenizer, render_chat
from creditgym.envs.wrappers import FixedWindow

ENV_IDS = ("creditgym/Math-v0", "creditgym/Rubric-v0", "creditgym/SWEBench-v0")

if "creditgym/Math-v0" not in registry:
    register(id="creditgym/Math-v0", entry_point="creditgym.envs.math:MathEnv")
if "creditgym/Rubric-v0" not in registry:
    register(id="creditgym/Rubric-v0", entry_point="creditgym.envs.rubric:RubricEnv")
if "creditgym/SWEBench-v0" not in registry:
    register(id="creditgym/SWEBench-v0", entry_point="creditgym.envs.swe:SWEEnv")


def registered_ids() -> list[str]:
    """Every registered env id in the ``creditgym`` namespace (including third-party ones added there)."""
    return sorted(env_id for env_id in registry if env_id.startswith("creditgym/"))


__all__ = [
    "ENV_IDS",
    "FixedWindow",
    "Ledger",
    "MathTask",
    "ProceduralMath",
    "Source",
    "TokenEnv",
    "TurnOutcome",
    "default_stop_token_ids",
    "load_dataset_dir",
    "load_jsonl",
    "load_tokenizer",
    "registered_ids",
    "render_chat",
]
