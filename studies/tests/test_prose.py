"""The study's prose against its numbers: every figure quoted in the text of docs/study/*.md and of the README's
Results section must be a figure of the committed files that page draws from, so re-rendering a table from
changed results (studies/scripts/verdict.py --rerender) fails here until the prose is rewritten to match.

A page draws from the tables it shows (copied, or included with ``--8<--``), the committed files and folders under
studies/results it names (a folder: the .md and .json files in it), and the extra sources `EXTRA` lists. A figure
(a decimal number: ``0.466``, ``-0.062``, ``+0.060``) matches a source figure when they agree at the prose's
decimals, the sign included when the prose gives one; ``N points`` is N / 100 (an MDE or a difference in points).
A figure derived rather than quoted is in `DERIVED`, with the computation from the committed files that gives it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sp

from creditgym.agents.study.results import FINISHED, upgrade_results
from creditgym.agents.study.stats import mean, sample_sd, t_quantile, within_task_variance

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "studies" / "results"
PAGES = sorted((ROOT / "docs" / "study").glob("*.md"))
#: A decimal figure; a sign counts only where it starts a figure (after a space, a bracket or a parenthesis), so the
#: ``-`` of a range ``1.8-5.6`` is not read as a minus.
FIGURE = re.compile(r"(?:(?<=[\s(\[])|^)([+-]?)(\d+\.\d+)(?![\d.]*\w)|(?<=[-–])(\d+\.\d+)")
POINTS = re.compile(r"(\d+\.\d+)(?:-(\d+\.\d+))? points|(\d+\.\d+)%(?:-(\d+\.\d+)%)?")
INCLUDE = re.compile(r'^--8<-- "([^"]+)"', re.M)
NAMED = re.compile(r"studies/results/[\w./=;-]*[\w-]")

#: Sources a page quotes without naming them (a folder of studies/results, or a file): its parts' studies for the
#: study at a glance, the folders each part quotes from the others, the step-cost table of the Benchmarks page.
EXTRA: dict[str, tuple[str, ...]] = {
    "index.md": (
        "docs/benchmarks.md",
        "studies/results/pilot",
        "studies/results/study-hard",
        "studies/results/study-hard/pooled0-19",
        "studies/results/study-hard/probed",
        "studies/results/study-chains/probed",
        "studies/results/study-chains/probed-pooled",
        "studies/results/study-chains/vine-links-pooled",
        "studies/results/study-chains/vine-links-pooled0-4",
        "studies/results/study-easy",
    ),
    "first-study.md": ("docs/benchmarks.md", "studies/results/probe/hard-tiny-after"),
    "part1.md": (
        "docs/benchmarks.md",
        "studies/results/study-chains/controls",
        "studies/results/study-chains/controls-pooled",
        "studies/results/study-chains/probed-pooled",
        "studies/results/study-chains/vine-links-pooled",
        "studies/results/study-chains/vine-links-pooled0-4",
        "studies/results/study-chains/vine-seeds12",
        "studies/results/study-chains/vine-steps",
        "studies/results/study-hard/pooled0-19",
        "studies/results/study-hard/probed",
        "studies/results/study-easy",
        "studies/results/probe/chains-tiny-after",
        "studies/results/probe/easy-tiny",
        "studies/results/probe/hard-tiny-after",
        "studies/results/probe/study-chains-step60-vine-seed1",
        "studies/results/probe/study-chains-step60-vine-seed2",
    ),
    "part2.md": tuple(
        f"studies/results/study-hard/{name}"
        for name in ("seeds6-9", "seeds10-14", "seeds15-16", "seeds17-19")
    ),
    "part3.md": (
        "studies/results/study-chains",
        "studies/results/study-chains/controls-seeds12",
        "studies/results/study-chains/controls-rest",
    ),
    "part5.md": ("studies/results/study-chains", "studies/results/study-chains/probed-seeds23"),
}
#: README's Results section: the headline, the easy control's own verdict, the probes during training and the
#: cheap-credit table.
README_SOURCES = (
    "studies/results/cheap-credit",
    "studies/results/headline.md",
    "studies/results/study-easy/verdict.md",
    "studies/results/study-hard/probed",
    "studies/results/study-chains/probed-pooled",
    "studies/results/smollm2-study/probed",
)
#: Figures from outside this study's record, per page: the papers' reported effects, the machine, the load on it
#: and the constants of a formula.
EXTERNAL: dict[str, set[str]] = {
    "first-study.md": {"+4.4 points", "61.4", "53.8", "+8.8", "21.0", "41.3", "3.11", "2.13"},
    "pilot.md": {"9.2", "14.1", "10.5", "0.975", "0.80"},
}
#: Figures of the study's prose that no committed file holds: the runs' per-step metrics (`mc/steps_per_response`)
#: were not committed, and the first study's probe records were replaced by the fixed modules' (probes.md). Listed
#: so that each is seen; a new figure that is neither here nor in its page's sources fails the test.
UNBACKED: dict[str, set[str]] = {
    "first-study.md": {"10.7", "11.5", "0.258", "0.0002", "0.140", "0.217", "2.76", "0.997", "0.154"},
    "part3.md": {"1.001", "4.67", "4.49", "4.48"},
}


def _sd_ratio(q: float) -> float:
    """The factor a sample sd from 3 seeds (2 degrees of freedom) is off by at the ``q`` quantile of chi-square."""
    return math.sqrt(2 / sp.chi2.ppf(q, 2))


def _study_hours() -> float:
    """The wall time of the study's distinct runs (entry, seed and config; a rerun counted once), in hours."""
    runs: dict[tuple[Any, ...], float] = {}
    for path in sorted(RESULTS.glob("study-*/**/results.json")):
        for run in upgrade_results(json.loads(path.read_text()))["runs"]:
            key = (run["entry"], run["seed"], run["config_hash"] or str(path))
            runs[key] = max(runs.get(key, 0.0), run["wall_s"] or 0.0)
    return sum(runs.values()) / 3600


def _hard_mean(entry: str, step: int) -> float:
    """The mean held-out score of ``entry`` at ``step`` over the hard rubric's seeds 0-16 (part 2)."""
    folders = ("", "seeds6-9", "seeds10-14", "seeds15-16")
    scores = []
    for folder in folders:
        runs = json.loads((RESULTS / "study-hard" / folder / "results.json").read_text())["runs"]
        scores += [v for r in runs if r["entry"] == entry for s, v in r["curve"] if s == step]
    return sum(scores) / len(scores)


def _evaluation_overstated() -> float:
    """How many times the binomial bound ``p (1 - p)`` overstates the pilot's measured per-task variance."""
    rewards = list(json.loads((RESULTS / "pilot" / "per_task.json").read_text())["rewards"].values())
    p = mean([mean(seed) for seed in rewards])
    return p * (1 - p) / within_task_variance(rewards)


#: Figures the prose derives rather than quotes, per page: the figure as printed, and how it follows from what is
#: committed (each computed here and compared at the printed decimals).
DERIVED: dict[str, dict[str, Callable[[], float]]] = {
    "index.md": {"0.52": lambda: _sd_ratio(0.975), "6.3": lambda: _sd_ratio(0.025), "40.7": _study_hours},
    "part2.md": {"0.692": lambda: _hard_mean("grpo", 40)},
    "part3.md": {"4.30": lambda: t_quantile(2)},
    "pilot.md": {"3.3": _evaluation_overstated},
}


def prose(text: str) -> Iterator[tuple[int, str]]:
    """The page's lines of prose, numbered: not code blocks, table rows, includes or a probe report's header."""
    code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            code = not code
        elif not (code or line.startswith(("|", "--8<--", "`creditgym/"))):
            yield number, line


def figures(text: str) -> Iterator[tuple[str, float, int]]:
    """Each figure of ``text``: as printed, its value (points as a fraction) and its decimals."""
    points = {m.start(g) for m in POINTS.finditer(text) for g in (1, 2, 3, 4) if m.group(g)}
    for m in FIGURE.finditer(text):
        sign, digits = (m.group(1), m.group(2)) if m.group(2) else ("", m.group(3))
        start = m.start(2) if m.group(2) else m.start(3)
        value = float(digits) * (-1 if sign == "-" else 1)
        decimals = len(digits.split(".")[1])
        if start in points:
            yield sign + digits + " points", value / 100, decimals + 2
        else:
            yield sign + digits, value, decimals


def _numbers(value: object) -> Iterator[float]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield float(value)


def _run_figures(results: dict[str, Any]) -> Iterator[float]:
    """What a study's runs give beyond their stored numbers: per entry and seed, the paired difference to the
    baseline of the final score and of each held-out step, and per entry the sd of its finals and of those
    differences at the end."""
    results = upgrade_results(results)
    runs = {(r["entry"], r["seed"]): r for r in results["runs"] if r["status"] == FINISHED}
    for entry in results["config"]["entries"]:
        finals = [r["final"] for (e, _), r in runs.items() if e == entry]
        diffs = []
        for (e, seed), run in runs.items():
            base = runs.get((results["baseline"], seed))
            if e != entry or base is None:
                continue
            diffs.append(run["final"] - base["final"])
            at = dict((step, v) for step, v in base["curve"])
            yield from (v - at[step] for step, v in run["curve"] if step in at and v is not None)
        yield from diffs
        for values in (finals, diffs):
            if len(values) > 1:
                yield sample_sd(values)


def _file_figures(path: Path) -> list[float]:
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        found = list(_numbers(data))
        if path.name == "results.json":
            found += _run_figures(data)
        return found
    return [value for _, value, _ in figures(path.read_text())]


def sources(page: Path, text: str) -> list[float]:
    """The figures of everything ``page`` (its text ``text``) draws from."""
    shown = "\n".join(line for line in text.splitlines() if line.startswith(("|", "`creditgym/")))
    found = [value for _, value, _ in figures(shown)]
    paths = [ROOT / p for p in INCLUDE.findall(text)]
    named = (
        NAMED.findall(text)
        + list(EXTRA.get(page.name, ()))
        + list(README_SOURCES if page.name == "README.md" else ())
    )
    for name in named:
        path = ROOT / name
        if path.is_dir():
            paths += sorted(p for p in path.iterdir() if p.suffix in (".md", ".json"))
        elif path.is_file() and path.suffix in (".md", ".json"):
            paths.append(path)
    for path in paths:
        found += _file_figures(path)
    return found


def matches(value: float, decimals: int, signed: bool, found: list[float]) -> bool:
    """``value`` (printed at ``decimals``, with a sign when ``signed``) is one of ``found`` at those decimals."""
    tolerance = 0.5 * 10**-decimals + 1e-9
    return any(abs((x if signed else abs(x)) - (value if signed else abs(value))) <= tolerance for x in found)


def unmatched(page: Path, text: str) -> list[str]:
    """The figures of ``page``'s prose that are not among its sources' figures nor derived (`DERIVED`)."""
    found = sources(page, text)
    derived = DERIVED.get(page.name, {})
    missing = []
    for number, line in prose(text):
        for printed, value, decimals in figures(line):
            if printed in EXTERNAL.get(page.name, set()) | UNBACKED.get(page.name, set()):
                continue
            if printed in derived:
                assert round(derived[printed](), decimals) == round(value, decimals), (page.name, printed)
                continue
            if not matches(value, decimals, printed[0] in "+-", found):
                missing.append(f"{page.name}:{number}: {printed} ({line.strip()[:100]})")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_figure_in_the_study_prose_is_a_committed_figure(page: Path) -> None:
    assert unmatched(page, page.read_text()) == []


def test_the_readme_results_quote_the_headline() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    page = ROOT / "README.md"
    assert unmatched(page, section) == []


def test_a_figure_that_disagrees_with_the_committed_results_fails() -> None:
    """The check itself: the study page's own figure passes, the same sentence with a figure off by one in its last
    digit (or with the wrong sign, or in points) does not."""
    page = ROOT / "docs" / "study" / "check.md"  # a page that draws from the headline alone
    include = '--8<-- "studies/results/headline.md"\n'
    assert unmatched(page, include + "`cort` loses -0.062 [-0.091, -0.034], MDE 4.1 points.\n") == []
    for wrong in ("-0.063 [-0.091, -0.034]", "+0.062", "-0.062 [-0.091, -0.034], MDE 4.3 points"):
        assert unmatched(page, include + f"`cort` loses {wrong}.\n"), wrong


#: Sentences that once said more than the probe's numbers; each page must not say them again.
OVERSTATED = {
    "docs/study/scale.md": (
        "In every completed probe the positive control measured what its expectation says",
        "two modules rank tokens with it",
    ),
    "docs/study/smollm2.md": (
        "The probe's finding held",
        "found one module that ranks",
        "three finals lie closer",
    ),
    "README.md": ("ranks tokens against it at both", "stayed above 0 (+0.156"),
}


def test_the_scale_prose_says_what_the_corrected_table_says() -> None:
    """No page repeats an overstated sentence; where the scale page says no module beats the null baselines and
    the rubric calls nothing, the committed table's verdicts agree."""
    for name, phrases in OVERSTATED.items():
        text = re.sub(r"\s+", " ", (ROOT / name).read_text())
        assert not [p for p in phrases if p in text], name
    scale = re.sub(r"\s+", " ", (ROOT / "docs" / "study" / "scale.md").read_text())
    table = json.loads((RESULTS / "scale" / "table.json").read_text())
    complete = [col for col in table.values() if col["status"] == "complete"]
    assert "No module does in any completed probe." in scale
    assert not any(m["beats_nulls"] for col in complete for m in col["modules"].values())
    assert "on the hard rubric the table calls nothing" in scale
    rubric = [col for key, col in table.items() if key.startswith("rubric/")]
    assert not any(m["clear"] or m["beats_nulls"] for col in rubric for m in col["modules"].values())
