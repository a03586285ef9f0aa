"""romanum: integers to Roman numerals and back."""

from romanum.convert import MAX_VALUE, MIN_VALUE, RomanError, from_roman, to_roman

__all__ = ["MAX_VALUE", "MIN_VALUE", "RomanError", "from_roman", "to_roman"]
__version__ = "1.2.0"
