"""The audit trail: one chronological log per workflow, ledger and workflow engine merged.

ADR-0034 keeps workflow-internal events (state transitions, activity retries) in the
workflow engine's history, Temporal or a LangGraph checkpointer, and workflow-spanning ones
in the side-channel ledger; "merging the two on timestamp gives a complete chronological
audit view". Timestamps tie (the engine and the ledger are written in the same millisecond
all the time), so the merge needs a total order that does not depend on read order:

    sort key = (timestamp, source rank, sequence)

* ``timestamp``: UTC, normalised to nanoseconds, ``YYYY-MM-DDTHH:MM:SS.fffffffffZ``, so
  that text order is time order (the ledger's microseconds get three zeros; Temporal keeps
  its nanoseconds; offsets are converted to UTC).
* ``source rank``: the engine (0) before the ledger (1) at the same instant: the engine's
  event is the workflow step, the ledger's the decision or cost recorded about it.
* ``sequence``: the order inside one source: Temporal's ``eventId``; a LangGraph
  checkpoint's rank when its list is sorted by (ts, id) (``list()`` returns newest first,
  and checkpoint ids are time-ordered); the ledger's global ``position``.

The ledger side is the ``audit_trail`` projection (each workflow's events by position
block). Engine histories are imported into ``engine_history`` by
:func:`parse_temporal_history` / :func:`parse_langgraph_checkpoints`, kept apart so that
rebuilding the projection does not drop them. :func:`merge_trail` is the merge, in Python;
the SQL read orders by the same key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tracebound.errors import ContractError
from tracebound.projections.base import Column, EventRecord, Rows, Table

__all__ = [
    "AUDIT_TRAIL",
    "BLOCK_BITS",
    "ENGINE_HISTORY",
    "ENGINE_RANK",
    "LEDGER_RANK",
    "AuditTrailProjection",
    "TrailEntry",
    "engine_entry",
    "ledger_entries",
    "merge_trail",
    "normalise_timestamp",
    "parse_langgraph_checkpoints",
    "parse_temporal_history",
]

ENGINE_RANK: Final = 0
LEDGER_RANK: Final = 1

BLOCK_BITS: Final = 12
"""Ledger trail entries are stored per workflow and block of 4 096 log positions."""

AUDIT_TRAIL = Table(
    "audit_trail",
    (
        Column("workflow_id"),
        Column("block", "integer"),
        Column("entries", "json"),
    ),
    key=("workflow_id", "block"),
)
"""``entries`` is a list of ``[position, timestamp, event_type]`` in position order.

One row per event would make the trail the most expensive view to write by far (an SQL row
per event costs more than reading and decoding the event); one row per workflow and
position block keeps writes to one per workflow per batch, and a row's size bounded. The
block is a function of the position alone, so rows do not depend on how the log was cut
into batches.
"""

ENGINE_HISTORY = Table(
    "engine_history",
    (
        Column("workflow_id"),
        Column("source"),
        Column("seq", "integer"),
        Column("timestamp"),
        Column("event_type"),
        Column("detail", "json", nullable=True),
    ),
    key=("workflow_id", "source", "seq"),
)
"""Imported engine events; owned by no projection, so a rebuild keeps them."""

_TS = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$"
)


def normalise_timestamp(text: str) -> str:
    """Any RFC 3339 instant as UTC with nine fractional digits; text order is time order.

    Raises:
        ContractError: not an RFC 3339 timestamp with a zone.
    """
    m = _TS.match(text)
    if m is None:
        raise ContractError(f"not an RFC 3339 timestamp with a time zone: {text!r}")
    day, clock, frac, zone = m.groups()
    nanos = (frac or "").ljust(9, "0")
    try:
        # Parsed even in UTC: the pattern lets "02-30" and "24:00" through.
        utc = datetime.fromisoformat(f"{day}T{clock}{zone.upper()}").astimezone(UTC)
    except (ValueError, OverflowError) as exc:  # OverflowError: before year 1 or after 9999
        raise ContractError(f"not a usable RFC 3339 timestamp: {text!r} ({exc})") from None
    # The year padded by hand: strftime("%Y") gives "999" on glibc, which sorts after "1990".
    return f"{utc.year:04d}-{utc:%m-%dT%H:%M:%S}.{nanos}Z"


class AuditTrailProjection:
    """Every workflow-scoped ledger event's place in its workflow's trail.

    The payload is not copied: the trail reader fetches it from the ledger by position,
    where the chain covers it.
    """

    name = "audit_trail"
    version = 1
    tables = (AUDIT_TRAIL,)
    kinds: frozenset[str] | None = None
    reads_payload = False  # the envelope is enough: payloads need not be parsed for it

    def apply(self, record: EventRecord, rows: Rows) -> None:
        wf = record["workflow_id"]
        if wf is None:
            return
        position: int = record["position"]
        key = (wf, position >> BLOCK_BITS)
        row = rows.get(AUDIT_TRAIL, key)
        if row is None:
            row = {"workflow_id": wf, "block": key[1], "entries": []}
        row["entries"].append([position, record["timestamp"], record["event_type"]])
        rows.put(AUDIT_TRAIL, key, row)

    def apply_many(self, records: Sequence[EventRecord], rows: Rows) -> None:
        """:meth:`apply` over a batch: one row lookup per run of a workflow's events."""
        current: tuple[str, int] | None = None
        entries: list[list[Any]] = []
        for record in records:
            wf = record["workflow_id"]
            if wf is None:
                continue
            position: int = record["position"]
            key = (wf, position >> BLOCK_BITS)
            if key != current:
                current = key
                row = rows.get(AUDIT_TRAIL, key)
                if row is None:
                    row = {"workflow_id": wf, "block": key[1], "entries": []}
                rows.put(AUDIT_TRAIL, key, row)  # marks it written; appended to in place
                entries = row["entries"]
            entries.append([position, record["timestamp"], record["event_type"]])


@dataclass(frozen=True, slots=True)
class TrailEntry:
    """One line of a workflow's merged audit trail."""

    timestamp: str  # normalised, see normalise_timestamp
    rank: int
    seq: int
    source: str  # "ledger", "temporal" or "langgraph"
    event_type: str
    position: int | None = None  # ledger entries only
    detail: Any = None

    @property
    def sort_key(self) -> tuple[str, int, int]:
        return (self.timestamp, self.rank, self.seq)

    def to_dict(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "source": self.source,
            "seq": self.seq,
            "event_type": self.event_type,
            "position": self.position,
            "detail": self.detail,
        }


def merge_trail(*sources: Iterable[TrailEntry]) -> list[TrailEntry]:
    """Merge trail entries from any sources into the one total order (see module doc)."""
    return sorted((e for src in sources for e in src), key=lambda e: e.sort_key)


def _temporal_events(history: Any) -> Sequence[Mapping[str, Any]]:
    events = history.get("events") if isinstance(history, Mapping) else history
    if not isinstance(events, Sequence) or isinstance(events, str | bytes):
        raise ContractError("a Temporal history is {'events': [...]} or a list of events")
    return events


_MAX_SEQ: Final = 2**63 - 1  # engine_history.seq is a signed 64-bit INTEGER


def _sequence_number(value: Any, i: int) -> int:
    """An ``eventId`` as written: an int, or its decimal text (protobuf JSON's int64).

    Raises:
        ContractError: anything else (a float, which int() would cut or refuse, a bool,
            a number outside 0 to 2**63-1, text with a sign, spaces or non-ASCII digits).
    """
    text = value if isinstance(value, str) else None
    if type(value) is int or (text is not None and text.isascii() and text.isdigit()):
        n = int(value) if text is None or len(text) <= len(str(_MAX_SEQ)) else -1
        if 0 <= n <= _MAX_SEQ:
            return n
    raise ContractError(
        f"Temporal history event {i}: eventId {value!r:.40} is not a sequence number "
        "(an integer from 0 to 2**63-1, or its decimal text)"
    )


def parse_temporal_history(history: Any, *, workflow_id: str) -> list[dict[str, Any]]:
    """A Temporal history export (``temporal workflow show -o json``) as engine rows.

    Reads ``eventId``, ``eventTime`` and ``eventType`` of each event, and keeps its
    ``…EventAttributes`` object as the detail. ``EVENT_TYPE_WORKFLOW_EXECUTION_STARTED`` and
    ``WorkflowExecutionStarted`` (older exports) are both accepted and kept as given.

    Raises:
        ContractError: the document is not a Temporal history.
    """
    out = []
    for i, event in enumerate(_temporal_events(history)):
        try:
            seq = _sequence_number(event["eventId"], i)
            ts = normalise_timestamp(str(event["eventTime"]))
            etype = str(event["eventType"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ContractError(f"Temporal history event {i}: {exc!r}") from exc
        attrs = next(
            (v for k, v in event.items() if k.endswith("EventAttributes")),
            None,
        )
        out.append(
            {
                "workflow_id": workflow_id,
                "source": "temporal",
                "seq": seq,
                "timestamp": ts,
                "event_type": etype,
                "detail": attrs,
            }
        )
    return out


def parse_langgraph_checkpoints(checkpoints: Any, *, workflow_id: str) -> list[dict[str, Any]]:
    """LangGraph checkpoints (dicts with ``ts``, ``id`` and ``metadata``) as engine rows.

    A checkpoint tuple's shape (``{"checkpoint": {...}, "metadata": {...}}``) is accepted
    too. The event type is ``checkpoint.<metadata.source>`` (``input``, ``loop``,
    ``update``); the detail is the id and the metadata.

    Raises:
        ContractError: an entry has no usable ``ts`` or ``id``.
    """
    if not isinstance(checkpoints, Sequence) or isinstance(checkpoints, str | bytes):
        raise ContractError("LangGraph checkpoints are a list of checkpoint dicts")
    parsed = []
    for i, entry in enumerate(checkpoints):
        try:
            inner = entry.get("checkpoint", entry)
            metadata = entry.get("metadata") or inner.get("metadata") or {}
            ts = normalise_timestamp(str(inner["ts"]))
            cid = str(inner["id"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise ContractError(f"LangGraph checkpoint {i}: {exc!r}") from exc
        source = metadata.get("source", "") if isinstance(metadata, Mapping) else ""
        parsed.append((ts, cid, source, metadata))
    parsed.sort(key=lambda t: (t[0], t[1]))
    return [
        {
            "workflow_id": workflow_id,
            "source": "langgraph",
            "seq": seq,
            "timestamp": ts,
            "event_type": f"checkpoint.{source}" if source else "checkpoint",
            "detail": {"id": cid, "metadata": metadata},
        }
        for seq, (ts, cid, source, metadata) in enumerate(parsed, start=1)
    ]


def ledger_entries(rows: Iterable[Mapping[str, Any]]) -> list[TrailEntry]:
    """``audit_trail`` rows (of one workflow) as trail entries, in position order."""
    out = [
        TrailEntry(
            timestamp=normalise_timestamp(ts),
            rank=LEDGER_RANK,
            seq=position,
            source="ledger",
            event_type=event_type,
            position=position,
        )
        for row in rows
        for position, ts, event_type in row["entries"]
    ]
    out.sort(key=lambda e: e.seq)
    return out


def engine_entry(row: Mapping[str, Any]) -> TrailEntry:
    """An ``engine_history`` row as a trail entry."""
    return TrailEntry(
        timestamp=row["timestamp"],
        rank=ENGINE_RANK,
        seq=row["seq"],
        source=row["source"],
        event_type=row["event_type"],
        detail=row["detail"],
    )
