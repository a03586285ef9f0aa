"""The product's text: the README (at most 300 lines) and the docs site (docs/, mkdocs.yml).

Every ```python block of README.md and docs/**/*.md runs as written, each in a fresh interpreter (SWE blocks need
Docker); the site builds with ``mkdocs build --strict``; every built page loads in headless Chromium with its
pictures; no page names an issue number; links stay inside the repository; module docstrings stay short; each
credit page's table of defaults is its config's.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from creditgym import credit

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 300
#: The bound on a module docstring, in lines as written (the formula, the paper, shapes and defaults).
DOCSTRING_MAX_LINES = 30
SOURCES = [
    p for role in ("agents", "credit", "envs", "verifiers", "creditgym") for p in (ROOT / role).rglob("*.py")
]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', flags=re.M)  # pymdownx.snippets: the file's text, in the block


def code_blocks(text: str, lang: str = "python") -> list[str]:
    """The fenced blocks of ``lang`` in Markdown ``text``, snippets (``--8<-- "path"``) expanded."""
    blocks = re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)
    return [SNIPPET.sub(lambda m: (ROOT / m.group(1)).read_text(), b) for b in blocks]


BLOCKS = [(page, i, block) for page in PAGES for i, block in enumerate(code_blocks(page.read_text()))]


def _needs_docker(block: str) -> bool:
    return "creditgym/SWEBench-v0" in block or "creditgym.verifiers.swe" in block


@pytest.mark.parametrize(
    ("page", "index", "block"),
    [
        pytest.param(page, i, b, marks=[pytest.mark.docker] if _needs_docker(b) else [])
        for page, i, b in BLOCKS
    ],
    ids=[f"{page.relative_to(ROOT)}:{i}" for page, i, _ in BLOCKS],
)
def test_python_block_runs(page: Path, index: int, block: str, request: pytest.FixtureRequest) -> None:
    if _needs_docker(block):
        request.getfixturevalue("base_image")  # skips without an engine locally, fails under CI=true
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=ROOT, timeout=300)
    where = f"{page.relative_to(ROOT)}, python block {index}"
    assert out.returncode == 0, f"{where} failed:\n{block}\n{out.stderr[-3000:]}"


def test_the_readme_and_the_docs_show_python_that_runs() -> None:
    assert len(code_blocks(README.read_text())) >= 2
    assert len(BLOCKS) >= 20
    assert code_blocks('```python\n--8<-- "examples/register_env.py"\n```\n')[0].startswith('"""Register')


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the cap is {README_MAX_LINES}"
    assert lines[2:6] == [  # the first code block: the two commands
        "```bash",
        "make run    # fresh machine: creates .venv, installs creditgym, trains the bundled tiny model on Math-v0 "
        "(CPU, ~2 min)",
        "make test   # installs test needs (Docker engine included: Debian's docker.io + a local base image), "
        "runs the suite",
        "```",
    ]


#: "issue 14", "issues 13 and 14", "(issue 13)", "#14", "issue #14"; not "#### 72" (GSM8K) nor "&#123;"
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+|(?<![\w&#/])#\d+\b", flags=re.I)


def test_the_issue_number_pattern() -> None:
    for text in ("before issue 13", "(issue 14)", "see #14.", "Issue #7", "issues 13"):
        assert ISSUE_NUMBER.search(text), text
    for text in ("#### 72", "&#123;", "an issue with 3 seeds", "page#section", "the issue's power"):
        assert not ISSUE_NUMBER.search(text), text


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_issue_numbers_in_user_facing_text(page: Path) -> None:
    found = [
        f"line {n}: {m.group(0)!r}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for m in ISSUE_NUMBER.finditer(line)
    ]
    assert not found, f"{page.relative_to(ROOT)} names issue numbers: {found}"


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_stay_inside_the_repository(page: Path) -> None:
    """A relative link resolves inside the repository (in the README: to a file that exists; mkdocs --strict checks
    the docs' own links and anchors); no link is absolute or local to one machine."""
    for target in LINK.findall(page.read_text()):
        if re.match(r"https?://", target) or target.startswith("#"):  # the web, or an anchor on the page
            continue
        path = target.split("#")[0]
        assert not path.startswith("/") and ":" not in path, f"{page.name}: link {target!r}"
        resolved = (page.parent / path).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name}: {target!r} points outside the repository"
        if page == README:
            assert resolved.is_file(), f"README.md links {target!r}, which does not exist"


def test_the_readme_links_into_the_docs() -> None:
    linked = {(README.parent / t.split("#")[0]).resolve() for t in LINK.findall(README.read_text())}
    for page in ("index", "getting-started", "concepts", "credit/index", "probe", "study/index", "envs/swe"):
        assert ROOT / "docs" / f"{page}.md" in linked, page


def _docstring_lines(path: Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    return len(doc.splitlines()) if doc else 0


def test_module_docstrings_are_short() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in SOURCES
        if "assets" not in p.parts and (n := _docstring_lines(p)) > DOCSTRING_MAX_LINES
    }
    assert not long, (
        f"module docstrings over {DOCSTRING_MAX_LINES} lines (move the reasoning to docs/): {long}"
    )


def _default(f: dataclasses.Field) -> str:
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
    return f"{type(value).__name__}()" if dataclasses.is_dataclass(value) else repr(value)


@pytest.mark.parametrize("name", credit.available())
def test_each_credit_page_lists_its_config_defaults(name: str) -> None:
    """docs/credit/<name>.md's table "| field | default | meaning |" is the config's fields and defaults, in order."""
    text = (ROOT / "docs" / "credit" / f"{name}.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", text.split("## Defaults", 1)[1].split("\n## ")[0], re.M)
    fields = dataclasses.fields(credit.get(name).config)
    assert rows == [(f.name, _default(f)) for f in fields]


# -- the site --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, needs: Callable[[str], None]) -> Path:
    """The site, built by ``mkdocs build --strict`` into a temporary folder."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        needs(f"mkdocs (pip install -e '.[docs]', or `make install-dev`) beside {sys.executable}")
    out = tmp_path_factory.mktemp("site")
    cmd = [str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir", str(out)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    log = res.stdout + res.stderr
    assert res.returncode == 0 and "WARNING" not in log and "ERROR" not in log, log[-5000:]
    return out


def test_the_site_builds_with_every_page(site: Path) -> None:
    for page in PAGES[1:]:
        rel = page.relative_to(ROOT / "docs").with_suffix("")
        built = site / (rel.parent if rel.name == "index" else rel) / "index.html"
        assert built.is_file(), f"{page.relative_to(ROOT)} was not built"
    assert (
        "CoRT: counterfactual replay" in (site / "api" / "credit" / "index.html").read_text()
    )  # mkdocstrings
    assert (site / "studies" / "results" / "study-chains" / "curves.png").is_file()  # the hook's pictures


class _Recorder(http.server.SimpleHTTPRequestHandler):
    """Serves the site and records ``(path, status)`` of every request."""

    seen: list[tuple[str, int]]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.seen.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


def _driver(needs: Callable[[str], None]):  # -> selenium.webdriver.Chrome
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        needs("Debian's Chromium: apt-get install chromium chromium-driver (`make test-tools`)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        needs("selenium (pip install -e '.[dev]')")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='creditgym-chromium-')}"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def test_every_page_loads_with_its_pictures_in_a_browser(site: Path, needs: Callable[[str], None]) -> None:
    """Each built page, served on loopback, loads in headless Chromium: HTTP 200, a title, no request of it (CSS,
    scripts, images) answered >= 400, nothing fetched from outside, and every <img> decoded (naturalWidth > 0)."""
    from selenium.webdriver.support.ui import WebDriverWait

    seen: list[tuple[str, int]] = []
    handler = functools.partial(type("Handler", (_Recorder,), {"seen": seen}), directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/"
    pages = sorted(p.relative_to(site).parent.as_posix() for p in site.rglob("index.html"))
    driver = _driver(needs)
    pictures = 0
    try:
        for page in pages:
            url = base if page == "." else f"{base}{page}/"
            seen.clear()
            driver.get(url)
            WebDriverWait(driver, 30).until(
                lambda d: d.execute_script(
                    "return document.readyState === 'complete' && [...document.images].every(i => i.complete)"
                )
            )
            assert driver.title.strip(), f"{url}: no title"
            assert seen and seen[0][1] == 200, f"{url}: {seen[:1]}"
            failed = [(path, code) for path, code in seen if code >= 400]
            assert not failed, f"{url}: requests failed: {failed}"
            outside = driver.execute_script(
                "return performance.getEntriesByType('resource').map(e => e.name)"
                ".filter(n => !n.startsWith(arguments[0]) && !n.startsWith('data:') && !n.startsWith('blob:'))",
                base,
            )
            assert not outside, f"{url}: fetched from outside the site: {outside}"
            images = driver.execute_script("return [...document.images].map(i => [i.src, i.naturalWidth])")
            broken = [src for src, width in images if not width]
            assert not broken, f"{url}: pictures that did not load: {broken}"
            pictures += len(images)
    finally:
        driver.quit()
        server.shutdown()
        server.server_close()
    assert len(pages) >= len(PAGES) - 1 and pictures >= 10, (len(pages), pictures)
