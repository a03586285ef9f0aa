"""Verifiers: score responses and return structured :class:`Verdict` objects. Never import torch here."""

from creditgym.verifiers.verdict import STATUSES, Status, Verdict

__all__ = ["STATUSES", "Status", "Verdict"]
