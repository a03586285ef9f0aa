"""Credit modules: from scores to per-token advantages.

Every module is one pure function ``fn(batch: CreditBatch, cfg) -> CreditOutput`` with a frozen config,
registered by name; importing this package registers all of them::

    from creditgym import credit

    module = credit.get("grpo")                 # CreditModule: fn, config, signals, critic
    out = module(batch, module.config())        # out.advantages: (B, T)

Adding a module: one file ``credit/<name>.py`` using `register`, plus one import line below. Outside the package,
any module that calls `register`: ``creditgym train --credit mypkg.mine:mine`` imports it first, and an installed
package may list it under the ``creditgym.credit`` entry-point group. A new signal is `declare_signal` in the
module's file plus a provider (``creditgym.agents.providers``).
"""

from __future__ import annotations

from creditgym.credit import cast, compo, cort, forking, gae, grpo, ktae, pact, prime, rloo, vine
from creditgym.credit.base import (
    CREDIT,
    MARK,
    SIGNALS,
    CreditBatch,
    CreditFn,
    CreditModule,
    CreditOutput,
    ProvidedBy,
    UnknownCreditModuleError,
    advantage_metrics,
    available,
    declare_signal,
    get,
    register,
    require,
)
from creditgym.credit.cast import CASTConfig
from creditgym.credit.compo import CompPOConfig
from creditgym.credit.cort import CoRTConfig
from creditgym.credit.forking import ForkingConfig
from creditgym.credit.gae import GAEConfig
from creditgym.credit.grpo import GRPOConfig
from creditgym.credit.ktae import KTAEConfig
from creditgym.credit.pact import PACTConfig
from creditgym.credit.prime import PRIMEConfig
from creditgym.credit.rloo import RLOOConfig
from creditgym.credit.vine import VineConfig

__all__ = [
    "CREDIT",
    "MARK",
    "SIGNALS",
    "CASTConfig",
    "CoRTConfig",
    "CompPOConfig",
    "CreditBatch",
    "CreditFn",
    "CreditModule",
    "CreditOutput",
    "ForkingConfig",
    "GAEConfig",
    "GRPOConfig",
    "KTAEConfig",
    "PACTConfig",
    "PRIMEConfig",
    "ProvidedBy",
    "RLOOConfig",
    "UnknownCreditModuleError",
    "VineConfig",
    "advantage_metrics",
    "available",
    "cast",
    "compo",
    "cort",
    "declare_signal",
    "forking",
    "gae",
    "get",
    "grpo",
    "ktae",
    "pact",
    "prime",
    "register",
    "require",
    "rloo",
    "vine",
]
