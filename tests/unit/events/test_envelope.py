"""The ADR-0034 envelope: type follows payload, time is aware UTC, the model is closed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest
from pydantic import ValidationError

from tracebound.errors import UnknownEventType, ValidationFailed
from tracebound.events import Event, format_timestamp
from tracebound.events.catalog import BlobErased, MergeOutcome
from tracebound.ids import EventType, Sha256Digest

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)
BLOB = Sha256Digest("sha256:" + "9a" * 32)


def _erased() -> BlobErased:
    return BlobErased(digest=BLOB, reason="retention expired")


def _stored(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "event_id": str(UUID(int=3)),
        "event_type": "blob_erased",
        "workflow_id": None,
        "timestamp": "2026-05-18T12:00:00.000000Z",
        "payload": {"kind": "blob_erased", "digest": BLOB, "reason": "r"},
        "correlation_id": None,
        "schema_version": 1,
    }
    data.update(overrides)
    return data


def test_create_takes_type_and_version_from_the_payload() -> None:
    event = Event.create(_erased(), event_id=UUID(int=1), timestamp=T0, workflow_id="wf")
    assert event.event_type == "blob_erased"
    assert event.schema_version == BlobErased.SCHEMA_VERSION == 1
    assert event.workflow_id == "wf"
    assert event.correlation_id is None
    assert event.event_id == UUID(int=1)


def test_naive_timestamps_are_rejected() -> None:
    naive = datetime(2026, 5, 18, 12, 0)
    with pytest.raises(ValidationError):
        Event.create(_erased(), event_id=UUID(int=1), timestamp=naive)
    with pytest.raises(ValidationError):
        Event.model_validate(_stored(timestamp="2026-05-18T12:00:00"))
    with pytest.raises(ValueError, match="timezone-aware"):
        format_timestamp(naive)


def test_aware_timestamps_are_normalised_to_utc() -> None:
    west = datetime(2026, 5, 18, 5, 0, tzinfo=timezone(timedelta(hours=-7)))
    event = Event.create(_erased(), event_id=UUID(int=1), timestamp=west)
    assert event.timestamp == T0
    assert event.timestamp.utcoffset() == timedelta(0)
    assert format_timestamp(west) == "2026-05-18T12:00:00.000000Z"


def test_event_type_must_match_the_payload_kind() -> None:
    with pytest.raises(ValidationError, match="does not match"):
        Event(
            event_id=UUID(int=1),  # type: ignore[arg-type]
            event_type=EventType("merge_outcome"),
            timestamp=T0,
            payload=_erased(),
        )


def test_a_stored_payload_is_decoded_by_its_own_kind_and_then_checked() -> None:
    # The payload says what it is; an envelope that claims otherwise is refused.
    with pytest.raises(ValidationError, match="does not match"):
        Event.model_validate(_stored(event_type="merge_outcome"))


def test_a_payload_without_kind_is_decoded_by_the_event_type() -> None:
    payload = {"digest": BLOB, "reason": "r"}
    event = Event.model_validate(_stored(payload=payload))
    assert event.payload == BlobErased(digest=BLOB, reason="r")


def test_an_unknown_kind_in_stored_data_is_a_typed_error() -> None:
    with pytest.raises(UnknownEventType):
        Event.model_validate(_stored(event_type="nope", payload={"kind": "nope"}))


def test_bad_payload_data_is_a_typed_error() -> None:
    with pytest.raises(ValidationFailed, match=r"blob_erased\.digest"):
        Event.model_validate(_stored(payload={"kind": "blob_erased", "digest": "x", "reason": "r"}))


def test_envelope_is_frozen_and_closed() -> None:
    event = Event.create(_erased(), event_id=UUID(int=1), timestamp=T0)
    with pytest.raises(ValidationError):
        event.workflow_id = "other"  # type: ignore[assignment, misc]
    with pytest.raises(ValidationError):
        Event.model_validate(_stored(position=5))


def test_payload_objects_are_kept_as_given() -> None:
    merge = MergeOutcome(pr_url="https://example.test/pr/1", decision="modified", reviewer=None)
    event = Event.create(merge, event_id=UUID(int=1), timestamp=T0, correlation_id="c-1")
    assert event.payload is merge
    assert event.correlation_id == "c-1"
    dumped = event.model_dump(mode="json")
    assert dumped["payload"] == {
        "kind": "merge_outcome",
        "pr_url": "https://example.test/pr/1",
        "decision": "modified",
        "reviewer": None,
    }
    assert dumped["event_type"] == "merge_outcome"
