"""Rich tables that stay readable on a normal-width terminal (80 columns and up).

Rich shrinks every column of a table that is too wide, the short ones included, until
some of them are zero wide: the headers go blank and positions, versions and event types
disappear. :func:`fit` decides instead which columns give way. Every column not named in
``give`` keeps its full width on one line (``no_wrap`` and a ``min_width`` of its widest
cell); the named ones share what is left, each cut with an ellipsis, cropped or folded
onto more lines, and never narrower than :data:`MIN_GIVEN` (or its widest cell). When even
that is too wide, the table drops its outer border and cell padding first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table

__all__ = ["MIN_GIVEN", "Give", "fit", "hoist_date", "short_digest"]

Give = Literal["ellipsis", "crop", "fold"]
"""How a column that gives way shows what does not fit: cut with "…", cut, or wrapped."""

MIN_GIVEN = 8
"""The narrowest a column that gives way becomes (unless all its cells are narrower)."""

_WIDE = 1 << 16


def _width(console: Console, options: ConsoleOptions, renderable: RenderableType) -> int:
    return Measurement.get(console, options, renderable).maximum


def _natural(console: Console, options: ConsoleOptions, column: Column) -> int:
    """The width of the column's widest cell, header included, without padding."""
    cells: list[RenderableType] = [column.header, *column.cells]
    return max(_width(console, options, cell) for cell in cells)


def _share(avail: int, wanted: Sequence[int], floors: Sequence[int]) -> list[int]:
    """Split ``avail`` fairly: each column gets its floor, then the rest is shared, a column
    that wants less than its share keeping only what it wants and leaving the rest."""
    widths = list(floors)
    extra, remaining = avail - sum(floors), len(wanted)
    for i in sorted(range(len(wanted)), key=lambda i: wanted[i] - floors[i]):
        add = min(max(wanted[i] - floors[i], 0), max(extra, 0) // remaining)
        widths[i] += add
        extra -= add
        remaining -= 1
    return widths


def _compact(table: Table) -> None:
    """No outer border, and one space of padding between cells instead of two."""
    table.box = box.SIMPLE_HEAD
    table.show_edge = False
    table.pad_edge = False
    table.padding = (0, 1, 0, 0)


def fit(
    table: Table,
    *,
    give: Mapping[str, Give] | None = None,
    prefer: str | None = None,
    console: Console,
    width: int | None = None,
) -> bool:
    """Lay ``table`` out for ``width`` (default: the console's); False if it cannot fit.

    Call it after the rows are added. ``give`` names (by header) the columns that may be
    shortened, and how; all the others are never shortened. They share the room left
    fairly, except ``prefer``, which is served first (what the others leave above their
    floors).
    """
    give = give or {}
    width = console.width if width is None else width
    options = console.options.update_width(_WIDE)
    columns = table.columns
    naturals = [_natural(console, options, c) for c in columns]
    flexible = [i for i, c in enumerate(columns) if str(c.header) in give]
    floors = [min(naturals[i], max(MIN_GIVEN, cell_len(str(columns[i].header)))) for i in flexible]

    def room() -> int:
        # What the borders and padding take is the table's own width less its cells'.
        overhead = _width(console, options, table) - sum(naturals)
        kept = sum(n for i, n in enumerate(naturals) if i not in flexible)
        return width - overhead - kept

    avail = room()
    if avail < sum(floors):
        _compact(table)
        avail = room()
    for i, column in enumerate(columns):
        if i not in flexible:
            column.no_wrap = True
            column.min_width = naturals[i]
    wanted = [naturals[i] for i in flexible]
    if avail < sum(wanted):  # short of room: a cropped column (a hash) takes only its floor
        wanted = [
            floors[k] if give[str(columns[i].header)] == "crop" else wanted[k]
            for k, i in enumerate(flexible)
        ]
    served = [str(columns[i].header) == prefer for i in flexible]
    if any(served):
        k = served.index(True)
        first = max(floors[k], min(wanted[k], avail - (sum(floors) - floors[k])))
        rest = _share(avail - first, wanted[:k] + wanted[k + 1 :], floors[:k] + floors[k + 1 :])
        shares = [*rest[:k], first, *rest[k:]]
    else:
        shares = _share(avail, wanted, floors)
    for i, share in zip(flexible, shares, strict=True):
        column = columns[i]
        how = give[str(column.header)]
        column.width = share
        column.overflow = how
        column.no_wrap = how != "fold"
    return avail >= sum(floors)


def short_digest(digest: str) -> str:
    """A digest as the tables show it: ``sha256:`` and 12 hex digits, enough to match it by
    eye against an evidence file."""
    return digest[:19]


def utc_text(at: datetime, *, seconds: bool = False) -> str:
    """``at`` in UTC as every table and message shows a time: ``YYYY-MM-DD HH:MM:SS.mmm``,
    or without ``.mmm`` (``seconds``) where a column or a sentence has no room for it.

    The milliseconds are cut, not rounded, so a time is never shown later than recorded.
    The caller marks it as UTC (a ``(UTC)`` column header or ``UTC`` after it); the date may
    go to the title (:func:`hoist_date`). The year is padded by hand, since strftime("%Y")
    writes year 999 as "999" on glibc.
    """
    at = at.astimezone(UTC)
    text = f"{at.year:04d}-{at:%m-%d %H:%M:%S}"
    return text if seconds else f"{text}.{at.microsecond // 1000:03d}"


def hoist_date(stamps: Sequence[str]) -> tuple[str | None, list[str]]:
    """When every timestamp (:func:`utc_text`) is on the same day: that day, and the times
    without it.

    ``"2026-11-23 02:26:24.123"`` becomes ``"02:26:24.123"`` and the day goes to the
    table's title, which leaves a third of the column to the ids beside it.
    """
    days = {s.partition(" ")[0] for s in stamps}
    if len(days) != 1 or not all(" " in s for s in stamps):
        return None, list(stamps)
    return days.pop(), [s.partition(" ")[2] for s in stamps]
