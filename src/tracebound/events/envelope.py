"""The event envelope of ADR-0034 and the ledger record that wraps it.

An :class:`Event` is what a producer writes: an id, a type, a workflow, a time and a
typed payload. A :class:`RecordedEvent` is what the ledger gives back: the same event plus
the fields the store assigned (stream, version, position) and the BLAKE3 chain link.

Ids and time are passed in, never made here: replay must produce identical bytes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar, Self
from uuid import UUID

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from tracebound.ids import (
    ChainHead,
    CorrelationId,
    EventId,
    EventType,
    Position,
    StreamId,
    StreamVersion,
    WorkflowId,
)

__all__ = ["Event", "Payload", "RecordedEvent", "format_timestamp"]


class Payload(BaseModel):
    """Base of every event payload: frozen, closed, tagged by ``kind``.

    Subclasses declare ``kind: Literal["snake_name"] = "snake_name"``; that string is the
    event's ``event_type``. ``SCHEMA_VERSION`` is bumped when a field is renamed or made
    required; an upcaster registered for the old version keeps old records readable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)

    SCHEMA_VERSION: ClassVar[int] = 1

    kind: str


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds: the one textual form of time in hashed data."""
    if value.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    v = value.astimezone(UTC)
    # Formatted by hand: strftime("%Y") does not zero-pad years before 1000 on glibc.
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T"
        f"{v.hour:02d}:{v.minute:02d}:{v.second:02d}.{v.microsecond:06d}Z"
    )


class Event(BaseModel):
    """An event as a producer writes it (ADR-0034 envelope)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: EventId
    event_type: EventType
    workflow_id: WorkflowId | None = None
    timestamp: AwareDatetime
    payload: SerializeAsAny[Payload]
    correlation_id: CorrelationId | None = None
    schema_version: int = 1

    @classmethod
    def create(
        cls,
        payload: Payload,
        *,
        event_id: UUID,
        timestamp: datetime,
        workflow_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Self:
        """Build an event whose type and schema version come from its payload."""
        return cls(
            event_id=EventId(event_id),
            event_type=EventType(payload.kind),
            workflow_id=None if workflow_id is None else WorkflowId(workflow_id),
            timestamp=timestamp,
            payload=payload,
            correlation_id=None if correlation_id is None else CorrelationId(correlation_id),
            schema_version=type(payload).SCHEMA_VERSION,
        )

    @field_validator("timestamp")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        try:
            return value.astimezone(UTC)
        except OverflowError:  # 0001-01-01T00:00+01:00 has no UTC form
            raise ValueError("timestamp is out of range in UTC") from None

    @model_validator(mode="before")
    @classmethod
    def _resolve_payload(cls, data: Any) -> Any:
        # A payload given as a mapping is resolved through the registry by its `kind`,
        # so a user-registered type round-trips exactly like a built-in one.
        if isinstance(data, dict) and isinstance(data.get("payload"), dict):
            from tracebound.events.registry import default_registry  # noqa: PLC0415 - cycle

            raw = data["payload"]
            kind = raw.get("kind", data.get("event_type"))
            version = data.get("schema_version", 1)
            decoded = default_registry().decode_payload(kind, version, raw)
            # The in-memory event describes the payload it holds, which is now current;
            # the stored bytes (what the chain verifies) keep the version they were written at.
            data = {**data, "payload": decoded, "schema_version": type(decoded).SCHEMA_VERSION}
        return data

    @model_validator(mode="after")
    def _type_matches_payload(self) -> Self:
        if self.event_type != self.payload.kind:
            raise ValueError(
                f"event_type {self.event_type!r} does not match payload kind {self.payload.kind!r}"
            )
        return self


class RecordedEvent(Event):
    """An event as the ledger stores it: the envelope plus the fields the store assigned.

    ``hash = blake3(prev_hash || canonical_json(record without hash))`` (ADR-0005), where the
    record is this model's fields in RFC 8785 form (see :mod:`tracebound.events.record`).
    """

    # Hashes are raw bytes in Python and lower-case hex in JSON.
    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="hex", val_json_bytes="hex"
    )

    stream_id: StreamId
    stream_version: StreamVersion
    position: Position
    prev_hash: ChainHead
    hash: ChainHead
