"""pagekit: split a sequence into numbered pages."""

from pagekit.paginator import EmptyPage, InvalidPage, Page, PageNotAnInteger, Paginator

__all__ = ["EmptyPage", "InvalidPage", "Page", "PageNotAnInteger", "Paginator"]
__version__ = "0.3.1"
