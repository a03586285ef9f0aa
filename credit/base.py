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
chooses the teacher), computed by the signal's default provider; `ProvidedBy` names another provider
(``signals={"values": ProvidedBy("critic_model", params=(...))}``). Names only: the providers live in
``creditgym.agents.providers`` and are looked up when a run starts. The trainer only ever does
``module = get(name); out = module(batch, cfg)`` and never branches on the name.

``get("mypkg.mine:mine")`` imports ``mypkg.mine`` first; a name nobody registered loads the installed packages'
``creditgym.credit`` entry points once (as envs do with ``creditgym.envs``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

import torch
from torch import Tensor

__all__ = [
    "CREDIT",
    "ENTRY_POINT_GROUP",
    "MARK",
    "SIGNALS",
    "CreditBatch",
    "CreditFn",
    "CreditModule",
    "CreditOutput",
    "ProvidedBy",
    "UnknownCreditModuleError",
    "advantage_metrics",
    "available",
    "declare_signal",
    "get",
    "load_entry_points",
    "load_registered",
    "register",
    "require",
]

#: Installed packages add credit modules under this entry-point group (loaded when an unknown name is asked for).
ENTRY_POINT_GROUP = "creditgym.credit"

_SIGNALS: dict[str, str] = {
    "values": "(B, T) critic values V(s_t); carried by CreditBatch.values, not by CreditBatch.signals",
}
#: The vocabulary of extra inputs a module may declare, with their meaning (read-only view): the contract's own
#: ``values``, and each other signal as `declare_signal` makes it, in the file of the module that owns it. Every
#: signal tensor has shape (B, T, ...) aligned with ``old_logprobs`` and is read only where ``policy_mask`` is True.
SIGNALS: Mapping[str, str] = MappingProxyType(_SIGNALS)


def declare_signal(name: str, meaning: str) -> None:
    """Add ``name`` to the vocabulary `SIGNALS`, with its shape and meaning (``"(B, T) ..."``).

    A new signal needs this declaration (the contract) and a provider (``creditgym.agents.providers``: how a
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


#: `CreditOutput.diagnostics` key of the per-token credit that plots show when it differs from the advantages.
CREDIT = "credit"
#: Prefix of a `CreditOutput.diagnostics` key holding signed marks in {-1, 0, +1} (``"mark/flip"``).
MARK = "mark/"


@dataclass(frozen=True)
class CreditOutput:
    """What a credit module returns.

    Attributes:
        advantages: (B, T) float, detached, exactly 0 wherever ``policy_mask`` is False. Plugged into the clipped
            policy-gradient loss (``creditgym.agents.train.loss.policy_loss``) as is.
        returns: (B, T) float or None. Value targets, for modules that train a critic (0 where masked).
        metrics: namespaced scalars, e.g. ``{"credit/grpo/adv_abs_mean": 0.8}``; the trainer logs them.
        diagnostics: named (B, T) float tensors for plots and the probe, finite and 0 where ``policy_mask`` is
            False, never optimised. Keys: ``"credit"`` (`CREDIT`), the per-token credit the trainer's heatmap
            shows when it differs from the advantages (PACT's ``C_t = V(next prefix) - V(prefix)``);
            ``"mark/<name>"`` (`MARK`), marks in {-1, 0, +1}: tokens the module treats apart, signed by the
            direction it pushes them (CAST's ``"mark/flip"``), which ``creditgym probe`` scores against A*.
            Stored read-only.
    """

    advantages: Tensor
    returns: Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    diagnostics: Mapping[str, Tensor] = field(default_factory=dict)

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
        for key, x in self.diagnostics.items():
            if not isinstance(x, Tensor) or x.shape != a.shape or not x.is_floating_point():
                got = _describe(x) if isinstance(x, Tensor) else type(x).__name__
                raise TypeError(
                    f"CreditOutput.diagnostics[{key!r}]: expected a float tensor of shape {tuple(a.shape)}, got {got}"
                )
            if key.startswith(MARK) and not (
                key[len(MARK) :] and torch.isin(x, x.new_tensor([-1, 0, 1])).all()
            ):
                raise ValueError(
                    f"CreditOutput.diagnostics[{key!r}]: a mark 'mark/<name>' holds only -1, 0 and +1"
                )
        object.__setattr__(self, "diagnostics", MappingProxyType(dict(self.diagnostics)))


ConfigT = TypeVar("ConfigT")
ConfigT_contra = TypeVar("ConfigT_contra", contravariant=True)


class CreditFn(Protocol[ConfigT_contra]):
    """A credit module's function: pure, ``@torch.no_grad()``, no I/O, no trainer state."""

    def __call__(self, batch: CreditBatch, cfg: ConfigT_contra, /) -> CreditOutput: ...


class UnknownCreditModuleError(KeyError, ValueError):
    """``get(name)`` with a name nobody registered (a ``KeyError`` and a ``ValueError``)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class ProvidedBy:
    """How a module wants one of its signals computed: by which provider, with which fields of its config.

    Attributes:
        provider: A provider's registered name (``"critic_model"``), or ``"module:name"`` to import ``module``
            first (a provider defined outside creditgym); None: the signal's default provider.
        params: Fields of the module's config handed to the provider as its parameters (nothing else of the
            config reaches it).
    """

    provider: str | None = None
    params: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.provider is not None and not (isinstance(self.provider, str) and self.provider):
            raise TypeError(f"ProvidedBy.provider: expected a provider name or None, got {self.provider!r}")
        if isinstance(self.params, str) or not all(isinstance(p, str) for p in self.params):
            raise TypeError(f"ProvidedBy.params: expected a tuple of config field names, got {self.params!r}")
        object.__setattr__(self, "params", tuple(self.params))


@dataclass(frozen=True)
class CreditModule(Generic[ConfigT]):
    """A registry entry: the function, its config class, the signals it reads, whether it trains a critic.

    ``provided_by`` maps each declared signal to the provider that computes it and the fields of ``config`` that
    provider takes (`ProvidedBy`). ``actor_loss`` is the policy loss of the module's paper (``"ppo"``, the clipped
    surrogate, or ``"dis"``, PACT's): a trainer uses it when its run names none. ``group_relative``: the
    module's advantage is centred on the group (0 for a group of one), so a trainer refuses a group size of 1.
    ``unread``: ``fn(cfg)`` -> the declared signals the module leaves unread under ``cfg`` (`signals_read`).
    """

    name: str
    fn: CreditFn[ConfigT]
    config: type[ConfigT]
    signals: tuple[str, ...]
    critic: bool
    provided_by: Mapping[str, ProvidedBy] = field(default_factory=dict)
    actor_loss: str = "ppo"
    group_relative: bool = False
    unread: Callable[[ConfigT], Sequence[str]] | None = None

    def signals_read(self, cfg: ConfigT) -> tuple[str, ...]:
        """The declared signals the module reads under ``cfg`` (an adapter may pass zeros for the others)."""
        skipped = set(self.unread(cfg)) if self.unread is not None else set()
        return tuple(s for s in self.signals if s not in skipped)

    @property
    def signal_params(self) -> dict[str, tuple[str, ...]]:
        """signal -> the config fields its provider takes."""
        return {signal: use.params for signal, use in self.provided_by.items()}

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
        for key, x in out.diagnostics.items():
            if (x[~batch.policy_mask] != 0).any() or not torch.isfinite(x).all():
                raise ValueError(
                    f"credit module {self.name!r} broke the contract: diagnostics[{key!r}] must be finite and "
                    "exactly 0 where policy_mask is False"
                )
        if self.critic and out.returns is None:
            raise ValueError(
                f"credit module {self.name!r} trains a critic but returned no value targets (returns)"
            )
        return out


_REGISTRY: dict[str, CreditModule[object]] = {}


SignalDecl = Sequence[str] | Mapping[str, Sequence[str] | ProvidedBy]


def _provided_by(module: str, config: type, decl: SignalDecl) -> dict[str, ProvidedBy]:
    """``decl`` as ``{signal: ProvidedBy}``, each parameter checked to be a field of ``config``."""
    if isinstance(decl, str):
        raise TypeError(
            f"credit module {module!r}: signals must be a tuple or a mapping, got the string {decl!r}"
        )
    pairs = decl.items() if isinstance(decl, Mapping) else ((s, ()) for s in decl)
    out = {s: d if isinstance(d, ProvidedBy) else ProvidedBy(params=tuple(d)) for s, d in pairs}
    names = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    for signal, use in out.items():
        missing = [f for f in use.params if f not in names]
        if missing:
            raise ValueError(
                f"credit module {module!r}: the parameters {missing} declared for signal {signal!r} are not "
                f"fields of {config.__name__} (fields: {sorted(names)})"
            )
    return out


def register(
    name: str,
    *,
    config: type[ConfigT],
    signals: SignalDecl = (),
    critic: bool = False,
    actor_loss: str = "ppo",
    group_relative: bool = False,
    unread: Callable[[ConfigT], Sequence[str]] | None = None,
) -> Callable[[CreditFn[ConfigT]], CreditFn[ConfigT]]:
    """Decorator: registers ``fn(batch, cfg) -> CreditOutput`` under ``name`` (file name = key = CLI value).

    Args:
        name: the registry key, a Python identifier (``"cort"``).
        config: the module's frozen config dataclass; ``config()`` must give the defaults.
        signals: extra inputs the trainer must compute, from ``SIGNALS``: a tuple of names, or a mapping from
            each name to the fields of ``config`` its default provider takes as parameters (``{"attention_stats":
            ("layers",)}``), or to a `ProvidedBy` naming another provider.
        critic: True when the module's advantages come from a critic fitted on its ``returns`` (such a module
            declares the ``values`` signal; its provider fits the critic after the actor update).
        actor_loss: the registered name (or ``module:name``) of the policy loss of the module's method, used by a
            run that names none: ``"ppo"``, the clipped surrogate, ``"dis"``, PACT's decoupled importance
            sampling, or one of ``creditgym.agents.train.loss.register_loss``'s (checked when a run resolves it).
        group_relative: True when the advantage is centred on the group (GRPO, RLOO and the modules built on
            them): a response alone in its group gets 0, so a trainer refuses a group size of 1.
        unread: ``fn(cfg)`` -> the declared signals the module provably ignores under ``cfg`` (None: it reads
            them all); an adapter that cannot compute such a signal passes zeros instead of refusing the module.

    Raises:
        ValueError: duplicate name, name not an identifier, unknown signal, a signal parameter that is not a
            config field, a critic without ``values``, or an actor loss that is not a name or ``module:name``.
    """
    if not name.isidentifier():
        raise ValueError(f"credit module name must be a Python identifier like 'grpo', got {name!r}")
    provided_by = _provided_by(name, config, signals)
    unknown = sorted(set(provided_by) - set(SIGNALS))
    if unknown:
        raise ValueError(
            f"credit module {name!r} declares unknown signals {unknown}; known: {sorted(SIGNALS)}"
        )
    if critic and "values" not in provided_by:
        raise ValueError(f"credit module {name!r} trains a critic, so it must declare the 'values' signal")
    if not isinstance(actor_loss, str) or not actor_loss.rpartition(":")[2].isidentifier():
        raise ValueError(
            f"credit module {name!r}: actor_loss must name a policy loss like 'ppo' or 'dis', got {actor_loss!r}"
        )

    def deco(fn: CreditFn[ConfigT]) -> CreditFn[ConfigT]:
        if name in _REGISTRY:
            raise ValueError(f"credit module {name!r} is already registered ({_REGISTRY[name].fn!r})")
        entry = CreditModule(
            name, fn, config, tuple(provided_by), critic, provided_by, actor_loss, group_relative, unread
        )
        _REGISTRY[name] = entry  # type: ignore[assignment]
        return fn

    return deco


_LOADED_GROUPS: set[str] = set()


def load_entry_points(group: str) -> None:
    """Load every installed entry point of ``group`` once: the named module is imported, or the named callable
    called (importing or calling it registers what it adds).

    Raises:
        ValueError: an entry point fails to load, named with the error.
    """
    if group in _LOADED_GROUPS:
        return
    _LOADED_GROUPS.add(group)
    for ep in importlib.metadata.entry_points(group=group):
        try:
            target = ep.load()
        except Exception as e:
            raise ValueError(
                f"the {group!r} entry point {ep.name!r} ({ep.value}) failed to import: {type(e).__name__}: {e}"
            ) from e
        if callable(target) and not inspect.ismodule(target):
            target()


def load_registered(name: str, registry: Mapping[str, object], *, group: str, kind: str) -> str:
    """The key of ``registry`` behind ``name``, importing what registers it (credit modules, signal providers).

    ``"module:key"`` imports ``module`` first (importing it registers ``key``); a plain ``key`` missing from
    ``registry`` loads the entry points of ``group`` (`load_entry_points`). Returns ``key``, which may still be
    missing: the caller names what is known.

    Raises:
        ValueError: the module of ``module:key`` fails to import, or imports without registering ``key``; an entry
            point fails to load.
    """
    module, sep, key = name.rpartition(":")
    if sep and module:
        try:
            importlib.import_module(module)
        except Exception as e:
            raise ValueError(
                f"{kind} {name!r}: importing module {module!r} failed ({type(e).__name__}: {e}); the "
                "'module:name' form imports the module that registers name (is it on sys.path / PYTHONPATH?)"
            ) from e
        if key not in registry:
            raise ValueError(
                f"{kind} {name!r}: module {module!r} imported, but it registers no {kind} {key!r}"
            )
        return key
    if name not in registry:
        load_entry_points(group)
    return name


def get(name: str) -> CreditModule[object]:
    """The module registered as ``name`` (``"mypkg.mine:mine"`` imports ``mypkg.mine`` first; an unknown name
    loads the ``creditgym.credit`` entry points); raises `UnknownCreditModuleError` listing the known names."""
    try:
        key = load_registered(name, _REGISTRY, group=ENTRY_POINT_GROUP, kind="credit module")
    except ValueError as e:
        raise UnknownCreditModuleError(str(e)) from e
    if key not in _REGISTRY:
        raise UnknownCreditModuleError(f"unknown credit module {name!r}; known modules: {available()}")
    return _REGISTRY[key]


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


def check_reward_range(owner: str, rr: object) -> None:
    """Raise a `ValueError` naming ``owner`` (``"PACTConfig.reward_range"``) unless ``rr`` is ``(lo, hi)``, two
    finite floats with ``lo < hi``."""
    if not (
        isinstance(rr, tuple)
        and len(rr) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rr)
        and -float("inf") < rr[0] < rr[1] < float("inf")
    ):
        raise ValueError(f"{owner}: expected a tuple (lo, hi) of floats with lo < hi, got {rr!r}")


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
