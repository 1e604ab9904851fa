"""Kill a writer with SIGKILL at a random moment, then check what survived.

A child process (a real interpreter, started with ``subprocess``) appends batches of events
in a loop. Before each append it notes the batch's event ids in a side file ("intent"); after
the store acknowledges the append it notes each event's id and position ("ack") and fsyncs.
The parent kills the child with SIGKILL at a random moment and then checks, on the store
exactly as the crash left it:

* every acknowledged event is there, at its acknowledged position;
* every batch is all there or not there at all;
* positions run 1..n with no event twice;
* ``Ledger.verify`` finds no damage, or (JSONL only) exactly a torn tail, which
  ``tracebound repair`` shows, ``tracebound repair --yes`` cuts, and verify then passes.

PostgreSQL (``run_trial(POSTGRES, …, url=…)``, a fresh schema per trial): the child's
session dies with it, so the server rolls back a transaction the kill interrupted, or
finishes a COMMIT it had already received. Before checking, the parent takes the log's lock
row, which waits for exactly that. There is no file to watch for "mid-write" kills, so they
watch the side file instead: the kill follows the intent line, when the child is inside
(or just entering) its append.

Used by ``tests/integration/test_crash.py`` (a few trials) and ``bench/soak_crash.py``
(hundreds). This file is also the child's script: ``python crash_harness.py child …``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

BACKENDS = ("sqlite", "jsonl")
POSTGRES = "postgresql"  # run_trial(POSTGRES, …, url=…): needs a server, so not in BACKENDS
ALL_BACKENDS = (*BACKENDS, POSTGRES)
_PADDING = "crash-harness;" * 150  # ~2.5 KB a record: big batches take a while to write
_BATCH_SIZES = (1, 1, 1, 2, 3, 8, 50, 400, 2000)
KILL_MODES = ("random", "mid-write")


def store_url(backend: str, directory: Path) -> str:
    """``sqlite:////abs`` or ``jsonl:////abs``: three slashes, then an absolute path."""
    return f"{backend}:///{directory.resolve()}"


def _event_id(seed: int, n: int) -> UUID:
    return UUID(int=((seed & 0xFFFFFFFF) << 64) | n)


# -- the child ------------------------------------------------------------------------------


def child_main(url: str, side: str, seed: int) -> None:
    """Append until killed. Runs in the child process; never returns on its own."""
    from tracebound.events.catalog import CostIncurred, CostSource
    from tracebound.events.envelope import Event
    from tracebound.ids import StreamId
    from tracebound.store.port import AppendRequest
    from tracebound.store.url import open_store

    rng = random.Random(seed)
    store = open_store(url)
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    t0 = datetime(2026, 5, 1, tzinfo=UTC)
    n = 0
    batch = 0
    while True:
        batch += 1
        requests = []
        for stream in rng.sample(("s0", "s1", "s2", "s3"), rng.choice((1, 1, 2))):
            events = []
            for _ in range(rng.choice(_BATCH_SIZES)):
                n += 1
                payload = CostIncurred(
                    tier="direct",
                    amount_usd=Decimal(n) / 10_000,
                    source=CostSource(f"{_PADDING}{n}"),
                )
                events.append(
                    Event.create(
                        payload,
                        event_id=_event_id(seed, n),
                        timestamp=t0 + timedelta(microseconds=n),
                        workflow_id=f"wf-{seed}",
                    )
                )
            expected = None
            if rng.random() < 0.5:  # optimistic concurrency on the path too
                head = store.stream_head(stream)
                expected = 0 if head is None else head.version
            requests.append(AppendRequest(StreamId(stream), events, expected))
        ids = [str(e.event_id) for r in requests for e in r.events]
        os.write(fd, json.dumps({"intent": batch, "ids": ids}).encode() + b"\n")
        recorded = store.append_batch(requests)
        acks = [[str(e.event_id), e.position] for e in recorded]
        os.write(fd, json.dumps({"ack": batch, "events": acks}).encode() + b"\n")
        os.fsync(fd)


# -- the parent -----------------------------------------------------------------------------


@dataclass
class TrialResult:
    """What one kill left behind. ``ok`` only if nothing acknowledged was lost or split."""

    backend: str
    seed: int
    kill: str
    acked: int = 0
    present: int = 0
    batches_acked: int = 0
    lost: list[tuple[str, int]] = field(default_factory=list)
    partial_batches: list[int] = field(default_factory=list)
    torn: str | None = None  # the torn-tail report, if the crash left one
    repaired: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.partial_batches or self.problems)

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "seed": self.seed,
            "kill": self.kill,
            "ok": self.ok,
            "acked": self.acked,
            "present": self.present,
            "batches_acked": self.batches_acked,
            "lost": self.lost,
            "partial_batches": self.partial_batches,
            "torn": self.torn,
            "repaired": self.repaired,
            "problems": self.problems,
        }


def _side_lines(side: Path) -> list[dict[str, Any]]:
    """Complete lines of the side file; the child may have died writing the last one."""
    data = side.read_bytes() if side.exists() else b""
    return [json.loads(line) for line in data.split(b"\n")[:-1]]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracebound", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _verify(url: str) -> Any:
    from tracebound.ledger import Ledger
    from tracebound.sources import FixedClock, SequentialIds
    from tracebound.store.url import open_store

    with Ledger(open_store(url), clock=FixedClock(), ids=SequentialIds(), origin="crash") as led:
        return led.verify(workers=1, require_signed=False)


def _repair(url: str, result: TrialResult, offset: str) -> None:
    """Run `tracebound repair` as an operator would: look first, then cut."""
    look = _cli("repair", "--store", url, "--json")
    shown = json.loads(look.stdout) if look.stdout else {}
    if look.returncode != 1 or [t["offset"] for t in shown.get("torn", [])] != [int(offset)]:
        result.problems.append(f"repair without --yes: {look.returncode} {look.stdout}")
        return
    cut = _cli("repair", "--store", url, "--yes", "--json")
    if cut.returncode != 0:
        result.problems.append(f"repair --yes failed: {cut.stdout} {cut.stderr}")
        return
    result.repaired = True


def check(backend: str, url: str, side: Path, seed: int, kill: str = "random") -> TrialResult:
    """Judge the store a killed writer left behind (see the module docstring)."""
    from tracebound.errors import DamageKind, TraceboundError
    from tracebound.store.url import open_store

    result = TrialResult(backend, seed, kill)
    lines = _side_lines(side)
    intents = {d["intent"]: d["ids"] for d in lines if "intent" in d}
    acked = [(i, p) for d in lines if "ack" in d for i, p in d["events"]]
    result.acked = len(acked)
    result.batches_acked = sum(1 for d in lines if "ack" in d)

    report = _verify(url)
    if report.damage is not None:
        damage = report.damage
        if backend != "jsonl" or damage.kind is not DamageKind.TORN_TAIL:
            result.problems.append(f"verify: {damage}")
            return result
        result.torn = str(damage)
        offset = damage.detail.split("byte offset ", 1)[1].split(" ", 1)[0]
        _repair(url, result, offset)
        again = _verify(url)
        if again.damage is not None:
            result.problems.append(f"verify after repair: {again.damage}")
            return result

    store = open_store(url)
    try:
        where: dict[str, int] = {}
        for expected, event in enumerate(store.read_log(), start=1):
            if event.position != expected:
                result.problems.append(f"position {event.position} where {expected} belongs")
            if str(event.event_id) in where:
                result.problems.append(f"event {event.event_id} stored twice")
            where[str(event.event_id)] = event.position
        if store.size() != len(where):
            result.problems.append(f"size {store.size()} but {len(where)} events read")
    except TraceboundError as exc:
        result.problems.append(f"reading back: {exc}")
        return result
    finally:
        store.close()
    result.present = len(where)
    result.lost = [(i, p) for i, p in acked if where.get(i) != p]
    for batch, ids in intents.items():
        present = sum(1 for i in ids if i in where)
        if present not in (0, len(ids)):
            result.partial_batches.append(batch)
    return result


@contextmanager
def postgres_database(name: str) -> Iterator[str]:
    """A throwaway PostgreSQL server (as the tests start it) with one database ``name``.

    Yields the database's ``postgresql://`` URL without a schema. For the soak scripts,
    which run outside pytest: ``tests/pg.py``'s fixtures start the server the same way.
    """
    import psycopg
    from psycopg import sql

    from tests.pg import _start, _stop, find_bindir

    server = _start(find_bindir())
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield server.url(name)
    finally:
        _stop(server)


def _settle_postgres(url: str) -> None:
    """Wait until the killed child's transaction is over: committed or rolled back.

    The server notices the dead client on its own; an append holds the ``log_head`` row
    lock until it ends either way, so taking that lock waits for exactly that.
    """
    import psycopg
    from psycopg import sql

    from tracebound.store.postgres import parse_url

    dsn, schema = parse_url(url)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(
            sql.SQL("SELECT position FROM {} FOR UPDATE").format(sql.Identifier(schema, "log_head"))
        )


def _watched(backend: str, store: Path) -> Path:
    """The file an append grows: the log itself, or SQLite's write-ahead log."""
    return store / ("log.jsonl" if backend == "jsonl" else "ledger.db-wal")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def run_trial(
    backend: str,
    workdir: Path,
    seed: int,
    *,
    kill: str = "random",
    max_delay: float = 0.25,
    timeout: float = 120.0,
    url: str | None = None,
) -> TrialResult:
    """One trial: fresh store, child appends, SIGKILL at a random moment, check.

    ``kill="random"`` kills after a uniformly random delay. ``kill="mid-write"`` waits a
    random delay, then watches the file an append grows and kills the moment it sees it
    grow: still SIGKILL at a real moment, but one that lands inside ``write`` or ``fsync``
    far more often than chance, which is where torn tails come from.
    """
    from tracebound.store.url import open_store

    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    side = workdir / "acks.jsonl"
    if backend == POSTGRES:
        if url is None:
            raise ValueError("a PostgreSQL trial needs the URL of a fresh schema")
        watched = side
    else:
        url = store_url(backend, workdir / "store")
        watched = _watched(backend, workdir / "store")
    open_store(url, create=True).close()
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "child", url, str(side), str(seed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + timeout
        while b'"ack"' not in (side.read_bytes() if side.exists() else b""):
            if child.poll() is not None:
                stderr = child.stderr.read().decode() if child.stderr else ""
                raise RuntimeError(f"the writer exited before its first append: {stderr}")
            if time.monotonic() > deadline:
                raise RuntimeError("the writer made no append in time")
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, max_delay))  # the random moment
        if kill == "mid-write":
            before = _size(watched)
            while _size(watched) == before and time.monotonic() < deadline:
                pass  # spin: a sleep would overshoot a write of a few milliseconds
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stderr:
            child.stderr.close()
    if backend == POSTGRES:
        _settle_postgres(url)
    return check(backend, url, side, seed, kill)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        child_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    sys.exit(f"usage: {sys.argv[0]} child URL SIDE_FILE SEED")
