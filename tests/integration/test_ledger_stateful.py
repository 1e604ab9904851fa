"""A model-based test of the ledger: random sequences of operations against a list in memory.

Hypothesis drives a :class:`~tracebound.ledger.Ledger` on a real store (a SQLite file, a
JSONL directory, a PostgreSQL schema) through appends (single, batched, with right and wrong
expected versions, bulk batches, payloads JSON cannot hold, a second handle appending
beside it), checkpoints, restarts, reads, verifies, inclusion proofs, copies to
another backend, and appends killed with SIGKILL by a real ``tracebound append`` process.
The model is what a reader of the docs expects: a list of records, each stream's versions
1..n chained by BLAKE3, and an RFC 6962 Merkle root per signed size, computed here from
scratch (hashlib and blake3, not tracebound's own Merkle code).

After every step: the log's size is the model's, each stream's versions run 1..n, every
acknowledged record reads back byte for byte, the stream heads are the model's, and the
newest checkpoint's signature verifies over the model's root at its size.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import signal
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from blake3 import blake3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conformance.suite import ConformanceNote
from tests.integration.conftest import cost
from tests.kill_at import kill_at
from tests.pg import PgServer
from tracebound.canonical import canonical_bytes
from tracebound.errors import CanonicalizationError, ConcurrencyConflict, ConfigError
from tracebound.events.envelope import Event, Payload, RecordedEvent
from tracebound.events.record import record_dict
from tracebound.ids import StreamId
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.note import open_checkpoint
from tracebound.ledger import MERKLE_NOT_COMPARED, InclusionBundle, Ledger, verify_bundle
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.copy import copy_ledger
from tracebound.store.port import ANY_VERSION, AppendRequest, LedgerStore
from tracebound.store.url import open_store
from tracebound.store.witness import FileWitness

ORIGIN = "tracebound.test/stateful"
SIGNER = NoteSigner("tb-stateful", bytes(range(32)))
STREAMS = ("a", "b", "run-ü", "c")

# Small: the whole machine runs in well under a minute per backend on a slow 2-core box.
MACHINE_SETTINGS = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash of the event hashes, written out from the RFC."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


@dataclass(frozen=True)
class Rec:
    """One acknowledged record as the model keeps it."""

    position: int
    stream_id: str
    version: int
    prev_hash: bytes
    hash: bytes
    body: bytes


@dataclass
class Model:
    records: list[Rec] = field(default_factory=list)
    streams: dict[str, list[int]] = field(default_factory=dict)  # stream -> positions
    checkpoints: list[int] = field(default_factory=list)

    def version(self, stream: str) -> int:
        return len(self.streams.get(stream, []))

    def head(self, stream: str) -> bytes:
        positions = self.streams.get(stream)
        return self.records[positions[-1] - 1].hash if positions else GENESIS

    def root(self, size: int) -> bytes:
        return mth([r.hash for r in self.records[:size]])

    def add(self, rec: RecordedEvent, body: bytes) -> None:
        """Check a record the store acknowledged against what the model predicts, keep it."""
        prev = self.head(rec.stream_id)
        expected = (len(self.records) + 1, self.version(rec.stream_id) + 1, prev)
        assert (rec.position, rec.stream_version, rec.prev_hash) == expected
        assert rec.hash == blake3(prev + body).digest()
        self.records.append(
            Rec(rec.position, rec.stream_id, rec.stream_version, prev, rec.hash, body)
        )
        self.streams.setdefault(rec.stream_id, []).append(rec.position)


payloads = st.builds(
    ConformanceNote,
    text=st.text(max_size=12),
    n=st.integers(-(2**53) + 1, 2**53 - 1),
    tags=st.lists(st.text(max_size=4), max_size=2).map(tuple),
)
workflows = st.none() | st.sampled_from(["wf-1", "wf-2"])
# How an append states the stream's version: not at all, rightly, or wrongly (by how much).
expectations = st.sampled_from(["any", "right"]) | st.tuples(st.just("wrong"), st.integers(0, 3))


def expected_version(how: object, current: int) -> tuple[int | None, bool]:
    """The ``expected_version`` to pass for ``how``, and whether it must conflict."""
    if how == "any":
        return ANY_VERSION, False
    if how == "right":
        return current, False
    assert isinstance(how, tuple)
    wrong = how[1] if how[1] != current else current + 1
    return wrong, True


# Where a `tracebound append` process is killed, and what the log may hold afterwards:
# before the store is asked (nothing), once it has answered (everything), or while it builds
# the answer, which is after the commit on some backends and before it on others (either).
CRASH_POINTS = (
    ("{store}.append_batch:1", frozenset({0})),
    ("{store}.append_batch:1:after", frozenset({"all"})),
    ("{module}:recorded_events:1", frozenset({0, "all"})),
)
_MODULES = {
    "sqlite": ("tracebound.store.sqlite", "SQLiteStore"),
    "jsonl": ("tracebound.store.jsonl", "JsonlStore"),
    "postgresql": ("tracebound.store.postgres", "PostgresStore"),
}


@dataclass(frozen=True)
class Places:
    """Where a machine makes its stores: ``url(kind, name)`` is a fresh store URL."""

    make: Callable[[str, str], str]

    def url(self, kind: str, name: str) -> str:
        return self.make(kind, name)


class LedgerMachine(RuleBasedStateMachine):
    """Set by :func:`machine_for`: where stores are made, which backends."""

    places: ClassVar[Places]
    kind: ClassVar[str]
    copy_kind: ClassVar[str]
    base: ClassVar[Path]
    _runs = itertools.count(1)

    def __init__(self) -> None:
        super().__init__()
        run = next(self._runs)
        self.url = self.places.url(self.kind, f"src{run}")
        self.copy_url = self.places.url(self.copy_kind, f"dst{run}")
        self.copied = 0  # the destination's size after the last copy
        outside = Path(tempfile.mkdtemp(dir=self.base))
        self.witness_path = outside / "witness.note"
        self.ids = SequentialIds(namespace=run)  # kept across restarts: ids stay unique
        self.clock = FixedClock()
        self.model = Model()
        store = open_store(self.url, create=True)
        store.set_meta("origin", ORIGIN)  # as `tracebound init` does
        self.ledger = self._ledger(store)

    def _ledger(self, store: LedgerStore) -> Ledger:
        return Ledger(
            store,
            clock=self.clock,
            ids=self.ids,
            signer=SIGNER,
            witness=FileWitness(self.witness_path, origin=ORIGIN),
            origin=ORIGIN,
        )

    def teardown(self) -> None:
        self.ledger.close()

    # -- writing ---------------------------------------------------------------------------

    def _acknowledged(self, recs: list[RecordedEvent], sent: Sequence[Payload]) -> None:
        assert [r.payload for r in recs] == list(sent)
        for rec in recs:
            self.model.add(rec, canonical_bytes(record_dict(rec)))

    @rule(stream=st.sampled_from(STREAMS), payload=payloads, wf=workflows, how=expectations)
    def record_one(self, stream: str, payload: ConformanceNote, wf: str | None, how: Any) -> None:
        current = self.model.version(stream)
        version, conflicts = expected_version(how, current)
        if conflicts:
            with pytest.raises(ConcurrencyConflict) as info:
                self.ledger.record(stream, [payload], workflow_id=wf, expected_version=version)
            assert (info.value.stream_id, info.value.expected) == (stream, version)
            assert info.value.actual == current
            return
        recs = self.ledger.record(stream, [payload], workflow_id=wf, expected_version=version)
        self._acknowledged(recs, [payload])
        assert recs[0].workflow_id == wf

    @rule(
        stream=st.sampled_from(STREAMS),
        batch=st.lists(payloads, min_size=2, max_size=6),
        how=expectations,
    )
    def record_batch(self, stream: str, batch: list[ConformanceNote], how: Any) -> None:
        current = self.model.version(stream)
        version, conflicts = expected_version(how, current)
        if conflicts:
            with pytest.raises(ConcurrencyConflict):
                self.ledger.record(stream, batch, expected_version=version)
            return
        self._acknowledged(self.ledger.record(stream, batch, expected_version=version), batch)

    @rule(
        stream=st.sampled_from(STREAMS),
        size=st.sampled_from([64, 700, 1100]),
        bad=st.none() | st.floats(0, 1),
        store_level=st.booleans(),
    )
    def record_bulk(self, stream: str, size: int, bad: float | None, store_level: bool) -> None:
        """A batch large enough for the stores' bulk paths (the ledger's from 64 events,
        SQLite's pipelined one from 512, PostgreSQL's COPY from 1000), with or without one
        payload JSON cannot hold (an integer past 2**53), which must write nothing."""
        n0 = len(self.model.records) * 10_000
        batch = [ConformanceNote(text="bulk", n=n0 + i) for i in range(size)]
        if bad is not None:
            batch[int(bad * (size - 1))] = ConformanceNote(text="bulk", n=2**53)
        if store_level:
            requests = [AppendRequest(StreamId(stream), [self.ledger.event(p) for p in batch])]
            append: Callable[[], list[RecordedEvent]] = functools.partial(
                self.ledger.store.append_batch, requests
            )
        else:
            append = functools.partial(self.ledger.record, stream, batch)
        if bad is not None:
            with pytest.raises(CanonicalizationError, match="outside"):
                append()
            return
        self._acknowledged(append(), batch)

    @rule(
        requests=st.lists(
            st.tuples(
                st.sampled_from(STREAMS), st.lists(payloads, min_size=0, max_size=3), expectations
            ),
            min_size=1,
            max_size=4,
        )
    )
    def append_batch(self, requests: list[tuple[str, list[ConformanceNote], Any]]) -> None:
        """Several streams in one transaction: all or nothing. Each request sees the ones
        before it in the batch."""
        versions = {s: self.model.version(s) for s in STREAMS}
        built, conflicts, sent = [], False, []
        for stream, batch, how in requests:
            version, wrong = expected_version(how, versions[stream])
            conflicts |= wrong
            versions[stream] += len(batch)
            events = [self.ledger.event(p) for p in batch]
            built.append(AppendRequest(StreamId(stream), events, version))
            sent += batch
        if conflicts:
            with pytest.raises(ConcurrencyConflict):
                self.ledger.store.append_batch(built)
            return
        self._acknowledged(self.ledger.store.append_batch(built), sent)

    @rule(
        stream=st.sampled_from(STREAMS),
        batch=st.lists(payloads, min_size=1, max_size=3),
        how=expectations,
    )
    def other_writer(self, stream: str, batch: list[ConformanceNote], how: Any) -> None:
        """Another handle on the same store (another process, as far as the ledger's
        handle can tell) appends; the ledger's handle stays open and must not act on what
        it remembered of the heads."""
        current = self.model.version(stream)
        version, conflicts = expected_version(how, current)
        other = open_store(self.url)
        try:
            events = [
                Event.create(p, event_id=self.ids.new_id(), timestamp=self.clock.now())
                for p in batch
            ]
            if conflicts:
                with pytest.raises(ConcurrencyConflict):
                    other.append(stream, events, expected_version=version)
                return
            self._acknowledged(other.append(stream, events, expected_version=version), batch)
        finally:
            other.close()

    @rule(crash=st.sampled_from(CRASH_POINTS), stream=st.sampled_from(STREAMS))
    def crash_append(self, crash: tuple[str, frozenset[object]], stream: str) -> None:
        """A `tracebound append` process killed at one point of its append."""
        module, cls = _MODULES[self.kind]
        point, allowed = crash[0].format(store=f"{module}:{cls}", module=module), crash[1]
        sent = [cost(len(self.model.records) + i) for i in range(2)]
        lines = [
            json.dumps({"stream_id": stream, "payload": p.model_dump(mode="json")}) for p in sent
        ]
        (self.base / "lines.jsonl").write_text("\n".join(lines) + "\n")
        cli = SimpleNamespace(cwd=self.base, env=dict(os.environ))
        proc = kill_at(cli, point, "append", "lines.jsonl", "--store", self.url, "--no-redact")
        assert proc.returncode == -signal.SIGKILL, (proc.stdout, proc.stderr)
        self._reopen()  # the store as the killed process left it
        before = len(self.model.records)
        raws = list(self.ledger.store.read_raw(start=before + 1))
        found = {0: 0, len(sent): "all"}.get(len(raws))
        assert found in allowed, (point, len(raws))
        recs = list(self.ledger.store.read_log(start=before + 1))
        assert [r.payload for r in recs] == (sent if raws else [])
        for rec, raw in zip(recs, raws, strict=True):
            self.model.add(rec, raw.body)

    # -- checkpoints and restarts ----------------------------------------------------------

    @rule(full=st.booleans())
    def checkpoint(self, full: bool) -> None:
        cp = self.ledger.checkpoint(full=full)
        size = len(self.model.records)
        assert (cp.origin, cp.size, cp.root) == (ORIGIN, size, self.model.root(size))
        self.model.checkpoints.append(size)

    def _reopen(self) -> None:
        self.ledger.close()
        self.ledger = self._ledger(open_store(self.url))

    @rule()
    def reopen(self) -> None:
        """Close the store and open it from its URL, as a new process would."""
        self._reopen()

    # -- reading ---------------------------------------------------------------------------

    @rule(
        stream=st.sampled_from(STREAMS),
        start=st.integers(1, 8),
        stop=st.none() | st.integers(0, 8),
    )
    def read_stream(self, stream: str, start: int, stop: int | None) -> None:
        got = list(self.ledger.store.read_stream(stream, from_version=start, to_version=stop))
        positions = self.model.streams.get(stream, [])[start - 1 : stop]
        assert [(e.position, e.stream_version, e.hash) for e in got] == [
            (p, self.model.records[p - 1].version, self.model.records[p - 1].hash)
            for p in positions
        ]

    @rule(start=st.integers(1, 40), stop=st.none() | st.integers(0, 40))
    def read_log(self, start: int, stop: int | None) -> None:
        got = list(self.ledger.store.read_log(start=start, stop=stop))
        want = self.model.records[start - 1 : stop]
        assert [(e.position, e.hash) for e in got] == [(r.position, r.hash) for r in want]

    @rule()
    def verify(self) -> None:
        report = self.ledger.verify(workers=1)
        size = len(self.model.records)
        signed = max(self.model.checkpoints, default=None)
        assert report.damage is None, report.as_dict()
        # Nothing signed yet: intact, but a root nothing vouches for is not "ok".
        assert report.ok == (signed is not None), report.as_dict()
        if signed is None:
            assert report.checks["merkle"] == MERKLE_NOT_COMPARED
        assert (report.size, report.root) == (size, self.model.root(size).hex())
        assert report.checkpoint_size == signed
        assert report.witness_size == signed
        assert report.uncovered == size - (signed or 0)
        assert report.streams == len(self.model.streams)

    @precondition(lambda self: bool(self.model.checkpoints))
    @rule(data=st.data())
    def prove(self, data: st.DataObject) -> None:
        signed = self.model.checkpoints[-1]
        beyond = len(self.model.records) + 1
        position = data.draw(st.integers(1, beyond), label="position")
        if position > signed:
            with pytest.raises(ConfigError, match="not covered by the newest checkpoint"):
                self.ledger.prove(position)
            return
        bundle = self.ledger.prove(position)
        sent = json.dumps(bundle.as_dict())  # what a third party is handed
        offline = InclusionBundle.from_json(sent)
        cp = verify_bundle(offline, SIGNER.verifier, origin=ORIGIN)
        rec = self.model.records[position - 1]
        assert (cp.size, cp.root) == (signed, self.model.root(signed))
        assert (offline.position, offline.stream_id, offline.prev_hash) == (
            rec.position,
            rec.stream_id,
            rec.prev_hash,
        )
        assert (offline.hash, offline.body) == (rec.hash, rec.body)

    # -- copies ----------------------------------------------------------------------------

    @rule()
    def copy(self) -> None:
        """Copy (or bring up to date) a mirror on another backend, and verify it there."""
        destination = open_store(self.copy_url, create=True)
        try:
            report = copy_ledger(self.ledger.store, destination, verifier=SIGNER.verifier)
            size = len(self.model.records)
            assert (report.size, report.resumed_from) == (size, self.copied)
            assert report.imported == size - self.copied
            assert report.signatures == ("ok" if self.model.checkpoints else "no checkpoint")
            self.copied = size
            assert _raw(destination) == _raw(self.ledger.store)
            assert destination.checkpoints() == self.ledger.store.checkpoints()
            mirror = Ledger(
                destination,
                clock=FixedClock(),
                ids=SequentialIds(),
                verifier=SIGNER.verifier,
                witness=FileWitness(self.witness_path, origin=ORIGIN),
                origin=ORIGIN,
            )
            report_copy = mirror.verify(workers=1)
            assert report_copy.damage is None, report_copy.as_dict()
            assert report_copy.ok == bool(self.model.checkpoints), report_copy.as_dict()
            assert report_copy.root == self.model.root(size).hex()
        finally:
            destination.close()

    # -- after every step ------------------------------------------------------------------

    @invariant()
    def log_is_the_model(self) -> None:
        store = self.ledger.store
        assert store.size() == len(self.model.records)
        raws = list(store.read_raw())
        assert [(r.position, r.stream_id, r.stream_version) for r in raws] == [
            (r.position, r.stream_id, r.version) for r in self.model.records
        ]
        assert [(r.prev_hash, r.hash, r.body) for r in raws] == [
            (r.prev_hash, r.hash, r.body) for r in self.model.records
        ]

    @invariant()
    def streams_are_the_model(self) -> None:
        for stream in STREAMS:
            head = self.ledger.store.stream_head(stream)
            version = self.model.version(stream)
            if version == 0:
                assert head is None
                continue
            assert head is not None and (head.version, head.head) == (
                version,
                self.model.head(stream),
            )
            versions = [e.stream_version for e in self.ledger.store.read_stream(stream)]
            assert versions == list(range(1, version + 1))

    @invariant()
    def newest_checkpoint_verifies(self) -> None:
        note = self.ledger.store.latest_checkpoint()
        if not self.model.checkpoints:
            assert note is None
            return
        cp = open_checkpoint(note or "", SIGNER.verifier, origin=ORIGIN)
        signed = self.model.checkpoints[-1]
        assert (cp.size, cp.root) == (signed, self.model.root(signed))


def _raw(store: LedgerStore) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store.read_raw()]


def machine_for(
    kind: str, copy_kind: str, base: Path, make_url: Callable[[str, str], str]
) -> type[LedgerMachine]:
    return type(
        f"LedgerMachine_{kind}",
        (LedgerMachine,),
        {
            "kind": kind,
            "copy_kind": copy_kind,
            "base": base,
            "places": Places(make_url),
        },
    )


@pytest.fixture
def make_url(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str, str], str]:
    """``make_url(kind, name)``: a fresh store URL of that backend."""

    def make(kind: str, name: str) -> str:
        if kind in {"sqlite", "jsonl"}:
            return f"{kind}:///{(tmp_path / name).resolve()}"
        server: PgServer = request.getfixturevalue("postgres_server")
        dsn: str = request.getfixturevalue("postgres_dsn")
        return server.url(dsn.rsplit("dbname=", 1)[1], schema=name)

    return make


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "copy_kind"),
    [
        ("sqlite", "jsonl"),
        ("jsonl", "sqlite"),
        pytest.param("postgresql", "sqlite", marks=pytest.mark.postgres),
    ],
)
def test_ledger_behaves_like_its_model(
    kind: str, copy_kind: str, tmp_path: Path, make_url: Callable[[str, str], str]
) -> None:
    run_state_machine_as_test(
        machine_for(kind, copy_kind, tmp_path, make_url), settings=MACHINE_SETTINGS
    )
