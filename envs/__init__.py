"""Token-level Gymnasium environments. Importing ``creditgym`` registers every id under ``creditgym/``.

Third-party packages register their own envs the same way (see ``examples/register_env.py``); commands take
Gymnasium's ``module:EnvId`` form and load ``creditgym.envs`` entry points (`resolve_env_id`).
"""

from gymnasium.envs.registration import register, registry

from creditgym.envs.core import (
    CounterfactualPrompt,
    DecisiveSlots,
    EmptyResponse,
    Forkable,
    Ledger,
    OracleResponse,
    Source,
    TokenEnv,
    TurnBudget,
    TurnOutcome,
)
from creditgym.envs.math_tasks import MathTask, ProceduralMath, load_dataset_dir, load_jsonl
from creditgym.envs.registration import (
    ENTRY_POINT_GROUP,
    UnknownEnvError,
    env_accepts,
    make,
    resolve_env_id,
    with_tokenizer,
)
from creditgym.envs.single_turn import (
    EXAMPLE_ROWS,
    RowVerifier,
    SingleTurnEnv,
    SingleTurnTask,
    get_verifier,
    register_verifier,
    verifier_names,
)
from creditgym.envs.tokenizer import default_stop_token_ids, load_tokenizer, render_chat
from creditgym.envs.wrappers import FixedWindow

ENV_IDS = (
    "creditgym/Math-v0",
    "creditgym/Rubric-v0",
    "creditgym/SWEBench-v0",
    "creditgym/Planted-v0",
    "creditgym/SingleTurn-v0",
)

if "creditgym/Math-v0" not in registry:
    register(id="creditgym/Math-v0", entry_point="creditgym.envs.math:MathEnv")
if "creditgym/Rubric-v0" not in registry:
    register(id="creditgym/Rubric-v0", entry_point="creditgym.envs.rubric:RubricEnv")
if "creditgym/SWEBench-v0" not in registry:
    register(id="creditgym/SWEBench-v0", entry_point="creditgym.envs.swe:SWEEnv")
if "creditgym/Planted-v0" not in registry:
    register(id="creditgym/Planted-v0", entry_point="creditgym.envs.planted:PlantedEnv")
if "creditgym/SingleTurn-v0" not in registry:  # given no rows, it plays a few bundled sums
    register(
        id="creditgym/SingleTurn-v0",
        entry_point="creditgym.envs.single_turn:SingleTurnEnv",
        kwargs={"rows": str(EXAMPLE_ROWS), "verifier": "math"},
    )


def registered_ids() -> list[str]:
    """Every registered env id in the ``creditgym`` namespace (including third-party ones added there)."""
    return sorted(env_id for env_id in registry if env_id.startswith("creditgym/"))


__all__ = [
    "ENTRY_POINT_GROUP",
    "ENV_IDS",
    "EXAMPLE_ROWS",
    "CounterfactualPrompt",
    "DecisiveSlots",
    "EmptyResponse",
    "FixedWindow",
    "Forkable",
    "Ledger",
    "MathTask",
    "OracleResponse",
    "ProceduralMath",
    "RowVerifier",
    "SingleTurnEnv",
    "SingleTurnTask",
    "Source",
    "TokenEnv",
    "TurnBudget",
    "TurnOutcome",
    "UnknownEnvError",
    "default_stop_token_ids",
    "env_accepts",
    "get_verifier",
    "load_dataset_dir",
    "load_jsonl",
    "load_tokenizer",
    "make",
    "register_verifier",
    "registered_ids",
    "render_chat",
    "resolve_env_id",
    "verifier_names",
    "with_tokenizer",
]
