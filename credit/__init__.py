"""Credit modules: from scores to per-token advantages.

Every module is one pure function ``fn(batch: CreditBatch, cfg) -> CreditOutput`` with a frozen config,
registered by name; importing this package registers all of them::

    from creditgym import credit

    module = credit.get("grpo")                 # CreditModule: fn, config, signals, critic
    out = module(batch, module.config())        # out.advantages: (B, T)

Adding a module: one file ``credit/<name>.py`` using `register`, plus one import line below (or, outside the
package, any module that calls `register`; a new signal is `declare_signal` here plus a provider in
``creditgym.agents.signals``).
"""

from __future__ import annotations

from creditgym.credit import cast, compo, cort, gae, grpo, pact, rloo, vine
from creditgym.credit.base import (
    SIGNALS,
    CreditBatch,
    CreditFn,
    CreditModule,
    CreditOutput,
    CriticTargetFn,
    UnknownCreditModuleError,
    available,
    declare_signal,
    get,
    register,
    require,
)
from creditgym.credit.cast import CASTConfig
from creditgym.credit.compo import CompPOConfig
from creditgym.credit.cort import CoRTConfig
from creditgym.credit.gae import GAEConfig
from creditgym.credit.grpo import GRPOConfig
from creditgym.credit.pact import PACTConfig
from creditgym.credit.rloo import RLOOConfig

__all__ = [
    "SIGNALS",
    "CASTConfig",
    "CoRTConfig",
    "CompPOConfig",
    "CreditBatch",
    "CreditFn",
    "CreditModule",
    "CreditOutput",
    "CriticTargetFn",
    "GAEConfig",
    "GRPOConfig",
    "PACTConfig",
    "RLOOConfig",
    "UnknownCreditModuleError",
    "available",
    "cast",
    "compo",
    "cort",
    "declare_signal",
    "gae",
    "get",
    "grpo",
    "pact",
    "register",
    "require",
    "rloo",
    "vine",
]
