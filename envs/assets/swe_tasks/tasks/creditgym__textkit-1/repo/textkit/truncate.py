"""Shorten text for display, ending with an ellipsis."""

from __future__ import annotations


def truncate(text: str, width: int, ellipsis: str = "…") -> str:
    """``text`` cut to at most ``width`` characters, on a word boundary, with ``ellipsis`` appended."""
    if width < len(ellipsis):
        raise ValueError(f"width {width} cannot hold the ellipsis {ellipsis!r}")
    if len(text) <= width:
        return text
    cut = text[: width - len(ellipsis)]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + ellipsis
