"""Value heads: the ``values`` signal's default provider (``value_head``) and the critics it trains.

``values[b, t] = V(s_t)``, the critic's estimate before token t (``creditgym.credit.CreditBatch.values``). Every
critic here reads the step's shared behaviour pass (detached), so it costs no forward pass of the actor of its
own. It is fitted after the actor update, on the module's ``returns`` over the policy tokens, with the loss
``critic_loss``: ``mse`` (the head's output is V) or ``bce`` (a logit: the module reads ``sigmoid(logit)`` and
the head is fitted with soft binary cross-entropy, PACT arXiv 2609.26355).

Which critic: the provider's optional parameters ``critic`` (`CRITICS`), ``layers`` and ``critic_loss``. A module
that offers the choice declares its config fields for them (``compo``: ``signals={"values": ("critic",
"layers")}``); the others get ``"standard"`` and ``"mse"``.

- ``standard``: a linear value head on the actor's detached last hidden state ``h^L`` (``gae``, ``pact``,
  ``compo:critic=standard``, CompPO's weaker ablation).
- ``tac``: CompPO's transport-aligned critic (arXiv 2608.21501): a two-layer MLP (width `TAC_WIDTH`, GELU) over::

      [LN(sg(h^L)); LN(sg(h^{l_m})); kappa; r_0 .. r_{L-1}]        (2 H + 1 + L features per token)

  ``h^{l_m}`` the output of the middle decoder layer ``L // 2``; ``r_l = 1 - Hbar_l`` the attention concentration
  of layer l (head-averaged row entropy over log(#keys), ``ForwardOutput.attention_entropy``), every decoder
  layer: the attention-routing features; ``kappa`` their mean over the module's ``layers``, the statistic the
  gate reads; ``LN`` a layer norm without parameters (the middle residual stream is not normalised). For
  ``compo`` its targets are the module's returns ``G_t``, computed with the same gates (transport-aligned).
"""

from __future__ import annotations

import abc
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from creditgym.agents.providers.attention import attention_concentration
from creditgym.agents.providers.base import (
    ForwardRequest,
    RunContext,
    SignalProvider,
    StepContext,
    average_gradients,
    register_provider,
)
from creditgym.agents.train.loss import value_loss

if TYPE_CHECKING:
    from creditgym.agents.train.policy import ForwardOutput

__all__ = [
    "CRITICS",
    "TAC_WIDTH",
    "VALUE_HEAD_FILE",
    "Critic",
    "CriticProvider",
    "StandardCritic",
    "TransportAlignedCritic",
    "ValueHead",
    "tac_features",
    "target_mask_frac",
]

VALUE_HEAD_FILE = "value_head.safetensors"
#: Hidden width of the TAC's MLP (ours: arXiv 2608.21501 does not give the head's architecture).
TAC_WIDTH = 256


class ValueHead(nn.Module):
    """A critic on the actor's hidden states: ``values(hidden) -> (B, T)``.

    A linear layer, or a two-layer MLP when ``mlp_size`` is given. The output layer starts at zero, so initial
    values are 0. With ``detach=True`` (default) the critic's loss does not reach the actor's weights.

    Args:
        hidden_size: ``H``, the actor's hidden size.
        mlp_size: Width of the hidden layer of an MLP head (``None``: linear head).
        detach: Stop gradients from flowing into the hidden states.
    """

    def __init__(self, hidden_size: int, *, mlp_size: int | None = None, detach: bool = True) -> None:
        super().__init__()
        self.hidden_size, self.mlp_size, self.detach = int(hidden_size), mlp_size, bool(detach)
        out = nn.Linear(mlp_size or hidden_size, 1)
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)
        self.net = nn.Sequential(nn.Linear(hidden_size, mlp_size), nn.GELU(), out) if mlp_size else out

    def forward(self, hidden: Tensor) -> Tensor:
        """``hidden`` ``(B, T, H)`` -> values ``(B, T)`` (float32)."""
        if self.detach:
            hidden = hidden.detach()
        weight = next(self.parameters())
        return self.net(hidden.to(weight.dtype)).squeeze(-1).float()

    def metadata(self) -> dict[str, str]:
        return {
            "hidden_size": str(self.hidden_size),
            "mlp_size": str(self.mlp_size or 0),
            "detach": str(self.detach),
        }

    def save(self, path: str | os.PathLike[str], extra: Mapping[str, str] | None = None) -> None:
        """Write the head to a safetensors file, its shape (and ``extra``) in the file's metadata."""
        from safetensors.torch import save_file

        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(state, str(path), metadata={**self.metadata(), **(extra or {})})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ValueHead:
        """A head written by :meth:`save`."""
        from safetensors import safe_open
        from safetensors.torch import load_file

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        head = cls(
            int(meta["hidden_size"]),
            mlp_size=int(meta.get("mlp_size", 0)) or None,
            detach=meta.get("detach") != "False",
        )
        head.load_state_dict(load_file(str(path)))
        return head


# -- the critics ---------------------------------------------------------------------------------------------------


class Critic(nn.Module, abc.ABC):
    """A value head over detached features of the behaviour pass: ``critic(critic.features(fwd)) -> (B, T)``.

    ``features`` runs once per step (no grad); the fit then slices its rows. ``head`` is the trained part.
    """

    kind: ClassVar[str] = ""
    head: ValueHead

    @abc.abstractmethod
    def forward_request(self) -> ForwardRequest:
        """What ``features`` reads from the behaviour pass."""

    @abc.abstractmethod
    def features(self, fwd: ForwardOutput) -> Tensor:
        """``(B, T, F)`` detached features at the position predicting each token."""

    def forward(self, features: Tensor) -> Tensor:
        """``(B, T, F)`` -> ``(B, T)``: V, or its logit for a ``bce`` critic."""
        return self.head(features)

    def metadata(self) -> dict[str, str]:
        """What a reader of the saved head needs to rebuild the features."""
        return {"critic": self.kind}


class StandardCritic(Critic):
    """A linear value head on the last hidden state ``h^L`` (module docstring)."""

    kind = "standard"

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.head = ValueHead(hidden_size)

    def forward_request(self) -> ForwardRequest:
        return ForwardRequest(hidden=True)

    def features(self, fwd: ForwardOutput) -> Tensor:
        assert fwd.hidden is not None
        return fwd.hidden.detach()


def tac_features(fwd: ForwardOutput, kappa_layers: Sequence[int], num_layers: int) -> Tensor:
    """``[LN(h^L); LN(h^{l_m}); kappa; r_0 .. r_{L-1}]`` ``(B, T, 2H + 1 + L)`` (module docstring), 0 off
    ``fwd.mask``.

    Args:
        fwd: A behaviour pass with ``hidden`` and the attention entropy of every one of the ``num_layers``
            decoder layers.
        kappa_layers: The layers (0-based, negative from the end) whose mean concentration is ``kappa``; empty:
            every layer.
        num_layers: ``L``.
    """
    if fwd.hidden is None or fwd.middle_hidden is None or fwd.attention_entropy is None:
        raise ValueError("tac_features: the behaviour pass must return hidden states and attention entropies")
    missing = sorted(set(range(num_layers)) - set(fwd.attention_entropy))
    if missing:
        raise ValueError(f"tac_features: no attention entropy for decoder layers {missing}")
    routing = 1.0 - torch.stack(
        [fwd.attention_entropy[layer] for layer in range(num_layers)], -1
    )  # (B, T, L)
    wanted = sorted({int(x) % num_layers for x in kappa_layers}) or list(range(num_layers))
    kappa = attention_concentration([fwd.attention_entropy[layer] for layer in wanted])  # (B, T)
    H = fwd.hidden.shape[-1]
    x = torch.cat(
        [
            F.layer_norm(fwd.hidden.float(), (H,)),
            F.layer_norm(fwd.middle_hidden.float(), (H,)),
            kappa.unsqueeze(-1).float(),
            routing.float(),
        ],
        -1,
    )  # (B, T, 2H + 1 + L)
    return (x * fwd.mask.unsqueeze(-1)).detach()


class TransportAlignedCritic(Critic):
    """CompPO's TAC: an MLP over `tac_features` (module docstring)."""

    kind = "tac"

    def __init__(
        self, hidden_size: int, num_layers: int, layers: Sequence[int], width: int = TAC_WIDTH
    ) -> None:
        super().__init__()
        self.num_layers, self.layers = int(num_layers), tuple(int(x) for x in layers)
        self.head = ValueHead(2 * hidden_size + 1 + self.num_layers, mlp_size=width)

    def forward_request(self) -> ForwardRequest:
        return ForwardRequest(hidden=True, attention_layers=tuple(range(self.num_layers)))

    def features(self, fwd: ForwardOutput) -> Tensor:
        return tac_features(fwd, self.layers, self.num_layers)

    def metadata(self) -> dict[str, str]:
        return {
            **super().metadata(),
            "layers": ",".join(map(str, self.layers)),
            "features": "layer_norm(h_last), layer_norm(h_middle), kappa, concentration of each layer",
        }


def _standard(hidden_size: int, num_layers: int, params: Mapping[str, Any]) -> Critic:
    return StandardCritic(hidden_size)


def _tac(hidden_size: int, num_layers: int, params: Mapping[str, Any]) -> Critic:
    return TransportAlignedCritic(hidden_size, num_layers, tuple(params.get("layers", ())))


#: critic name -> builder ``(hidden_size, num_layers, provider params) -> Critic``; the ``values`` provider's
#: ``critic`` parameter picks one.
CRITICS = {"standard": _standard, "tac": _tac}


def target_mask_frac(mask: Tensor, policy_mask: Tensor) -> float:
    """The share of policy tokens a critic is fitted on (``critic/target_mask_frac``)."""
    return float(mask.sum() / policy_mask.sum().clamp(min=1))


# -- the provider --------------------------------------------------------------------------------------------------


@register_provider("value_head", signal="values", default=True)
class CriticProvider(SignalProvider):
    """``values`` from the critic ``critic`` (`CRITICS`, module docstring), fitted on the module's returns after
    the actor update.

    Optional parameters: ``critic`` (default ``"standard"``), ``layers``, the decoder layers whose concentration
    is the TAC's ``kappa`` (default: every layer), and ``critic_loss`` (``"mse"`` or ``"bce"``, default
    ``"mse"``).
    """

    optional_params: ClassVar[Mapping[str, Any]] = {"critic": "standard", "layers": (), "critic_loss": "mse"}

    def __init__(self, run: RunContext, params: Mapping[str, Any]) -> None:
        super().__init__(run, params)
        kind, loss = self.params["critic"], self.params["critic_loss"]
        if kind not in CRITICS:
            raise ValueError(f"unknown critic {kind!r}; known critics: {sorted(CRITICS)}")
        if loss not in ("mse", "bce"):
            raise ValueError(f"critic_loss must be 'mse' or 'bce', got {loss!r}")
        config = run.policy.model.config.get_text_config()
        self.critic = CRITICS[kind](int(config.hidden_size), run.policy.num_layers, self.params)
        self.critic.to(run.policy.device)
        self.optimizer = torch.optim.AdamW(self.critic.parameters(), lr=run.cfg.critic_lr)
        self.bce = loss == "bce"

    @property
    def head(self) -> ValueHead:
        """The trained head of the critic."""
        return self.critic.head

    def check(self) -> None:
        n = self.run.policy.num_layers
        bad = [x for x in self.params["layers"] if not -n <= int(x) < n]
        if bad:
            raise ValueError(f"values: layers {bad} out of range for a model with {n} decoder layers")

    def forward_request(self) -> ForwardRequest:
        return self.critic.forward_request()

    @torch.no_grad()
    def compute(self, step: StepContext) -> Tensor:
        fwd = step.behaviour()
        out = self.critic(self.critic.features(fwd)) * fwd.mask
        return torch.sigmoid(out) if self.bce else out

    def update(self, step: StepContext) -> dict[str, float]:
        """Fit the critic on the module's ``returns`` over the policy tokens (`fit`)."""
        returns = None if step.credit_out is None else step.credit_out.returns
        if returns is None:
            raise ValueError(
                "the value head is fitted on the module's returns, but the module returned none: register it "
                "with critic=True and return CreditOutput(advantages, returns)"
            )
        return self.fit(step, returns.detach(), step.policy_mask)

    def fit(
        self, step: StepContext, targets: Tensor, mask: Tensor, weights: Tensor | None = None
    ) -> dict[str, float]:
        """Fit the critic on ``targets`` (B, T) where ``mask`` (B, T) holds, each token's loss times ``weights``
        (B, T) when given, over the behaviour pass's features: ``epochs x minibatches`` AdamW steps in row order
        (the actor's permutation is left alone)."""
        fwd = step.behaviour()
        features, fmask = self.critic.features(fwd), fwd.mask
        kind = "bce" if self.bce else "mse"
        rows_all = torch.arange(features.shape[0], device=features.device)
        out: dict[str, list[float]] = {}
        for _ in range(self.run.cfg.epochs):
            for rows in torch.tensor_split(rows_all, min(self.run.cfg.minibatches, features.shape[0])):
                values = self.critic(features[rows]) * fmask[rows]
                w = None if weights is None else weights[rows]
                loss, metrics = value_loss(values, targets[rows], mask[rows], kind=kind, weights=w)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                average_gradients(list(self.critic.parameters()), self.run.accelerator)
                self.optimizer.step()
                for k, v in metrics.items():
                    out.setdefault(k, []).append(float(v))
        return {"critic/target_mask_frac": target_mask_frac(mask, step.policy_mask)} | {
            k: float(np.mean(v)) for k, v in out.items()
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.kind,
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        saved = state.get("critic", StandardCritic.kind)  # checkpoints from before TAC hold a standard head
        if saved != self.critic.kind:
            raise ValueError(
                f"the checkpoint's critic is {saved!r} but this run's is {self.critic.kind!r}: run with "
                f"critic={saved!r} (e.g. --credit-kw critic={saved}) to continue from it"
            )
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])

    def save(self, folder: Path) -> None:
        self.head.save(folder / VALUE_HEAD_FILE, extra=self.critic.metadata())
