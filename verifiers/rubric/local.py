"""Localized rubric checks that IFEval lacks, registered with :func:`~creditgym.verifiers.rubric.register_checker`.

``local:first_sentence_keyword`` (kwarg ``keyword``): the keyword appears, as a whole word (an ``s`` or ``es``
plural allowed, any case), in the response's first sentence. The first sentence starts after leading whitespace
and after a leading title line (``<<title>>``, which is not a sentence, even after the opening quote of a quoted
response) and runs to the first ``.``, ``!`` or ``?``
followed by whitespace or the end (closing quotes and brackets included), or to the first line break, whichever
comes first. A response with neither has no complete first sentence and fails: otherwise dropping every full stop
would make the whole response its "first sentence".

Spans, like the IFEval checks' (``_rubric_ifeval._spans``): the keyword's occurrence when the check passes; the
first sentence (where the keyword is missing) when it fails; none when there is no first sentence.
"""

from __future__ import annotations

import re

from creditgym.verifiers.rubric.grade import register_checker

Span = tuple[int, int]

FIRST_SENTENCE_KEYWORD = "local:first_sentence_keyword"
_TITLE_LINE = re.compile(r"\s*[\"']?<<[^\n<>]+>>[ \t]*(?:\n|$)")  # also inside a response-wide quotation
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s|$)|\n")


def first_sentence(response: str) -> Span | None:
    """``(start, end)`` of the first sentence of ``response`` (see the module docstring), or ``None``."""
    title = _TITLE_LINE.match(response)
    start = title.end() if title else 0
    while start < len(response) and response[start].isspace():
        start += 1
    end = _SENTENCE_END.search(response, start)
    if end is None or start >= len(response):
        return None
    return start, end.start() if end.group() == "\n" else end.end()


def _keyword_pattern(keyword: object) -> re.Pattern[str]:
    if not isinstance(keyword, str) or not re.fullmatch(r"\w+(?:[ '-]\w+)*", keyword):
        raise ValueError(
            f"kwarg 'keyword' must be a word (letters, digits, inner spaces or hyphens), got {keyword!r}"
        )
    return re.compile(rf"(?<!\w){re.escape(keyword)}(?:s|es)?(?!\w)", re.IGNORECASE)


@register_checker(
    FIRST_SENTENCE_KEYWORD,
    description='Include the keyword "{keyword}" in the first sentence of your response.',
)
def first_sentence_keyword(response: str, *, keyword: str) -> tuple[float, Span | None]:
    """1.0 with the keyword's span if the first sentence holds ``keyword``; else 0.0 with the sentence's span."""
    pattern = _keyword_pattern(keyword)
    sentence = first_sentence(response)
    if sentence is None:
        return 0.0, None
    found = pattern.search(response, *sentence)
    if found is None:
        return 0.0, sentence
    return 1.0, found.span()
