"""Tokenizers for token-level envs: the bundled one, any Hugging Face fast tokenizer, and chat rendering."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from creditgym.installation import bundled_assets

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SPECIAL_TOKENS: dict[str, str] = {
    "pad": "<|pad|>",
    "endoftext": "<|endoftext|>",
    "bos_turn": "<|im_start|>",
    "eos": "<|im_end|>",
}

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

BUNDLED = "creditgym/tiny"
#: The bundled model's folder (package data of ``creditgym``): its tokenizer is the bundled one. Importing this
#: module under a stray ``creditgym`` folder that shadows the package raises `ShadowedPackage`, naming the folder.
ASSETS = bundled_assets()

# End-of-turn markers of common chat models; any of them present in a vocabulary ends a policy turn.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>")


def load_tokenizer(name_or_path: str | os.PathLike[str] = BUNDLED) -> PreTrainedTokenizerBase:
    """The bundled tokenizer (``"creditgym/tiny"``), a named model's (``"smollm2-135m"``, `creditgym.models`), or
    any Hugging Face tokenizer by local path or hub name."""
    return _load(str(name_or_path))


@lru_cache(maxsize=8)
def _load(name_or_path: str) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from creditgym.models import resolve_model

    if name_or_path == BUNDLED:
        return PreTrainedTokenizerFast.from_pretrained(str(ASSETS))
    return AutoTokenizer.from_pretrained(resolve_model(name_or_path))  # a named model: its cached folder


def same_tokenizer(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Whether two tokenizers make the same ids and chat turns: vocabulary, chat template, EOS and pad."""
    return a is b or (
        a.get_vocab() == b.get_vocab()
        and a.chat_template == b.chat_template
        and (a.eos_token_id, a.pad_token_id) == (b.eos_token_id, b.pad_token_id)
    )


def resolve_tokenizer(tokenizer: str | os.PathLike[str] | PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer)
    if not hasattr(tokenizer, "convert_tokens_to_ids"):
        raise TypeError(f"expected a Hugging Face tokenizer or a name/path, got {type(tokenizer).__name__}")
    return tokenizer


def vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """Number of token ids the tokenizer can produce (base vocabulary plus added tokens)."""
    return len(tokenizer)


def default_stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Token ids that end a policy turn: the EOS token and every known end-of-turn marker in the vocabulary."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids.update(int(vocab[t]) for t in END_OF_TURN_TOKENS if t in vocab)
    if not ids:
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no EOS or end-of-turn token; "
            "pass stop_token_ids=... to the env"
        )
    return frozenset(ids)


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, str]],
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template.

    Raises:
        ValueError: the tokenizer has no chat template; the message names the fix.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template. Set one before making "
            "the env, e.g. `tokenizer.chat_template = creditgym.envs.tokenizer.CHATML_TEMPLATE` "
            "(ChatML), or use a chat/instruct model's tokenizer"
        )
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_prompt(
    tokenizer: PreTrainedTokenizerBase, content: str, *, system_prompt: str | None = None
) -> list[int]:
    """Token ids of a one-turn prompt: an optional system turn, the user turn ``content``, the assistant header."""
    messages = [{"role": "user", "content": content}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return render_chat(tokenizer, messages)
