"""window_pages: the keyset windows behind the stores' filtered reads (read_raw_matching)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracebound.store.port import window_pages


class _Log:
    """Positions ``1..size`` (a few missing), of which ``matching`` match; counts reads."""

    def __init__(self, size: int, matching: set[int], missing: frozenset[int] = frozenset()):
        self.size, self.matching, self.missing = size, matching, missing
        self.windows: list[tuple[int, int]] = []

    def page(self, lo: int, hi: int, limit: int) -> Sequence[Sequence[Any]]:
        self.windows.append((lo, hi))
        hits = [(p,) for p in range(lo, hi + 1) if p in self.matching and p not in self.missing]
        return hits[:limit]

    def read(self, start: int, stop: int | None, *, limit: int = 3, window: int = 5) -> list[int]:
        pages = window_pages(
            lambda lo, hi: self.page(lo, hi, limit),
            lambda: self.size,
            start=start,
            stop=stop,
            limit=limit,
            window=window,
        )
        return [row[0] for rows in pages for row in rows]


def test_every_match_in_order_however_the_windows_and_pages_fall() -> None:
    matching = {1, 2, 3, 4, 5, 6, 9, 20, 21, 22, 23, 47}
    for start, stop in ((1, None), (2, 22), (6, 6), (48, None), (30, 10), (1, 1000)):
        log = _Log(47, matching, missing=frozenset({21}))
        want = sorted(p for p in matching - {21} if p >= start and (stop is None or p <= stop))
        assert log.read(start, stop) == want, (start, stop)


def test_no_statement_looks_at_more_than_a_window_nor_past_the_log_s_end() -> None:
    log = _Log(23, {23})
    assert log.read(1, None, window=5) == [23]
    assert log.windows == [(1, 5), (6, 10), (11, 15), (16, 20), (21, 23)]


def test_a_full_page_continues_after_its_last_row_not_after_its_window() -> None:
    log = _Log(10, set(range(1, 11)))
    assert log.read(1, None, limit=3, window=10) == list(range(1, 11))
    assert log.windows == [(1, 10), (4, 10), (7, 10), (10, 10)]


def test_what_is_appended_while_reading_is_read_too() -> None:
    log = _Log(4, {2, 6})
    pages = window_pages(
        lambda lo, hi: log.page(lo, hi, 3), lambda: log.size, start=1, stop=None, limit=3,
        window=5,
    )  # fmt: skip
    assert next(pages) == [(2,)]
    log.size = 6  # appended after the read reached the end it knew
    assert list(pages) == [[(6,)]]
