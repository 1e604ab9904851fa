"""Projections over a fixture stream, in memory: no ledger, no database, no workflow.

ADR-0034: "each projection is independently testable: given a fixture event stream, assert
the projection's output." :func:`project` is that: it runs projections over events (typed
or record dicts) against an in-memory sink and returns their tables' rows, ordered by key
exactly as :meth:`SQLiteViews.select` orders them. The SQLite runner must agree with it,
and a test holds it to that.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tracebound.events.envelope import Event
from tracebound.projections.base import EventRecord, Key, Projection, Row, Rows, Table
from tracebound.projections.records import records_of

__all__ = ["MemorySink", "project"]


class MemorySink:
    """A :class:`~tracebound.projections.base.RowSink` backed by dicts."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Key, Row]] = {}

    def load(self, table: Table, key: Key) -> Row | None:
        return self.tables.get(table.name, {}).get(key)

    def write(self, tables: Sequence[Table], written: dict[str, list[Row]]) -> None:
        by_name = {t.name: t for t in tables}
        for name, rows in written.items():
            store = self.tables.setdefault(name, {})
            for row in rows:
                store[by_name[name].key_of(row)] = row

    def rows(self, table: Table) -> list[Row]:
        stored = self.tables.get(table.name, {})
        return [stored[k] for k in sorted(stored, key=_sortable)]


def _sortable(key: Key) -> tuple[Any, ...]:
    # None sorts first, as in SQLite; keys of one table are otherwise of one type per column.
    return tuple((v is not None, v) for v in key)


def project(
    projections: Sequence[Projection], events: Iterable[Event | EventRecord]
) -> dict[str, list[Row]]:
    """Run ``projections`` over ``events`` in order; every table's rows, ordered by key."""
    sink = MemorySink()
    rows = {p.name: Rows(sink) for p in projections}
    for record in records_of(events):
        kind = record["event_type"]
        for p in projections:
            if p.kinds is None or kind in p.kinds:
                p.apply(record, rows[p.name])
    for p in projections:
        sink.write(p.tables, rows[p.name].drain())
    return {t.name: sink.rows(t) for p in projections for t in p.tables}
