"""Pure-string answer extraction for :mod:`creditgym.verifiers.math` (no sympy, no math-verify).

Everything here is plain ``re`` and string work, linear in the length of the response, so the parent process
can import it cheaply (to normalise golds and validate inputs) and workers can run it before any sympy call.

The rules, in priority order (the first that finds something decides):

1. ``boxed``: the **last** top-level ``\\boxed{...}`` / ``\\fbox{...}``, braces matched by hand (escaped
   ``\\{`` ``\\}`` do not count). A run of boxes separated only by connectors ("or", ",", "and", "/", ";",
   ``\\text{ or }``, ``\\quad``, ``$``...) is one *group* of final answers (see :func:`final_box_group`).
2. ``gsm8k``: the text after the last ``####``.
3. ``answer_is``: "The (final) answer is N", "Answer: N" (the last one whose text looks mathematical).
4. ``fallback``: math-verify's own extraction over the tail of the response (done by the worker).

Multiple choice (gold is a single letter A-J) uses :func:`extract_choice` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "TEST_HOOK_PREFIX",
    "Answer",
    "Box",
    "Extraction",
    "choice_letter",
    "clean_answer_text",
    "extract",
    "extract_choice",
    "final_box_group",
    "find_boxes",
    "gold_answer",
    "listed_before",
    "short_repr",
    "split_alternatives",
]

#: Golds starting with this run a misbehaving test hook in the worker (sleep, spin, self-kill), only when
#: ``CREDITGYM_TEST_HOOKS=1`` is set in the worker's environment; otherwise they are ordinary (bad) golds.
TEST_HOOK_PREFIX = "__creditgym_test_hook__:"

# One token of a brace scan: a box opener, an escaped character (``\{``, ``\\``), or a brace.
_SCAN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{|\\.|[{}]", re.S)

# Regexes below avoid adjacent optional whitespace runs ("\s*(?:x)?\s*"), which backtrack quadratically or worse on
# long blank stretches: a response is untrusted input.

# What may stand between two boxes of one final-answer group ("\boxed{2} or \boxed{3}").
_CONNECTOR_RE = re.compile(
    r"""(?:
        \s | [,;/|&~.*] | \$ | \\[()\[\]] | \\\\ | \\[,;:!>\ ] | \\q?quad(?![a-zA-Z])
        | (?<![a-zA-Z])(?:or|and|either|maybe|perhaps|possibly|alternatively|otherwise|else)(?![a-zA-Z])
        | \\(?:text|textrm|textbf|textit|mathrm|mbox|operatorname)\s*\{\s*(?:(?:or|and|,|;|/)\s*)?\}
        | \\(?:vee|lor)(?![a-zA-Z])
        | (?<![a-zA-Z\\])[a-zA-Z](?:_\{?\w{1,3}\}?)?\s*=(?!=)    # "x = \boxed{2} or x = \boxed{3}"
    )*""",
    re.X | re.I,
)

# "or" between alternatives inside one answer: "2 \text{ or } 3", "2 or 3", "either 2 or 3" (the whitespace and
# a comma around it are trimmed off the parts afterwards).
_OR_SPLIT_RE = re.compile(
    r"\\(?:text|textrm|textbf|textit|mathrm|mbox)\s*\{\s*or\s*\}|(?<![a-zA-Z\\])or(?![a-zA-Z])", re.I
)
_EITHER_RE = re.compile(r"\s*(?:\\text\s*\{\s*)?either(?![a-zA-Z])\s*(?:\}\s*)?", re.I)
_ONE_OF_RE = re.compile(r"\s*(?:one|any)\s+of\s+(?:the\s+following\s*(?::\s*)?)?", re.I)

_GSM8K_RE = re.compile(r"####[ \t]*([^\n]*)")
_MAX_ANSWER_IS = 16
_ANSWER_IS_RE = re.compile(
    r"(?<![a-zA-Z])(?:final\s+answer|answer)(?![a-zA-Z])\s*(?:(?:\*\*|__)\s*)?"
    r"(?:is|:|=|should\s+be|would\s+be|will\s+be|must\s+be)\s*(?::\s*)?(?:(?:\*\*|__)\s*)?",
    re.I,
)
# A sentence ends at a newline, or at . ! ? ; followed by whitespace or the end (so "3.5" survives).
_SENTENCE_END_RE = re.compile(r"\n|[.!?;](?=\s|$)")
_MATHY_RE = re.compile(r"[0-9\\$^{}=+/()\[\]-]|^[A-Za-z]$")
_WORD_RE = re.compile(r"[^\W\d_]+")

_MATH_DELIMS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
# Tokens for the depth-0 word scan of :func:`clean_answer_text`.
_LEADING_WORDS_RE = re.compile(r"(?:[A-Za-z]{2,}\s+)+(?=[-\d$\\])")
_WORD_SCAN_RE = re.compile(r"[{}]|\\[a-zA-Z]+|\\.|(?<![A-Za-z])[A-Za-z]{2,}(?![A-Za-z])", re.S)

_LETTER = r"[A-J]"
_WRAP_OPEN = r"(?:\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{\s*)?"
_CHOICE_IN_BOX_RE = re.compile(
    rf"\s*(?:\$\s*)?{_WRAP_OPEN}(?:\*\*)?(?:\(\s*)?({_LETTER})\s*(?:\)\s*)?(?:\*\*\s*)?(?:\}}\s*)?"
    rf"(?:[.:)].*)?(?:\$\s*)?",
    re.S,
)
_CHOICE_LIST_RE = re.compile(
    rf"\s*(?:\$\s*)?{_WRAP_OPEN}\(?({_LETTER})\)?\}}?(?![A-Za-z])"
    rf"(?:\s*(?:,|/|&|;|(?i:or|and)(?![A-Za-z])|\\text\s*\{{\s*(?i:or|and)\s*\}})\s*"
    rf"{_WRAP_OPEN}\(?({_LETTER})\)?\}}?(?![A-Za-z]))+"
)
_CHOICE_AFTER_ANSWER_RE = re.compile(
    rf"(?:\*\*)?(?:\$\s*)?{_WRAP_OPEN}(?:(?:option|choice)\s+)?(?:\(\s*)?({_LETTER})\s*\)?(?![A-Za-z0-9])",
    re.I,
)
_CHOICE_LINE_RE = re.compile(
    rf"(?:\*\*\s*)?(?:\(({_LETTER})\)(?:\s.*)?|({_LETTER}))\s*(?:\*\*\s*)?(?:[.:]\s*)?(?:\*\*)?"
)
_GOLD_CHOICE_RE = re.compile(rf"(?:\(\s*)?({_LETTER})\s*\)?\.?")


@dataclass(frozen=True)
class Box:
    """One closed ``\\boxed{...}``: ``[open_start, close_end)`` is the whole box, ``[start, end)`` its content."""

    open_start: int
    start: int
    end: int
    close_end: int


@dataclass(frozen=True)
class Answer:
    """An extracted answer string and its character span ``[start, end)`` in the response."""

    text: str
    start: int
    end: int

    @property
    def span(self) -> tuple[int, int]:
        return (self.start, self.end)


@dataclass(frozen=True)
class Extraction:
    """What the extraction rules found in a response.

    Attributes:
        method: The rule that fired: ``"boxed"``, ``"gsm8k"``, ``"answer_is"`` or ``"choice"``.
        answers: The candidate final answers, in order. One for a plain answer; several when the response gives
            a group of final answers (boxes joined by "or", "2 or 3"), which the caller judges as hedging
            unless they are all equivalent (or the gold itself is a collection).
        error: Why no answer could be read (then ``answers`` is empty), e.g. an unclosed ``\\boxed{``.
        error_span: Where the reason for ``error`` sits in the response, if anywhere.
    """

    method: str
    answers: tuple[Answer, ...] = ()
    error: str | None = None
    error_span: tuple[int, int] | None = None


def find_boxes(text: str) -> tuple[list[Box], list[int]]:
    """Top-level closed boxes of ``text`` in order, and the start offsets of boxes that never close.

    One left-to-right pass with a stack (linear in ``len(text)``): ``\\{`` and ``\\}`` are escaped braces and
    do not count; a stray ``}`` with nothing open is ignored. A box nested in another box is not top-level.
    """
    stack: list[tuple[int, int]] = []  # (open_start, content_start); open_start = -1 for a plain "{"
    closed: list[Box] = []
    for token in _SCAN_RE.finditer(text):
        tok = token.group()
        if tok == "}":
            if stack:
                open_start, content_start = stack.pop()
                if open_start >= 0:
                    closed.append(Box(open_start, content_start, token.start(), token.end()))
        elif tok == "{":
            stack.append((-1, token.end()))
        elif tok[-1] == "{" and tok[1] in "bf":  # \boxed{ or \fbox{
            stack.append((token.start(), token.end()))
    closed.sort(key=lambda b: b.open_start)
    top: list[Box] = []
    for box in closed:
        if not top or box.open_start >= top[-1].close_end:
            top.append(box)
    unclosed = [open_start for open_start, _ in stack if open_start >= 0]
    return top, unclosed


def final_box_group(text: str, boxes: list[Box]) -> list[Box]:
    """The last box plus the boxes right before it separated only by connectors ("or", ",", ``\\quad``...).

    "first I got \\boxed{2}, but correcting myself the final answer is \\boxed{3}" gives only the last box;
    "\\boxed{2} or \\boxed{3}" gives both.
    """
    if not boxes:
        return []
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        between = text[prev.close_end : group[0].open_start]
        if len(between) > 200 or _CONNECTOR_RE.fullmatch(between) is None:
            break
        group.insert(0, prev)
    return group


def split_alternatives(text: str, offset: int = 0) -> list[Answer]:
    """Split ``text`` on "or" (``2 \\text{ or } 3``, "either 2 or 3", "one of 2, 3, 5") into answers.

    Returns a single answer when there is no alternative. Spans are shifted by ``offset``.
    """
    lead = _EITHER_RE.match(text) or _ONE_OF_RE.match(text)
    one_of = lead is not None and lead.re is _ONE_OF_RE
    body_start = lead.end() if lead else 0
    parts: list[Answer] = []
    pos = body_start
    seps = list(_OR_SPLIT_RE.finditer(text, body_start))
    if not seps and not one_of:
        return [_trimmed(text, 0, len(text), offset)]
    for sep in [*seps, None]:
        end = sep.start() if sep is not None else len(text)
        chunk_parts = [(pos, end)]
        if one_of:  # "one of 2, 3 or 5": the commas also separate candidates
            chunk_parts = []
            start = pos
            for comma in re.finditer(r",", text[pos:end]):
                chunk_parts.append((start, pos + comma.start()))
                start = pos + comma.end()
            chunk_parts.append((start, end))
        for start, stop in chunk_parts:
            while stop > start and (text[stop - 1].isspace() or text[stop - 1] == ","):  # "2, 3, or 5"
                stop -= 1
            answer = _trimmed(text, start, stop, offset)
            if answer.text:
                parts.append(answer)
        if sep is not None:
            pos = sep.end()
    return parts or [_trimmed(text, 0, len(text), offset)]


def _unwrap(text: str, box: Box) -> Box:
    """``\\boxed{\\boxed{4}}`` -> the inner box."""
    while True:
        content = text[box.start : box.end]
        inner, _ = find_boxes(content)
        if len(inner) != 1 or content.strip() != content[inner[0].open_start : inner[0].close_end]:
            return box
        b = inner[0]
        box = Box(box.start + b.open_start, box.start + b.start, box.start + b.end, box.start + b.close_end)


def _last_gsm8k(text: str) -> re.Match[str] | None:
    """The last ``####`` and the rest of its line (``group(1)``)."""
    at = text.rfind("####")
    while at > 0 and text[at - 1] == "#":  # "#####": take the first four of the run
        at -= 1
    return _GSM8K_RE.match(text, at) if at >= 0 else None


def _trimmed(text: str, start: int, end: int, offset: int) -> Answer:
    chunk = text[start:end]
    left = len(chunk) - len(chunk.lstrip())
    right = len(chunk.rstrip())
    return Answer(chunk[left:right], offset + start + left, offset + start + right)


def clean_answer_text(text: str, offset: int = 0) -> Answer:
    """Trim an "answer is" / GSM8K answer to the mathematical part.

    Drops markdown bold and leading words before a number or formula ("approximately 3.14"), then takes the
    content of a leading ``$...$`` / ``\\(...\\)`` / ``\\[...\\]``; otherwise drops a currency ``$``, trailing
    punctuation, and trailing prose after the first word of two or more letters at brace depth 0 ("5 apples" ->
    "5", but ``\\text{Monday}`` and ``\\sqrt{2}`` are kept).
    """
    start, end = 0, len(text)

    def strip_ws() -> None:
        nonlocal start, end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1

    strip_ws()
    for marker in ("**", "__"):
        if text.startswith(marker, start):
            start += len(marker)
            close = text.find(marker, start, end)
            if close >= 0:
                end = close
            strip_ws()
    lead = _LEADING_WORDS_RE.match(text, start, end)  # "approximately 3.14", "equivalently $2$"
    if lead:
        start = lead.end()
    for open_, close_ in _MATH_DELIMS:
        if text.startswith(open_, start):
            close = text.find(close_, start + len(open_), end)
            if close >= 0:
                return _trimmed(text, start + len(open_), close, offset)
            if open_ == "$":  # "$5" is a currency sign, not an inline formula
                start += 1
            break
    strip_ws()
    while end > start and text[end - 1] in ".,;:!?*":
        end -= 1
    strip_ws()
    depth = 0
    for token in _WORD_SCAN_RE.finditer(text, start, end):
        tok = token.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth = max(0, depth - 1)
        elif depth == 0 and tok[0] != "\\" and text[start : token.start()].strip():
            end = token.start()
            break
    strip_ws()
    while end > start and text[end - 1] in ".,;:!?*(":
        end -= 1
    if text.endswith(")", start, end) and text.count("(", start, end) < text.count(")", start, end):
        end -= 1  # "2 (or equivalently 2.0)" split on "or" leaves "2.0)"
    return _trimmed(text, start, end, offset)


def _answer_is(text: str, offset: int = 0, *, words: bool = True) -> Extraction | None:
    """The last "answer is ..." / "Answer: ..." whose text looks mathematical (or, if ``words``, is one word)."""
    if offset:
        found = _answer_is(text[offset:], words=words)
        if found is None:
            return None
        shifted = tuple(Answer(a.text, a.start + offset, a.end + offset) for a in found.answers)
        return Extraction(found.method, shifted)
    best: Extraction | None = None
    # Only the last few: "answer is" repeated 50,000 times must not cost 50,000 scans.
    for match in reversed(list(_ANSWER_IS_RE.finditer(text))[-_MAX_ANSWER_IS:]):
        stop = _SENTENCE_END_RE.search(text, match.end())
        end = stop.start() if stop else len(text)
        if end - match.end() > 2000:
            end = match.end() + 2000
        raw = text[match.end() : end]
        alternatives = [clean_answer_text(a.text, a.start) for a in split_alternatives(raw, match.end())]
        alternatives = [a for a in alternatives if a.text]
        if not alternatives:
            continue
        found = Extraction("answer_is", tuple(alternatives))
        if any(_MATHY_RE.search(a.text) for a in alternatives):
            return found
        if words and best is None and all(_WORD_RE.fullmatch(a.text) for a in alternatives):
            best = found
    return best


def _later_statements(text: str, start: int) -> list[Answer]:
    """Final-answer statements after position ``start`` ("The answer is 5", "Final answer: 5", "#### 5").

    A response that boxes one answer and then states another gives two final answers: a hedge, unless they agree.
    Only mathematical statements count ("The answer is correct" does not).
    """
    later: list[Answer] = []
    gsm = _last_gsm8k(text[start:])
    if gsm is not None:
        answer = clean_answer_text(gsm.group(1), start + gsm.start(1))
        if answer.text:
            later.append(answer)
    stated = _answer_is(text, start, words=False)
    if stated is not None:
        later.extend(stated.answers)
    return later


def extract(text: str) -> Extraction | None:
    """Apply the boxed, GSM8K and "answer is" rules; ``None`` means the caller should fall back to math-verify.

    An :class:`Extraction` with ``error`` set means the response's final answer is unreadable (for example the
    last ``\\boxed{`` never closes), which scores as ``unparseable`` without any fallback.
    """
    boxes, unclosed = find_boxes(text)
    last_closed_end = boxes[-1].close_end if boxes else -1
    broken = [start for start in unclosed if start >= last_closed_end]
    if broken:
        return Extraction(
            "boxed", error="the last \\boxed{ is never closed", error_span=(broken[-1], len(text))
        )
    if boxes:
        group = final_box_group(text, boxes)
        answers: list[Answer] = []
        for box in group:
            answers.extend(split_alternatives(text[box.start : box.end], box.start))
        if len(group) == 1 and len(answers) == 1:  # keep the raw content (and span) of a single box
            box = _unwrap(text, group[0])
            answers = [_trimmed(text, box.start, box.end, 0)]
        if not any(a.text for a in answers):
            return Extraction(
                "boxed", error="the last \\boxed{} is empty", error_span=(boxes[-1].start, boxes[-1].end)
            )
        answers.extend(_later_statements(text, group[-1].close_end))
        return Extraction("boxed", tuple(a for a in answers if a.text))
    gsm = _last_gsm8k(text)
    if gsm is not None:
        answer = clean_answer_text(gsm.group(1), gsm.start(1))
        if answer.text:
            alternatives = [
                clean_answer_text(a.text, a.start) for a in split_alternatives(answer.text, answer.start)
            ]
            return Extraction("gsm8k", tuple(a for a in alternatives if a.text) or (answer,))
        return Extraction("gsm8k", error="nothing follows the last ####", error_span=gsm.span())
    return _answer_is(text)


def short_repr(text: str, limit: int = 120) -> str:
    """``repr(text)``, cut in the middle when long (for error messages)."""
    if len(text) <= limit:
        return repr(text)
    half = limit // 2
    return f"{text[:half]!r} ... ({len(text) - 2 * half} more characters) ... {text[-half:]!r}"


def gold_answer(gold: str) -> str:
    """The answer part of a gold string.

    GSM8K solutions ("... #### 72") give what follows the last ``####``; MATH solutions give the content of
    their last ``\\boxed{}``; anything else is taken whole. Surrounding ``$`` and whitespace are removed.

    Raises:
        ValueError: if nothing is left (an empty gold, "####" with nothing after it, an empty box).
    """
    text = gold.strip()
    if "####" in text:
        text = text.rsplit("####", 1)[1].strip()
        text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    else:
        boxes, _ = find_boxes(text)
        if boxes:
            text = text[boxes[-1].start : boxes[-1].end].strip()
    for open_, close_ in _MATH_DELIMS:
        if len(text) >= len(open_) + len(close_) and text.startswith(open_) and text.endswith(close_):
            text = text[len(open_) : len(text) - len(close_)].strip()
            break
    if not text:
        raise ValueError(
            f"gold {short_repr(gold)} has no answer in it (empty, or nothing after '####' / in the box)"
        )
    return text


def choice_letter(gold: str) -> str | None:
    """The letter when ``gold`` (already passed through :func:`gold_answer`) is a single choice A-J, else None.

    Accepts "C", "(C)", "C.", ``\\text{C}``, ``\\text{(C)}``.
    """
    text = gold.strip()
    wrapped = re.fullmatch(r"\\(?:text|textbf|mathrm|mbox)\s*\{(.*)\}", text, re.S)
    if wrapped:
        text = wrapped.group(1).strip()
    match = _GOLD_CHOICE_RE.fullmatch(text)
    return match.group(1) if match else None


def _letters_in(text: str, offset: int) -> list[Answer] | None:
    """Letters of a choice answer: ``C``, ``(C)``, ``\\text{C}``, ``C) 42``; a list "B or C" gives several."""
    listed = _CHOICE_LIST_RE.match(text)
    if listed:
        return [
            Answer(m.group(1).upper(), offset + m.start(1), offset + m.end(1))
            for m in re.finditer(r"(?<![A-Za-z\\])\(?([A-J])\)?(?![A-Za-z])", text[: listed.end()])
        ]
    single = _CHOICE_IN_BOX_RE.fullmatch(text)
    if single:
        return [Answer(single.group(1), offset + single.start(1), offset + single.end(1))]
    return None


def extract_choice(text: str) -> Extraction:
    """Find a multiple-choice letter: last box, ``#### C``, "The answer is (C)" / "Answer: C", or a last line
    that is just ``(C)`` / ``C``. Several different letters in the final answer are reported as several answers.
    """
    boxes, unclosed = find_boxes(text)
    last_closed_end = boxes[-1].close_end if boxes else -1
    if any(start >= last_closed_end for start in unclosed):
        return Extraction(
            "choice", error="the last \\boxed{ is never closed", error_span=(unclosed[-1], len(text))
        )
    if boxes:
        letters: list[Answer] = []
        for box in final_box_group(text, boxes):
            found = _letters_in(text[box.start : box.end], box.start)
            if found is None:
                return Extraction(
                    "choice",
                    error="the boxed answer is not a choice letter A-J",
                    error_span=(box.start, box.end),
                )
            letters.extend(found)
        return Extraction("choice", tuple(letters))
    gsm = _last_gsm8k(text)
    if gsm is not None:
        found = _letters_in(gsm.group(1), gsm.start(1))
        if found:
            return Extraction("choice", tuple(found))
    for match in reversed(list(_ANSWER_IS_RE.finditer(text))[-_MAX_ANSWER_IS:]):
        listed = _CHOICE_LIST_RE.match(text, match.end())
        if listed:
            return Extraction(
                "choice", tuple(_letters_in(text[match.end() : listed.end()], match.end()) or ())
            )
        single = _CHOICE_AFTER_ANSWER_RE.match(text, match.end())
        if single:
            letter = single.group(1)
            if letter.isupper() or text[single.start(1) - 1 : single.start(1)] == "(":
                return Extraction("choice", (Answer(letter.upper(), single.start(1), single.end(1)),))
    stripped = text.rstrip()
    line_start = stripped.rfind("\n") + 1
    line = stripped[line_start:]
    lead = len(line) - len(line.lstrip())
    listed = _CHOICE_LIST_RE.fullmatch(line.strip().rstrip("."))
    if listed:
        return Extraction("choice", tuple(_letters_in(line.strip(), line_start + lead) or ()))
    last = _CHOICE_LINE_RE.fullmatch(line.strip())
    if last:
        group = 1 if last.group(1) else 2
        return Extraction(
            "choice",
            (
                Answer(
                    last.group(group),
                    line_start + lead + last.start(group),
                    line_start + lead + last.end(group),
                ),
            ),
        )
    return Extraction("choice", error="no choice letter (A-J) found")


# A number, then only connectors ("41 or 42", "1, 2, ..., 42", "3 / 4 / 5"), right before the fallback's answer.
_LISTED = re.compile(r"(-?\d+(?:\.\d+)?)(?:\s*(?:,\s|;|/|\bor\b|\band\b|\.\.\.|…|\\[lc]?dots)\s*)+$")


def listed_before(response: str, answer: Answer) -> Answer | None:
    """The candidate listed just before a fallback answer, when the two differ: a hedge ("maybe 41 or 42").

    Without this rule a response that ends on a list of numbers ("1, 2, ..., 200") scores whenever the gold is
    the last one listed, and a guess between two ends on the right one half the time.
    """
    match = _LISTED.search(response, max(0, answer.start - 200), answer.start)
    if match is None or match.group(1) == answer.text.strip():
        return None
    return Answer(match.group(1), match.start(1), match.end(1))
