"""Many writer processes on one ledger: nothing lost, nothing doubled, conflicts typed.

Each writer is a real interpreter (``subprocess``) with its own store connection. Half of
them contend: they read a shared stream's head, then append with that ``expected_version``,
and when another writer got there first the store must say so with
:class:`~tracebound.errors.ConcurrencyConflict` (and write nothing), after which they
retry with a fresh event id. Every tenth append of a contender is an ``append_batch`` over
its own stream and a shared one, so a conflict on one request must drop both. The other
writers own a stream each (a conflict there would be a bug) and also append to a stream all
of them share without a version check.

Each writer notes every acknowledged event (id, position, stream, version) and every
conflicted event id in its own side file. Meanwhile the parent signs checkpoints of the
growing log. Afterwards (:func:`check`):

* every acknowledged event is in the log once, at its acknowledged position and version;
* no event id is there twice, no conflicted event is there at all, and the log holds
  exactly the acknowledged events (positions ``1..n``, no gap);
* ``Ledger.checkpoint`` then ``Ledger.verify`` (chain, positions, Merkle root, signatures,
  witness) pass, and every checkpoint signed mid-run is consistent with the final one
  (RFC 6962 consistency proofs, checked with ``verify_consistency``);
* conflicts happened (so the path was exercised) and every one was a ConcurrencyConflict.

Used by ``tests/integration/test_concurrency_proof.py`` (small) and
``bench/soak_concurrency.py`` (8 x 5,000). This file is also the writer's script:
``python concurrency_harness.py writer …``.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

SHARED = ("shared-0", "shared-1")
COMMON = "common"  # appended to by the non-contending writers, without a version check
ORIGIN = "tracebound.test/concurrency"
SIGNING_SEED = bytes(range(32))


def _event_id(writer: int, n: int) -> UUID:
    return UUID(int=((writer + 1) << 96) | n)


# -- the writer -----------------------------------------------------------------------------


def writer_main(url: str, writer: int, appends: int, side: str, start: str, seed: int) -> None:
    """Append ``appends`` times, then exit 0; exit 1 on anything but a ConcurrencyConflict."""
    from tracebound.errors import ConcurrencyConflict
    from tracebound.events.catalog import CostIncurred, CostSource
    from tracebound.events.envelope import Event
    from tracebound.ids import StreamId
    from tracebound.store.port import AppendRequest
    from tracebound.store.url import open_store

    rng = random.Random(seed * 1000 + writer)
    store = open_store(url)
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    t0 = datetime(2026, 7, 1, tzinfo=UTC)
    n = 0
    contender = writer % 2 == 0
    own = f"w{writer}"
    own_version = 0
    conflicts = 0

    def event() -> Event:
        nonlocal n
        n += 1
        return Event.create(
            CostIncurred(
                tier="direct", amount_usd=Decimal(n) / 100, source=CostSource(f"writer-{writer}")
            ),
            event_id=_event_id(writer, n),
            timestamp=t0 + timedelta(microseconds=n),
            workflow_id=f"wf-{writer % 3}",
        )

    def note(data: dict[str, Any]) -> None:
        os.write(fd, json.dumps(data).encode() + b"\n")

    while not Path(start).exists():  # everyone starts together, connections already open
        time.sleep(0.001)
    try:
        for i in range(appends):
            while True:
                if contender:
                    stream = SHARED[rng.randrange(2)]
                    head = store.stream_head(stream)
                    expected: int | None = 0 if head is None else head.version
                    if rng.random() < 0.2:
                        time.sleep(rng.uniform(0, 0.002))  # widen the read-to-append window
                    requests = [AppendRequest(StreamId(stream), [event()], expected)]
                    if i % 10 == 9:  # one transaction over two streams: all or nothing
                        requests.insert(0, AppendRequest(StreamId(own), [event()], own_version))
                else:
                    stream = COMMON if i % 3 == 2 else own
                    expected = None if stream == COMMON else own_version
                    requests = [AppendRequest(StreamId(stream), [event()], expected)]
                try:
                    recorded = store.append_batch(requests)
                except ConcurrencyConflict as exc:
                    if exc.stream_id not in SHARED:
                        raise  # nobody else writes this stream: a conflict here is a bug
                    conflicts += 1
                    note({"conflict": [str(e.event_id) for r in requests for e in r.events]})
                    continue
                note(
                    {
                        "ack": [
                            [str(e.event_id), e.position, e.stream_id, e.stream_version]
                            for e in recorded
                        ]
                    }
                )
                own_version += sum(1 for e in recorded if e.stream_id == own)
                break
    except BaseException as exc:
        note({"error": f"{type(exc).__name__}: {exc}"})
        raise
    note({"done": True, "conflicts": conflicts, "appends": appends})
    store.close()


# -- the parent -----------------------------------------------------------------------------


@dataclass
class ProofResult:
    """What a run left behind; ``ok`` only if every property held."""

    backend: str
    writers: int
    appends: int
    seconds: float = 0.0
    events: int = 0
    acked: int = 0
    conflicts: int = 0
    conflicted_events: int = 0
    checkpoints: list[int] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    verify: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.lost or self.duplicated or self.phantom or self.misplaced or self.problems
        ) and bool(self.verify.get("ok"))

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "writers": self.writers,
            "appends_per_writer": self.appends,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "appends_per_second": round(self.writers * self.appends / self.seconds)
            if self.seconds
            else None,
            "events": self.events,
            "acked": self.acked,
            "conflicts": self.conflicts,
            "conflicted_events": self.conflicted_events,
            "checkpoints": self.checkpoints,
            "lost": len(self.lost),
            "duplicated": len(self.duplicated),
            "phantom": len(self.phantom),
            "misplaced": len(self.misplaced),
            "problems": self.problems[:20],
            "verify": self.verify,
        }


def _ledger(url: str, workdir: Path) -> Any:
    from tracebound.integrity.keys import NoteSigner
    from tracebound.ledger import Ledger
    from tracebound.sources import FixedClock, SequentialIds
    from tracebound.store.url import open_store
    from tracebound.store.witness import FileWitness

    state = workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    return Ledger(
        open_store(url),
        clock=FixedClock(),
        ids=SequentialIds(),
        signer=NoteSigner("tb-concurrency", SIGNING_SEED),
        witness=FileWitness(workdir / "outside" / "witness.note", origin=ORIGIN, store_dir=state),
        origin=ORIGIN,
    )


def run_proof(
    backend: str,
    url: str,
    workdir: Path,
    *,
    writers: int = 8,
    appends: int = 200,
    seed: int = 0,
    checkpoint_every: float = 0.25,
    timeout: float = 3600.0,
) -> ProofResult:
    """Start the writers on a fresh store at ``url``, sign checkpoints meanwhile, then check."""
    from tracebound.store.url import open_store

    workdir.mkdir(parents=True, exist_ok=True)
    with closing(open_store(url, create=True)) as store:  # the port has close(), no __enter__
        store.set_meta("origin", ORIGIN)
    start = workdir / "start"
    sides = [workdir / f"writer-{i}.jsonl" for i in range(writers)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "writer",
                url,
                str(i),
                str(appends),
                str(sides[i]),
                str(start),
                str(seed),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for i in range(writers)
    ]
    result = ProofResult(backend, writers, appends)
    signed: list[Any] = []
    ledger = _ledger(url, workdir)
    try:
        time.sleep(0.5)  # let every writer open its connection before the clock starts
        started = time.monotonic()
        start.touch()
        deadline = started + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise RuntimeError("the writers did not finish in time")
            time.sleep(checkpoint_every)
            if ledger.store.size() > (signed[-1].size if signed else 0):
                signed.append(ledger.checkpoint())  # while the writers keep appending
        result.seconds = time.monotonic() - started
        for i, p in enumerate(procs):
            stderr = p.stderr.read().decode() if p.stderr else ""
            if p.returncode != 0:
                result.problems.append(f"writer {i} exited {p.returncode}: {stderr[-2000:]}")
        check(ledger, sides, signed, result)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stderr:
                p.stderr.close()
        ledger.close()
    return result


def check(ledger: Any, sides: list[Path], signed: list[Any], result: ProofResult) -> None:
    """Judge the log against what the writers were told (see the module docstring)."""
    from tracebound.integrity.merkle import verify_consistency

    acked: dict[str, tuple[int, str, int]] = {}
    conflicted: set[str] = set()
    for i, side in enumerate(sides):
        lines = [json.loads(line) for line in side.read_text().splitlines()]
        if not lines or not lines[-1].get("done"):
            result.problems.append(f"writer {i} did not finish: {lines[-1:]}")
        for d in lines:
            for event_id, position, stream, version in d.get("ack", []):
                if event_id in acked:
                    result.problems.append(f"event {event_id} acknowledged twice")
                acked[event_id] = (position, stream, version)
            conflicted.update(d.get("conflict", []))
            result.conflicts += int(d.get("conflicts", 0)) if d.get("done") else 0
    result.acked = len(acked)
    result.conflicted_events = len(conflicted)

    seen: dict[str, tuple[int, str, int]] = {}
    for expected, event in enumerate(ledger.store.read_log(), start=1):
        key = str(event.event_id)
        if event.position != expected:
            result.problems.append(f"position {event.position} where {expected} belongs")
        if key in seen:
            result.duplicated.append(key)
        seen[key] = (event.position, event.stream_id, event.stream_version)
    result.events = len(seen)
    result.lost = [k for k in acked if k not in seen]
    result.misplaced = [k for k, where in acked.items() if k in seen and seen[k] != where]
    result.phantom = [k for k in seen if k not in acked]
    result.phantom += [k for k in conflicted if k in seen and k not in result.phantom]
    if ledger.store.size() != len(seen):
        result.problems.append(f"size {ledger.store.size()} but {len(seen)} events read")

    final = ledger.checkpoint()
    report = ledger.verify(workers=1)
    result.verify = {"ok": report.ok, **report.as_dict()}
    result.checkpoints = [c.size for c in signed] + [final.size]
    pairs = list(itertools.pairwise(signed)) + [(old, final) for old in signed]
    for a, b in pairs:
        if a.size == b.size:
            if a.root != b.root:
                result.problems.append(f"two roots for size {a.size}")
            continue
        try:
            proof = ledger.consistency_proof(a.size, b.size)
            verify_consistency(a.size, b.size, a.root, b.root, proof)
        except Exception as exc:  # noqa: BLE001 - reported, and fails the run
            result.problems.append(f"checkpoint {a.size} -> {b.size} is not consistent: {exc}")


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "writer":
        writer_main(
            sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6],
            int(sys.argv[7]),
        )  # fmt: skip
        sys.exit(0)
    sys.exit(f"usage: {sys.argv[0]} writer URL INDEX APPENDS SIDE_FILE START_FILE SEED")
