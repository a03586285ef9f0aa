"""URL slugs: lower-case ASCII words joined by a separator."""

from __future__ import annotations

import re
import unicodedata

_NOT_WORD = re.compile(r"[^\w\s-]")
_RUNS = re.compile(r"[\s_-]+")


def slugify(text: str, separator: str = "-", max_length: int | None = None, lowercase: bool = True) -> str:
    """A URL-safe slug for ``text``.

    Accents are transliterated (``é`` -> ``e``), other non-ASCII characters and punctuation are dropped,
    and runs of whitespace, underscores and hyphens become one ``separator``. With ``max_length`` the
    slug is cut to at most that many characters, on a word boundary when there is one.
    """
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    if lowercase:
        ascii_text = ascii_text.lower()
    words = _RUNS.sub(" ", _NOT_WORD.sub("", ascii_text)).split()
    slug = separator.join(words)
    if max_length is not None and len(slug) > max_length:
        slug = slug[:max_length]
        if separator in slug:
            slug = slug[: slug.rindex(separator)]
    return slug
