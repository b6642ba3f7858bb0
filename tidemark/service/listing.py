"""The dashboard's lists, searched, ordered and cut into pages: usable with 1 000 streams.

    page = page_of_streams(rows, query="shop/", order="lag", page=2)   # rows: stream_json dicts
    page.items, page.number, page.pages, page.matching

Pure functions over the JSON rows the service already makes; only the rows of the
page shown get their charts (the expensive part of a card).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.errors import ConfigurationError

PAGE_SIZE = 25
ORDERS = ("lag", "name")
"""``lag``: streams with no watermark first, then the largest lag; ``name``: by name."""
HELD_BACK_SHOWN = 50


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    number: int
    """1-based, clamped to the pages there are."""
    pages: int
    matching: int
    total: int


def _lag_key(row: Mapping[str, Any]) -> tuple[int, int, str]:
    mark = row.get("watermark")
    if mark is None:
        return (0, 0, row["stream"])
    return (1, -int(mark["lag_ms"]), row["stream"])


def page_of_streams(
    rows: Sequence[dict[str, Any]],
    *,
    query: str = "",
    order: str = "lag",
    page: int = 1,
    size: int = PAGE_SIZE,
) -> Page:
    """The ``page`` of ``rows`` whose stream name contains ``query`` (case-insensitive)."""
    if order not in ORDERS:
        raise ConfigurationError(f"sort={order!r}: one of {', '.join(ORDERS)}")
    needle = query.strip().lower()
    found = [r for r in rows if needle in r["stream"].lower()]
    found.sort(key=_lag_key if order == "lag" else lambda r: r["stream"])
    pages = max(1, -(-len(found) // size))
    number = min(max(1, page), pages)
    start = (number - 1) * size
    return Page(found[start : start + size], number, pages, len(found), len(rows))


def held_back(
    by_stream: Mapping[str, Sequence[Mapping[str, Any]]], limit: int = HELD_BACK_SHOWN
) -> tuple[list[dict[str, Any]], int]:
    """Every stream's laggards in one list, the furthest behind first (at most ``limit``),
    and how many there are in all."""
    rows = [{"stream": s, **r} for s, found in by_stream.items() for r in found]
    rows.sort(key=lambda r: (-int(r.get("behind_ms") or 0), r["stream"], str(r["writer"])))
    return rows[:limit], len(rows)


__all__ = ["HELD_BACK_SHOWN", "ORDERS", "PAGE_SIZE", "Page", "held_back", "page_of_streams"]
