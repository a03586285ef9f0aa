"""Generation backends: who samples the policy's tokens. Hugging Face ``generate`` (CPU, GPU) and vLLM (GPU).

A backend only turns prompts into sampled token ids. It does **not** report log-probabilities: the
:class:`~creditgym.agents.train.policy.Policy` recomputes the behaviour log-probs of every sampled token with one
teacher-forced forward pass of its own model (:meth:`Policy.logprobs`). That costs one extra forward pass (cheap
next to autoregressive decoding), and buys the property the trainer relies on: ``old_logprobs`` are computed by
exactly the code that computes the new ones in the loss, so the importance ratio is 1 before the first update.
Log-probs taken from ``generate``'s scores (or from vLLM, whose kernels and sampler differ from the trainer's)
would carry a small, systematic mismatch into every ratio.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from torch import nn

__all__ = ["Backend", "GenerationBackend", "HFBackend", "Sampling", "VLLMBackend", "truncate_at_stop"]


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


@contextlib.contextmanager
def _rng_from(generator: torch.Generator | None, device: torch.device) -> Iterator[None]:
    """Run the block on torch's global RNG seeded from ``generator``, restoring the global RNG afterwards.

    ``model.generate`` samples with the global RNG and takes no generator, so a seeded ``torch.Generator`` is
    turned into a seed for a forked global RNG: the result is deterministic in the generator's state, and the
    caller's global RNG stream is left untouched. With no generator the global RNG is used as is
    (``torch.manual_seed`` then makes sampling deterministic).
    """
    if generator is None:
        yield
        return
    seed = _seed_from(generator)
    # manual_seed reseeds every CUDA device, so fork (and later restore) all of them.
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@dataclass(frozen=True)
class Sampling:
    """One ``generate`` call's sampling rule, checked (`Backend.generate` builds it)."""

    max_new_tokens: int
    temperature: float
    top_p: float
    stops: list[int]  # sorted, non-empty
    generator: torch.Generator | None


class Backend(abc.ABC):
    """What every backend here shares: argument checks, stop ids, batches of at most ``max_batch_size`` prompts.

    Subclasses implement `_sample` for one batch; ``max_batch_size`` is None for all prompts at once (the trainer
    halves it on out-of-memory).
    """

    max_batch_size: int | None = None

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop_token_ids: Iterable[int],
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """Generated token ids per prompt (see :class:`GenerationBackend`)."""
        _check_sampling(max_new_tokens, temperature, top_p)
        stops = sorted({int(t) for t in stop_token_ids})
        if not stops:
            raise ValueError("stop_token_ids is empty; pass at least the EOS / end-of-turn token id")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        sampling = Sampling(max_new_tokens, float(temperature), float(top_p), stops, generator)
        size = self.max_batch_size or max(len(prompts), 1)
        out: list[list[int]] = []
        for start in range(0, len(prompts), size):
            out.extend(self._sample(prompts[start : start + size], sampling))
        return out

    @abc.abstractmethod
    def _sample(self, prompts: Sequence[Sequence[int]], sampling: Sampling) -> list[list[int]]:
        """Token ids for one batch of prompts, each cut at and including its first stop token."""

    @abc.abstractmethod
    def sync_weights(self, model: nn.Module) -> None:
        """Sample from ``model``'s current weights from now on."""


class HFBackend(Backend):
    """Sampling with Hugging Face ``model.generate``: KV cache, left-padded batches, any device.

    Prompts are left-padded into one batch (``attention_mask`` marks the padding; ``generate`` derives position
    ids from it), so a batch gives the same tokens as one-by-one generation up to floating-point noise. Each
    sequence stops at its first stop token; the batch stops when all have, or at ``max_new_tokens``.

    The backend samples from the very module the trainer updates, so :meth:`sync_weights` has nothing to do.

    Args:
        model: A Hugging Face causal LM (``GenerationMixin``).
        pad_token_id: Id used to pad prompts (never attended to, never returned).
        max_batch_size: Prompts per ``generate`` call (``None``: all at once).
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
    def _sample(self, prompts: Sequence[Sequence[int]], sampling: Sampling) -> list[list[int]]:
        from transformers import GenerationConfig

        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)  # (B, P)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)  # (B, P)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            attention_mask[i, width - len(p) :] = 1
        rule: dict[str, Any] = (
            {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": 0}
            if sampling.temperature > 0
            else {"do_sample": False}
        )
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=sampling.stops,
            pad_token_id=self.pad_token_id,
            use_cache=True,
            **rule,
        )
        # The model's own generation defaults (top_k=50, repetition penalties, ... in generation_config.json)
        # would fill every field left unset here: sample from a blank config instead, so that "temperature and
        # top_p" is the whole sampling rule.
        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig()
        try:
            with _rng_from(sampling.generator, device):
                sequences = self.model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=config,
                )  # (B, P + N)
        finally:
            self.model.generation_config = saved
        new = sequences[:, width:].tolist()
        # A row still running when the batch stopped used the whole budget, so cutting at the first stop token
        # (and dropping the padding written after it) recovers every row exactly.
        return [truncate_at_stop(row, sampling.stops) for row in new]


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

    def _sample(self, prompts: Sequence[Sequence[int]], sampling: Sampling) -> list[list[int]]:
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
        return result

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
