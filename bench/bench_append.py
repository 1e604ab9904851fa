"""Append throughput: tracebound's SQLite store against eventsourcing's SQLite recorder.

Usage::

    .venv/bin/python -m bench.bench_append [--single N] [--batched N] [--dir DIR] [--json PATH]

Both sides write to a fresh SQLite file on the same disk, in WAL mode with
``synchronous=FULL`` (every acknowledged commit has been fsynced), in the same process one
after the other. What each timed loop includes:

* tracebound: ``Ledger.record(stream, payloads)``: envelope (random id from
  ``tracebound.system.RandomIds``, time from ``SystemClock``), canonical JSON,
  BLAKE3 chain link, position assignment under ``BEGIN IMMEDIATE``, insert, COMMIT (fsync).
* eventsourcing: ``aggregate.trigger_event(...)`` for each event, then ``app.save(aggregate)``:
  event object, JSON transcoding, insert, COMMIT (fsync), with
  ``PERSISTENCE_MODULE=eventsourcing.sqlite``; the recorder switches the file to WAL itself and
  leaves SQLite's default
  ``synchronous`` (FULL), which the bench reads back and reports.

Payload objects are built before the clock starts on both sides: they are the caller's data.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import cost_payload, machine, peer_fields, print_table, show_machine, write_json
from tracebound.ledger import Ledger
from tracebound.store.sqlite import SQLiteStore
from tracebound.system import RandomIds, SystemClock

TARGET_SINGLE_RATIO = 2.0  # vs eventsourcing at 1 event per save
TARGET_BATCH_RATE = 75_000.0  # events/s at 1000 events per transaction
TARGET_BATCH_RATIO = 2.5  # vs eventsourcing at 100 events per save


def _pragma(db: Path, name: str) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute(f"PRAGMA {name}").fetchone()[0])


# -- the two writers -------------------------------------------------------------------------
# Each writer is opened once per scenario and then asked for `rounds` timed runs, alternating
# with its peer, because this machine's fsync latency drifts by 10x within a minute: paired
# rounds see the same disk, and the median of the per-round ratios is what is reported.

_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


class _TraceboundWriter:
    name = "tracebound"

    def __init__(self, directory: Path) -> None:
        self.store = SQLiteStore(directory / "tb", synchronous="FULL")
        # The sources every user's ledger has (random ids, the wall clock), as the peer's
        # events get uuid4 ids and datetime.now() times.
        self.ledger = Ledger(self.store, clock=SystemClock(), ids=RandomIds())
        self.n = 0

    def prepare(self, total: int, per_txn: int) -> list[list[Any]]:
        first, self.n = self.n, self.n + total
        return [
            [cost_payload(i) for i in range(b, min(b + per_txn, first + total))]
            for b in range(first, first + total, per_txn)
        ]

    def write(self, batches: list[list[Any]]) -> None:
        record = self.ledger.record
        for payloads in batches:
            record("bench-stream", payloads)

    def describe(self) -> tuple[int, str]:
        conn = self.store._conn()
        (body_len,) = conn.execute("SELECT AVG(LENGTH(body)) FROM events").fetchone()
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        (journal,) = conn.execute("PRAGMA journal_mode").fetchone()
        return round(body_len), f"journal_mode={journal}, synchronous={_SYNC_NAMES.get(sync, sync)}"

    def close(self) -> None:
        self.ledger.close()


class _EventsourcingWriter:
    name = "eventsourcing"

    def __init__(self, directory: Path) -> None:
        # Imported here so that the tracebound side still runs where eventsourcing is absent.
        from bench._es_peer import CostAccount, open_app  # noqa: PLC0415

        self.db = directory / "es.db"
        self.app = open_app(str(self.db))
        self.account = CostAccount()
        self.app.save(self.account)
        self.n = 0

    def prepare(self, total: int, per_txn: int) -> list[list[Any]]:
        first, self.n = self.n, self.n + total
        return [
            [peer_fields(i) for i in range(b, min(b + per_txn, first + total))]
            for b in range(first, first + total, per_txn)
        ]

    def write(self, batches: list[list[Any]]) -> None:
        account, save = self.account, self.app.save
        for batch in batches:
            for fields in batch:
                account.incur(**fields)
            save(account)

    def describe(self) -> tuple[int, str]:
        with sqlite3.connect(self.db) as conn:
            (state_len,) = conn.execute(
                "SELECT AVG(LENGTH(state)) FROM stored_events WHERE topic LIKE '%CostIncurred'"
            ).fetchone()
        from eventsourcing.sqlite import SQLiteApplicationRecorder  # noqa: PLC0415

        # The recorder's own connection, asked what it runs with (not a fresh one's defaults).
        recorder = self.app.recorder
        assert isinstance(recorder, SQLiteApplicationRecorder)
        with recorder.datastore.get_connection(commit=False) as conn:
            cur = conn.cursor()
            cur.execute("PRAGMA synchronous")
            sync = cur.fetchone()[0]
            cur.execute("PRAGMA journal_mode")
            journal = cur.fetchone()[0]
        settings = f"journal_mode={journal}, synchronous={_SYNC_NAMES.get(sync, sync)}"
        return round(state_len), settings

    def close(self) -> None:
        self.app.close()


class _BareSQLiteWriter:
    """The floor under both: plain ``sqlite3`` INSERTs of pre-built rows and a COMMIT.

    Same file settings (WAL, ``synchronous=FULL``, the store's ``wal_autocheckpoint``), the
    same table and index as tracebound's store (its schema text), rows of the same sizes,
    built before the clock starts: what is timed is SQLite's own insert and durable commit,
    nothing else. No ledger does less per durable append with SQLite and this schema.
    """

    name = "bare sqlite"

    def __init__(self, directory: Path) -> None:
        from tracebound.store import sqlite as store_module  # noqa: PLC0415 - bench only

        self.db = directory / "bare.db"
        self.conn = sqlite3.connect(self.db, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        # The store's own checkpoint interval (SQLite's default where it sets none).
        pages = getattr(store_module, "_WAL_AUTOCHECKPOINT", 1000)
        self.conn.execute(f"PRAGMA wal_autocheckpoint={int(pages)}")
        schema = store_module._SCHEMA
        for statement in filter(None, (s.strip() for s in schema.split(";"))):
            self.conn.execute(statement)
        self.n = 0

    def prepare(self, total: int, per_txn: int) -> list[list[Any]]:
        first, self.n = self.n, self.n + total
        body = b"x" * 1055
        digest = bytes(32)
        rows = [
            (
                i + 1,
                "bench-stream",
                i + 1,
                "CostIncurred",
                None,
                "2026-01-01T00:00:00.000000Z",
                1,
                digest,
                digest,
                body,
            )
            for i in range(first, first + total)
        ]
        return [rows[b : b + per_txn] for b in range(0, total, per_txn)]

    def write(self, batches: list[list[Any]]) -> None:
        execute, executemany = self.conn.execute, self.conn.executemany
        insert = "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?)"
        for rows in batches:
            execute("BEGIN IMMEDIATE")
            if len(rows) == 1:
                execute(insert, rows[0])
            else:
                executemany(insert, rows)
            execute("COMMIT")

    def describe(self) -> tuple[int, str]:
        (body_len,) = self.conn.execute("SELECT AVG(LENGTH(body)) FROM events").fetchone()
        sync = self.conn.execute("PRAGMA synchronous").fetchone()[0]
        (journal,) = self.conn.execute("PRAGMA journal_mode").fetchone()
        return round(body_len), f"journal_mode={journal}, synchronous={_SYNC_NAMES.get(sync, sync)}"

    def close(self) -> None:
        self.conn.close()


class _FsyncWriter:
    """The disk's own floor: one 4 KB ``pwrite`` (in place) and one ``fdatasync`` per txn.

    A WAL commit writes at least one 4 KB page frame and syncs it; this is that, without
    SQLite.
    """

    name = "fdatasync 4 KB"

    def __init__(self, directory: Path) -> None:
        self.path = directory / "fsync.bin"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(self.fd, b"\0" * 4096, 0)
        os.fsync(self.fd)

    def prepare(self, total: int, per_txn: int) -> list[list[Any]]:
        return [[b"y" * 4096] for _ in range(0, total, per_txn)]

    def write(self, batches: list[list[Any]]) -> None:
        fd = self.fd
        for (page,) in batches:
            os.pwrite(fd, page, 0)
            os.fdatasync(fd)

    def describe(self) -> tuple[int, str]:
        return 4096, "pwrite + fdatasync, in place"

    def close(self) -> None:
        os.close(self.fd)


def _timed(writer: Any, total: int, per_txn: int) -> float:
    batches = writer.prepare(total, per_txn)
    # The prepared inputs are the harness's data, not the writer's: freeze them out of the
    # cyclic GC's sight so that neither side pays for scanning the other's (or its own) inputs.
    gc.collect()
    gc.freeze()
    try:
        t0 = time.perf_counter()
        writer.write(batches)
        return total / (time.perf_counter() - t0)
    finally:
        gc.unfreeze()


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def scenario(
    directory: Path | None, total: int, per_txn: int, rounds: int, *, floors: bool = True
) -> list[dict[str, Any]]:
    """Alternate the writers for `rounds` rounds of `total` events at `per_txn` (the floors,
    bare SQLite and a bare fdatasync, in the same rounds unless ``floors`` is off)."""
    with tempfile.TemporaryDirectory(prefix="bench-append-", dir=directory) as tmp:
        writers: list[Any] = [_TraceboundWriter(Path(tmp))]
        with contextlib.suppress(ImportError):  # the peer is optional
            writers.append(_EventsourcingWriter(Path(tmp)))
        if floors:
            writers.append(_BareSQLiteWriter(Path(tmp)))
            if per_txn == 1:
                writers.append(_FsyncWriter(Path(tmp)))
        rates: dict[str, list[float]] = {w.name: [] for w in writers}
        try:
            for r in range(rounds):
                order = writers if r % 2 == 0 else writers[::-1]
                for w in order:
                    rates[w.name].append(_timed(w, total, per_txn))
            described = {w.name: w.describe() for w in writers}
        finally:
            for w in writers:
                w.close()
    rows = []
    for w in writers:
        size, settings = described[w.name]
        row: dict[str, Any] = {
            "system": w.name,
            "events_per_txn": per_txn,
            "events": total * rounds,
            "rounds": rounds,
            "events_per_s": _median(rates[w.name]),
            "round_rates": rates[w.name],
            "record_bytes": size,
            "settings": settings,
        }
        if "eventsourcing" in rates and w.name != "eventsourcing":
            row["vs_eventsourcing_same_batch"] = _median(
                [a / b for a, b in zip(rates[w.name], rates["eventsourcing"], strict=True)]
            )
        if "bare sqlite" in rates and w.name != "bare sqlite":
            # µs per event above the bare-SQLite floor, paired per round (same disk).
            row["us_above_bare_sqlite"] = _median(
                [
                    1e6 / a - 1e6 / b
                    for a, b in zip(rates[w.name], rates["bare sqlite"], strict=True)
                ]
            )
        rows.append(row)
        print(
            f"  {w.name:13} {per_txn:5}/txn: {row['events_per_s']:10,.0f} events/s "
            f"(median of {rounds}; rounds {', '.join(f'{x:,.0f}' for x in rates[w.name])})",
            flush=True,
        )
    return rows


def run(
    single: int, batched: int, rounds: int, directory: Path | None, *, floors: bool = True
) -> dict[str, Any]:
    """Run every append scenario and compute the ratios against the targets."""
    rows: list[dict[str, Any]] = []
    for total, per_txn in ((single, 1), (batched, 100), (batched, 1000)):
        rows.extend(scenario(directory, total, per_txn, rounds, floors=floors))
    rate = {(r["system"], r["events_per_txn"]): r for r in rows}
    targets = []
    tb1, tb1000 = rate[("tracebound", 1)], rate[("tracebound", 1000)]
    es100 = rate.get(("eventsourcing", 100))
    if "vs_eventsourcing_same_batch" in tb1:
        ratio = tb1["vs_eventsourcing_same_batch"]
        targets.append(
            {
                "target": "single durable append >= 2x eventsourcing (1/save)",
                "measured": f"{ratio:.2f}x",
                "met": ratio >= TARGET_SINGLE_RATIO,
            }
        )
    targets.append(
        {
            "target": "batched (1000/txn) >= 75k events/s",
            "measured": f"{tb1000['events_per_s']:,.0f}/s",
            "met": tb1000["events_per_s"] >= TARGET_BATCH_RATE,
        }
    )
    if es100 is not None:
        ratio = tb1000["events_per_s"] / es100["events_per_s"]
        targets.append(
            {
                "target": "batched (1000/txn) >= 2.5x eventsourcing (100/save)",
                "measured": f"{ratio:.2f}x",
                "met": ratio >= TARGET_BATCH_RATIO,
            }
        )
    return {"rows": rows, "targets": targets}


def report(results: dict[str, Any]) -> None:
    print_table(
        "Append throughput (durable: WAL, synchronous=FULL)",
        [
            "system",
            "events/txn",
            "events",
            "events/s",
            "x eventsourcing",
            "us/event above bare sqlite",
            "record B",
            "settings",
        ],
        [
            [
                r["system"],
                r["events_per_txn"],
                r["events"],
                r["events_per_s"],
                r.get("vs_eventsourcing_same_batch"),
                r.get("us_above_bare_sqlite"),
                r["record_bytes"],
                r["settings"],
            ]
            for r in results["rows"]
        ],
    )
    print_table(
        "Append targets",
        ["target", "measured", "met"],
        [[t["target"], t["measured"], "yes" if t["met"] else "NO"] for t in results["targets"]],
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=2000, help="events per 1-per-txn round")
    parser.add_argument("--batched", type=int, default=20_000, help="events per batched round")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per scenario")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    parser.add_argument(
        "--no-floors", action="store_true", help="skip the bare-SQLite and fdatasync floors"
    )
    args = parser.parse_args(argv)
    info = machine(args.dir)
    show_machine(info)
    append = run(args.single, args.batched, args.rounds, args.dir, floors=not args.no_floors)
    results = {"machine": info, "append": append}
    report(results["append"])
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
