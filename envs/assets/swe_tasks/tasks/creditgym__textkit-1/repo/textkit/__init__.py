"""textkit: slugs and truncation for display."""

from textkit.slug import slugify
from textkit.truncate import truncate

__all__ = ["slugify", "truncate"]
__version__ = "2.1.0"
