"""Labelled cases for ``creditgym.verifiers.math``: statuses, hedging, spans, golds, input errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from creditgym.verifiers.math import MathVerifier, verify, verify_many
from creditgym.verifiers.math import extract as ex
from creditgym.verifiers.verdict import STATUSES, Verdict

PMATRIX = r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"
BMATRIX = r"\begin{bmatrix}1&2\\3&4\end{bmatrix}"
MATH_SOLUTION = (
    r"Each coin is heads with probability $\frac12$, so both are $\frac12\cdot\frac12=\boxed{\frac{1}{4}}$."
)

# (label, response, gold, expected): expected is a status, or "hedged" (= status "wrong" with details["hedged"]).
CASES: list[tuple[str, str, str | int, str]] = [
    # fractions vs decimals
    ("frac-vs-decimal", r"So $\boxed{\frac{1}{2}}$.", "0.5", "correct"),
    ("decimal-vs-frac", r"\boxed{0.5}", r"\frac{1}{2}", "correct"),
    ("dfrac", r"\boxed{\dfrac{3}{4}}", "0.75", "correct"),
    ("unreduced-frac", r"\boxed{\frac{2}{4}}", r"\frac{1}{2}", "correct"),
    ("slash-frac", r"\boxed{1/2}", "0.5", "correct"),
    ("rounded-decimal-is-wrong", r"\boxed{0.33}", r"\frac{1}{3}", "wrong"),
    ("wrong-frac", r"\boxed{\frac{1}{3}}", "0.5", "wrong"),
    # sets
    ("set-order", r"\boxed{\{3, 2, 1\}}", r"\{1,2,3\}", "correct"),
    ("set-missing-element", r"\boxed{\{1, 2\}}", r"\{1,2,3\}", "wrong"),
    ("set-as-list", r"The roots are \boxed{2, 3}", r"\{2,3\}", "correct"),
    ("set-gold-boxes-listed", r"$x = \boxed{2}$ and $\boxed{3}$", r"\{2, 3\}", "correct"),
    ("set-gold-or-list", r"\boxed{x = 2 \text{ or } x = 3}", r"\{2, 3\}", "correct"),
    # intervals
    ("interval", r"\boxed{(1, 2]}", "(1,2]", "correct"),
    ("interval-wrong-bracket", r"\boxed{[1, 2]}", "(1,2]", "wrong"),
    ("interval-infinity", r"\boxed{(-\infty, 3)}", r"(-\infty,3)", "correct"),
    ("interval-union", r"\boxed{(-\infty,0)\cup(1,\infty)}", r"(-\infty, 0) \cup (1, \infty)", "correct"),
    # matrices
    ("matrix-pmatrix-vs-bmatrix", rf"$$\boxed{{{PMATRIX}}}$$", BMATRIX, "correct"),
    ("matrix-wrong-entry", r"\boxed{\begin{pmatrix}1&2\\3&5\end{pmatrix}}", BMATRIX, "wrong"),
    # percentages
    ("percent-vs-decimal", r"\boxed{50\%}", "0.5", "correct"),
    ("percent-vs-percent", r"\boxed{50\%}", r"50\%", "correct"),
    ("number-vs-percent-gold", r"\boxed{50}", r"50\%", "correct"),
    ("wrong-percent", r"\boxed{40\%}", r"50\%", "wrong"),
    # units
    ("units-text", r"\boxed{5\text{ cm}}", "5", "correct"),
    ("units-degrees", r"\boxed{30^\circ}", "30", "correct"),
    ("units-dollars", r"\boxed{\$12}", "12", "correct"),
    ("units-prose", "The answer is 12 dollars.", "12", "correct"),
    # equations
    ("equation-vs-number", r"\boxed{x=5}", "5", "correct"),
    ("number-vs-equation", r"\boxed{5}", "x=5", "correct"),
    ("equation-wrong", r"\boxed{x=6}", "x=5", "wrong"),
    ("line-equation", r"\boxed{y = 2x + 1}", "y=2x+1", "correct"),
    # radicals and algebra
    ("radical-simplified", r"\boxed{2\sqrt{2}}", r"\sqrt{8}", "correct"),
    ("radical-rationalised", r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", "correct"),
    ("radical-wrong", r"\boxed{\sqrt{3}}", r"\sqrt{2}", "wrong"),
    ("factored-polynomial", r"\boxed{(x-1)(x+1)}", "x^2-1", "correct"),
    ("pi", r"\boxed{\pi}", r"\pi", "correct"),
    # GSM8K
    ("gsm8k", "She has 3 + 4 = 7 apples.\n#### 7", "Natalia has 3 and buys 4.\n#### 7", "correct"),
    ("gsm8k-thousands", "#### 1,000", "#### 1000", "correct"),
    ("gsm8k-wrong", "So 2 * 4 = 8.\n#### 8", "#### 7", "wrong"),
    ("gsm8k-empty", "I computed it.\n#### ", "7", "unparseable"),
    ("gsm8k-dollars", "#### $18", "#### 18", "correct"),
    # "the answer is" / "Answer:"
    ("answer-is", "Adding up, the answer is 42.", "42", "correct"),
    ("answer-colon-decimal", "Answer: 3.5", "3.5", "correct"),
    ("final-answer-bold-latex", r"**Final Answer:** $\frac{1}{2}$", "0.5", "correct"),
    ("final-answer-i-hope", "The final answer is 7. I hope it is correct.", "7", "correct"),
    ("answer-is-wrong", "The answer is 41.", "42", "wrong"),
    ("answer-is-negative", "The answer is $-3$.", "-3", "correct"),
    ("answer-is-approximately", "The answer is approximately $3.14$.", "3.14", "correct"),
    ("answer-is-or-equivalently", "The answer is 2 (or equivalently 2.0).", "2", "correct"),
    ("answer-is-latex-or-decimal", r"The answer is $\frac{1}{2}$ (or $0.5$).", "0.5", "correct"),
    # multiple choice
    ("choice-parens", "The answer is (C).", "C", "correct"),
    ("choice-boxed", r"\boxed{C}", "C", "correct"),
    ("choice-boxed-text", r"\boxed{\text{C}}", "C", "correct"),
    ("choice-answer-colon-wrong", "Answer: B", "C", "wrong"),
    ("choice-gold-in-parens", r"\boxed{(C)}", "(C)", "correct"),
    ("choice-last-line", "After checking each option:\n(C)", "C", "correct"),
    ("choice-gsm8k", "#### D", "D", "correct"),
    ("choice-hedged-boxes", r"\boxed{B} or \boxed{C}", "C", "hedged"),
    ("choice-hedged-answer-is", "The answer is B or C.", "C", "hedged"),
    ("choice-none", "I am not sure which option is right.", "C", "unparseable"),
    ("choice-boxed-value-not-letter", r"\boxed{42}", "C", "unparseable"),
    # last boxed wins
    (
        "correction-last-box-right",
        r"First I got \boxed{2}, but correcting myself the final answer is \boxed{3}",
        "3",
        "correct",
    ),
    (
        "correction-last-box-wrong",
        r"First I got \boxed{2}, but correcting myself the final answer is \boxed{3}",
        "2",
        "wrong",
    ),
    ("nested-box", r"\boxed{\boxed{4}}", "4", "correct"),
    ("boxes-with-prose-between", r"\boxed{5} and checking again we get \boxed{5}", "5", "correct"),
    ("identical-boxes-not-hedging", r"\boxed{5} or \boxed{5}", "5", "correct"),
    ("equivalent-boxes-not-hedging", r"\boxed{0.5} or \boxed{\frac{1}{2}}", "0.5", "correct"),
    ("fbox", r"\fbox{9}", "9", "correct"),
    ("box-with-space", r"\boxed {9}", "9", "correct"),
    # hedging
    ("hedge-boxes-or", r"\boxed{2} or \boxed{3}", "2", "hedged"),
    ("hedge-boxes-or-last-right", r"\boxed{2} or \boxed{3}", "3", "hedged"),
    ("hedge-boxes-comma-dollars", r"$\boxed{2}$, $\boxed{3}$", "2", "hedged"),
    ("hedge-boxes-quad", r"\boxed{2}\quad\boxed{3}", "3", "hedged"),
    ("hedge-boxes-text-or", r"$\boxed{2}\text{ or }\boxed{3}$", "3", "hedged"),
    ("hedge-boxes-slash", r"\boxed{2} / \boxed{3}", "2", "hedged"),
    ("hedge-boxes-with-assignments", r"$x = \boxed{2}$ or $x = \boxed{3}$", "3", "hedged"),
    ("plus-minus-gold-boxes-with-assignments", r"x = \boxed{2} or x = \boxed{-2}", r"\pm 2", "correct"),
    ("hedge-in-box-text-or", r"\boxed{2 \text{ or } 3}", "2", "hedged"),
    ("hedge-answer-is-or", "The answer is 2 or 3.", "2", "hedged"),
    ("hedge-answer-is-either", "The answer is either 2 or 3.", "3", "hedged"),
    ("hedge-candidate-list", "The answer is one of 2, 3, 5.", "2", "hedged"),
    ("hedge-many-candidates", " or ".join(rf"\boxed{{{i}}}" for i in range(40)), "5", "hedged"),
    ("hedge-set-for-scalar", r"\boxed{2, 3}", "2", "hedged"),
    ("hedge-plus-minus-for-scalar", r"\boxed{\pm 2}", "2", "hedged"),
    ("plus-minus-gold", r"\boxed{\pm 2}", r"\pm 2", "correct"),
    # malformed LaTeX
    ("malformed-frac", r"\boxed{\frac{1}{", "1", "unparseable"),
    ("malformed-frac-in-closed-box", r"\boxed{\frac{1}{}", "1", "unparseable"),
    ("malformed-frac-missing-argument", r"\boxed{\frac{1}}", "1", "unparseable"),
    ("malformed-superscript", r"\boxed{x^}", "1", "unparseable"),
    ("empty-box", r"The result is \boxed{}", "1", "unparseable"),
    ("last-box-unclosed", r"So \boxed{2}. Then \boxed{\frac{3}{", "2", "unparseable"),
    ("stray-closing-brace", r"\} text } \boxed{\frac{1}{2}} }", "0.5", "correct"),
    ("escaped-braces", r"\boxed{\{1,2\}}", r"\{1,2\}", "correct"),
    # empty and answerless
    ("empty", "", "1", "unparseable"),
    ("whitespace", "   \n ", "1", "unparseable"),
    ("no-answer", "no numbers here at all", "1", "unparseable"),
    # math-verify fallback
    ("fallback-last-number", "So there are 17 marbles left in the jar.", "17", "correct"),
    ("fallback-latex", r"Therefore $x = \frac{3}{4}$", "0.75", "correct"),
    ("fallback-wrong", "I think 7, then 12", "7", "wrong"),
    # a restated computation is not an answer (a response cut off mid-equation must not score)
    ("fallback-restated-sum", "81 + 17 = ", "98", "wrong"),
    ("fallback-restated-product", "so 6 * 7", "42", "wrong"),
    ("fallback-equation-result", "81 + 17 = 98", "98", "correct"),
    ("fallback-hedged-or", "maybe 41 or 42", "42", "hedged"),
    ("fallback-hedged-list", "1, 2, ..., 42", "42", "hedged"),
    ("fallback-hedged-unicode-list", "It could be 40, 41, … 42.", "42", "hedged"),
    ("fallback-thousands-not-a-list", "She has 1,000 apples.", "1000", "correct"),
    ("fallback-repeat-not-hedging", "It is 42 or 42.", "42", "correct"),
    # golds in other forms
    ("math-solution-gold", r"\boxed{\frac{1}{4}}", MATH_SOLUTION, "correct"),
    ("int-gold", r"\boxed{7}", 7, "correct"),
    ("text-answer", r"\boxed{\text{Monday}}", r"\text{Monday}", "correct"),
    ("thousands-separator", r"\boxed{1,000}", "1000", "correct"),
    ("unicode-around", "Ответ: \\boxed{5} 😀", "5", "correct"),
]


@pytest.fixture(scope="module")
def verifier() -> Iterator[MathVerifier]:
    with MathVerifier(2) as v:
        yield v


@pytest.fixture(scope="module")
def table(verifier: MathVerifier) -> list[Verdict]:
    return verifier.verify_many([c[1] for c in CASES], [c[2] for c in CASES], timeout=10.0)


def test_there_are_at_least_60_labelled_cases() -> None:
    assert len(CASES) >= 60
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_labelled_case(index: int, table: list[Verdict]) -> None:
    label, response, _gold, expected = CASES[index]
    verdict = table[index]
    hedged = expected == "hedged"
    status = "wrong" if hedged else expected
    assert verdict.status == status, f"{label}: {verdict}"
    assert verdict.details["hedged"] is hedged, f"{label}: {verdict}"
    assert verdict.score == (1.0 if status == "correct" else 0.0)
    for key in ("extracted", "gold", "method", "hedged", "elapsed"):
        assert key in verdict.details, key
    assert verdict.details["method"] in (None, "boxed", "gsm8k", "answer_is", "choice", "fallback")
    for start, end in verdict.spans:
        assert 0 <= start <= end <= len(response)


# ------------------------------------------------------------------------------------------------ spans


@pytest.mark.parametrize(
    ("response", "gold", "method", "answers"),
    [
        (r"Thus $\boxed{\frac{1}{2}}$.", "0.5", "boxed", [r"\frac{1}{2}"]),
        ("We add.\n#### 72", "#### 72", "gsm8k", ["72"]),
        ("Adding up, the answer is 42.", "42", "answer_is", ["42"]),
        ("So there are 17 marbles left.", "17", "fallback", ["17"]),
        ("The answer is (C).", "C", "choice", ["C"]),
        (r"\boxed{\text{C}}", "C", "choice", ["C"]),
        (r"\boxed{2} or \boxed{3}", "2", "boxed", ["2", "3"]),
        ("The answer is 2 or 3.", "2", "answer_is", ["2", "3"]),
        ("αβγ δ \\boxed{5}", "5", "boxed", ["5"]),
        (r"\boxed{ \boxed{4} }", "4", "boxed", ["4"]),
    ],
)
def test_spans_point_at_the_answer(
    verifier: MathVerifier, response: str, gold: str, method: str, answers: list[str]
) -> None:
    verdict = verifier.verify(response, gold)
    assert verdict.details["method"] == method
    assert [response[s:e] for s, e in verdict.spans] == answers


def test_span_of_the_last_box_when_an_earlier_box_has_the_same_text(verifier: MathVerifier) -> None:
    response = r"At first \boxed{3}? No: recomputing, the final answer is \boxed{3}"
    verdict = verifier.verify(response, "3")
    assert verdict.status == "correct"
    ((start, end),) = verdict.spans
    assert start == response.rindex("3") and end == start + 1


def test_spans_of_a_long_response_use_offsets_in_the_full_text(verifier: MathVerifier) -> None:
    response = "filler words " * 5000 + "so the total is 1234 marbles"
    verdict = verifier.verify(response, "1234")
    assert verdict.status == "correct" and verdict.details["method"] == "fallback"
    ((start, end),) = verdict.spans
    assert response[start:end] == "1234" and start == response.rindex("1234")


def test_unparseable_box_points_at_the_broken_box(verifier: MathVerifier) -> None:
    response = r"So \boxed{2}. Then \boxed{\frac{3}{"
    verdict = verifier.verify(response, "2")
    assert verdict.status == "unparseable" and "never closed" in verdict.details["error"]
    assert verdict.spans == ((response.rindex(r"\boxed"), len(response)),)


# ------------------------------------------------------------------------------------------------ golds and errors


@pytest.mark.parametrize(
    ("response", "status"),
    [
        (r"$\boxed{5?}$", "correct"),  # short: math-verify's own reading is kept
        ("The answer is 5?", "correct"),
        (
            r"$\boxed{5 + (((?) @ #x ~~ 3^{[}) ? what is this even ???}$",
            "unparseable",
        ),  # long junk: not parsed
    ],
)
def test_junk_is_not_handed_to_the_latex_parser_and_short_answers_keep_their_reading(
    verifier: MathVerifier, response: str, status: str
) -> None:
    assert verifier.verify(response, "5").status == status


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("5", "5"),
        ("  $\\frac{1}{2}$ ", "\\frac{1}{2}"),
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
        ("#### 1,234", "1234"),
        (MATH_SOLUTION, "\\frac{1}{4}"),
        ("\\{1,2\\}", "\\{1,2\\}"),
    ],
)
def test_gold_answer_forms(gold: str, answer: str) -> None:
    assert ex.gold_answer(gold) == answer


@pytest.mark.parametrize(
    ("gold", "letter"), [("C", "C"), ("(C)", "C"), ("C.", "C"), ("\\text{(J)}", "J"), ("K", None)]
)
def test_choice_gold_detection(gold: str, letter: str | None) -> None:
    assert ex.choice_letter(gold) == letter


@pytest.mark.parametrize("gold", [r"\frac{1}{", "", "   ", "#### ", r"\boxed{}"])
def test_a_gold_that_does_not_parse_is_a_value_error_naming_it(verifier: MathVerifier, gold: str) -> None:
    with pytest.raises(ValueError, match="gold") as info:
        verifier.verify(r"\boxed{1}", gold)
    assert repr(gold) in str(info.value)


def test_bad_gold_error_names_the_item_and_stays_short(verifier: MathVerifier) -> None:
    huge = r"\frac{1}{" + "9" * 100_000
    with pytest.raises(ValueError, match=r"item 1") as info:
        verifier.verify_many(["1", "2"], ["1", huge])
    assert len(str(info.value)) < 1000


def test_non_str_response_is_a_type_error(verifier: MathVerifier) -> None:
    with pytest.raises(TypeError, match="response 0 must be a str"):
        verifier.verify(b"5", "5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="response 1"):
        verifier.verify_many(["5", None], ["5", "5"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="gold 0"):
        verifier.verify("5", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequences"):
        verifier.verify_many("5", "5")


def test_bad_arguments(verifier: MathVerifier) -> None:
    with pytest.raises(ValueError, match="2 responses but 1 golds"):
        verifier.verify_many(["1", "2"], ["1"])
    for timeout in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            verifier.verify("1", "1", timeout=timeout)
    assert verifier.verify_many([], []) == []


def test_a_closed_verifier_refuses_work() -> None:
    v = MathVerifier(1)
    v.close()
    v.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        v.verify("1", "1")


# ------------------------------------------------------------------------------------------------ module level


def test_module_level_functions_share_a_default_verifier() -> None:
    assert verify(r"\boxed{4}", "4").status == "correct"
    verdicts = verify_many([r"\boxed{4}", r"\boxed{5}"], ["4", "4"], workers=1)
    assert [v.status for v in verdicts] == ["correct", "wrong"]
    assert all(v.status in STATUSES for v in verdicts)


def test_importing_the_module_loads_neither_torch_nor_sympy() -> None:
    code = (
        "import sys, creditgym\n"
        "before = set(sys.modules)\n"
        "import creditgym.verifiers.math\n"
        "new = set(sys.modules) - before\n"
        "bad = sorted(m for m in new if m.split('.')[0] in ('torch', 'sympy', 'math_verify'))\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------------------------ extraction units


def test_find_boxes_matches_braces_and_skips_escaped_ones() -> None:
    text = r"a \boxed{\{1, \frac{2}{3}\}} b \boxed{\boxed{4}} c \boxed{5"
    boxes, unclosed = ex.find_boxes(text)
    assert [text[b.start : b.end] for b in boxes] == [r"\{1, \frac{2}{3}\}", r"\boxed{4}"]
    assert unclosed == [text.rindex(r"\boxed")]


def test_final_box_group_stops_at_prose() -> None:
    text = r"\boxed{1}. Hmm, actually \boxed{2} or \boxed{3}"
    boxes, _ = ex.find_boxes(text)
    assert [text[b.start : b.end] for b in ex.final_box_group(text, boxes)] == ["2", "3"]


def test_clean_answer_text_drops_trailing_prose() -> None:
    text = "5 apples, since 2 + 3 = 5"
    answer = ex.clean_answer_text(text)
    assert answer.text == "5" and text[answer.start : answer.end] == "5"
    kept = ex.clean_answer_text(r"5\text{ cm}")
    assert kept.text == r"5\text{ cm}"


_BLANK = " " * 100_000
PATHOLOGICAL = [
    _BLANK + "x",
    "answer" + _BLANK + "x",
    "The answer is" + _BLANK + "x",
    "The answer is **" + _BLANK + "x",
    "The answer is either" + _BLANK + "x",
    "The answer is one of" + _BLANK + "x",
    r"\boxed{1}" + " " * 199 + "w" + r"\boxed{2}",
    r"\boxed{1}" + " " * 150 + r"\text{" + " " * 40 + "x}" + r"\boxed{2}",
    r"\boxed{C" + _BLANK + "x}",
    r"\boxed{$" + _BLANK + "C" + _BLANK + "x}",
    "**" + _BLANK + "C" + _BLANK + "x",
    "(C)" + _BLANK + "**" + _BLANK + "x",
    "Answer: (C" + _BLANK,
    "#### " + _BLANK + "x",
    "a " * 50_000,
    "The answer is " + "ab  " * 50_000,
    ", " * 50_000 + "or",
    " or" * 30_000,
    r"\text{" + _BLANK + "or" + _BLANK,
    "x =" * 30_000,
]


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=[f"pathological-{i}" for i in range(len(PATHOLOGICAL))])
def test_extraction_is_linear_on_pathological_text(text: str) -> None:
    """A guard against catastrophic (quadratic or exponential) regex backtracking, not a speed target.

    On these ~100 kB inputs a linear scan takes milliseconds and a backtracking regex takes hours, so a bound of
    30 s tells them apart on any machine, however loaded (speed itself is measured in examples/benchmarks).
    """
    import time

    for fn in (ex.extract, ex.extract_choice, ex.clean_answer_text, ex.split_alternatives, ex.find_boxes):
        t0 = time.perf_counter()
        fn(text)
        assert time.perf_counter() - t0 < 30.0, fn.__name__
