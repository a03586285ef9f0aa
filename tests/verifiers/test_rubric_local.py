"""``local:first_sentence_keyword``: passes only with the keyword in the first sentence, and says where."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from creditgym.verifiers.rubric import Criterion, describe, grade, known_ids
from creditgym.verifiers.rubric.local import FIRST_SENTENCE_KEYWORD, first_sentence, first_sentence_keyword


def _check(text: str, keyword: str = "cat") -> tuple[float, tuple[int, int] | None]:
    return first_sentence_keyword(text, keyword=keyword)


@pytest.mark.parametrize(
    ("text", "evidence"),
    [
        ("I like the cat. Dogs bark.", "cat"),
        ("Cats sleep all day! Dogs do not.", "Cats"),
        ("\n\n   CAT time? Yes.", "CAT"),
        ("<<my note>>\nThe cat naps.\n* a point", "cat"),
        ('"<<my note>>\nThe cat naps. It is warm."', "cat"),  # a quoted response with a title
        ("It costs 3.5 cats today. Then more.", "cats"),  # a decimal point ends no sentence
        ('She said "the cat." Then left.', "cat"),
    ],
)
def test_passes_with_the_keyword_in_the_first_sentence(text: str, evidence: str) -> None:
    score, span = _check(text)
    assert score == 1.0 and span is not None and text[span[0] : span[1]] == evidence


@pytest.mark.parametrize(
    "text",
    [
        "I like dogs. The cat came later.",  # in the second sentence only
        "I like dogs and cats and birds and all the rest with no full stop anywhere",  # no sentence end at all
        "A cat",
        "I like dogs\nthe cat came later.",  # a line break ends the first sentence
        "I read a category of concatenated words. The cat.",  # the keyword only inside other words
        "<<cat>>\nI like dogs. A cat.",  # only in the title, which is not a sentence
        "<<cat>>",  # only a title
        "",
        "   \n  ",
        "I like dogs. " + "cat " * 500,  # repeating the keyword later does not help
        "I like ca-t and c.a.t. Then cat.",  # broken up
    ],
)
def test_cannot_pass_without_meeting_it(text: str) -> None:
    score, span = _check(text)
    assert score == 0.0
    assert span == first_sentence(
        text
    )  # the evidence of a miss: the first sentence, where the keyword is not


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("abct .!?\n<>\"'-3")), max_size=60),
    st.text(alphabet=st.sampled_from(list("abct .!?\n<>\"'-3")), max_size=60),
)
def test_a_pass_always_points_at_the_keyword_inside_the_first_sentence(head: str, tail: str) -> None:
    text = head + tail
    score, span = _check(text)
    sentence = first_sentence(text)
    if score == 1.0:
        assert span is not None and sentence is not None
        assert sentence[0] <= span[0] < span[1] <= sentence[1]
        assert re.fullmatch(r"cat(?:s|es)?", text[span[0] : span[1]], re.I)
    # the keyword written after a finished first sentence never turns a miss into a pass
    if sentence is not None and score == 0.0 and text[sentence[1] - 1] in ".!?":
        assert _check(text + " cat cat. cat!")[0] == 0.0


def test_registered_described_and_graded_with_spans() -> None:
    assert FIRST_SENTENCE_KEYWORD in known_ids()
    criterion = Criterion(FIRST_SENTENCE_KEYWORD, {"keyword": "tea"})
    assert describe(criterion) == 'Include the keyword "tea" in the first sentence of your response.'
    text = "<<tea>>\nI drink tea daily. More tea later."
    verdict = grade(text, [criterion, Criterion("punctuation:no_comma")])
    row = verdict.details["criteria"][0]
    assert row["passed"] and text[row["span"][0] : row["span"][1]] == "tea" and row["span"] in verdict.spans
    miss = grade("I drink coffee. Then tea.", [criterion])
    assert miss.score == 0.0 and miss.details["criteria"][0]["span"] == (0, 15)


def test_bad_kwargs_are_named() -> None:
    with pytest.raises(ValueError, match="missing kwarg 'keyword'"):
        Criterion(FIRST_SENTENCE_KEYWORD, {})
    with pytest.raises(ValueError, match="unknown kwarg 'word'"):
        Criterion(FIRST_SENTENCE_KEYWORD, {"keyword": "tea", "word": "x"})
    for bad in ("", "tea.", "a|b", 3):
        verdict = grade("Tea.", [Criterion(FIRST_SENTENCE_KEYWORD, {"keyword": bad})])
        assert (
            verdict.status == "infra_error" and "kwarg 'keyword' must be a word" in verdict.details["error"]
        )
