"""A small paginator, modelled on Django's.

``orphans`` lets a short last page join the page before it: with 23 items, 10 per page and
``orphans=3``, there are two pages and the second holds 13 items.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class InvalidPage(ValueError):
    """A page number that cannot be served."""


class PageNotAnInteger(InvalidPage):
    """The page number is not an integer."""


class EmptyPage(InvalidPage):
    """The page number is outside 1..num_pages."""


@dataclass(frozen=True)
class Page(Generic[T]):
    number: int
    items: list[T]
    paginator: Paginator[T]

    def __len__(self) -> int:
        return len(self.items)

    def has_next(self) -> bool:
        return self.number < self.paginator.num_pages

    def has_previous(self) -> bool:
        return self.number > 1

    def start_index(self) -> int:
        """1-based index of the first item on this page (0 when the page is empty)."""
        if not self.items:
            return 0
        return (self.number - 1) * self.paginator.per_page + 1

    def end_index(self) -> int:
        """1-based index of the last item on this page."""
        if self.number == self.paginator.num_pages:
            return self.paginator.count
        return self.number * self.paginator.per_page


class Paginator(Generic[T]):
    def __init__(
        self, items: Sequence[T], per_page: int, orphans: int = 0, allow_empty_first_page: bool = True
    ) -> None:
        if per_page < 1:
            raise ValueError(f"per_page must be at least 1, got {per_page}")
        if not 0 <= orphans < per_page:
            raise ValueError(f"orphans must be in 0..per_page-1, got {orphans}")
        self.items = items
        self.per_page = per_page
        self.orphans = orphans
        self.allow_empty_first_page = allow_empty_first_page

    @property
    def count(self) -> int:
        return len(self.items)

    @property
    def num_pages(self) -> int:
        if self.count == 0 and not self.allow_empty_first_page:
            return 0
        hits = max(1, self.count - self.orphans)
        return math.ceil(hits / self.per_page)

    @property
    def page_range(self) -> range:
        return range(1, self.num_pages + 1)

    def validate_number(self, number: object) -> int:
        if isinstance(number, float) and number.is_integer():
            number = int(number)
        if not isinstance(number, int) or isinstance(number, bool):
            raise PageNotAnInteger(f"page number {number!r} is not an integer")
        if number < 1:
            raise EmptyPage(f"page {number} is less than 1")
        if number > self.num_pages and not (number == 1 and self.allow_empty_first_page):
            raise EmptyPage(f"page {number} is past the last page ({self.num_pages})")
        return number

    def page(self, number: object) -> Page[T]:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans > self.count:
            top = self.count
        return Page(number, list(self.items[bottom:top]), self)

    def __iter__(self) -> Iterator[Page[T]]:
        for number in self.page_range:
            yield self.page(number)
