"""The signal-provider contract: how a trainer computes each extra input a credit module declares.

A provider is a `SignalProvider` class registered under its own name with the signal it computes
(`register_provider`; a stateless one is a function, `signal_provider`). A module names the provider it wants per
signal (``creditgym.credit.ProvidedBy``; by default the signal's default provider) and which fields of its config
are the provider's parameters; the provider gets those and nothing else of the module. At start-up the trainer
builds one provider per declared signal (`build_providers`): an unknown provider, a parameter the two disagree on,
or a run that cannot provide the signal fails then, not at step 50. Each step the trainer calls ``compute`` of
every provider, hands the tensors to the module, updates the actor, then calls ``update`` of every provider (fit
a critic on the step's targets, refresh a teacher): the actor first, then the critics. A provider's trainer-side
state lives in the provider and is checkpointed through ``state_dict`` / ``load_state_dict``, under its signal's
name.

A stateless provider::

    @signal_provider("position", signal="token_position", params=("scale",))
    def position(step: StepContext, params: Mapping[str, Any]) -> Tensor:
        return params["scale"] * step.old_logprobs    # (B, T), 0 off the policy mask

Every tensor a provider returns is ``(B, T, ...)`` aligned with the rollout batch (index t describes token t, as
in the ledger) and is read only on the policy mask. ``"module:name"`` names a provider defined outside creditgym
(``module`` is imported first); an unknown name loads the ``creditgym.providers`` entry points once.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
from torch import Tensor

from creditgym.agents.train.rollout import Batch, Episode, to_batch
from creditgym.credit.base import (
    SIGNALS,
    CreditBatch,
    CreditModule,
    CreditOutput,
    load_entry_points,
    load_registered,
)

if TYPE_CHECKING:
    from creditgym.agents.train.config import TrainConfig
    from creditgym.agents.train.policy import ForwardOutput, Policy
    from creditgym.envs.core import TokenEnv

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROVIDERS",
    "ForwardRequest",
    "RunContext",
    "SignalProvider",
    "StepContext",
    "average_gradients",
    "build_providers",
    "provider_class",
    "register_provider",
    "sequence_logprobs",
    "signal_provider",
]

#: Installed packages add signal providers under this entry-point group (loaded when an unknown name is asked for).
ENTRY_POINT_GROUP = "creditgym.providers"


@dataclass
class RunContext:
    """What a provider may use for the whole run (the module's config is not part of it: a provider gets the
    parameters its module declared for it).

    Attributes:
        cfg: The run's `TrainConfig` (learning rates, epochs, sampling).
        policy: The actor.
        env: The training env (unwrapped), for capability checks.
        env_id: Its id, for messages.
        accelerator: An ``accelerate.Accelerator`` in a multi-process run, else None.
    """

    cfg: TrainConfig
    policy: Policy
    env: TokenEnv
    env_id: str
    accelerator: Any = None


@dataclass(frozen=True)
class ForwardRequest:
    """What a provider needs from the shared no-grad pass of the behaviour policy over the rollout batch."""

    hidden: bool = False
    attention_layers: tuple[int, ...] = ()
    entropy: bool = False

    def __or__(self, other: ForwardRequest) -> ForwardRequest:
        layers = tuple(sorted(set(self.attention_layers) | set(other.attention_layers)))
        return ForwardRequest(self.hidden or other.hidden, layers, self.entropy or other.entropy)


@dataclass
class StepContext:
    """One step's rollouts, on the policy's device, and what the step has computed so far.

    Attributes:
        step: The optimizer step (0-based) being taken.
        episodes: The kept episodes (infra errors dropped), row ``b`` of every tensor is ``episodes[b]``.
        batch: The rollout batch (CPU tensors, see `Batch`).
        input_ids, attention_mask, policy_mask, old_logprobs: ``(B, T)`` on the policy's device.
        credit_batch, credit_out: The module's input and output, set once the module has run (a critic's
            provider fits on ``credit_out.returns`` in its ``update``).
        generator: The step's seeded generator (for providers that sample).
    """

    step: int
    episodes: list[Episode]
    batch: Batch
    input_ids: Tensor
    attention_mask: Tensor
    policy_mask: Tensor
    old_logprobs: Tensor
    policy: Policy
    request: ForwardRequest = field(default_factory=ForwardRequest)
    generator: torch.Generator | None = None
    credit_batch: CreditBatch | None = None
    credit_out: CreditOutput | None = None
    _behaviour: ForwardOutput | None = None

    @classmethod
    def of(
        cls,
        step: int,
        episodes: list[Episode],
        policy: Policy,
        request: ForwardRequest,
        generator: torch.Generator | None = None,
    ) -> StepContext:
        """The context of ``episodes``, padded into one batch (`to_batch`) on the policy's device."""
        batch = to_batch(episodes, policy.pad_token_id)
        device = policy.device
        return cls(
            step=step,
            episodes=episodes,
            batch=batch,
            input_ids=batch.input_ids.to(device),
            attention_mask=batch.attention_mask.to(device),
            policy_mask=batch.policy_mask.to(device),
            old_logprobs=batch.old_logprobs.to(device),
            policy=policy,
            request=request,
            generator=generator,
        )

    def make_credit_batch(self, signals: Mapping[str, Tensor], *, total_steps: int) -> CreditBatch:
        """The `CreditBatch` of this step with the step's ``signals`` (``values`` goes to its own field):
        the one place a trainer or the probe assembles a module's input."""
        signals = dict(signals)
        device = self.input_ids.device
        return CreditBatch(
            token_rewards=self.batch.token_rewards.to(device),
            policy_mask=self.policy_mask,
            group_ids=self.batch.group_ids.to(device),
            old_logprobs=self.old_logprobs,
            segment_ids=self.batch.segment_ids.to(device),
            values=signals.pop("values", None),
            signals=signals,
            step=self.step,
            total_steps=total_steps,
        )

    def behaviour(self) -> ForwardOutput:
        """The behaviour policy's no-grad pass over the batch with every provider's `ForwardRequest`, run once."""
        if self._behaviour is None:
            with torch.no_grad():
                self._behaviour = self.policy.forward_logprobs(
                    self.input_ids,
                    self.attention_mask,
                    return_entropy=self.request.entropy,
                    return_hidden=self.request.hidden,
                    attention_layers=list(self.request.attention_layers) or None,
                )
        return self._behaviour


class SignalProvider(abc.ABC):
    """Computes one signal for a run; subclasses implement `compute` and are registered by `register_provider`.

    Class attributes:
        name: The provider's registered name (set by `register_provider`).
        signal: The signal it computes (set by `register_provider`).
        default: Whether it is its signal's default provider.
        params: The parameters it takes: a module must declare these config fields for it.
        optional_params: Parameters a module may also declare, with the value a module that does not gets
            (e.g. the value head's ``critic``, which only ``compo`` chooses).
    """

    name: ClassVar[str] = ""
    signal: ClassVar[str] = ""
    default: ClassVar[bool] = False
    params: ClassVar[tuple[str, ...]] = ()
    optional_params: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, run: RunContext, params: Mapping[str, Any]) -> None:
        self.run = run
        self.params = dict(params)

    def check(self) -> None:
        """Raise, naming what is missing, when this run cannot provide the signal (called at start-up)."""
        return None

    def forward_request(self) -> ForwardRequest:
        """What this provider reads from `StepContext.behaviour` (nothing by default)."""
        return ForwardRequest()

    @abc.abstractmethod
    def compute(self, step: StepContext) -> Tensor:
        """The signal for this step's batch, ``(B, T, ...)``, detached."""

    def update(self, step: StepContext) -> dict[str, float]:
        """After the actor update: refresh or fit state (``step.credit_out`` holds the module's output); returns
        metrics."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Trainer-side state to checkpoint (tensors and plain data)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned."""
        return None

    def save(self, folder: Path) -> None:
        """Write what a user needs beside the final model (e.g. a critic) into ``folder``."""
        return None


ProviderT = TypeVar("ProviderT", bound=type[SignalProvider])

#: provider name -> provider class; `register_provider` and `signal_provider` add to it.
PROVIDERS: dict[str, type[SignalProvider]] = {}


def register_provider(
    name: str, *, signal: str | None = None, default: bool = False
) -> Callable[[ProviderT], ProviderT]:
    """Class decorator: registers ``cls`` as the provider ``name`` of ``signal`` (default: the signal called
    ``name``); ``default=True`` makes it the provider a module gets when it names none (a signal with a single
    provider needs no default)."""
    signal = name if signal is None else signal

    def deco(cls: ProviderT) -> ProviderT:
        if not name.isidentifier() or not signal.isidentifier():
            raise ValueError(f"provider and signal names must be identifiers, got {name!r} for {signal!r}")
        if name in PROVIDERS:
            raise ValueError(f"a provider named {name!r} is registered already ({PROVIDERS[name].__name__})")
        taken = [n for n, c in PROVIDERS.items() if c.signal == signal and c.default]
        if default and taken:
            raise ValueError(f"signal {signal!r} has a default provider already ({taken[0]!r})")
        cls.name, cls.signal, cls.default = name, signal, default
        PROVIDERS[name] = cls
        return cls

    return deco


def signal_provider(
    name: str, *, signal: str | None = None, params: Sequence[str] = (), default: bool = False
) -> Callable[[Callable[[StepContext, Mapping[str, Any]], Tensor]], type[SignalProvider]]:
    """Function decorator: a stateless provider ``fn(step, params) -> Tensor`` (arguments of `register_provider`)."""

    def deco(fn: Callable[[StepContext, Mapping[str, Any]], Tensor]) -> type[SignalProvider]:
        def compute(self: SignalProvider, step: StepContext) -> Tensor:
            return fn(step, self.params)

        body = {"params": tuple(params), "compute": compute, "__doc__": fn.__doc__}
        return register_provider(name, signal=signal, default=default)(type(name, (SignalProvider,), body))

    return deco


def provider_class(signal: str, name: str | None = None) -> type[SignalProvider]:
    """The provider ``name`` (``"module:name"`` imports ``module`` first) of ``signal``, or the signal's default.

    Raises:
        ValueError: an unknown provider or one of another signal (the signal's providers listed), or no name
            and no default for the signal.
    """
    if signal not in SIGNALS:
        raise ValueError(f"unknown signal {signal!r}; known signals: {sorted(SIGNALS)}")
    if name is not None:
        name = load_registered(name, PROVIDERS, group=ENTRY_POINT_GROUP, kind="signal provider")
    ours = {n: c for n, c in PROVIDERS.items() if c.signal == signal}
    if name is None:
        if not ours:  # perhaps an installed package provides it
            load_entry_points(ENTRY_POINT_GROUP)
            ours = {n: c for n, c in PROVIDERS.items() if c.signal == signal}
        if not ours:
            raise ValueError(
                f"no provider computes the signal {signal!r}; register one with "
                f"creditgym.agents.providers.register_provider (providers: {sorted(PROVIDERS)})"
            )
        defaults = [n for n, c in ours.items() if c.default] or (list(ours) if len(ours) == 1 else [])
        if not defaults:
            raise ValueError(
                f"the signal {signal!r} has several providers, {sorted(ours)}, and no default: name one "
                f"(register(..., signals={{{signal!r}: ProvidedBy('<provider>', params=(...))}}))"
            )
        name = defaults[0]
    if name not in ours:
        other = f" (it computes {PROVIDERS[name].signal!r})" if name in PROVIDERS else ""
        raise ValueError(
            f"no provider {name!r} of the signal {signal!r}{other}; its providers: {sorted(ours)}, all providers: "
            f"{sorted(PROVIDERS)}"
        )
    return ours[name]


def build_providers(run: RunContext, module: CreditModule[Any], credit_cfg: Any) -> dict[str, SignalProvider]:
    """One provider per signal ``module`` declares, keyed by the signal, each built with the config fields the
    module declared for it (read from ``credit_cfg``) and checked (``check()``).

    Raises:
        ValueError: naming the module and the signal: no such provider, the declared parameters differ from the
            ones the provider takes, or the run cannot provide the signal.
    """
    out = {}
    for signal, use in module.provided_by.items():
        where = f"credit module {module.name!r}, signal {signal!r}"
        try:
            cls = provider_class(signal, use.provider)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e
        declared = set(use.params)
        if not set(cls.params) <= declared <= set(cls.params) | set(cls.optional_params):
            optional = f" (optional: {list(cls.optional_params)})" if cls.optional_params else ""
            raise ValueError(
                f"{where}: the module declares the parameters {list(use.params)}, but its provider {cls.name!r} "
                f"takes {list(cls.params)}{optional}: declare those config fields at registration "
                f"(register(..., signals={{{signal!r}: {tuple(cls.params)!r}}}))"
            )
        try:
            provider = cls(run, {**cls.optional_params, **{p: getattr(credit_cfg, p) for p in use.params}})
            provider.check()
        except ValueError as e:
            raise ValueError(f"{where} (provider {cls.name!r}): {e}") from e
        out[signal] = provider
    return out


def average_gradients(params: Sequence[torch.nn.Parameter], accelerator: Any) -> None:
    """In a multi-process run, replace each gradient by its mean over the processes (a no-op in one process).

    For trainer-side models outside the actor's DDP wrapper (a value head, a critic model).
    """
    if accelerator is None:
        return
    for param in params:
        if param.grad is not None:
            param.grad = accelerator.reduce(param.grad, reduction="mean")


@torch.no_grad()
def sequence_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """``(B, T)`` log-probs of every token under ``model`` (a teacher or a reference copy); 0 at t = 0."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    )
    lp = torch.log_softmax(logits.logits[:, :-1].float(), -1)
    lp = lp.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    return torch.nn.functional.pad(lp, (1, 0))
