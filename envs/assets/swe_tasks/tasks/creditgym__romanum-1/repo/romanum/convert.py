"""Roman numeral conversion in standard form: I V X L C D M with subtractive pairs (IV, IX, XL, XC, CD, CM).

Values from ``MIN_VALUE`` to ``MAX_VALUE`` inclusive are representable; anything else raises ``RomanError``.
"""

from __future__ import annotations

import re

MIN_VALUE = 1
MAX_VALUE = 3999

_NUMERALS: tuple[tuple[int, str], ...] = (
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
)
_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}

# thousands, hundreds, tens, units: each group is one of its ten standard spellings
_STANDARD_FORM = re.compile(
    r"""
    ^M{0,3}
    (CM|CD|D?C{0,3})
    (XC|XL|L?X{0,3})
    (IX|IV|V?I{0,2})$
    """,
    re.VERBOSE,
)


class RomanError(ValueError):
    """A value that has no standard Roman numeral, or a string that is not one."""


def to_roman(number: int) -> str:
    """The standard Roman numeral for ``number``."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise TypeError(f"expected an int, got {type(number).__name__}")
    if not MIN_VALUE <= number < MAX_VALUE:
        raise RomanError(f"{number} is out of range {MIN_VALUE}..{MAX_VALUE}")
    parts = []
    for value, numeral in _NUMERALS:
        count, number = divmod(number, value)
        parts.append(numeral * count)
    return "".join(parts)


def from_roman(text: str) -> int:
    """The integer a standard Roman numeral stands for; case-insensitive, surrounding spaces ignored."""
    numeral = text.strip().upper()
    if not numeral or not _STANDARD_FORM.match(numeral):
        raise RomanError(f"{text!r} is not a standard Roman numeral")
    total = 0
    for i, char in enumerate(numeral):
        value = _VALUES[char]
        if i + 1 < len(numeral) and _VALUES[numeral[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
