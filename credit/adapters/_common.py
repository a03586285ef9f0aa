"""What the adapters share: the module's config from what the caller gave, and a batch that never guesses.

An adapter knows only what its trainer hands it. Where an input of `CreditBatch` is absent (old log-probs,
the step, the planned number of steps), it builds a `partial_batch`: the absent fields hold placeholders
that a module cannot read, since reading one raises `MissingInputError` naming the input and the adapter
argument that carries it. So a module that never reads an input (``grpo`` and the old log-probs) runs without
it, and one that does (``cort``: old log-probs and its ramp's ``total_steps``) fails loudly, never on zeros.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import torch

from creditgym.credit import SIGNALS
from creditgym.credit.base import CreditBatch, CreditModule

__all__ = ["MissingInputError", "check_signals", "module_config", "partial_batch"]

#: The `CreditBatch` fields an adapter may lack.
_ABSENTABLE = ("old_logprobs", "step", "total_steps")


class MissingInputError(ValueError):
    """A credit module read an input that its adapter was not given.

    Attributes:
        field: the `CreditBatch` field (``old_logprobs``, ``step``, ``total_steps``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _PartialBatch(CreditBatch):
    """A `CreditBatch` whose fields named in ``_absent`` raise `MissingInputError` when read."""

    _absent: Mapping[str, str]

    def __getattribute__(self, name: str) -> Any:
        if name in _ABSENTABLE:
            absent = object.__getattribute__(self, "__dict__").get("_absent", {})
            if name in absent:
                raise MissingInputError(name, absent[name])
        return super().__getattribute__(name)

    def __repr__(self) -> str:
        return f"PartialBatch(shape={self.shape}, absent={sorted(self._absent)})"


def partial_batch(absent: Mapping[str, str], **fields: Any) -> CreditBatch:
    """``CreditBatch(**fields)``, except that reading a field named in ``absent`` raises `MissingInputError`.

    Args:
        absent: field -> the error message (what is missing, which adapter argument carries it); fields from
            ``old_logprobs``, ``step``, ``total_steps``, left out of ``fields``.
        **fields: `CreditBatch`'s other fields.
    """
    unknown = sorted(set(absent) - set(_ABSENTABLE))
    if unknown:
        raise ValueError(f"partial_batch: only {list(_ABSENTABLE)} may be absent, got {unknown}")
    if not absent:
        return CreditBatch(**fields)
    never_read = {"old_logprobs": torch.zeros_like(fields["token_rewards"]), "step": 0, "total_steps": 1}
    batch = _PartialBatch(**fields, **{k: v for k, v in never_read.items() if k in absent})
    object.__setattr__(batch, "_absent", dict(absent))
    return batch


def module_config(
    module: CreditModule[object],
    given: object | Mapping[str, Any] | None,
    base: Mapping[str, Any],
    where: str,
) -> object:
    """The module's config: ``given`` as is when it is a config instance, else its defaults with ``base`` (the
    fields the adapter derives from its trainer, kept where the config has them) and then ``given``'s overrides.

    Raises:
        TypeError: a config of another class. ValueError: an unknown field (the error lists the known ones).
    """
    if given is not None and not isinstance(given, Mapping):
        if not isinstance(given, module.config):
            raise TypeError(
                f"{where}: credit_config for {module.name!r} must be a {module.config.__name__} or a mapping of "
                f"its fields, got {type(given).__name__}"
            )
        return given
    fields = {f.name for f in dataclasses.fields(module.config)}  # type: ignore[arg-type]
    return module.make_config({**{k: v for k, v in base.items() if k in fields}, **dict(given or {})})


def check_signals(module: CreditModule[object], given: Collection[str], where: str, how: str) -> None:
    """Raise a `ValueError` naming the first signal ``module`` declares that is not in ``given`` (``values``
    included), with ``how``: the adapter argument that carries it (``{signal}`` is filled in)."""
    for name in module.signals:
        if name not in given:
            raise ValueError(
                f"{where}: credit module {module.name!r} needs the signal {name!r} ({SIGNALS[name]}), which was "
                f"not given; {how.format(signal=name)}"
            )
