"""Signal providers: how the trainer computes each extra input a credit module declares.

One table, `PROVIDERS`: signal name (``creditgym.credit.SIGNALS``) -> a `SignalProvider` class. At start-up the
trainer builds one provider per signal the chosen module declares (`build_providers`), passing it the module
config's fields the module named for that signal (``register(..., signals={"attention_stats": ("layers",)})``);
a signal without a provider, or a parameter the provider and the module disagree on, is an error then, not at
step 50. Each step the trainer calls ``compute`` of every provider of the rollout phase, hands the tensors to the
module, updates the actor, computes the critic-phase signals, and calls ``update`` of every provider (refresh a
teacher, fit a critic). A provider's trainer-side state (a teacher snapshot, a critic) lives in the provider and
is checkpointed through ``state_dict`` / ``load_state_dict``.

Adding a signal: declare it (``creditgym.credit.declare_signal``) and register a provider, a class or a function::

    @signal_provider("my_signal", params=("scale",))
    def my_signal(step: StepContext, params: Mapping[str, Any]) -> Tensor:
        return params["scale"] * step.old_logprobs    # (B, T), 0 off the policy mask

Every tensor a provider returns is ``(B, T, ...)`` aligned with the rollout batch (index t describes token t, as
in the ledger) and is read only on the policy mask.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

import torch
from torch import Tensor

from creditgym.agents.rollout import Batch, Episode, to_batch
from creditgym.envs.core import CounterfactualPrompt, Source

if TYPE_CHECKING:
    from creditgym.agents.config import TrainConfig
    from creditgym.agents.policy import ForwardOutput, Policy
    from creditgym.credit import CreditBatch, CreditModule, CreditOutput
    from creditgym.envs.core import TokenEnv

__all__ = [
    "ALTERNATIVES",
    "PROVIDERS",
    "RunContext",
    "SignalProvider",
    "StepContext",
    "average_gradients",
    "build_providers",
    "char_offsets",
    "register_provider",
    "sequence_logprobs",
    "signal_provider",
    "verdict_span_mask",
]


@dataclass
class RunContext:
    """What a provider may use for the whole run.

    Attributes:
        cfg: The run's `TrainConfig`.
        policy: The actor.
        env: The training env (unwrapped), for capability checks.
        env_id: Its id, for messages.
        module: The credit module (its name, ``critic_loss``, ``critic_targets``).
        credit_cfg: The module's config.
        accelerator: An ``accelerate.Accelerator`` in a multi-process run, else None.
    """

    cfg: TrainConfig
    policy: Policy
    env: TokenEnv
    env_id: str
    module: CreditModule[Any]
    credit_cfg: Any
    accelerator: Any = None


@dataclass(frozen=True)
class ForwardRequest:
    """What a provider needs from the shared no-grad pass of the behaviour policy over the rollout batch."""

    hidden: bool = False
    attention_layers: tuple[int, ...] = ()

    def __or__(self, other: ForwardRequest) -> ForwardRequest:
        layers = tuple(sorted(set(self.attention_layers) | set(other.attention_layers)))
        return ForwardRequest(self.hidden or other.hidden, layers)


@dataclass
class StepContext:
    """One step's rollouts, on the policy's device, and what the step has computed so far.

    Attributes:
        step: The optimizer step (0-based) being taken.
        episodes: The kept episodes (infra errors dropped), row ``b`` of every tensor is ``episodes[b]``.
        batch: The rollout batch (CPU tensors, see `Batch`).
        input_ids, attention_mask, policy_mask, old_logprobs: ``(B, T)`` on the policy's device.
        credit_batch, credit_out: Set once the credit module has run.
        critic_targets: ``(targets, mask)`` the critic is fitted on, set after the actor update.
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
    critic_targets: tuple[Tensor, Tensor] | None = None
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

    def behaviour(self) -> ForwardOutput:
        """The behaviour policy's no-grad pass over the batch with every provider's `ForwardRequest`, run once."""
        if self._behaviour is None:
            with torch.no_grad():
                self._behaviour = self.policy.forward_logprobs(
                    self.input_ids,
                    self.attention_mask,
                    return_entropy=False,
                    return_hidden=self.request.hidden,
                    attention_layers=list(self.request.attention_layers) or None,
                )
        return self._behaviour


class SignalProvider(abc.ABC):
    """Computes one signal for a run; subclasses set ``name`` (by `register_provider`) and implement `compute`.

    Class attributes:
        params: The parameters it takes: the module must declare these config fields for the signal.
        optional_params: Parameters a module may also declare, with the value a module that does not gets
            (e.g. the ``values`` provider's ``critic``, which only ``compo`` chooses).
        phase: ``"rollout"`` (computed before the credit module runs) or ``"critic"`` (after the actor update,
            for a module's ``critic_signals``).
    """

    name: ClassVar[str] = ""
    params: ClassVar[tuple[str, ...]] = ()
    optional_params: ClassVar[Mapping[str, Any]] = {}
    phase: ClassVar[Literal["rollout", "critic"]] = "rollout"

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
        """After the actor update (and the critic-phase signals): refresh or fit state; returns metrics."""
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

#: signal name -> provider class; `register_provider` and `signal_provider` add to it.
PROVIDERS: dict[str, type[SignalProvider]] = {}
#: signal name -> {the config fields it takes -> provider class}: other providers of a signal, each used for the
#: modules that declare exactly its parameters (``register_provider(name, alternative=True)``), e.g. PACT's
#: critic model for ``values`` beside the value head that ``gae`` and ``compo`` get.
ALTERNATIVES: dict[str, dict[frozenset[str], type[SignalProvider]]] = {}


def register_provider(name: str, *, alternative: bool = False) -> Callable[[ProviderT], ProviderT]:
    """Class decorator: ``cls`` provides the signal ``name`` (declared in ``creditgym.credit.SIGNALS``); with
    ``alternative=True``, for the modules that declare exactly ``cls.params`` for it (`ALTERNATIVES`)."""
    from creditgym.credit import SIGNALS

    def deco(cls: ProviderT) -> ProviderT:
        if name not in SIGNALS:
            raise ValueError(
                f"no signal {name!r} is declared; declare it first with creditgym.credit.declare_signal "
                f"(known: {sorted(SIGNALS)})"
            )
        key = frozenset(cls.params)
        taken = key in ALTERNATIVES.get(name, {}) or (
            name in PROVIDERS and key == set(PROVIDERS[name].params)
        )
        if alternative and taken:
            raise ValueError(f"signal {name!r} already has a provider taking the parameters {sorted(key)}")
        if not alternative and name in PROVIDERS:
            raise ValueError(f"signal {name!r} already has a provider ({PROVIDERS[name].__name__})")
        cls.name = name
        if alternative:
            ALTERNATIVES.setdefault(name, {})[key] = cls
        else:
            PROVIDERS[name] = cls
        return cls

    return deco


def signal_provider(
    name: str, *, params: Sequence[str] = (), phase: Literal["rollout", "critic"] = "rollout"
) -> Callable[[Callable[[StepContext, Mapping[str, Any]], Tensor]], type[SignalProvider]]:
    """Function decorator: a stateless provider ``fn(step, params) -> Tensor`` for the signal ``name``."""

    def deco(fn: Callable[[StepContext, Mapping[str, Any]], Tensor]) -> type[SignalProvider]:
        def compute(self: SignalProvider, step: StepContext) -> Tensor:
            return fn(step, self.params)

        cls = type(
            f"{name}_provider",
            (SignalProvider,),
            {"params": tuple(params), "phase": phase, "compute": compute, "__doc__": fn.__doc__},
        )
        return register_provider(name)(cls)

    return deco


def build_providers(run: RunContext) -> dict[str, SignalProvider]:
    """One provider per signal ``run.module`` declares (both phases), parameters checked, ``check()`` called.

    Raises:
        ValueError: a declared signal has no provider, the module's declared parameters differ from the ones
            the provider takes, or the run cannot provide a signal (the provider's ``check``).
    """
    module, out = run.module, {}
    for name in (*module.signals, *module.critic_signals):
        declared = tuple(module.signal_params.get(name, ()))
        cls = ALTERNATIVES.get(name, {}).get(frozenset(declared), PROVIDERS.get(name))
        if cls is None:
            raise ValueError(
                f"credit module {module.name!r} needs the signal {name!r}, but no provider computes it; "
                f"register one with creditgym.agents.signals.register_provider (providers: {sorted(PROVIDERS)})"
            )
        if not set(cls.params) <= set(declared) <= set(cls.params) | set(cls.optional_params):
            optional = f" (optional: {list(cls.optional_params)})" if cls.optional_params else ""
            raise ValueError(
                f"credit module {module.name!r} declares the parameters {list(declared)} for signal {name!r}, "
                f"but its provider {cls.__name__} takes {list(cls.params)}{optional}: declare those config "
                f"fields at registration (register(..., signals={{{name!r}: {tuple(cls.params)!r}}}))"
            )
        want = "critic" if name in module.critic_signals else "rollout"
        if cls.phase != want:
            raise ValueError(
                f"credit module {module.name!r} reads signal {name!r} in its {want} phase, but its provider "
                f"computes it in the {cls.phase} phase"
            )
        provider = cls(run, {**cls.optional_params, **{p: getattr(run.credit_cfg, p) for p in declared}})
        provider.check()
        out[name] = provider
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


# -- the built-in providers ---------------------------------------------------------------------------------------


@register_provider("counterfactual_logprobs")
class CounterfactualLogprobs(SignalProvider):
    """Log-probs of everything after each episode's prompt, replayed after its counterfactual prompt.

    One teacher-forced pass of the behaviour policy (CoRT, arXiv 2607.25659): the same response tokens, the
    prompt swapped for ``env.counterfactual_prompt_tokens()`` (the `CounterfactualPrompt` capability: the same
    task without its criteria).
    """

    def check(self) -> None:
        env = self.run.env
        if not isinstance(env, CounterfactualPrompt) or not env.has_counterfactual:
            raise ValueError(
                f"credit module {self.run.module.name!r} needs a counterfactual prompt, but env "
                f"{self.run.env_id!r} provides none (it lacks the CounterfactualPrompt capability, "
                "counterfactual_prompt_tokens(), or its tasks carry no separate criteria block); use an env with "
                "one, such as creditgym/Rubric-v0 or creditgym/Math-v0"
            )

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        contexts, continuations, starts = [], [], []
        for ep in step.episodes:
            led = ep.env.ledger
            start = int((led.source == Source.PROMPT).sum())
            contexts.append(ep.env.counterfactual_prompt_tokens())  # type: ignore[attr-defined]
            continuations.append(led.token_id[start:].tolist())
            starts.append(start)
        scored = step.policy.logprobs(contexts, continuations, return_entropy=False)
        out = torch.zeros(step.batch.input_ids.shape, dtype=torch.float32)
        for row, start in enumerate(starts):
            n = len(continuations[row])
            out[row, start : start + n] = scored.logprobs[row, :n].float().cpu()
        return out.to(step.policy_mask.device) * step.policy_mask


def char_offsets(tokenizer: Any, token_ids: Sequence[int]) -> list[tuple[int, int]]:
    """The ``(start, end)`` characters each token covers in ``tokenizer.decode(token_ids,
    skip_special_tokens=True)`` (the text verifiers grade). When the tokens decoded one by one concatenate to that
    text, their lengths give the offsets (O(T)); otherwise (a character split over tokens, decoding that joins
    tokens) a token ends where the decoded prefix through it ends, and one whose prefix is not a prefix of the
    text (half a multi-byte character) covers nothing, the next token covering those characters (O(T^2)). A
    special token covers nothing."""
    ids = [int(t) for t in token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    pieces = [tokenizer.decode([t], skip_special_tokens=True) for t in ids]
    if "".join(pieces) == text:
        ends = list(itertools.accumulate(len(p) for p in pieces))
        return list(zip([0, *ends[:-1]], ends, strict=True))
    out, prev = [], 0
    for k in range(len(ids)):
        prefix = tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        end = max(prev, len(prefix)) if text.startswith(prefix) else prev
        out.append((prev, end))
        prev = end
    return out


def verdict_span_mask(episodes: Sequence[Episode], width: int) -> Tensor:
    """(B, width) float: 1.0 on the last policy turn's tokens that overlap a character span of the episode's
    verdict (``info["verdict"].spans``; for Rubric-v0 the union of ``info["criteria"][i]["spans"]``), mapped to
    token positions by `char_offsets`; 0 elsewhere and for episodes whose verdict has no spans."""
    out = torch.zeros((len(episodes), width), dtype=torch.float32)
    for row, ep in enumerate(episodes):
        spans = getattr(ep.info.get("verdict"), "spans", ())
        led = ep.env.ledger
        turns = led.turn[led.policy_mask]
        if not spans or not turns.size:
            continue
        positions = (led.policy_mask & (led.turn == turns[-1])).nonzero()[0]
        offsets = char_offsets(ep.env.tokenizer, led.token_id[positions].tolist())
        for pos, (a, b) in zip(positions, offsets, strict=True):
            out[row, int(pos)] = float(any(a < end and start < b for start, end in spans))
    return out


@signal_provider("criterion_spans")
def criterion_spans(step: StepContext, params: Mapping[str, Any]) -> Tensor:
    """`verdict_span_mask` of the step's episodes (CoRT's span metrics), 0 off the policy mask."""
    mask = verdict_span_mask(step.episodes, step.batch.input_ids.shape[1])
    return mask.to(step.policy_mask.device) * step.policy_mask


def attention_concentration(entropies: Mapping[int, Tensor] | Sequence[Tensor]) -> Tensor:
    """kappa = 1 - the mean over layers of the normalised attention-row entropies, (B, T) in [0, 1].

    Args:
        entropies: layer -> (B, T) (``ForwardOutput.attention_entropy``) or a sequence of (B, T) tensors.
    """
    stats = list(entropies.values()) if isinstance(entropies, Mapping) else list(entropies)
    if not stats:
        raise ValueError("attention_concentration: expected at least one layer's (B, T) attention entropy")
    return 1.0 - torch.stack(stats, -1).mean(-1)


@register_provider("attention_stats")
class AttentionStats(SignalProvider):
    """Attention concentration kappa (B, T) of the behaviour pass over the decoder layers ``layers`` (CompPO).

    ``kappa_t = 1 - mean over layers of the head-averaged attention-row entropy, normalised by log(keys)``
    (`attention_concentration`), read at the position that predicts token t.
    """

    params = ("layers",)

    def forward_request(self) -> ForwardRequest:
        return ForwardRequest(
            attention_layers=tuple(int(x) % self.run.policy.num_layers for x in self.layers)
        )

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(self.params["layers"])

    def check(self) -> None:
        n = self.run.policy.num_layers
        bad = [x for x in self.layers if not -n <= int(x) < n]
        if bad:
            raise ValueError(
                f"attention_stats: layers {bad} out of range for a model with {n} decoder layers"
            )

    def compute(self, step: StepContext) -> Tensor:
        entropy = step.behaviour().attention_entropy
        assert entropy is not None
        wanted = {int(x) % self.run.policy.num_layers for x in self.layers}
        return attention_concentration({k: v for k, v in entropy.items() if k in wanted}) * step.policy_mask


@register_provider("updated_logprobs")
class UpdatedLogprobs(SignalProvider):
    """Log-probs of the sampled tokens under the updated actor, after the actor update (PACT's critic phase)."""

    phase = "critic"

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        fwd = step.policy.forward_logprobs(step.input_ids, step.attention_mask, return_entropy=False)
        return fwd.logprobs * step.policy_mask


# the providers with trainer-side state live in their own files; importing them fills the table
from creditgym.agents import critic_model as _critic_model  # noqa: E402,F401
from creditgym.agents import critics as _critics  # noqa: E402,F401
from creditgym.agents import mc as _mc  # noqa: E402,F401
from creditgym.agents import teachers as _teachers  # noqa: E402,F401
