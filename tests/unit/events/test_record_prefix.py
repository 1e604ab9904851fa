"""The one-call record prefix (C and reference) and the pooled random ids."""

from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracebound import canonical
from tracebound.canonical import canonical_bytes
from tracebound.errors import CanonicalizationError
from tracebound.events.catalog import CostIncurred
from tracebound.events.envelope import Event, format_timestamp
from tracebound.events.record import _event_prefix_general, _timestamp_text, event_prefix
from tracebound.system import RandomIds, SystemClock

_json = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**60), max_value=2**60),  # both sides of ±(2**53-1)
        st.text(max_size=12),
        st.floats(allow_nan=True),  # always refused in hash-safe mode
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.tuples(inner, inner),
    ),
    max_leaves=12,
)
_ids = st.one_of(
    st.integers(min_value=0, max_value=2**128 - 1),
    st.sampled_from([0, 2**128 - 1, 1 << 64, (1 << 64) - 1]),
)


def _outcome(build: canonical._PrefixBuilder, *args: object) -> object:
    try:
        return build(*args)  # type: ignore[arg-type]
    except CanonicalizationError as exc:
        return ("error", str(exc))


def _expected(cid: object, event_id: int, event_type: object, payload: object) -> object:
    try:
        return b'{"correlation_id":%s,"event_id":"%s","event_type":%s,"payload":%s' % (
            canonical_bytes(cid),
            str(UUID(int=event_id)).encode(),
            canonical_bytes(event_type),
            canonical_bytes(payload),
        )
    except CanonicalizationError as exc:
        return ("error", str(exc))


@given(st.one_of(st.none(), st.text(max_size=12), _json), _ids, _json, _json)
def test_record_prefix_implementations_agree(
    cid: object, event_id: int, event_type: object, payload: object
) -> None:
    expected = _expected(cid, event_id, event_type, payload)
    for name, build in canonical._PREFIX_BUILDERS.items():
        assert _outcome(build, cid, event_id, event_type, payload) == expected, name


@pytest.mark.parametrize("name", sorted(canonical._PREFIX_BUILDERS))
@pytest.mark.parametrize("bad", [-1, 2**128, True, 1.0, "00000000-0000-0000-0000-000000000000"])
def test_record_prefix_refuses_ids_outside_128_bits(name: str, bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        canonical._PREFIX_BUILDERS[name](None, bad, "t", {})  # type: ignore[arg-type]


def test_record_prefix_grows_past_the_inline_buffer() -> None:
    payload = {"k": "x" * 10_000, "l": ["é\u2028\x00"] * 500}
    for build in canonical._PREFIX_BUILDERS.values():
        assert build("c", 5, "t", payload) == _expected("c", 5, "t", payload)


def _cost(text: str) -> CostIncurred:
    return CostIncurred.model_validate(
        {
            "tier": "direct",
            "amount_usd": "1.5",
            "source": text,
            "tokens_in": 3,
            "tokens_out": 1,
            "model": text,
            "role": "Executor",
            "step_id": text,
        }
    )


@given(
    st.uuids(),
    st.one_of(st.none(), st.text(max_size=20)),
    st.text(alphabet='abcXYZ019:/-_ é"\\\u2028', min_size=1, max_size=40),
)
def test_event_prefix_matches_the_general_path(
    event_id: UUID, correlation_id: str | None, text: str
) -> None:
    payload = _cost(text)
    event = Event.create(
        payload,
        event_id=event_id,
        timestamp=SystemClock().now(),
        correlation_id=correlation_id,
    )
    assert event_prefix(event) == _event_prefix_general(event)


class _TextUUID(UUID):
    def __str__(self) -> str:
        return "not-a-uuid"


def test_event_prefix_of_a_uuid_subclass_takes_the_general_path() -> None:
    payload = _cost("s")
    event = Event.create(payload, event_id=uuid.uuid4(), timestamp=SystemClock().now())
    object.__setattr__(event, "event_id", _TextUUID(int=7))
    assert b'"event_id":"not-a-uuid"' in event_prefix(event)
    assert event_prefix(event) == _event_prefix_general(event)


def test_random_ids_are_version_4_uuids_like_uuid4() -> None:
    ids = RandomIds()
    drawn = [ids.new_id() for _ in range(5000)]  # several refills
    assert len(set(drawn)) == len(drawn)
    for value in drawn:
        assert type(value) is UUID
        assert value.version == 4
        assert value.variant == uuid.RFC_4122
        assert value.is_safe is uuid.SafeUUID.unknown
        assert UUID(str(value)) == value
        assert hash(UUID(str(value))) == hash(value)
        assert UUID(str(value)).__getstate__() == value.__getstate__()
    # the 122 random bits do vary: every hex digit outside the fixed ones takes many values
    texts = [value.hex for value in drawn]
    for i in range(32):
        if i in (12, 16):  # version nibble; variant nibble (8..b)
            continue
        assert len({t[i] for t in texts}) > 8, i
    assert {t[12] for t in texts} == {"4"}
    assert {t[16] for t in texts} <= set("89ab")


def test_random_ids_shared_by_threads_stay_unique() -> None:
    ids = RandomIds()
    out: list[list[UUID]] = [[] for _ in range(4)]

    def draw(bucket: list[UUID]) -> None:
        bucket.extend(ids.new_id() for _ in range(3000))

    threads = [threading.Thread(target=draw, args=(b,)) for b in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [u for b in out for u in b]
    assert len(set(flat)) == len(flat) == 12_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_random_ids_forked_child_does_not_reuse_the_parents_pool() -> None:
    ids = RandomIds()
    ids.new_id()  # fill the pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read)
        os.write(write, ids.new_id().bytes)
        os._exit(0)
    os.close(write)
    child = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert UUID(bytes=child) != ids.new_id()


_moments = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=3)), timezone(-timedelta(hours=9))]),
)


@pytest.mark.skipif(canonical.utc_timestamp is None, reason="C accelerator not in use")
@given(st.one_of(_moments, st.datetimes()))
def test_c_utc_timestamp_is_format_timestamp(value: datetime) -> None:
    assert canonical.utc_timestamp is not None
    text = canonical.utc_timestamp(value)
    if type(value) is datetime and value.tzinfo is UTC:
        assert text == format_timestamp(value)
        assert text == _timestamp_text(value)
    else:
        assert text is None
    if value.tzinfo is not None:
        assert _timestamp_text(value) == format_timestamp(value)


@pytest.mark.skipif(canonical.utc_timestamp is None, reason="C accelerator not in use")
def test_c_utc_timestamp_edges_and_refusals() -> None:
    assert canonical.utc_timestamp is not None
    for value in (
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=timezone(timedelta(0))),  # the same singleton as UTC
    ):
        assert canonical.utc_timestamp(value) == format_timestamp(value)

    class Later(datetime):
        pass

    for other in (Later(2026, 1, 1, tzinfo=UTC), "2026-01-01", None, 1, datetime(2026, 1, 1)):
        assert canonical.utc_timestamp(other) is None
