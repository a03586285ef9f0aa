"""Generation backends: who samples the policy's tokens. Hugging Face models (a KV-cached decode loop; CPU, GPU)
and vLLM (GPU).

The Hugging Face backend reports the behaviour log-prob of every token it samples, read off the logits it drew the
token from (:class:`Sampled`): the trainer's ``old_logprobs`` then cost no forward pass of their own. They agree
with the trainer's teacher-forced pass to float noise (a cached decode and a full pass sum in different orders;
``tests/agents/test_policy.py`` bounds the gap), so the importance ratio before the first update is 1 to that
noise, which the PPO clip and the DIS truncation never see. vLLM's kernels and sampler differ from the trainer's,
so its tokens are rescored by the policy's own pass (:meth:`Policy.logprobs`) instead.
"""

from __future__ import annotations

import abc
import inspect
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "Backend",
    "Decoding",
    "GenerationBackend",
    "HFBackend",
    "Sampled",
    "VLLMBackend",
    "truncate_at_stop",
]


@runtime_checkable
class GenerationBackend(Protocol):
    """Samples continuations of token-id prompts.

    ``generate`` returns, for each prompt, the generated token ids: they end at and include the first token in
    ``stop_token_ids``, or stop at ``max_new_tokens``. ``temperature == 0`` means greedy decoding. Sampling is from
    the model's next-token distribution divided by ``temperature`` and cut to the ``top_p`` nucleus; no other
    processing (no top-k, no repetition penalty, whatever the model's ``generation_config.json`` says).

    ``sync_weights(model)`` makes the backend sample from ``model``'s current weights (a no-op for a backend that
    samples from the trainer's own module).
    """

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        stop_token_ids: Iterable[int],
        generator: torch.Generator | None,
    ) -> list[list[int]]: ...

    def sync_weights(self, model: nn.Module) -> None: ...


def truncate_at_stop(tokens: Sequence[int], stop_token_ids: Iterable[int]) -> list[int]:
    """``tokens`` up to and including the first stop token (all of them if there is none)."""
    stops = set(stop_token_ids)
    out = []
    for t in tokens:
        out.append(int(t))
        if t in stops:
            break
    return out


def _check_sampling(max_new_tokens: int, temperature: float, top_p: float) -> None:
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _seed_from(generator: torch.Generator) -> int:
    """A 63-bit seed drawn from ``generator`` (advances it, so successive calls differ)."""
    return int(torch.randint(0, 2**63 - 1, (1,), generator=generator, device=generator.device).item())


@dataclass(frozen=True)
class Decoding:
    """One ``generate`` call's decoding rule, checked (`Backend.generate` builds it): the run's sampling
    (`creditgym.agents.train.sampling.Sampling`, passed as keywords) with this call's budget and stop ids."""

    max_new_tokens: int
    temperature: float
    top_p: float
    stops: list[int]  # sorted; empty: no stop token
    generator: torch.Generator | None


@dataclass
class Sampled:
    """A batch's generated token ids and, from a backend that reads them off its own decode, their log-probs.

    ``logprobs[i]`` is a float32 CPU tensor of ``len(tokens[i])``: ``log p(token)`` under the model at
    temperature 1 with no top-p; ``None`` when the backend cannot report them exactly (vLLM: its kernels differ
    from the trainer's, so the policy rescores).
    """

    tokens: list[list[int]]
    logprobs: list[torch.Tensor] | None = None


class Backend(abc.ABC):
    """What every backend here shares: argument checks, stop ids, batches of at most ``max_batch_size`` prompts.

    Subclasses implement `_sample` for one batch; ``max_batch_size`` is None for all prompts at once (the trainer
    halves it on out-of-memory).
    """

    max_batch_size: int | None = None

    def generate(self, prompts: Sequence[Sequence[int]], **sampling: Any) -> list[list[int]]:
        """Generated token ids per prompt (see :class:`GenerationBackend`; ``sampling``: `generate_scored`'s)."""
        return self.generate_scored(prompts, **sampling).tokens

    def generate_scored(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_token_ids: Iterable[int],
        generator: torch.Generator | None = None,
    ) -> Sampled:
        """`generate`'s tokens with their log-probs where the backend has them (see :class:`Sampled`)."""
        _check_sampling(max_new_tokens, temperature, top_p)
        stops = sorted(
            {int(t) for t in stop_token_ids}
        )  # empty: every response runs max_new_tokens (Planted-v0)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        sampling = Decoding(max_new_tokens, float(temperature), float(top_p), stops, generator)
        size = self.max_batch_size or max(len(prompts), 1)
        parts = [self._sample(prompts[lo : lo + size], sampling) for lo in range(0, len(prompts), size)]
        tokens = [t for part in parts for t in part.tokens]
        if any(part.logprobs is None for part in parts):
            return Sampled(tokens)
        return Sampled(tokens, [lp for part in parts for lp in part.logprobs or []])

    @abc.abstractmethod
    def _sample(self, prompts: Sequence[Sequence[int]], sampling: Decoding) -> Sampled:
        """Token ids (and log-probs, if the backend has them) for one batch, each cut at its first stop token."""

    @abc.abstractmethod
    def sync_weights(self, model: nn.Module) -> None:
        """Sample from ``model``'s current weights from now on."""


class HFBackend(Backend):
    """Sampling from a Hugging Face causal LM with its KV cache, in left-padded batches, on any device.

    A decode loop of its own (what ``model.generate`` does for plain sampling, minus its general machinery): one
    prefill pass over the left-padded prompts (``attention_mask`` marks the padding, position ids follow from it;
    identical prompts, such as a group's or a probe start's forks, are prefilled once and their cache rows copied),
    then one cached forward pass per new token for the rows still running. A row that samples a stop token leaves
    the batch (its cache rows are dropped), so the passes shrink as rows finish where ``generate`` would keep
    computing them. Each sampled token's log-prob under the model's own distribution (temperature 1, no top-p) is
    read from the logits it was drawn from: :meth:`generate_scored` returns them, and
    :meth:`~creditgym.agents.train.policy.Policy.sample` takes them instead of a second, teacher-forced pass
    (they agree with that pass to float noise: ``tests/agents/test_policy.py``).

    Sampling: logits / temperature, cut to the ``top_p`` nucleus, drawn from a generator seeded by one draw of
    ``generator`` (the global RNG without one) exactly as ``model.generate`` draws, so a seed gives the tokens it
    gave; ``temperature == 0`` is argmax. The model's ``generation_config.json`` is never read. The
    backend samples from the very module the trainer updates, so :meth:`sync_weights` has nothing to copy.

    Args:
        model: A Hugging Face causal LM.
        pad_token_id: Id used to pad prompts (never attended to, never returned).
        max_batch_size: Prompts per decode batch (``None``: all at once).
    """

    def __init__(self, model: nn.Module, *, pad_token_id: int, max_batch_size: int | None = None) -> None:
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1 or None, got {max_batch_size}")
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = max_batch_size

    def sync_weights(self, model: nn.Module) -> None:
        """Sample from ``model`` from now on (normally the same module already: nothing to copy)."""
        self.model = model

    @torch.no_grad()
    def _sample(self, prompts: Sequence[Sequence[int]], sampling: Decoding) -> Sampled:
        device = next(self.model.parameters()).device
        n = len(prompts)
        unique: dict[tuple[int, ...], int] = {}
        source = torch.tensor(
            [unique.setdefault(tuple(p), len(unique)) for p in prompts], device=device
        )  # (B,)
        logits, cache, att, pos = self._prefill([list(p) for p in unique], device)
        shrink = can_copy_rows(cache)
        if (
            len(unique) < n and shrink
        ):  # identical prompts (a group's, a probe start's forks) share one prefill
            cache.batch_select_indices(source)
            logits, att, pos = logits[source], att[source], pos[source]
        elif len(unique) < n:  # a cache whose rows cannot be copied: prefill every row
            logits, cache, att, pos = self._prefill([list(p) for p in prompts], device)
        cache_name = cache_arg(self.model)
        rows = torch.arange(n, device=device)  # batch row -> prompt index
        nxt_pos = pos[:, -1:] + 1  # (B, 1)
        stops = torch.tensor(sampling.stops, device=device)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        running = torch.ones(n, dtype=torch.bool, device=device)  # rows kept without shrinking
        rng = _fresh_generator(sampling.generator, device)
        for step in range(sampling.max_new_tokens):
            logp = torch.log_softmax(logits.float(), dim=-1)  # (b, V)
            token = _draw(logits.float(), sampling, rng, rows, n)  # (b,)
            lp = logp.gather(-1, token[:, None])[:, 0]  # (b,)
            stopped = torch.isin(token, stops)
            for r, t, v, live in zip(
                rows.tolist(), token.tolist(), lp.tolist(), running.tolist(), strict=True
            ):
                if live:
                    tokens[r].append(t)
                    logps[r].append(v)
            running = running & ~stopped
            if step + 1 == sampling.max_new_tokens or not running.any():
                break
            if shrink and not running.all():
                keep = running.nonzero()[:, 0]
                cache.batch_select_indices(keep)
                rows, token, att, nxt_pos = rows[keep], token[keep], att[keep], nxt_pos[keep]
                running = running[keep]
            att = torch.cat([att, torch.ones_like(att[:, :1])], dim=1)
            step_in = {
                "input_ids": token[:, None],
                "attention_mask": att,
                "position_ids": nxt_pos,
                cache_name: cache,
            }
            out = self.model(**step_in, use_cache=True)
            cache, logits, nxt_pos = cache_of(out), out.logits[:, -1], nxt_pos + 1
        return Sampled(tokens, [torch.tensor(v, dtype=torch.float32) for v in logps])

    def _prefill(
        self, prompts: list[list[int]], device: torch.device
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """One pass over the left-padded ``prompts``: last logits ``(B, V)``, KV cache, attention mask and
        position ids ``(B, P)``."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)  # (B, P)
        att = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, P)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.as_tensor(p, dtype=torch.long)
            att[i, width - len(p) :] = 1
        ids, att = ids.to(device), att.to(device)
        pos = (att.cumsum(-1) - 1).clamp_min(0)  # (B, P)
        extra = {"logits_to_keep": 1} if _takes(self.model, "logits_to_keep") else {}
        out = self.model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, **extra)
        return out.logits[:, -1], cache_of(out), att, pos


def _takes(model: nn.Module, name: str) -> bool:
    """Whether ``model.forward`` has a parameter ``name``."""
    return name in inspect.signature(model.forward).parameters


def cache_arg(model: nn.Module) -> str:
    """The name ``model.forward`` takes a KV cache under (``cache`` in transformers >= 5, ``past_key_values``)."""
    return "cache" if _takes(model, "cache") else "past_key_values"


def cache_of(out: Any) -> Any:
    """The KV cache a forward pass returned (``cache`` in transformers >= 5, ``past_key_values`` before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def can_copy_rows(cache: Any) -> bool:
    """Whether ``cache``'s rows can be selected, copied or dropped (a plain dynamic cache of full-attention layers)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return type(cache) is DynamicCache and bool(layers) and all(type(x) is DynamicLayer for x in layers)


def _fresh_generator(generator: torch.Generator | None, device: torch.device) -> torch.Generator | None:
    """A generator seeded from ``generator`` (one draw, as every call of this backend has taken), or None."""
    if generator is None:
        return None
    return torch.Generator(device=device).manual_seed(_seed_from(generator))


def _draw(
    logits: torch.Tensor, sampling: Decoding, rng: torch.Generator | None, rows: torch.Tensor, n: int
) -> torch.Tensor:
    """One token for each of the ``(b, V)`` float logits' rows (``rows``: their places in a batch of ``n``).

    Temperature, then the nucleus as Hugging Face's ``TopPLogitsWarper`` cuts it (the top token always stays),
    then ``torch.multinomial``'s own one-sample rule, ``argmax(p / q)`` with ``q ~ Exp(1)`` drawn for the
    whole batch of ``n`` rows every step: finished rows that left the batch still take their share of the
    stream, so a seed draws the tokens ``model.generate`` drew from it (which samples every row to the end).
    """
    if sampling.temperature == 0:
        return logits.argmax(-1)
    scores = logits / sampling.temperature
    if sampling.top_p < 1:
        ordered, order = torch.sort(scores, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - sampling.top_p
        drop[:, -1] = False
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    probs = scores.softmax(-1)
    noise = torch.empty((n, probs.shape[1]), dtype=probs.dtype, device=probs.device).exponential_(
        1, generator=rng
    )
    return (probs / noise[rows]).argmax(-1)


class VLLMBackend(Backend):
    """Sampling with vLLM on a GPU, in the trainer's process (tensor parallel size 1).

    ``vllm`` is imported here, in the constructor, never at module import, so creditgym works without it. The
    engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless already set), which lets
    :meth:`sync_weights` hand the trainer's tensors to vLLM's ``load_weights`` without serialising them.

    Not tested in CI (no GPU there): ``examples/gpu_check.py`` exercises it on a GPU machine.

    Args:
        model_path: A local Hugging Face model folder (e.g. one written by ``Policy.save``); nothing is downloaded.
        gpu_memory_utilization: Share of GPU memory vLLM may take (the trainer needs the rest).
        dtype: vLLM dtype (``"auto"``, ``"bfloat16"``, ``"float32"``, ...).
        seed: Engine seed.
        **llm_kwargs: Passed to ``vllm.LLM`` (``max_model_len``, ``enforce_eager``, ...).

    Raises:
        ImportError: vLLM is not installed (install the ``gpu`` extra).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        gpu_memory_utilization: float = 0.3,
        dtype: str = "auto",
        seed: int = 0,
        **llm_kwargs: Any,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
        except ImportError as e:
            raise ImportError(
                "the vLLM backend needs vllm, which is not installed: pip install 'creditgym[gpu]' "
                "(on a machine with a CUDA GPU), or use the Hugging Face backend (HFBackend)"
            ) from e
        self._vllm = vllm
        kwargs: dict[str, Any] = {
            "model": str(model_path),
            "tokenizer": str(model_path),
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "seed": seed,
            "tensor_parallel_size": 1,
            # Ignore the model's generation_config.json defaults (top_k, repetition penalty...): sampling is exactly
            # the SamplingParams built in generate().
            "generation_config": "vllm",
            "enable_prefix_caching": True,
        }
        kwargs.update(llm_kwargs)
        self.llm = vllm.LLM(**kwargs)

    def _sample(self, prompts: Sequence[Sequence[int]], sampling: Decoding) -> Sampled:
        """One seed per request drawn from ``sampling.generator`` makes a call deterministic in its state."""
        generator, stops = sampling.generator, sampling.stops
        base_seed = _seed_from(generator) if generator is not None else None
        params = [
            self._vllm.SamplingParams(
                n=1,
                max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p if sampling.temperature > 0 else 1.0,
                stop_token_ids=stops,
                seed=None if base_seed is None else (base_seed + i) % (2**63 - 1),
                skip_special_tokens=False,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        requests = [{"prompt_token_ids": [int(t) for t in p]} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        result = []
        for out in outputs:
            completion = out.outputs[0]
            tokens = [int(t) for t in completion.token_ids]
            # vLLM keeps a sampled stop token in token_ids; should a version drop it, put it back from stop_reason.
            if (
                completion.finish_reason == "stop"
                and isinstance(completion.stop_reason, int)
                and (not tokens or tokens[-1] not in stops)
            ):
                tokens.append(int(completion.stop_reason))
            result.append(truncate_at_stop(tokens, stops))
        return Sampled(result)

    @torch.no_grad()
    def sync_weights(self, model: nn.Module) -> None:
        """Load ``model``'s current weights into the engine and drop its prefix cache (stale KV).

        Uses ``LLM.apply_model`` (vLLM >= 0.9) to call the vLLM model's ``load_weights`` with the trainer's
        ``(name, tensor)`` pairs in Hugging Face naming; older versions reach the model through
        ``llm_engine.model_executor.driver_worker``. Tensor parallel size 1 only.
        """
        weights = list(model.state_dict().items())

        def load(vllm_model: nn.Module) -> None:
            vllm_model.load_weights(weights=weights)  # type: ignore[operator]

        if hasattr(self.llm, "apply_model"):
            self.llm.apply_model(load)
        else:  # vLLM < 0.9 (V0 engine)
            load(self.llm.llm_engine.model_executor.driver_worker.model_runner.model)
        self.llm.reset_prefix_cache()
