"""The rubric verifier: every IFEval id on a passing and a failing response, scores, spans, registry, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from creditgym.verifiers import Verdict
from creditgym.verifiers.rubric import Criterion, describe, grade, known_ids, register_checker, worker_pids
from creditgym.verifiers.rubric.ifeval import IFEVAL_IDS

# id -> (kwargs, a passing response, a failing response)
CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "keywords:existence": ({"keywords": ["tea", "cup"]}, "A cup of tea.", "A glass of water."),
    "keywords:frequency": (
        {"keyword": "tea", "frequency": 2, "relation": "at least"},
        "Tea, more tea.",
        "Only one tea.",
    ),
    "keywords:forbidden_words": ({"forbidden_words": ["bad"]}, "All good here.", "That is bad."),
    "keywords:letter_frequency": (
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Zebras buzz.",
        "No such letter.",
    ),
    "language:response_language": (
        {"language": "fr"},
        "Bonjour, je suis très content de vous voir aujourd'hui dans cette belle ville.",
        "Hello, I am very happy to see you today in this beautiful city of ours.",
    ),
    "length_constraints:number_sentences": (
        {"num_sentences": 3, "relation": "at least"},
        "One here. Two here. Three here.",
        "Just one sentence.",
    ),
    "length_constraints:number_paragraphs": (
        {"num_paragraphs": 2},
        "First part.\n***\nSecond part.",
        "One part.",
    ),
    "length_constraints:number_words": (
        {"num_words": 5, "relation": "less than"},
        "Short answer.",
        "This answer has far too many words in it.",
    ),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        "First we wait.\n\nThen we go.",
        "First we wait.\n\nAfter that we go.",
    ),
    "detectable_content:number_placeholders": (
        {"num_placeholders": 2},
        "Dear [name], see you at [place].",
        "Dear [name], see you.",
    ),
    "detectable_content:postscript": ({"postscript_marker": "P.S."}, "Bye.\nP.S. See you.", "Bye."),
    "detectable_format:number_bullet_lists": ({"num_bullets": 2}, "* one\n* two", "* one"),
    "detectable_format:constrained_response": ({}, "My answer is yes.", "Perhaps."),
    "detectable_format:number_highlighted_sections": ({"num_highlights": 2}, "*one* and *two*", "*one* only"),
    "detectable_format:multiple_sections": (
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nabc\nSection 2\ndef",
        "Section 1\nabc",
    ),
    "detectable_format:json_format": ({}, '```json\n{"a": 1}\n```', "a: 1"),
    "detectable_format:title": ({}, "<<My Title>>\nText.", "My Title\nText."),
    "combination:two_responses": ({}, "First answer.\n******\nSecond answer.", "Only one answer."),
    "combination:repeat_prompt": (
        {"prompt_to_repeat": "Say hi."},
        "Say hi. Hi!",
        "Hi! Say hi.",
    ),
    "startend:end_checker": ({"end_phrase": "Any other questions?"}, "Done. Any other questions?", "Done."),
    "change_case:capital_word_frequency": (
        {"capital_frequency": 2, "capital_relation": "at least"},
        "WOW this is GREAT news.",
        "Wow this is great news.",
    ),
    "change_case:english_capital": (
        {},
        "THIS IS A LONG ENGLISH SENTENCE WRITTEN IN CAPITAL LETTERS FOR THE TEST.",
        "This is a long English sentence written in mixed case letters for the test.",
    ),
    "change_case:english_lowercase": (
        {},
        "this is a long english sentence written in lowercase letters for the test.",
        "This is a long English sentence written in mixed case letters for the test.",
    ),
    "punctuation:no_comma": ({}, "No commas here.", "Commas, here."),
    "startend:quotation": ({}, '"All quoted."', "Not quoted."),
}


def test_the_cases_cover_all_25_ifeval_ids() -> None:
    assert len(IFEVAL_IDS) == 25 and set(CASES) == set(IFEVAL_IDS)
    assert set(IFEVAL_IDS) | {"llm_judge"} <= set(known_ids())


@pytest.mark.parametrize("criterion_id", sorted(CASES))
def test_each_ifeval_id_passes_and_fails(criterion_id: str) -> None:
    kwargs, good, bad = CASES[criterion_id]
    criterion = Criterion(criterion_id, kwargs)
    assert describe(criterion) and criterion.description == describe(criterion)
    ok, ko = grade(good, [criterion]), grade(bad, [criterion])
    assert (ok.status, ok.score, ok.details["criteria"][0]["passed"]) == ("correct", 1.0, True), ok
    assert (ko.status, ko.score, ko.details["criteria"][0]["passed"]) == ("wrong", 0.0, False), ko


def test_spans_point_at_the_evidence() -> None:
    text = "Some tea here. Any other questions?"
    v = grade(text, [Criterion("keywords:existence", {"keywords": ["tea"]}),
                     Criterion("startend:end_checker", {"end_phrase": "Any other questions?"})])  # fmt: skip
    rows = v.details["criteria"]
    assert text[slice(*rows[0]["span"])] == "tea"
    assert text[slice(*rows[1]["span"])] == "Any other questions?"
    assert v.spans == (rows[0]["span"], rows[1]["span"])
    quoted = '"Done. Any other questions?"  '
    row = grade(quoted, [Criterion("startend:end_checker", {"end_phrase": "Any other questions?"})])
    assert quoted[slice(*row.details["criteria"][0]["span"])] == "Any other questions?"
    js = 'Here:\n{"a": [1, 2]}\n'
    row = grade(js.strip(), [Criterion("detectable_format:json_format")]).details["criteria"][0]
    assert row["span"] is None  # "Here:" makes it invalid JSON: no block to point at
    row = grade(' {"a": 1} ', [Criterion("detectable_format:json_format")]).details["criteria"][0]
    assert row["span"] == (1, 9)
    assert grade("Fine.", [Criterion("punctuation:no_comma")]).details["criteria"][0]["span"] is None


def test_partial_and_all_or_nothing_on_a_hand_made_case() -> None:
    criteria = [
        Criterion("keywords:existence", {"keywords": ["tea"]}, weight=3.0),  # passes
        Criterion("punctuation:no_comma", weight=1.0),  # fails
    ]
    response = "Tea, please."
    partial = grade(response, criteria)
    assert partial.score == pytest.approx(0.75) and partial.status == "wrong"
    assert [r["score"] for r in partial.details["criteria"]] == [1.0, 0.0]
    strict = grade(response, criteria, mode="all_or_nothing")
    assert strict.score == 0.0 and strict.status == "wrong"
    assert grade("Tea please.", criteria, mode="all_or_nothing").score == 1.0


def test_kwargs_with_null_values_are_dropped_like_ifeval_data() -> None:
    c = Criterion("punctuation:no_comma", {"keywords": None, "num_words": None})
    assert dict(c.kwargs) == {}


def test_unknown_id_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown criterion id 'keywords:nope'.*keywords:existence"):
        Criterion("keywords:nope")


@pytest.mark.parametrize(
    ("criterion_id", "kwargs", "match"),
    [
        ("keywords:existence", {"keyword": ["x"]}, r"'keywords:existence': unknown kwarg 'keyword'"),
        ("keywords:existence", {}, r"'keywords:existence': missing kwarg 'keywords'"),
        (
            "length_constraints:number_words",
            {"num_words": "ten", "relation": "at least"},
            r"kwarg 'num_words'",
        ),
        ("length_constraints:number_words", {"num_words": 3, "relation": "about"}, r"kwarg 'relation'"),
        ("language:response_language", {"language": "xx"}, r"kwarg 'language'"),
        ("keywords:frequency", {"keyword": "(", "frequency": 1, "relation": "at least"}, r"kwarg 'keyword'"),
        ("punctuation:no_comma", {"extra": 1}, r"'punctuation:no_comma': unknown kwarg 'extra'"),
        ("llm_judge", {"question": "ok?"}, r"'llm_judge': kwarg 'model'"),
    ],
)
def test_kwargs_that_do_not_fit_name_criterion_and_kwarg(criterion_id: str, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Criterion(criterion_id, kwargs)


def test_bad_weights_and_empty_rubrics() -> None:
    with pytest.raises(ValueError, match="weight"):
        Criterion("punctuation:no_comma", weight=-1.0)
    with pytest.raises(ValueError, match="at least one criterion"):
        grade("x", [])
    with pytest.raises(ValueError, match="mode"):
        grade("x", [Criterion("punctuation:no_comma")], mode="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        grade("x", [Criterion("punctuation:no_comma")], timeout=0)
    with pytest.raises(TypeError, match="response"):
        grade(None, [Criterion("punctuation:no_comma")])  # type: ignore[arg-type]


def test_register_checker_with_spans_and_kwarg_validation() -> None:
    @register_checker("test:mentions_number", description="Mention the number {n}.")
    def mentions(response: str, *, n: int) -> tuple[float, tuple[int, int] | None]:
        i = response.find(str(n))
        return (1.0, (i, i + len(str(n)))) if i >= 0 else (0.0, None)

    @register_checker("test:half")
    def half(response: str) -> float:
        return 0.5

    c = Criterion("test:mentions_number", {"n": 42})
    assert describe(c) == "Mention the number 42."
    v = grade("It is 42.", [c, Criterion("test:half")])
    assert v.score == pytest.approx(0.75) and v.details["criteria"][0]["span"] == (6, 8)
    assert v.details["criteria"][1]["passed"] is False
    with pytest.raises(ValueError, match="already registered"):
        register_checker("test:half")(half)
    with pytest.raises(ValueError, match=r"'test:mentions_number': missing kwarg 'n'"):
        Criterion("test:mentions_number")
    with pytest.raises(ValueError, match=r"'test:mentions_number': unknown kwarg 'm'"):
        Criterion("test:mentions_number", {"n": 1, "m": 2})


def test_a_checker_that_raises_is_an_infra_error_not_a_zero() -> None:
    @register_checker("test:broken")
    def broken(response: str) -> bool:
        raise RuntimeError("boom")

    v = grade("x", [Criterion("punctuation:no_comma"), Criterion("test:broken")])
    assert v.status == "infra_error" and v.score is None
    assert "test:broken" in v.details["error"] and "boom" in v.details["error"]


def test_a_checker_past_its_own_regex_time_limit_is_a_timeout_not_an_infra_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nltk runs its tokenizers' regexes under ``nltk.redos``'s wall-clock limit (5 s); on a slow machine a
    megabyte response hits it. That is the response's fault: a 0, never a dropped ``infra_error`` a policy could
    hide behind. Here the limit is made tiny, in this process, so that it is hit every time."""
    import nltk.redos

    from creditgym.verifiers.rubric import ifeval as _rubric_ifeval

    monkeypatch.setattr(nltk.redos, "DEFAULT_TIMEOUT", 1e-9)
    kwargs = json.dumps(CASES["change_case:capital_word_frequency"][0])
    text = "Some WORDS here. " * 20_000
    out = _rubric_ifeval.check_many((text, [("change_case:capital_word_frequency", kwargs),
                                            ("punctuation:no_comma", "{}")]))  # fmt: skip
    assert out == [_rubric_ifeval.TIMED_OUT, (1.0, [])]
    with pytest.raises(TimeoutError):  # the limit is really hit, not some other failure mapped to a timeout
        _rubric_ifeval.check("change_case:capital_word_frequency", json.loads(kwargs), text)


def test_a_megabyte_response_gets_a_verdict_in_reasonable_time() -> None:
    criteria = [Criterion(cid, CASES[cid][0]) for cid in sorted(CASES)]
    t0 = time.perf_counter()
    v = grade(("Some words here. " * 60_000)[:1_000_000], criteria, timeout=20.0)
    assert isinstance(v, Verdict) and v.status in ("wrong", "timeout")
    assert time.perf_counter() - t0 < 60
    # An adversarial megabyte (quadratic in two IFEval regexes) hits the deadline instead of hanging.
    t0 = time.perf_counter()
    v = grade("[" * 1_000_000, [Criterion("detectable_content:number_placeholders", {"num_placeholders": 1})],
              timeout=1.0)  # fmt: skip
    assert v.status == "timeout" and v.score == 0.0 and "ran past" in v.details["error"]
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize(
    ("response", "criterion"),
    [
        ("[" * 16_384, Criterion("detectable_content:number_placeholders", {"num_placeholders": 1})),
        ("\n" * 16_384, Criterion("length_constraints:number_paragraphs", {"num_paragraphs": 2})),
        ("\n \n" * 5_000, Criterion("length_constraints:number_paragraphs", {"num_paragraphs": 2})),
    ],
)
def test_adversarial_16_kb_costs_the_grading_process_nothing(response: str, criterion: Criterion) -> None:
    grade("warm", [criterion])
    cpu0 = time.process_time()
    v = grade(response, [criterion], timeout=2.0)
    assert v.status in ("wrong", "timeout") and v.score == 0.0
    assert time.process_time() - cpu0 < 0.25  # the checks ran in the worker (inline, 16 KB of "[" took 1.9 s)


def test_a_check_past_its_deadline_is_a_timeout_and_the_worker_is_replaced() -> None:
    grade("warm", [Criterion("punctuation:no_comma")])
    (before,) = worker_pids()
    catastrophic = Criterion("keywords:existence", {"keywords": ["(a+)+$"]})  # keywords are IFEval regexes
    t0 = time.monotonic()
    v = grade("a" * 40 + "!", [catastrophic, Criterion("punctuation:no_comma")], timeout=0.5)
    assert v.status == "timeout" and v.score == 0.0 and "ran past 0.5 s" in v.details["error"]
    assert time.monotonic() - t0 < 10
    assert grade("fine", [Criterion("punctuation:no_comma")]).status == "correct"
    (after,) = worker_pids()
    assert after != before


def test_the_ifeval_worker_runs_under_a_memory_limit() -> None:
    grade("warm", [Criterion("punctuation:no_comma")])
    (pid,) = worker_pids()
    limits = Path(f"/proc/{pid}/limits").read_text()
    line = next(row for row in limits.splitlines() if row.startswith("Max address space"))
    assert line.split()[3] != "unlimited", line


@pytest.mark.parametrize(
    ("response", "repaired"),
    [
        ("abc\udc80def", True),  # a lone surrogate (surrogateescape-decoded byte)
        ("\ud800", True),
        ("ok \ud83d\ude00 pair", True),  # a surrogate pair left as two code units
        (b"caf\xc3\xa9 \xff\xfe bytes", True),  # bytes that are not UTF-8
        ("ok \U0001f600 fine", False),
    ],
)
def test_invalid_unicode_from_a_detokenizer_gets_a_typed_verdict(
    response: str | bytes, repaired: bool
) -> None:
    criteria = [Criterion(cid, CASES[cid][0]) for cid in sorted(CASES)]
    v = grade(response, criteria)
    assert isinstance(v, Verdict) and v.status in ("correct", "wrong")
    assert len(v.details["criteria"]) == 25
    assert v.details["repaired"] is repaired


def test_if_verifiable_runs_in_the_worker_only_and_nltk_is_left_alone() -> None:
    code = (
        "import sys, nltk\n"
        "import creditgym, creditgym.verifiers.rubric as r, creditgym.envs.rubric\n"
        "assert 'if_verifiable' not in sys.modules\n"
        "before = nltk.word_tokenize\n"
        "c = r.Criterion('length_constraints:number_sentences', {'num_sentences': 2, 'relation': 'at least'})\n"
        "assert r.grade('One. Two.', [c]).score == 1.0\n"
        "assert 'if_verifiable' not in sys.modules and nltk.word_tokenize is before\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
