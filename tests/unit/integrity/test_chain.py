"""The per-stream BLAKE3 chain (ADR-0005): links, continuing an upstream head, corruption."""

from __future__ import annotations

import pytest
from blake3 import blake3
from hypothesis import given
from hypothesis import strategies as st

from tracebound.errors import AuditChainCorrupted
from tracebound.integrity.chain import GENESIS, ChainCursor, chain_hash, parse_head


def test_link_is_blake3_of_prev_then_bytes() -> None:
    assert chain_hash(GENESIS, b"record") == blake3(bytes(32) + b"record").digest()
    assert bytes(32) == GENESIS


@given(st.lists(st.binary(max_size=64), max_size=20), st.binary(min_size=32, max_size=32))
def test_writer_and_verifier_agree_from_any_head(records: list[bytes], head: bytes) -> None:
    writer, verifier = ChainCursor(head), ChainCursor(head)
    prev = head
    for record in records:
        claimed = writer.extend(record)
        assert verifier.check(prev, record, claimed) == claimed
        prev = claimed
    assert writer.head == verifier.head and writer.length == len(records)


def test_continuing_an_upstream_head() -> None:
    upstream = ChainCursor()
    upstream.extend(b"phase 4 event 1")
    head = upstream.extend(b"phase 4 event 2")
    downstream = ChainCursor(head)  # the RetryLedger continues the planning side's head
    first = chain_hash(head, b"attempt 0")
    assert downstream.check(head, b"attempt 0", first) == first


def test_a_record_that_does_not_continue_the_head_is_corruption() -> None:
    cursor = ChainCursor(b"\x01" * 32)
    with pytest.raises(AuditChainCorrupted, match="links to"):
        cursor.check(GENESIS, b"x", chain_hash(GENESIS, b"x"))
    with pytest.raises(AuditChainCorrupted, match="hashes to"):
        cursor.check(b"\x01" * 32, b"x", b"\x00" * 32)
    assert cursor.length == 0 and cursor.head == b"\x01" * 32  # nothing advanced


@pytest.mark.parametrize("bad", [b"", b"\x00" * 31, b"\x00" * 33, "zz" * 32, "ab"])
def test_heads_of_the_wrong_shape_are_refused(bad: bytes | str) -> None:
    with pytest.raises((AuditChainCorrupted, ValueError)):
        parse_head(bad)


def test_hex_heads_are_accepted() -> None:
    assert parse_head("00" * 32) == GENESIS


@pytest.mark.parametrize("how", ["link", "hash"])
@pytest.mark.parametrize("broken", [1, 2, 3])
def test_corruption_names_the_record_it_found(broken: int, how: str) -> None:
    writer, records = ChainCursor(), [b"a", b"b", b"c"]
    heads: list[bytes] = [writer.extend(r) for r in records]
    prevs: list[bytes] = [GENESIS, *heads[:-1]]
    if how == "link":
        prevs[broken - 1] = bytes(32 * [9])
    else:
        heads[broken - 1] = bytes(32)
    verifier = ChainCursor()
    for i in range(broken - 1):
        verifier.check(prevs[i], records[i], heads[i])
    with pytest.raises(AuditChainCorrupted, match=rf"^record {broken} {how}"):
        verifier.check(prevs[broken - 1], records[broken - 1], heads[broken - 1])
    assert verifier.length == broken - 1
