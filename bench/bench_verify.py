"""Verify throughput and memory: chain + Merkle root + checkpoint signature of a big ledger.

Usage::

    .venv/bin/python -m bench.bench_verify [--events N ...] [--workers 2 1] [--dir DIR]
                                           [--json PATH]

Setup (not timed): a fresh SQLite ledger of N ~1 KB events is written through the fast
batch path, ``SQLiteStore.append_batch`` with 1000 events per transaction (10 streams of
100 events each, over 1000 streams in all), with ``synchronous=NORMAL`` for setup only:
the bytes on disk are identical to a FULL store's, only the fsyncs are skipped. A checkpoint
is then signed (Ed25519) and handed to a file witness outside the store.

Timed: ``Ledger.verify(workers=W)`` in a *fresh* Python process, so that the setup's memory
does not count. The child reports its wall time, its CPU time (user + system, of itself and
of any helper processes) and peak RSS (``ru_maxrss`` of itself and of its helper processes,
which it has waited for). With the C verify kernel (ADR 0007) the helpers are threads of the
child, so their memory is in the child's figure and the helper figure is 0. The verify
checks every record's BLAKE3 link, the index columns against the hashed bytes, positions and
per-stream versions, the Merkle root against the signed checkpoint, the checkpoint's
signature and the witness.

``--ledger DIR`` keeps the built ledger in ``DIR/<events>`` and reuses it on the next run
(the setup of 5M events takes minutes).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import cost_payload, machine, print_table, show_machine, write_json
from tracebound.events.envelope import Event
from tracebound.ids import StreamId
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.port import AppendRequest
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness

TARGET_RATE = 1_000_000.0  # events/s on 2 cores
ORIGIN = "bench.tracebound/verify"
_SEED = bytes(range(32))
BATCH = 1000
STREAMS_PER_BATCH = 10
STREAMS = 1000


def _paths(root: Path) -> tuple[Path, Path]:
    return root / "store", root / "outside" / "witness.note"


def _ledger(root: Path, *, synchronous: str = "FULL") -> Ledger:
    store_dir, witness_path = _paths(root)
    signer = NoteSigner("bench-key", _SEED)
    return Ledger(
        SQLiteStore(store_dir, synchronous=synchronous),
        clock=FixedClock(),
        ids=SequentialIds(namespace=3),
        signer=signer,
        verifier=signer.verifier,
        witness=FileWitness(witness_path, origin=ORIGIN, store_dir=store_dir),
        origin=ORIGIN,
    )


def build(root: Path, events: int) -> float:
    """Write ``events`` events in 1000-event transactions and sign a checkpoint; seconds."""
    t0 = time.perf_counter()
    ledger = _ledger(root, synchronous="NORMAL")
    clock, ids = FixedClock(), SequentialIds(namespace=3)
    per_stream = BATCH // STREAMS_PER_BATCH
    try:
        n = 0
        batch_no = 0
        while n < events:
            requests = []
            for j in range(STREAMS_PER_BATCH):
                count = min(per_stream, events - n)
                if count <= 0:
                    break
                stream = StreamId(f"run-{(batch_no * STREAMS_PER_BATCH + j) % STREAMS:04d}")
                evs = [
                    Event.create(
                        cost_payload(n + k),
                        event_id=ids.new_id(),
                        timestamp=clock.now(),
                        workflow_id=f"wf-{stream}",
                    )
                    for k in range(count)
                ]
                requests.append(AppendRequest(stream, evs))
                n += count
            ledger.store.append_batch(requests)
            batch_no += 1
        ledger.checkpoint()
    finally:
        ledger.close()
    return time.perf_counter() - t0


def _child(root: Path, workers: int) -> None:
    """Runs in a fresh interpreter: verify once and print one JSON line."""
    ledger = _ledger(root)
    try:
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        report = ledger.verify(workers=workers)
        elapsed = time.perf_counter() - t0
    finally:
        ledger.close()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (own.ru_utime - r0.ru_utime) + (own.ru_stime - r0.ru_stime)
    cpu += kids.ru_utime + kids.ru_stime
    out = {
        "ok": report.ok,
        "checks": report.checks,
        "size": report.size,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "rss_parent_mb": own.ru_maxrss / 1024,
        "rss_worker_mb": kids.ru_maxrss / 1024,
    }
    print(json.dumps(out))


def measure(root: Path, workers: int) -> dict[str, Any]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_verify",
            "--child",
            str(root),
            "--workers",
            str(workers),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not result["ok"]:
        raise SystemExit(f"verify did not pass: {result['checks']}")
    result["workers"] = workers
    result["events_per_s"] = result["size"] / result["seconds"]
    return result


def _measure_all(root: Path, size: int, workers: list[int], setup: float | None) -> list[Any]:
    rows = []
    db_mb = (_paths(root)[0] / "ledger.db").stat().st_size / 2**20
    for w in workers:
        row = measure(root, w)
        row["setup_seconds"] = setup
        row["db_mb"] = db_mb
        rows.append(row)
        print(
            f"  verify {size:>9,} events, workers={w}: "
            f"{row['events_per_s']:,.0f} events/s ({row['cpu_seconds'] / size * 1e6:.2f} us CPU "
            f"per event), peak RSS {row['rss_parent_mb']:.0f} MB "
            f"+ helper processes {row['rss_worker_mb']:.0f} MB",
            flush=True,
        )
    return rows


def run(
    sizes: list[int], workers: list[int], directory: Path | None, keep: Path | None = None
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for size in sizes:
        if keep is not None:
            root = keep / str(size)
            if not (_paths(root)[0] / "ledger.db").exists():
                print(f"  building {size:,} events in {root} ...", flush=True)
                root.mkdir(parents=True, exist_ok=True)
                build(root, size)
            rows.extend(_measure_all(root, size, workers, None))
            continue
        with tempfile.TemporaryDirectory(prefix="bench-verify-", dir=directory) as tmp:
            root = Path(tmp)
            print(f"  building {size:,} events ...", flush=True)
            setup = build(root, size)
            rows.extend(_measure_all(root, size, workers, setup))
    best = {r["size"]: r["events_per_s"] for r in rows if r["workers"] == 2}
    targets = [
        {
            "target": f"verify {size:,} events >= 1M events/s on 2 cores",
            "measured": f"{rate:,.0f}/s",
            "met": rate >= TARGET_RATE,
        }
        for size, rate in best.items()
    ]
    return {"rows": rows, "targets": targets}


def report(results: dict[str, Any]) -> None:
    print_table(
        "Verify (chain + Merkle root + checkpoint signature + witness), fresh process",
        [
            "events",
            "workers",
            "seconds",
            "events/s",
            "CPU us/event",
            "peak RSS MB",
            "helper proc RSS MB",
            "db MB",
        ],
        [
            [
                r["size"],
                r["workers"],
                r["seconds"],
                r["events_per_s"],
                r["cpu_seconds"] / r["size"] * 1e6,
                r["rss_parent_mb"],
                r["rss_worker_mb"],
                r["db_mb"],
            ]
            for r in results["rows"]
        ],
    )
    print_table(
        "Verify targets",
        ["target", "measured", "met"],
        [[t["target"], t["measured"], "yes" if t["met"] else "NO"] for t in results["targets"]],
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    parser.add_argument("--ledger", type=Path, default=None, help="keep/reuse ledgers here")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child, args.workers[0])
        return {}
    info = machine(args.dir)
    show_machine(info)
    results = {"machine": info, "verify": run(args.events, args.workers, args.dir, args.ledger)}
    report(results["verify"])
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
