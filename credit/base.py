"""The credit contract: what every credit module receives (`CreditBatch`), returns (`CreditOutput`), and the
registry that maps a name (``grpo``, ``gae``, ...) to a module.

A credit module turns sparse scores into per-token advantages. It is one pure function
``fn(batch: CreditBatch, cfg: Config) -> CreditOutput`` plus a frozen config, registered by name::

    @dataclass(frozen=True)
    class MyConfig:
        scale: float = 1.0

    @register("mine", config=MyConfig, signals={"teacher_logprobs": ("teacher",)})
    @torch.no_grad()
    def mine(batch: CreditBatch, cfg: MyConfig) -> CreditOutput:
        teacher = require(batch, "teacher_logprobs", module="mine")  # raises at the top when missing
        ...

``signals`` names the extra inputs the module reads (the vocabulary `SIGNALS`; `declare_signal` adds to it) and,
for each, the fields of the module's config that parameterise how it is computed (here the field ``teacher``
chooses the teacher). The trainer only ever does ``module = get(name); out = module(batch, cfg)``: for each
declared signal it runs that signal's provider (``creditgym.agents.signals``) with those fields as parameters,
trains a critic when ``module.critic`` is true, and never branches on the name.

A critic module may also need inputs that exist only *after* the actor update (PACT's actor-then-critic order:
log-probs of the updated actor). It declares them as ``critic_signals`` together with a ``critic_targets``
function ``(batch, cfg) -> (targets (B, T), mask (B, T))``; after the actor update the trainer computes those
signals, adds them to ``batch.signals`` and fits the critic on ``critic_targets(batch, cfg)`` instead of
``(out.returns, policy_mask)``. Generic: no module name is special.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

import torch
from torch import Tensor

__all__ = [
    "SIGNALS",
    "CreditBatch",
    "CreditFn",
    "CreditModule",
    "CreditOutput",
    "CriticTargetFn",
    "UnknownCreditModuleError",
    "advantage_metrics",
    "available",
    "declare_signal",
    "get",
    "register",
    "require",
]

_SIGNALS: dict[str, str] = {
    "counterfactual_logprobs": "(B, T) log-probs of the sampled tokens replayed under the counterfactual "
    "prompt (CoRT: the rubric-free prompt), teacher-forced, no grad",
    "teacher_logprobs": "(B, T) log-probs of the sampled tokens under a stop-gradient teacher (CAST)",
    "attention_stats": "(B, T) or (B, T, K) detached statistics of the behaviour policy's attention rows "
    "(CompPO: concentration in [0, 1])",
    "values": "(B, T) critic values V(s_t); carried by CreditBatch.values, not by CreditBatch.signals",
    "updated_logprobs": "(B, T) log-probs of the sampled tokens under the updated actor pi_{k+1}, computed "
    "after the actor update for a module's critic phase (PACT's critic_signals)",
    "mc_values": "(B, T, 2) Monte-Carlo values around the step holding each policy token: [..., 0] = V(prefix "
    "before the step), [..., 1] = V(prefix after it), each the mean reward of K continuations sampled from that "
    "prefix; after the last step, the response's reward (VinePPO)",
}
#: The vocabulary of extra inputs a module may declare, with their meaning (read-only view; `declare_signal` adds
#: to it). Every signal tensor has shape (B, T, ...) aligned with ``old_logprobs`` and is read only where
#: ``policy_mask`` is True.
SIGNALS: Mapping[str, str] = MappingProxyType(_SIGNALS)


def declare_signal(name: str, meaning: str) -> None:
    """Add ``name`` to the vocabulary `SIGNALS`, with its shape and meaning (``"(B, T) ..."``).

    A new signal needs this declaration (the contract) and a provider in ``creditgym.agents.signals`` (how a
    trainer computes it). Declaring a known name again with the same meaning is a no-op.

    Raises:
        ValueError: ``name`` is not an identifier, is ``values``, or is declared already with another meaning.
    """
    if not name.isidentifier():
        raise ValueError(f"signal name must be a Python identifier like 'teacher_logprobs', got {name!r}")
    if name in _SIGNALS and _SIGNALS[name] != meaning:
        raise ValueError(f"signal {name!r} is declared already: {_SIGNALS[name]!r}")
    _SIGNALS[name] = meaning


def _describe(x: Tensor) -> str:
    return f"shape {tuple(x.shape)}, dtype {x.dtype}, device {x.device}"


@dataclass(frozen=True)
class CreditBatch:
    """The input of every credit module: B rows of T token positions (prompt, policy and env tokens, padding).

    Row ``b`` is one episode laid out left to right; position ``t`` is one token. ``policy_mask`` says which
    tokens the policy sampled: only those receive advantages, and everything a module reads at the other positions
    (old log-probs, values, signals) is ignored.

    Attributes:
        token_rewards: (B, T) float. Mostly 0. The verdict sits on the last policy token of the episode; multi-turn
            envs may also put per-turn rewards on each turn's last policy token. Must be 0 wherever
            ``policy_mask`` is False (a reward must belong to a token the policy chose) and finite.
        policy_mask: (B, T) bool. True = token sampled by the policy; False = prompt, env-inserted token (chat
            glue, tool output, next user turn) or padding. A row with no True entry is a padding row: it is not a
            sample, does not count in group statistics, and gets advantage 0 everywhere.
        group_ids: (B,) integer. Rows that answer the same task share an id (verl's ``uid``); group baselines
            (GRPO, RLOO) are computed within a group.
        old_logprobs: (B, T) float. Log-probs of the sampled tokens under the behaviour policy (0 where masked).
        segment_ids: (B, T) integer or None. Turn index of each token (multi-turn episodes).
        values: (B, T) float or None. Critic values, one per token position, with this convention (used by
            ``gae`` and every critic module): ``values[b, t] = V(s_t)``, the critic's estimate of the return
            **before** token ``t`` is emitted, i.e. of the prefix ``x, y_<t`` (everything left of ``t``). In a causal
            LM it is read from the hidden state at position ``t - 1``: the position whose logits give
            ``old_logprobs[b, t]`` (verl's ``values[:, -L-1:-1]`` slice). The value after the last policy token is
            0 (terminal). So with ``gamma = lam = 1`` and one terminal reward R, GAE gives ``A_t = R - values[b, t]``
            (PACT's ``R - V_{t-1}`` in its 1-based notation). Read only where ``policy_mask`` is True.
        signals: name -> tensor (B, T, ...), the extra inputs a module declared (vocabulary: ``SIGNALS``, except
            ``values`` which has its own field). Stored read-only.
        step: optimizer step, for schedules (CoRT's ramp). ``0 <= step``.
        total_steps: planned number of optimizer steps, ``>= 1``.

    Raises:
        ValueError / TypeError: on a shape, dtype, device or content mismatch, saying what was received and what
            was expected.
    """

    token_rewards: Tensor
    policy_mask: Tensor
    group_ids: Tensor
    old_logprobs: Tensor
    segment_ids: Tensor | None = None
    values: Tensor | None = None
    signals: Mapping[str, Tensor] = field(default_factory=dict)
    step: int = 0
    total_steps: int = 1

    def __post_init__(self) -> None:
        r, m = self.token_rewards, self.policy_mask
        if not isinstance(r, Tensor) or r.dim() != 2 or not r.is_floating_point():
            got = _describe(r) if isinstance(r, Tensor) else type(r).__name__
            raise TypeError(f"CreditBatch.token_rewards: expected a 2-D float tensor (B, T), got {got}")
        shape, device = tuple(r.shape), r.device
        if not isinstance(m, Tensor) or tuple(m.shape) != shape or m.dtype != torch.bool:
            got = _describe(m) if isinstance(m, Tensor) else type(m).__name__
            raise TypeError(
                f"CreditBatch.policy_mask: expected a bool tensor of shape {shape} (like token_rewards), got {got}; "
                "convert a {0, 1} mask with `.bool()`"
            )
        self._check("group_ids", self.group_ids, shape[:1], floating=False, device=device)
        self._check("old_logprobs", self.old_logprobs, shape, floating=True, device=device)
        if self.segment_ids is not None:
            self._check("segment_ids", self.segment_ids, shape, floating=False, device=device)
        if self.values is not None:
            self._check("values", self.values, shape, floating=True, device=device)
        for name, x in self.signals.items():
            if name == "values":
                raise ValueError(
                    "CreditBatch.signals['values']: pass critic values as CreditBatch(values=...)"
                )
            if name not in SIGNALS:
                raise ValueError(
                    f"CreditBatch.signals: unknown signal {name!r}; known signals: {sorted(SIGNALS)}"
                )
            if not isinstance(x, Tensor) or x.dim() < 2 or tuple(x.shape[:2]) != shape or x.device != device:
                got = _describe(x) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(
                    f"CreditBatch.signals[{name!r}]: expected a tensor of shape {shape} + (...) on {device}, got {got}"
                )
        object.__setattr__(self, "signals", MappingProxyType(dict(self.signals)))
        if not isinstance(self.step, int) or not isinstance(self.total_steps, int):
            raise TypeError(
                f"CreditBatch.step/total_steps: expected ints, got {self.step!r}, {self.total_steps!r}"
            )
        if self.step < 0 or self.total_steps < 1:
            raise ValueError(
                f"CreditBatch: expected step >= 0 and total_steps >= 1, got step={self.step}, "
                f"total_steps={self.total_steps}"
            )
        if not torch.isfinite(r).all():
            raise ValueError(
                f"CreditBatch.token_rewards: {int((~torch.isfinite(r)).sum())} non-finite entries"
            )
        stray = (r != 0) & ~m
        if stray.any():
            b, t = (int(i) for i in stray.nonzero()[0])
            raise ValueError(
                f"CreditBatch.token_rewards: {int(stray.sum())} nonzero rewards where policy_mask is False, "
                f"e.g. at (b={b}, t={t}); put each reward on the last policy token of its turn or episode"
            )

    @staticmethod
    def _check(name: str, x: Tensor, shape: tuple[int, ...], *, floating: bool, device: torch.device) -> None:
        kind = "a float" if floating else "an integer"
        ok = isinstance(x, Tensor) and tuple(x.shape) == shape and x.device == device
        ok = ok and (
            x.is_floating_point() if floating else not x.is_floating_point() and x.dtype != torch.bool
        )
        ok = ok and not x.is_complex()
        if not ok:
            got = _describe(x) if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(
                f"CreditBatch.{name}: expected {kind} tensor of shape {shape} on {device}, got {got}"
            )

    @property
    def shape(self) -> tuple[int, int]:
        """(B, T)."""
        B, T = self.token_rewards.shape
        return B, T


@dataclass(frozen=True)
class CreditOutput:
    """What a credit module returns.

    Attributes:
        advantages: (B, T) float, detached, exactly 0 wherever ``policy_mask`` is False. Plugged into the clipped
            policy-gradient loss (``creditgym.agents.loss.policy_loss``) as is.
        returns: (B, T) float or None. Value targets, for modules that train a critic (0 where masked).
        metrics: namespaced scalars, e.g. ``{"credit/grpo/adv_abs_mean": 0.8}``; the trainer logs them.
        token_credit: (B, T) float or None. Per-token credit for plots and diagnostics (credit heatmaps), when it
            differs from the advantages, e.g. PACT's ``C_t = V(next prefix) - V(prefix)``; 0 where masked. The
            trainer never optimises it.
        token_marks: named (B, T) diagnostic marks in {-1, 0, +1}: tokens a module treats apart, signed by the
            direction it pushes them (CAST: ``"flip"``, its flipped tokens); 0 where masked. ``creditgym probe``
            reports, per mark, the share of marked tokens whose A* has the mark's sign. Never optimised.
    """

    advantages: Tensor
    returns: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    token_credit: Tensor | None = None
    token_marks: Mapping[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        a = self.advantages
        if not isinstance(a, Tensor) or a.dim() != 2 or not a.is_floating_point():
            got = _describe(a) if isinstance(a, Tensor) else type(a).__name__
            raise TypeError(f"CreditOutput.advantages: expected a 2-D float tensor (B, T), got {got}")
        ret = self.returns
        if ret is not None and (
            not isinstance(ret, Tensor) or ret.shape != a.shape or not ret.is_floating_point()
        ):
            got = _describe(ret) if isinstance(ret, Tensor) else type(ret).__name__
            raise TypeError(
                f"CreditOutput.returns: expected a float tensor of shape {tuple(a.shape)}, got {got}"
            )
        c = self.token_credit
        if c is not None and (not isinstance(c, Tensor) or c.shape != a.shape or not c.is_floating_point()):
            got = _describe(c) if isinstance(c, Tensor) else type(c).__name__
            raise TypeError(
                f"CreditOutput.token_credit: expected a float tensor of shape {tuple(a.shape)}, got {got}"
            )
        for name, m in self.token_marks.items():
            if not isinstance(m, Tensor) or m.shape != a.shape:
                got = _describe(m) if isinstance(m, Tensor) else type(m).__name__
                raise TypeError(
                    f"CreditOutput.token_marks[{name!r}]: expected shape {tuple(a.shape)}, got {got}"
                )


ConfigT = TypeVar("ConfigT")
ConfigT_contra = TypeVar("ConfigT_contra", contravariant=True)


class CreditFn(Protocol[ConfigT_contra]):
    """A credit module's function: pure, ``@torch.no_grad()``, no I/O, no trainer state."""

    def __call__(self, batch: CreditBatch, cfg: ConfigT_contra, /) -> CreditOutput: ...


class CriticTargetFn(Protocol[ConfigT_contra]):
    """A critic module's target function for the critic phase, run after the actor update: pure, no grad.

    ``batch.signals`` holds the module's ``critic_signals`` as well. Returns ``targets`` (B, T) float and
    ``mask`` (B, T) bool (a subset of ``policy_mask``), both detached: the critic is fitted on ``targets`` where
    ``mask`` is True.
    """

    def __call__(self, batch: CreditBatch, cfg: ConfigT_contra, /) -> tuple[Tensor, Tensor]: ...


class UnknownCreditModuleError(KeyError, ValueError):
    """``get(name)`` with a name nobody registered (a ``KeyError`` and a ``ValueError``)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class CreditModule(Generic[ConfigT]):
    """A registry entry: the function, its config class, the signals it reads, whether it trains a critic.

    ``critic_signals`` and ``critic_targets`` (both empty / None unless the module declares them): inputs the
    trainer computes after the actor update, and the function giving the critic's targets from them (see the
    module docstring). ``signal_params`` maps each declared signal (of either phase) to the fields of ``config``
    that parameterise its provider (empty tuple: none).
    """

    name: str
    fn: CreditFn[ConfigT]
    config: type[ConfigT]
    signals: tuple[str, ...]
    critic: bool
    critic_signals: tuple[str, ...] = ()
    critic_targets: CriticTargetFn[ConfigT] | None = None
    critic_loss: str = "mse"
    signal_params: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def make_config(self, overrides: Mapping[str, object] | None = None) -> ConfigT:
        """The module's config with ``overrides`` (field -> value); an unknown field names the valid ones."""
        overrides = dict(overrides or {})
        valid = [f.name for f in dataclasses.fields(self.config)]  # type: ignore[arg-type]
        bad = sorted(set(overrides) - set(valid))
        if bad:
            raise ValueError(
                f"credit module {self.name!r} has no config field {', '.join(map(repr, bad))}; its fields: "
                f"{valid}"
            )
        return self.config(**overrides)

    def __call__(self, batch: CreditBatch, cfg: ConfigT | None = None) -> CreditOutput:
        """Runs the module (default config when ``cfg`` is None) and checks the output contract."""
        cfg = self.config() if cfg is None else cfg
        if not isinstance(cfg, self.config):
            raise TypeError(
                f"credit module {self.name!r} takes a {self.config.__name__}, got {type(cfg).__name__}"
            )
        out = self.fn(batch, cfg)
        if out.advantages.shape != batch.policy_mask.shape:
            raise ValueError(
                f"credit module {self.name!r} returned advantages of shape {tuple(out.advantages.shape)}, "
                f"expected {batch.shape}"
            )
        if (out.advantages[~batch.policy_mask] != 0).any() or not torch.isfinite(out.advantages).all():
            raise ValueError(
                f"credit module {self.name!r} broke the contract: advantages must be finite and exactly 0 where "
                "policy_mask is False"
            )
        if out.token_credit is not None and (
            (out.token_credit[~batch.policy_mask] != 0).any() or not torch.isfinite(out.token_credit).all()
        ):
            raise ValueError(
                f"credit module {self.name!r} broke the contract: token_credit must be finite and exactly 0 where "
                "policy_mask is False"
            )
        if self.critic and out.returns is None:
            raise ValueError(
                f"credit module {self.name!r} trains a critic but returned no value targets (returns)"
            )
        return out


_REGISTRY: dict[str, CreditModule[object]] = {}


SignalDecl = Sequence[str] | Mapping[str, Sequence[str]]


def _signal_params(module: str, config: type, decl: SignalDecl) -> dict[str, tuple[str, ...]]:
    """``decl`` as ``{signal: config fields}``, each field checked to exist on ``config``."""
    params = {s: tuple(f) for s, f in decl.items()} if isinstance(decl, Mapping) else {s: () for s in decl}
    names = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    for signal, wanted in params.items():
        missing = [f for f in wanted if f not in names]
        if missing:
            raise ValueError(
                f"credit module {module!r}: the parameters {missing} declared for signal {signal!r} are not "
                f"fields of {config.__name__} (fields: {sorted(names)})"
            )
    return params


def register(
    name: str,
    *,
    config: type[ConfigT],
    signals: SignalDecl = (),
    critic: bool = False,
    critic_signals: SignalDecl = (),
    critic_targets: CriticTargetFn[ConfigT] | None = None,
    critic_loss: str = "mse",
) -> Callable[[CreditFn[ConfigT]], CreditFn[ConfigT]]:
    """Decorator: registers ``fn(batch, cfg) -> CreditOutput`` under ``name`` (file name = key = CLI value).

    Args:
        name: the registry key, a Python identifier (``"cort"``).
        config: the module's frozen config dataclass; ``config()`` must give the defaults.
        signals: extra inputs the trainer must compute, from ``SIGNALS``: a tuple of names, or a mapping from
            each name to the fields of ``config`` its provider takes as parameters (``{"attention_stats":
            ("layers",)}``).
        critic: True when the module's advantages come from a critic the trainer must train on ``returns``
            (such a module declares the ``values`` signal).
        critic_signals: signals (from ``SIGNALS``) the trainer computes after the actor update, for
            ``critic_targets`` only (e.g. ``("updated_logprobs",)``), declared like ``signals``. Needs ``critic``
            and ``critic_targets``.
        critic_targets: ``(batch, cfg) -> (targets, mask)`` for the critic phase; given with ``critic_signals``.
        critic_loss: ``"mse"`` (the value head's output is V) or ``"bce"`` (it is a logit: the trainer passes
            ``sigmoid(logit)`` as ``values`` and fits the logit with soft binary cross-entropy, as PACT does).

    Raises:
        ValueError: duplicate name, name not an identifier, unknown signal, a signal parameter that is not a
            config field, a critic without ``values``, or ``critic_signals`` without ``critic`` and
            ``critic_targets`` (or the reverse).
    """
    if not name.isidentifier():
        raise ValueError(f"credit module name must be a Python identifier like 'grpo', got {name!r}")
    params = {**_signal_params(name, config, signals), **_signal_params(name, config, critic_signals)}
    signals, critic_signals = tuple(signals), tuple(critic_signals)
    unknown = sorted((set(signals) | set(critic_signals)) - set(SIGNALS))
    if unknown:
        raise ValueError(
            f"credit module {name!r} declares unknown signals {unknown}; known: {sorted(SIGNALS)}"
        )
    if critic and "values" not in signals:
        raise ValueError(f"credit module {name!r} trains a critic, so it must declare the 'values' signal")
    if (critic_signals or critic_targets is not None) and not (
        critic and critic_signals and critic_targets is not None
    ):
        raise ValueError(
            f"credit module {name!r}: critic_signals={critic_signals!r} and critic_targets={critic_targets!r} "
            "go together, and only on a module with critic=True"
        )
    if critic_loss not in ("mse", "bce"):
        raise ValueError(f"credit module {name!r}: critic_loss must be 'mse' or 'bce', got {critic_loss!r}")

    def deco(fn: CreditFn[ConfigT]) -> CreditFn[ConfigT]:
        if name in _REGISTRY:
            raise ValueError(f"credit module {name!r} is already registered ({_REGISTRY[name].fn!r})")
        _REGISTRY[name] = CreditModule(  # type: ignore[assignment]
            name, fn, config, signals, critic, critic_signals, critic_targets, critic_loss, params
        )
        return fn

    return deco


def get(name: str) -> CreditModule[object]:
    """The module registered as ``name``; raises `UnknownCreditModuleError` listing the known names."""
    if name not in _REGISTRY:
        raise UnknownCreditModuleError(f"unknown credit module {name!r}; known modules: {available()}")
    return _REGISTRY[name]


def available() -> list[str]:
    """Sorted names of the registered credit modules."""
    return sorted(_REGISTRY)


def require(batch: CreditBatch, name: str, *, module: str = "this credit module") -> Tensor:
    """Returns the signal ``name`` of ``batch``, or raises a `ValueError` that names it when it is missing.

    ``values`` is read from ``batch.values``, every other signal from ``batch.signals``. Call it at the top of a
    module for each signal it declared: a missing signal is an error, never a silent fallback.
    """
    if name not in SIGNALS:
        raise ValueError(f"unknown signal {name!r}; known signals: {sorted(SIGNALS)}")
    x = batch.values if name == "values" else batch.signals.get(name)
    if x is None:
        where = "CreditBatch.values is None" if name == "values" else f"CreditBatch.signals has no {name!r}"
        raise ValueError(
            f"{module} needs the signal {name!r} ({SIGNALS[name]}), but {where}; the trainer must compute every "
            "signal listed in creditgym.credit.get(<name>).signals"
        )
    return x


def advantage_metrics(name: str, advantages: Tensor, mask: Tensor) -> dict[str, float]:
    """Summary of ``advantages`` (B, T) over policy tokens ``mask`` (B, T), keys ``credit/<name>/adv_*``."""
    a = advantages[mask]
    if a.numel() == 0:
        return {
            f"credit/{name}/{k}": 0.0 for k in ("adv_mean", "adv_abs_mean", "adv_std", "adv_min", "adv_max")
        }
    return {
        f"credit/{name}/adv_mean": a.mean().item(),
        f"credit/{name}/adv_abs_mean": a.abs().mean().item(),
        f"credit/{name}/adv_std": a.std(correction=0).item(),
        f"credit/{name}/adv_min": a.min().item(),
        f"credit/{name}/adv_max": a.max().item(),
    }
