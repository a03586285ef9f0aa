"""IFEval's 25 instruction checkers (from ``if-verifiable``), made offline-safe, quiet and span-aware.

Nothing here imports ``if_verifiable`` (about 0.8 s, it pulls in ``datasets``) or touches nltk until a checker is
first used. At that point :func:`_ifeval` applies two process-wide fixes once:

- **nltk offline**: ``length_constraints:number_sentences`` and ``change_case:capital_word_frequency`` load the
  ``punkt`` data, which is not available offline. We give if-verifiable an untrained Punkt tokenizer (needs no
  data) and a ``word_tokenize`` that skips the punkt sentence split. Sentence counts can run one higher than
  official IFEval after abbreviations such as "Dr." (see ``shared/reference/offline_libs.md`` section 3). Only
  if-verifiable's view of nltk is changed; ``nltk.word_tokenize`` itself is left alone.
- **langdetect determinism**: ``langdetect.DetectorFactory.seed = 0``, so the three language checks give the same
  answer for the same text in every run (langdetect samples at random otherwise).

The three langdetect-based checks are re-implemented here with if-verifiable's exact rule (an undetectable text
counts as followed) but without its ``logging.error`` call, which prints the whole response.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import types
from collections.abc import Mapping
from typing import Any

Span = tuple[int, int]

# id -> {kwarg: allowed python types}; every listed kwarg is required (if-verifiable would draw a missing one at
# random, which would make the rubric non-deterministic).
SCHEMAS: dict[str, dict[str, tuple[type, ...]]] = {
    "keywords:existence": {"keywords": (list, tuple)},
    "keywords:frequency": {"keyword": (str,), "frequency": (int,), "relation": (str,)},
    "keywords:forbidden_words": {"forbidden_words": (list, tuple)},
    "keywords:letter_frequency": {"letter": (str,), "let_frequency": (int,), "let_relation": (str,)},
    "language:response_language": {"language": (str,)},
    "length_constraints:number_sentences": {"num_sentences": (int,), "relation": (str,)},
    "length_constraints:number_paragraphs": {"num_paragraphs": (int,)},
    "length_constraints:number_words": {"num_words": (int,), "relation": (str,)},
    "length_constraints:nth_paragraph_first_word": {
        "num_paragraphs": (int,),
        "nth_paragraph": (int,),
        "first_word": (str,),
    },
    "detectable_content:number_placeholders": {"num_placeholders": (int,)},
    "detectable_content:postscript": {"postscript_marker": (str,)},
    "detectable_format:number_bullet_lists": {"num_bullets": (int,)},
    "detectable_format:constrained_response": {},
    "detectable_format:number_highlighted_sections": {"num_highlights": (int,)},
    "detectable_format:multiple_sections": {"section_spliter": (str,), "num_sections": (int,)},
    "detectable_format:json_format": {},
    "detectable_format:title": {},
    "combination:two_responses": {},
    "combination:repeat_prompt": {"prompt_to_repeat": (str,)},
    "startend:end_checker": {"end_phrase": (str,)},
    "change_case:capital_word_frequency": {"capital_frequency": (int,), "capital_relation": (str,)},
    "change_case:english_capital": {},
    "change_case:english_lowercase": {},
    "punctuation:no_comma": {},
    "startend:quotation": {},
}
IFEVAL_IDS: tuple[str, ...] = tuple(SCHEMAS)
RELATIONS = ("less than", "at least")
_RELATION_KWARGS = ("relation", "let_relation", "capital_relation")
_LANGDETECT_IDS = (
    "language:response_language",
    "change_case:english_capital",
    "change_case:english_lowercase",
)

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _ifeval() -> types.ModuleType:
    """``if_verifiable.ifeval.instructions_registry``, imported and patched for offline use on first call."""
    registry = _state.get("registry")
    if registry is not None:
        return registry
    with _lock:
        if "registry" not in _state:
            import langdetect
            import nltk
            from if_verifiable.ifeval import instructions_registry
            from if_verifiable.ifeval import instructions_util as iu

            punkt = nltk.tokenize.PunktSentenceTokenizer()  # untrained: needs no data files
            iu._get_sentence_tokenizer = lambda: punkt
            iu.nltk = types.SimpleNamespace(
                tokenize=nltk.tokenize,
                word_tokenize=functools.partial(nltk.tokenize.word_tokenize, preserve_line=True),
            )
            langdetect.DetectorFactory.seed = 0
            _state["langdetect"] = langdetect
            _state["registry"] = instructions_registry
        return _state["registry"]


def validate(criterion_id: str, kwargs: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the criterion and the kwarg when ``kwargs`` do not fit the checker."""
    schema = SCHEMAS[criterion_id]
    for name in kwargs:
        if name not in schema:
            expected = sorted(schema) or "no kwargs"
            raise ValueError(f"criterion {criterion_id!r}: unknown kwarg {name!r}; it takes {expected}")
    for name, types_ in schema.items():
        if name not in kwargs:
            raise ValueError(
                f"criterion {criterion_id!r}: missing kwarg {name!r} (it takes {sorted(schema)})"
            )
        value = kwargs[name]
        if not isinstance(value, types_) or isinstance(value, bool):
            want = " or ".join(t.__name__ for t in types_)
            raise ValueError(
                f"criterion {criterion_id!r}: kwarg {name!r} must be {want}, got {type(value).__name__} {value!r}"
            )
        if name in _RELATION_KWARGS and value not in RELATIONS:
            raise ValueError(
                f"criterion {criterion_id!r}: kwarg {name!r} must be one of {RELATIONS}, got {value!r}"
            )
        if isinstance(value, (list, tuple)) and not (value and all(isinstance(v, str) and v for v in value)):
            raise ValueError(
                f"criterion {criterion_id!r}: kwarg {name!r} must be a non-empty list of strings"
            )
        if isinstance(value, int) and value < 0:
            raise ValueError(f"criterion {criterion_id!r}: kwarg {name!r} must be >= 0, got {value}")
    if criterion_id == "language:response_language":
        from if_verifiable.ifeval.instructions_util import LANGUAGE_CODES

        if kwargs["language"] not in LANGUAGE_CODES:
            raise ValueError(
                f"criterion {criterion_id!r}: kwarg 'language' must be an ISO 639-1 code among "
                f"{sorted(LANGUAGE_CODES)}, got {kwargs['language']!r}"
            )
    if criterion_id == "keywords:letter_frequency" and not re.fullmatch(r"[A-Za-z]", kwargs["letter"]):
        raise ValueError(
            f"criterion {criterion_id!r}: kwarg 'letter' must be one ASCII letter, got {kwargs['letter']!r}"
        )
    for name in ("keywords", "keyword", "forbidden_words"):
        for word in [kwargs[name]] if isinstance(kwargs.get(name), str) else kwargs.get(name, ()):
            try:
                re.compile(word)  # IFEval uses keywords as regular expressions
            except re.error as e:
                raise ValueError(
                    f"criterion {criterion_id!r}: kwarg {name!r}: {word!r} is not a valid regex ({e})"
                ) from e


def _freeze(kwargs: Mapping[str, Any]) -> str:
    return json.dumps(kwargs, sort_keys=True, default=list)


@functools.lru_cache(maxsize=4096)
def _instruction(criterion_id: str, frozen: str) -> tuple[Any, str]:
    registry = _ifeval()
    instruction = registry.INSTRUCTION_DICT[criterion_id](criterion_id)
    description = instruction.build_description(**json.loads(frozen))
    return instruction, description


def describe(criterion_id: str, kwargs: Mapping[str, Any]) -> str:
    """IFEval's own human-readable text of the instruction (``build_description``)."""
    return _instruction(criterion_id, _freeze(kwargs))[1]


def _detect(text: str) -> str | None:
    langdetect = _state["langdetect"]
    try:
        return str(langdetect.detect(text))
    except langdetect.LangDetectException:
        return None  # IFEval counts an undetectable language as followed


def _passes(criterion_id: str, instruction: Any, kwargs: Mapping[str, Any], response: str) -> bool:
    if criterion_id == "language:response_language":
        lang = _detect(response)
        return lang is None or lang == kwargs["language"]
    if criterion_id == "change_case:english_capital":
        lang = _detect(response) if response.isupper() else "no"
        return response.isupper() and (lang is None or lang == "en")
    if criterion_id == "change_case:english_lowercase":
        lang = _detect(response) if response.islower() else "no"
        return response.islower() and (lang is None or lang == "en")
    return bool(instruction.check_following(response))


def _all(pattern: str, text: str, flags: int = 0, limit: int = 64) -> list[Span]:
    out = []
    for m in re.finditer(pattern, text, flags):
        out.append((m.start(), m.end()))
        if len(out) >= limit:
            break
    return out


def _spans(criterion_id: str, kwargs: Mapping[str, Any], text: str, passed: bool) -> list[Span]:
    """Character spans the verdict rests on (found keywords, the ending, the JSON block, ...); [] if none."""
    ci = re.IGNORECASE
    if criterion_id == "keywords:existence":
        return [s for k in sorted(kwargs["keywords"]) for s in _all(k, text, ci, 1)]
    if criterion_id == "keywords:frequency":
        return _all(kwargs["keyword"].strip(), text, ci)
    if criterion_id == "keywords:forbidden_words":
        return [
            s for w in sorted(set(kwargs["forbidden_words"])) for s in _all(r"\b" + w + r"\b", text, ci, 8)
        ]
    if criterion_id == "length_constraints:nth_paragraph_first_word":
        start = 0
        for i, para in enumerate(text.split("\n\n")):
            m = re.search(r"\S+", para)
            if i + 1 == kwargs["nth_paragraph"]:
                return [(start + m.start(), start + m.end())] if m else []
            start += len(para) + 2
        return []
    if criterion_id == "detectable_content:number_placeholders":
        return _all(r"\[[^\[\]\n]*\]", text)
    if criterion_id == "detectable_content:postscript":
        marker = kwargs["postscript_marker"].strip()
        pattern = {"P.P.S": r"p\.\s?p\.\s?s", "P.S.": r"p\.\s?s\."}.get(marker, re.escape(marker.lower()))
        return _all(pattern + r"[^\n]*", text, ci, 1)
    if criterion_id == "detectable_format:number_bullet_lists":
        return _all(r"^[ \t]*(?:\*[^*\n]|-)[^\n]*", text, re.MULTILINE)
    if criterion_id == "detectable_format:constrained_response":
        options = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
        return [(i, i + len(o)) for o in options if (i := text.find(o)) >= 0][:1]
    if criterion_id == "detectable_format:number_highlighted_sections":
        return _all(r"\*\*[^\n*]*\*\*|\*[^\n*]*\*", text)
    if criterion_id == "detectable_format:multiple_sections":
        return _all(re.escape(kwargs["section_spliter"].strip()) + r"\s?\d+", text)
    if criterion_id == "detectable_format:title":
        return _all(r"<<[^\n<>]+>>", text, 0, 1)
    if criterion_id == "combination:two_responses":
        return _all(r"\*{6}", text, 0, 4)
    if criterion_id == "combination:repeat_prompt" and passed:
        start = len(text) - len(text.lstrip())
        return [(start, start + len(kwargs["prompt_to_repeat"].strip()))]
    if (
        criterion_id in ("startend:end_checker", "startend:quotation", "detectable_format:json_format")
        and passed
    ):
        if criterion_id == "startend:end_checker":  # IFEval strips whitespace, then quotes
            end = len(text.rstrip().rstrip('"'))
            return [(end - len(kwargs["end_phrase"].strip()), end)]
        return [(len(text) - len(text.lstrip()), len(text.rstrip()))]
    if criterion_id == "punctuation:no_comma" and not passed:
        return _all(",", text, 0, 8)
    return []


def check(criterion_id: str, kwargs: Mapping[str, Any], response: str) -> tuple[float, list[Span]]:
    """Score (1.0 passed, 0.0 failed) and evidence spans of one IFEval criterion on ``response``."""
    instruction, _ = _instruction(criterion_id, _freeze(kwargs))
    if criterion_id in _LANGDETECT_IDS:
        _ifeval()
    passed = _passes(criterion_id, instruction, kwargs, response)
    try:
        spans = _spans(criterion_id, kwargs, response, passed)
    except (re.error, IndexError):
        spans = []
    return (1.0 if passed else 0.0), spans


#: What ``check_many`` gives for a criterion whose checker ran past a time limit of its own (nltk's tokenizers run
#: every regex under ``nltk.redos``'s wall-clock limit and raise ``TimeoutError``): the response's fault, like the
#: pool's deadline, so it scores 0 as a timeout, never a dropped ``infra_error``.
TIMED_OUT = "timeout"


def check_many(item: tuple[str, list[tuple[str, str]]]) -> list[tuple[float, list[Span]] | str]:
    """Pool entry point: ``(response, [(criterion_id, kwargs_json), ...])`` -> one ``check`` result each, or
    `TIMED_OUT` for a criterion whose checker raised ``TimeoutError``."""
    response, criteria = item
    results: list[tuple[float, list[Span]] | str] = []
    for cid, kw in criteria:
        try:
            results.append(check(cid, json.loads(kw), response))
        except TimeoutError:
            results.append(TIMED_OUT)
    return results


# One value per kwarg type, enough for every checker to run once (the language checks load langdetect's profiles).
_WARM_UP_KWARGS: dict[type, Any] = {list: ["word"], str: "at least", int: 1}


def warm_up() -> None:
    """Import and patch if-verifiable and run every checker once (the rubric fork server calls this at start)."""
    _ifeval()
    text = "Hello world. This is a short warm-up text, with a comma.\n\nA second paragraph [here]."
    for criterion_id, schema in SCHEMAS.items():
        kwargs = {name: _WARM_UP_KWARGS[types_[0]] for name, types_ in schema.items()}
        kwargs.update({"language": "en", "letter": "a", "section_spliter": "Section"})
        kwargs = {name: value for name, value in kwargs.items() if name in schema}
        try:
            check(criterion_id, kwargs, text)
        except Exception:  # a warm-up failure must never stop the server; the real call reports it
            continue
