"""Adapters that plug creditgym's credit modules into other RL trainers.

Each adapter lives in its own module and imports its trainer library only there, so importing this package
(or ``creditgym.credit``) never needs stable-baselines3, TRL or verl::

    from creditgym.credit.adapters.sb3 import CreditRolloutBuffer      # needs stable-baselines3
    from creditgym.credit.adapters.verl import make_verl_estimator     # torch + numpy only; verl to register
    from creditgym.credit.adapters.trl import CreditGRPOTrainer        # needs trl

Submodules: `sb3`, `verl`, `trl`.
"""

from __future__ import annotations

__all__: list[str] = []
