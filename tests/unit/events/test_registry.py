"""EventRegistry: registration rules, unknown kinds, upcasting, and user-defined types."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, ClassVar, Literal
from uuid import UUID

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import tracebound.events.registry as registry_module
from tracebound.errors import (
    ContractError,
    EventTypeError,
    IntegrityError,
    TraceboundError,
    UnknownEventType,
    UpcastError,
    ValidationFailed,
)
from tracebound.events import Event, EventRegistry, Payload, default_registry, register_event
from tracebound.events.anchor import Money
from tracebound.events.catalog import BUILTIN_PAYLOAD_TYPES, BlobErased
from tracebound.events.record import LedgerFields, decode_record, event_prefix, record_suffix

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


@pytest.fixture
def isolated_default_registry(monkeypatch: pytest.MonkeyPatch) -> EventRegistry:
    """A default registry holding only the built-ins, restored after the test.

    ``Event`` resolves dict payloads through the default registry, so a user-type test has
    to register there; this keeps that registration from leaking into other tests.
    """
    fresh = EventRegistry()
    for cls in BUILTIN_PAYLOAD_TYPES:
        fresh.register(cls)
    monkeypatch.setattr(registry_module, "_DEFAULT", fresh)  # monkeypatch restores it
    return fresh


class TicketV1(Payload):
    kind: Literal["ticket_opened"] = "ticket_opened"
    title: str


class TicketV2(Payload):
    """v2 split ``title`` into ``summary`` and added a required ``priority``."""

    SCHEMA_VERSION: ClassVar[int] = 2

    kind: Literal["ticket_opened"] = "ticket_opened"
    summary: str
    priority: int


class TicketV3(Payload):
    SCHEMA_VERSION: ClassVar[int] = 3

    kind: Literal["ticket_opened"] = "ticket_opened"
    summary: str
    priority: int
    budget_usd: Money


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {"kind": data["kind"], "summary": data["title"], "priority": 3}


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "budget_usd": "0"}


# --- registration -------------------------------------------------------------------------


def test_register_returns_the_class_and_is_idempotent_for_the_same_class() -> None:
    reg = EventRegistry()
    assert reg.register(TicketV1) is TicketV1
    assert reg.register(TicketV1) is TicketV1
    assert reg.kinds() == ["ticket_opened"]
    assert "ticket_opened" in reg
    assert reg.get("ticket_opened") is TicketV1


def test_a_second_class_for_a_kind_is_refused() -> None:
    reg = EventRegistry()
    reg.register(TicketV1)
    with pytest.raises(EventTypeError, match="already registered"):
        reg.register(TicketV2)
    assert reg.get("ticket_opened") is TicketV1


def test_a_user_type_cannot_take_a_builtin_kind() -> None:
    class FakeErasure(Payload):
        kind: Literal["blob_erased"] = "blob_erased"
        digest: str

    with pytest.raises(EventTypeError):
        default_registry().register(FakeErasure)
    assert default_registry().get("blob_erased") is BlobErased


class _Score(BaseModel):
    value: float


class _WithFloat(Payload):
    kind: Literal["with_float"] = "with_float"
    score: float


class _WithOptionalFloat(Payload):
    kind: Literal["with_optional_float"] = "with_optional_float"
    score: float | None = None


class _WithNestedFloat(Payload):
    kind: Literal["with_nested_float"] = "with_nested_float"
    scores: list[_Score]


class _WithFloatMap(Payload):
    kind: Literal["with_float_map"] = "with_float_map"
    scores: dict[str, float]


@pytest.mark.parametrize(
    "cls",
    [_WithFloat, _WithOptionalFloat, _WithNestedFloat, _WithFloatMap],
    ids=lambda c: c.__name__,
)
def test_float_bearing_payloads_are_refused(cls: type[Payload]) -> None:
    reg = EventRegistry()
    with pytest.raises(EventTypeError, match="floats"):
        reg.register(cls)
    assert reg.kinds() == []


def test_decimal_money_is_accepted_because_it_serialises_as_a_string() -> None:
    reg = EventRegistry()
    reg.register(TicketV3)
    assert reg.kinds() == ["ticket_opened"]


def test_a_payload_without_a_kind_default_is_refused() -> None:
    class NoKind(Payload):
        title: str

    class EmptyKind(Payload):
        kind: Literal[""] = ""

    for cls in (NoKind, EmptyKind):
        with pytest.raises(EventTypeError, match="kind"):
            EventRegistry().register(cls)


def test_registry_errors_are_contract_errors() -> None:
    assert issubclass(UnknownEventType, EventTypeError)
    assert issubclass(EventTypeError, ContractError)
    assert issubclass(UpcastError, ContractError)
    assert issubclass(ValidationFailed, ContractError)


# --- lookup and decoding -------------------------------------------------------------------


def test_unknown_kind_raises() -> None:
    reg = EventRegistry()
    with pytest.raises(UnknownEventType, match="nope"):
        reg.get("nope")
    with pytest.raises(UnknownEventType):
        reg.decode_payload("nope", 1, {"kind": "nope"})
    with pytest.raises(UnknownEventType):
        default_registry().decode_payload("no_such_builtin", 1, {})


def test_invalid_payload_data_is_a_typed_error_naming_the_field() -> None:
    reg = EventRegistry()
    reg.register(TicketV2)
    with pytest.raises(ValidationFailed) as info:
        reg.decode_payload("ticket_opened", 2, {"kind": "ticket_opened", "summary": "s"})
    assert info.value.field == "ticket_opened.priority"


def test_upcaster_chain_brings_v1_data_to_the_current_version() -> None:
    reg = EventRegistry()
    reg.register(TicketV3)
    reg.register_upcaster("ticket_opened", 1, _v1_to_v2)
    reg.register_upcaster("ticket_opened", 2, _v2_to_v3)
    v1 = TicketV1(title="disk full").model_dump(mode="json")
    assert reg.decode_payload("ticket_opened", 1, v1) == TicketV3(
        summary="disk full", priority=3, budget_usd=Decimal(0)
    )
    v2 = TicketV2(summary="cpu hot", priority=1).model_dump(mode="json")
    assert reg.decode_payload("ticket_opened", 2, v2) == TicketV3(
        summary="cpu hot", priority=1, budget_usd=Decimal(0)
    )
    current = {"kind": "ticket_opened", "summary": "s", "priority": 2, "budget_usd": "1.5"}
    assert reg.decode_payload("ticket_opened", 3, current).budget_usd == Decimal("1.5")  # type: ignore[attr-defined]


def test_upcasting_does_not_mutate_the_callers_data() -> None:
    reg = EventRegistry()
    reg.register(TicketV2)
    reg.register_upcaster("ticket_opened", 1, _v1_to_v2)
    data = {"kind": "ticket_opened", "title": "t"}
    reg.decode_payload("ticket_opened", 1, data)
    assert data == {"kind": "ticket_opened", "title": "t"}


def test_a_missing_upcaster_is_an_upcast_error() -> None:
    reg = EventRegistry()
    reg.register(TicketV3)
    reg.register_upcaster("ticket_opened", 1, _v1_to_v2)  # but no v2 -> v3
    with pytest.raises(UpcastError, match="v2 -> v3"):
        reg.decode_payload("ticket_opened", 1, {"kind": "ticket_opened", "title": "t"})


def test_a_newer_version_than_the_reader_knows_is_an_upcast_error() -> None:
    reg = EventRegistry()
    reg.register(TicketV2)
    with pytest.raises(UpcastError, match="newer"):
        reg.decode_payload("ticket_opened", 3, {"kind": "ticket_opened"})


def test_a_newer_user_type_says_to_upgrade_the_code_that_defines_it() -> None:
    # An older deploy of a team's own code reading what a newer deploy wrote: upgrading
    # tracebound would not help; the message names the class whose newer version is needed.
    reg = EventRegistry()
    reg.register(TicketV2)
    with pytest.raises(UpcastError) as info:
        reg.decode_payload("ticket_opened", 3, {"kind": "ticket_opened"})
    assert "upgrade tracebound" not in str(info.value)
    assert "TicketV2" in str(info.value)
    builtin = default_registry().get("gate_requested")
    with pytest.raises(UpcastError, match="upgrade tracebound"):
        default_registry().decode_payload(
            "gate_requested", builtin.SCHEMA_VERSION + 1, {"kind": "gate_requested"}
        )


def test_a_record_that_cannot_be_upcast_names_its_position() -> None:
    reg = EventRegistry()
    reg.register(TicketV3)  # no upcasters: a stored v1 record cannot be read
    event = Event.create(
        TicketV1(title="t"), event_id=UUID(int=1), timestamp=datetime(2026, 1, 1, tzinfo=UTC)
    )
    body = event_prefix(event) + record_suffix(
        LedgerFields(event), position=7, prev_hash=bytes(32), stream_id_json=b'"s"',
        stream_version=1,
    )  # fmt: skip
    with pytest.raises(UpcastError, match=r"position 7 \(stream 's' v1\)"):
        decode_record(body, bytes(32), reg)


def test_a_failing_upcaster_is_reported_as_an_upcast_error() -> None:
    reg = EventRegistry()
    reg.register(TicketV2)
    reg.register_upcaster("ticket_opened", 1, _v1_to_v2)
    with pytest.raises(UpcastError, match="failed") as info:
        reg.decode_payload("ticket_opened", 1, {"kind": "ticket_opened"})  # no "title"
    assert isinstance(info.value.__cause__, KeyError)


def test_an_upcaster_is_registered_once() -> None:
    reg = EventRegistry()
    reg.register_upcaster("ticket_opened", 1, _v1_to_v2)
    with pytest.raises(EventTypeError, match="already"):
        reg.register_upcaster("ticket_opened", 1, _v1_to_v2)


# --- user types through the envelope ----------------------------------------------------------


def test_user_type_round_trips_through_event_model_validate(
    isolated_default_registry: EventRegistry,
) -> None:
    @register_event
    class DeployRequested(Payload):
        kind: Literal["deploy_requested"] = "deploy_requested"
        service: str
        replicas: int
        cost_usd: Money

    assert isolated_default_registry.get("deploy_requested") is DeployRequested
    event = Event.create(
        DeployRequested(service="api", replicas=3, cost_usd=Decimal("12.50")),
        event_id=UUID(int=7),
        timestamp=T0,
        workflow_id="wf-9",
    )
    again = Event.model_validate(event.model_dump(mode="json"))
    assert again == event
    assert isinstance(again.payload, DeployRequested)
    assert again.payload.cost_usd == Decimal("12.50")
    assert b'"cost_usd":"12.50"' in event_prefix(event)


def test_user_type_upcasts_through_event_model_validate(
    isolated_default_registry: EventRegistry,
) -> None:
    register_event(TicketV2)
    isolated_default_registry.register_upcaster("ticket_opened", 1, _v1_to_v2)
    stored = {
        "event_id": str(UUID(int=1)),
        "event_type": "ticket_opened",
        "timestamp": "2026-05-18T12:00:00.000000Z",
        "payload": {"kind": "ticket_opened", "title": "old"},
        "schema_version": 1,
    }
    event = Event.model_validate(stored)
    assert event.payload == TicketV2(summary="old", priority=3)


def test_an_upcast_event_survives_a_second_round_trip(
    isolated_default_registry: EventRegistry,
) -> None:
    register_event(TicketV2)
    isolated_default_registry.register_upcaster("ticket_opened", 1, _v1_to_v2)
    stored = {
        "event_id": str(UUID(int=1)),
        "event_type": "ticket_opened",
        "timestamp": "2026-05-18T12:00:00.000000Z",
        "payload": {"kind": "ticket_opened", "title": "old"},
        "schema_version": 1,
    }
    event = Event.model_validate(stored)
    assert Event.model_validate(event.model_dump(mode="json")) == event
    assert event.schema_version == TicketV2.SCHEMA_VERSION


def test_isolation_fixture_leaves_the_real_default_registry_alone() -> None:
    assert "deploy_requested" not in default_registry()


# A stored record as the ledger writes it; whoever holds the store can rewrite any field.
_STORED: dict[str, Any] = {
    "correlation_id": None, "event_id": "da8dcd7b-e651-43df-bd76-5cb218007423",
    "event_type": "cost_incurred", "position": 2, "prev_hash": "00" * 32,
    "schema_version": 1, "stream_id": "run-1", "stream_version": 2,
    "timestamp": "2026-11-29T11:30:06.417360Z", "workflow_id": None,
    "payload": {"amount_usd": "0.7", "cached_input_tokens": None, "kind": "cost_incurred",
                "model": None, "reasoning_tokens": None, "role": None, "source": "s",
                "step_id": None, "tier": "direct", "tokens_in": None, "tokens_out": None},
}  # fmt: skip
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


@pytest.mark.parametrize(
    "field",
    ["event_id", "timestamp", "prev_hash", "stream_version", "position", "stream_id",
     "workflow_id", "correlation_id"],
)  # fmt: skip
@pytest.mark.parametrize("value", [[], {}, 1.5, True])
def test_a_stored_field_of_another_json_type_is_an_integrity_error(
    field: str, value: object
) -> None:
    # Read back as it stood, a list would have been the event's stream version or stream id
    # (the fields are not validated again), and a number its event id crashed UUID().
    body = orjson.dumps({**_STORED, field: value})
    with pytest.raises(IntegrityError, match="cannot be decoded"):
        decode_record(body, bytes(32))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_rewritten_stored_record_decodes_or_is_a_typed_error(data: st.DataObject) -> None:
    record: dict[str, Any] = {**_STORED, "payload": dict(_STORED["payload"])}
    for _ in range(data.draw(st.integers(1, 3))):
        target = record["payload"] if data.draw(st.booleans()) else record
        if not isinstance(target, dict) or not target:
            target = record
        target[data.draw(st.sampled_from(sorted(target)))] = data.draw(_JSON_VALUES)
    with contextlib.suppress(TraceboundError):
        decode_record(orjson.dumps(record), bytes(32))


def test_only_trusted_upcasters_skip_validation_on_the_read_path() -> None:
    """A projection rebuild validated every upcast record: 7.7 µs each, and a ledger
    recorded before a schema change holds many. tracebound's own upcasters are trusted
    (their output is taken as a current record's stored payload is); a user's is not."""
    reg = EventRegistry()
    reg.register(TicketV2)
    reg.register_upcaster("ticket_opened", 1, _v1_to_v2)
    assert reg.upcast_trusted("ticket_opened", 1, {"kind": "ticket_opened", "title": "t"}) is None
    trusted = EventRegistry()
    trusted.register(TicketV2)
    trusted.register_upcaster("ticket_opened", 1, _v1_to_v2, trusted=True)
    v1 = {"kind": "ticket_opened", "title": "t"}
    assert trusted.upcast_trusted("ticket_opened", 1, v1) == trusted.decode_payload(
        "ticket_opened", 1, v1
    ).model_dump(mode="json")
    # Anything validation must speak to goes back to it: a key the model lacks, a version
    # that is not older, a payload that is not an object.
    passing = EventRegistry()
    passing.register(TicketV2)
    passing.register_upcaster("ticket_opened", 1, lambda d: {**d, "priority": 3}, trusted=True)
    assert passing.upcast_trusted("ticket_opened", 1, {**v1, "summary": "s"}) is None  # title
    assert trusted.upcast_trusted("ticket_opened", 2, v1) is None
    assert trusted.upcast_trusted("ticket_opened", 1, ["not", "an", "object"]) is None  # type: ignore[arg-type]


def test_the_builtin_upcasters_fast_path_equals_the_validated_one() -> None:
    """Every built-in upcaster is trusted, and on the golden v1 records (recorded before
    each schema change) its output is the validated payload's JSON form, key for key."""
    from tests.golden.test_golden_replay import _verbatim_records

    reg = default_registry()
    seen = set()
    for record in _verbatim_records("gated.v1"):
        body = orjson.loads(record.body)
        kind, version = body["event_type"], body["schema_version"]
        if version >= reg.get(kind).SCHEMA_VERSION:
            continue
        seen.add(kind)
        fast = reg.upcast_trusted(kind, version, body["payload"])
        assert fast == reg.decode_payload(kind, version, body["payload"]).model_dump(mode="json")
    assert seen == {"gate_requested", "cost_incurred"}
