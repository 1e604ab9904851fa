"""The pure verifier: any chunking of a log gives the same root and the same first damage."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.canonical import canonical_bytes
from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.events.record import RawRecord
from tracebound.integrity.chain import GENESIS, chain_hash
from tracebound.integrity.merkle import leaf_hash, root_of
from tracebound.integrity.note import Checkpoint
from tracebound.integrity.verify import (
    ChunkVerifier,
    LogAssembler,
    check_against_checkpoints,
    verify_records,
)

TS = "2026-01-01T00:00:00.000000Z"


def make_log(streams: list[int]) -> list[RawRecord]:
    """A valid log; ``streams[i]`` is the stream of position i+1."""
    heads: dict[int, tuple[int, bytes]] = {}
    out = []
    for i, s in enumerate(streams, start=1):
        version, prev = heads.get(s, (0, GENESIS))
        sid = f"s{s}"
        body = (
            b'{"correlation_id":null,"event_id":"e%d","event_type":"t","payload":{"kind":"t"}'
            b',"position":%d,"prev_hash":"%s","schema_version":1,"stream_id":%s,'
            b'"stream_version":%d,"timestamp":"%s","workflow_id":null}'
            % (i, i, prev.hex().encode(), canonical_bytes(sid), version + 1, TS.encode())
        )
        digest = chain_hash(prev, body)
        out.append(RawRecord(i, sid, version + 1, "t", None, TS, 1, prev, digest, body))
        heads[s] = (version + 1, digest)
    return out


def chunked(records: list[RawRecord], size: int, root_sizes: list[int]) -> tuple[bytes, int]:
    assembler = LogAssembler(root_sizes=root_sizes)
    for start in range(0, len(records), size):
        part = records[start : start + size]
        assembler.add(ChunkVerifier(start + 1, snapshot_sizes=root_sizes).feed_all(part))
    log = assembler.result()
    return log.root, log.size


logs = st.lists(st.integers(0, 3), min_size=1, max_size=40)


@settings(max_examples=60)
@given(logs, st.sampled_from([1, 2, 4, 8, 16]))
def test_root_does_not_depend_on_chunking(streams: list[int], size: int) -> None:
    records = make_log(streams)
    whole = verify_records(records)
    assert whole.root == root_of([leaf_hash(r.hash) for r in records])
    assert chunked(records, size, []) == (whole.root, len(records))


@settings(max_examples=60)
@given(logs, st.data())
def test_one_record_at_a_time_accepts_what_a_page_does(
    streams: list[int], data: st.DataObject
) -> None:
    """``feed`` (the slow path ``feed_page`` hands over to at a record it does not take)
    must accept a valid log exactly as the page loop does: same size, root, stream spans
    and snapshots. Valid logs rarely reach it, so it is driven here directly."""
    records = make_log(streams)
    sizes = sorted(set(data.draw(st.lists(st.integers(1, len(records)), max_size=4))))
    paged = ChunkVerifier(1, snapshot_sizes=sizes).feed_all(records)
    single = ChunkVerifier(1, snapshot_sizes=sizes)
    assert all(single.feed(r) for r in records)
    one = single.result()
    assert one.damage is None and paged.damage is None
    assert (one.size, one.subtrees, one.snapshots) == (paged.size, paged.subtrees, paged.snapshots)
    assert sorted(one.snapshots) == sizes
    assert one.streams == paged.streams  # dataclasses: compared field by field


@settings(max_examples=60)
@given(logs, st.sampled_from([1, 2, 4, 8]), st.data())
def test_first_damage_does_not_depend_on_chunking(
    streams: list[int], size: int, data: st.DataObject
) -> None:
    records = make_log(streams)
    victim = data.draw(st.integers(0, len(records) - 1))
    records[victim] = replace_body(records[victim])

    def first_damage(chunk: int) -> tuple[DamageKind, int | None]:
        try:
            chunked(records, chunk, [])
        except LedgerDamaged as damage:
            return damage.kind, damage.position
        raise AssertionError("damage not found")

    assert first_damage(len(records)) == first_damage(size) == (DamageKind.TAMPER, victim + 1)


def replace_body(record: RawRecord) -> RawRecord:
    return record._replace(body=record.body.replace(b'"kind":"t"', b'"kind":"u"'))


def test_roots_at_checkpoint_sizes_and_checks() -> None:
    records = make_log([0, 1, 0, 2, 1, 0, 0, 1, 2])
    log = verify_records(records, root_sizes=[4, 9])
    cps = [Checkpoint("o", 4, log.roots[4]), Checkpoint("o", 9, log.roots[9])]
    check_against_checkpoints(log, cps, cps[-1])  # consistent: no exception
    short = verify_records(records[:7], root_sizes=[4])
    with pytest.raises(LedgerDamaged) as truncated:
        check_against_checkpoints(short, cps, None)
    assert (truncated.value.kind, truncated.value.position) == (DamageKind.TRUNCATION, 8)
    with pytest.raises(LedgerDamaged) as rolled_back:
        check_against_checkpoints(short, cps[:1], cps[1])
    assert rolled_back.value.kind is DamageKind.ROLLBACK
    forged = [cps[0], replace(cps[1], root=b"\x00" * 32)]
    with pytest.raises(LedgerDamaged) as rewritten:
        check_against_checkpoints(log, forged, None)
    assert (rewritten.value.kind, rewritten.value.position) == (DamageKind.TAMPER, 5)


def test_a_witness_that_disagrees_at_the_same_size_is_a_fork() -> None:
    """The store's checkpoint and the witness's, same size, different roots: equivocation."""
    records = make_log([0, 1, 0, 2, 1, 0])
    log = verify_records(records, root_sizes=[6])
    stored = Checkpoint("o", 6, log.roots[6])
    witnessed = Checkpoint("o", 6, b"\x07" * 32)
    with pytest.raises(LedgerDamaged) as forked:
        check_against_checkpoints(log, [stored], witnessed)
    assert (forked.value.kind, forked.value.position) == (DamageKind.FORK, 1)
    resigned = Checkpoint("o", 6, b"\x07" * 32)  # the store's own checkpoint disagrees too
    with pytest.raises(LedgerDamaged) as rewritten:
        check_against_checkpoints(log, [resigned], witnessed)
    assert rewritten.value.kind is DamageKind.TAMPER


@pytest.mark.parametrize("column", ["stream_id", "workflow_id"])
@pytest.mark.parametrize("value", [1.5, 2**60, b"s1"])
def test_an_id_column_of_the_wrong_type_is_malformed_damage(column: str, value: object) -> None:
    """A hand-edited column that cannot even be encoded is damage at its position, not an
    exception out of verify (which would name no position and exit as a usage error)."""
    records = make_log([1, 2, 1])
    wrong: dict[str, Any] = {column: value}  # deliberately not the field's type
    records[1] = records[1]._replace(**wrong)
    damage = ChunkVerifier(1).feed_all(records).damage
    assert damage is not None
    assert (damage.kind, damage.position) == (DamageKind.MALFORMED, 2)


def test_a_log_rolled_back_and_grown_again_is_a_fork_not_a_rollback() -> None:
    """The store went back to its checkpoint of 5 events, then other events were appended.
    Shorter than the witness's checkpoint it is a rollback; as long or longer, the log is
    not the one the witness signed (no consistency proof joins them): a fork, found after
    the store's last checkpoint that still matches."""
    signed = make_log([0, 1, 0, 2, 1, 0, 0, 1, 2, 0])
    witnessed = Checkpoint("o", 10, root_of([leaf_hash(r.hash) for r in signed]))
    regrown = [*signed[:5], *make_log([0, 1, 0, 2, 1, 3, 3, 3, 3, 3, 3, 3])[5:]]
    assert regrown[:5] == signed[:5] and regrown[5] != signed[5]
    kept = Checkpoint("o", 5, root_of([leaf_hash(r.hash) for r in signed[:5]]))

    def damage(size: int, checkpoints: list[Checkpoint]) -> tuple[DamageKind, int | None]:
        log = verify_records(regrown[:size], root_sizes=[5, 10])
        with pytest.raises(LedgerDamaged) as info:
            check_against_checkpoints(log, checkpoints, witnessed)
        return info.value.kind, info.value.position

    assert damage(8, [kept]) == (DamageKind.ROLLBACK, 9)  # shorter: rolled back
    assert damage(10, [kept]) == (DamageKind.FORK, 6)  # same size, another root
    assert damage(12, [kept]) == (DamageKind.FORK, 6)  # longer, but does not extend it
    assert damage(12, []) == (DamageKind.FORK, 1)  # the store's checkpoints dropped too
    # The events are the signed ones, only the store's checkpoints went back: rollback.
    log = verify_records(signed, root_sizes=[5, 10])
    with pytest.raises(LedgerDamaged) as info:
        check_against_checkpoints(log, [kept], witnessed)
    assert (info.value.kind, info.value.position) == (DamageKind.ROLLBACK, 6)
