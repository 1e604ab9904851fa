"""Events for comparing the record dicts that different backends give for the same log.

The same events, appended in the same batches, give the same canonical bodies on every
backend; :func:`records_by_mode` reads them back the ways a runner does (every payload,
some kinds' payloads, no payload), with a registry that upcasts an old payload version.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar, Literal
from uuid import UUID

from tracebound.events import EventRegistry
from tracebound.events.catalog import (
    BUILTIN_PAYLOAD_TYPES,
    CostIncurred,
    CostSource,
    MergeOutcome,
)
from tracebound.events.envelope import Event, Payload
from tracebound.ids import StreamId
from tracebound.projections.records import RecordDecoder, read_records
from tracebound.store.port import AppendRequest, LogStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)

RECORD_KEYS = frozenset(
    {
        "correlation_id",
        "event_id",
        "event_type",
        "payload",
        "position",
        "prev_hash",
        "schema_version",
        "stream_id",
        "stream_version",
        "timestamp",
        "workflow_id",
    }
)
ENVELOPE_KEYS = frozenset(
    {
        "event_type",
        "payload",
        "position",
        "schema_version",
        "stream_id",
        "stream_version",
        "timestamp",
        "workflow_id",
    }
)


class NoteV1(Payload):
    """Version 1 of a user type, as written before a rename."""

    kind: Literal["shape_note"] = "shape_note"
    by: str


class NoteV2(Payload):
    """Version 2: ``by`` became ``author``; v1 records are upcast on read."""

    SCHEMA_VERSION: ClassVar[int] = 2
    kind: Literal["shape_note"] = "shape_note"
    author: str


def _rename(v1: dict[str, Any]) -> dict[str, Any]:
    out = dict(v1)
    out["author"] = out.pop("by")
    return out


def registry() -> EventRegistry:
    """The built-in kinds plus :class:`NoteV2` with its upcaster from v1."""
    reg = EventRegistry()
    for cls in BUILTIN_PAYLOAD_TYPES:
        reg.register(cls)
    reg.register(NoteV2)
    reg.register_upcaster("shape_note", 1, _rename)
    return reg


def _payload(i: int) -> Payload:
    match i % 4:
        case 0:
            return CostIncurred(
                tier="direct", amount_usd=Decimal("0.01"), source=CostSource("openai")
            )
        case 1:
            return MergeOutcome(pr_url=f"https://x.test/pr/{i}", decision="merged", reviewer=None)
        case 2:
            return NoteV1(by=f"ana \u2028 {i}")  # an old version, and text JSON escapes oddly
        case _:
            return NoteV2(author="bo")


def batches(n: int = 60) -> list[list[AppendRequest]]:
    """``n`` events in a few batches: workflows and none, correlation ids and none."""
    out: list[list[AppendRequest]] = []
    for begin in range(0, n, 20):
        requests = []
        for i in range(begin, min(begin + 20, n)):
            event = Event.create(
                _payload(i),
                event_id=UUID(int=i + 1),
                timestamp=T0 + timedelta(milliseconds=i),
                workflow_id=None if i % 7 == 0 else f"wf-{i % 3}",
                correlation_id=None if i % 2 else f"corr-{i}",
            )
            requests.append(AppendRequest(StreamId(f"s-{i % 3}"), [event]))
        out.append(requests)
    return out


def fill(store: LogStore) -> None:
    append_batch = getattr(store, "append_batch")  # noqa: B009 - every writable store has it
    for batch in batches():
        append_batch(batch)


MODES: dict[str, frozenset[str] | None] = {
    "every payload": None,
    "some payloads": frozenset({"cost_incurred", "shape_note"}),
    "no payload": frozenset(),
}


def records_by_mode(store: LogStore) -> dict[str, list[dict[str, Any]]]:
    """The store's records read as a runner reads them, in each mode of :data:`MODES`."""
    return {
        mode: list(read_records(store, decoder=RecordDecoder(registry()), payload_kinds=kinds))
        for mode, kinds in MODES.items()
    }


def check_shapes(records: dict[str, list[dict[str, Any]]]) -> None:
    """Every record has exactly the documented keys of its shape."""
    for mode, kinds in MODES.items():
        for record in records[mode]:
            read = kinds is None or record["event_type"] in kinds
            assert record.keys() == (RECORD_KEYS if read else ENVELOPE_KEYS), (mode, record)
            if record["event_type"] == "shape_note" and read:
                assert record["schema_version"] == 2
                assert set(record["payload"]) == {"author", "kind"}  # v1 upcast: no "by"
