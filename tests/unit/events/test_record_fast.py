"""The append path's shortcuts in events/record.py give exactly the bytes of the plain path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from uuid import UUID

from hypothesis import given
from hypothesis import strategies as st

from tracebound.canonical import canonical_bytes
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.envelope import Event, format_timestamp
from tracebound.events.payload_json import payload_json
from tracebound.events.record import (
    LedgerFields,
    _timestamp_text,
    _workflow_json,
    event_prefix,
)
from tracebound.ids import StepId

_aware = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from(
        [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))]
    ),
)


@given(_aware)
def test_timestamp_text_is_format_timestamp(value: datetime) -> None:
    assert _timestamp_text(value) == format_timestamp(value)
    assert _timestamp_text(value.astimezone(UTC)) == format_timestamp(value)


def test_timestamp_text_edge_cases() -> None:
    for value in (
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),  # microsecond 0: isoformat still writes .000000
        datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ):
        assert _timestamp_text(value) == format_timestamp(value)


@given(st.one_of(st.none(), st.text(max_size=40)))
def test_workflow_json_is_canonical(value: str | None) -> None:
    expected = b"null" if value is None else canonical_bytes(value)
    assert _workflow_json(value) == expected
    assert _workflow_json(value) == expected  # cached


@given(
    st.decimals(min_value=0, max_value=10**6, places=6, allow_nan=False),
    st.text(alphabet='abcXYZ019:/-_ é"\\', min_size=1, max_size=60),
    st.integers(min_value=0, max_value=2**40),
    st.datetimes(timezones=st.just(UTC)),
    st.uuids(),
    st.one_of(st.none(), st.text(max_size=20)),
)
def test_prefix_and_fields_match_the_plain_path(
    amount: Decimal, text: str, tokens: int, when: datetime, event_id: UUID, wf: str | None
) -> None:
    payload = CostIncurred(
        tier="direct",
        amount_usd=amount,
        source=CostSource(text),
        tokens_in=tokens,
        tokens_out=1,
        model=text,
        role="Executor",
        step_id=StepId(text),
    )
    assert payload_json(payload) == payload.model_dump(mode="json")
    event = Event.create(payload, event_id=event_id, timestamp=when, workflow_id=wf)
    prefix = event_prefix(event)
    plain = canonical_bytes(
        {
            "correlation_id": event.correlation_id,
            "event_id": str(event.event_id),
            "event_type": event.event_type,
            "payload": payload.model_dump(mode="json"),
        }
    )
    assert prefix == plain[:-1]
    fields = LedgerFields(event)
    assert fields.timestamp == canonical_bytes(format_timestamp(event.timestamp))
    assert fields.timestamp_text == format_timestamp(event.timestamp)
    assert fields.workflow_id == (b"null" if wf is None else canonical_bytes(wf))
