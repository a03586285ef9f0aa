"""Signal providers: how a trainer computes each extra input a credit module declares.

`base` holds the contract (`SignalProvider`, the `StepContext` of a step, the registry `PROVIDERS`,
`build_providers`); each other file is one provider or one family, registered under its own name with the signal
it computes. The import list below is the one place that registers them all.

signal -> its providers (the default first), file:

- ``counterfactual_logprobs`` -> ``counterfactual_replay``, ``counterfactual.py`` (CoRT)
- ``criterion_spans`` -> ``criterion_spans``, ``spans.py`` (CoRT's span metrics)
- ``attention_stats`` -> ``attention_concentration``, ``attention.py`` (CompPO)
- ``teacher_logprobs`` -> ``teacher``, ``teachers.py`` (CAST)
- ``values`` -> ``value_head``, ``critics.py`` (gae, compo); ``critic_model``, ``critic_model.py`` (pact)
- ``mc_values`` -> ``mc_values``, ``mc.py`` (vine, the probe)
- ``token_entropy`` -> ``behaviour_entropy``; ``token_ids`` -> ``sampled_token_ids``; ``reference_logprobs`` ->
  ``reference_model``; all in ``policy_signals.py`` (forking, ktae, prime)
"""

from creditgym.agents.providers import (  # noqa: F401  (importing a provider registers it)
    attention,
    counterfactual,
    critic_model,
    critics,
    mc,
    policy_signals,
    spans,
    teachers,
)
from creditgym.agents.providers.attention import attention_concentration
from creditgym.agents.providers.base import (
    ENTRY_POINT_GROUP,
    PROVIDERS,
    ForwardRequest,
    RunContext,
    SignalProvider,
    StepContext,
    average_gradients,
    build_providers,
    provider_class,
    register_provider,
    sequence_logprobs,
    signal_provider,
)
from creditgym.agents.providers.spans import char_offsets, verdict_span_mask

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROVIDERS",
    "ForwardRequest",
    "RunContext",
    "SignalProvider",
    "StepContext",
    "attention_concentration",
    "average_gradients",
    "build_providers",
    "char_offsets",
    "provider_class",
    "register_provider",
    "sequence_logprobs",
    "signal_provider",
    "verdict_span_mask",
]
