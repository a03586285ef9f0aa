"""MkDocs hook: the study's pictures and the API reference's sources, without copies in docs/.

- ``on_startup``: lays out ``build/docs-api/creditgym/`` as the installed package (``creditgym.credit`` is
  ``credit/``, ...) with symbolic links, so mkdocstrings reads the sources statically.
- ``on_files``: every ``studies/results/**/*.png`` that a page names becomes part of the site at the same path
  (a page in ``docs/study/`` links it as ``../studies/results/...``).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
#: creditgym.<name> -> the repository folder it is installed from (pyproject's package-dir)
PACKAGES = {"credit": "credit", "agents": "agents", "envs": "envs", "verifiers": "verifiers"}
PICTURE = re.compile(r"studies/results/[\w./-]+?\.png")


def api_tree(root: Path, out: Path) -> Path:
    """``out/creditgym``: links to the files of ``root/creditgym`` and to each package folder; returns ``out``."""
    pkg = out / "creditgym"
    pkg.mkdir(parents=True, exist_ok=True)
    targets = {p.name: p for p in (root / "creditgym").iterdir() if p.name != "__pycache__"}
    targets |= {name: root / folder for name, folder in PACKAGES.items()}
    for name, target in targets.items():
        link = pkg / name
        if link.is_symlink() and link.resolve() == target.resolve():
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return out


def on_startup(command: str, dirty: bool) -> None:  # before mkdocstrings reads its paths (on_config)
    api_tree(ROOT, ROOT / "build" / "docs-api")


def pictures(pages: list[str]) -> list[str]:
    """The ``studies/results/...png`` paths the pages' text names, each once, sorted."""
    return sorted({m.group(0) for text in pages for m in PICTURE.finditer(text)})


def on_files(files: Files, config: MkDocsConfig) -> Files:
    texts = [Path(f.abs_src_path).read_text() for f in files.documentation_pages() if f.abs_src_path]
    for uri in pictures(texts):
        src = ROOT / uri
        if not src.is_file():  # a page naming a missing picture: mkdocs --strict reports the broken link
            continue
        files.append(File.generated(config, uri, abs_src_path=str(src)))
    return files
