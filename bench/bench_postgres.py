"""PostgreSQL: batched COPY, a single client, and subscriber latency under group commit.

Usage::

    .venv/bin/python -m bench.bench_postgres [--dsn DSN] [--rounds 3] [--batched 50000]
        [--single 2000] [--clients 16] [--per-client 300] [--json PATH]

Without ``--dsn`` a throwaway server is started from the machine's PostgreSQL binaries (as
the tests do, ``tests/pg.py``) with ``fsync = on`` and ``synchronous_commit = on``; every
tracebound session also sets ``synchronous_commit = on`` itself. So every number is for
appends that are durable when acknowledged.

* **batched**: ``PostgresStore.append(stream, events)`` with 5,000 events per call: the
  chain (BLAKE3 per event) is computed under the ``log_head`` lock, 256 events at a time,
  and each piece goes by binary COPY while the next is chained.
* **single**: one thread, one event per append, no group commit (two round trips and a
  commit each).
* **subscriber latency**: ``--clients`` threads append one event at a time through a
  :class:`GroupCommitter`; a subscriber in *another process* follows the log with
  ``PostgresStore.subscribe`` (LISTEN/NOTIFY). The writer notes ``time.monotonic()`` the
  moment each group's COMMIT returns; the subscriber notes it when each event is handed
  out. ``CLOCK_MONOTONIC`` is one clock for every process on the machine, so the difference
  is commit-to-delivery time (it leaves out the few microseconds between the server making
  the commit visible and the COMMIT reply arriving, so it is a slight underestimate of that
  interval and an overestimate of nothing).

Event payloads (and the ``Event`` envelopes) are built before the clock starts, and then
frozen out of the cyclic garbage collector's sight (``gc.freeze``), as ``bench_append`` and
``bench_group_commit`` do: they are the harness's data, and without the freeze every full
collection during the run walks all of them (~6 µs per appended event here for the batched
scenario, more than the chaining itself). ``--no-freeze`` measures with them in sight.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import multiprocessing
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from bench._common import cost_payload, machine, print_table, show_machine, write_json
from tracebound.events.envelope import Event
from tracebound.store.group_commit import GroupCommitter
from tracebound.store.postgres import PostgresStore

TARGET_BATCHED = 70_000.0
TARGET_LATENCY_P99_MS = 50.0
_T0 = datetime(2026, 5, 1, tzinfo=UTC)
FREEZE = True  # --no-freeze turns it off


@contextmanager
def frozen_inputs() -> Iterator[None]:
    """Keep the inputs built so far out of the cyclic GC's scans while the clock runs."""
    if not FREEZE:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# -- a server ---------------------------------------------------------------------------------


@contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """``dsn`` as given, or a throwaway server of the machine's binaries (fsync on)."""
    if dsn is not None:
        yield dsn
        return
    import tests.pg as pg  # noqa: PLC0415 - the tests' server starter, only when needed

    # A prefix of our own: the tests' reaper stops `tracebound-pg-*` servers whose owner
    # process is gone, and must not mistake this one for an orphan.
    pg._PREFIX = "tracebound-bench-pg-"
    running = pg._start(pg.find_bindir())
    try:
        yield running.dsn()
    finally:
        pg._stop(running)


def fresh_database(dsn: str, name: str) -> str:
    """Create (or recreate) database ``name`` on ``dsn``'s server; return its DSN."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})


def server_settings(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = [
            conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            for name in (
                "fsync",
                "synchronous_commit",
                "full_page_writes",
                "wal_sync_method",
                "server_version",
            )
        ]
    fsync, sync, fpw, method, version = (r[0] if r else "?" for r in rows)
    return (
        f"PostgreSQL {version}, fsync={fsync}, synchronous_commit={sync}, "
        f"full_page_writes={fpw}, wal_sync_method={method}"
    )


def events(first: int, count: int) -> list[Event]:
    """``count`` ~1 KB events with distinct ids, built before any clock starts."""
    return [
        Event.create(
            cost_payload(n),
            event_id=UUID(int=n + 1),
            timestamp=_T0 + timedelta(microseconds=n),
            workflow_id="wf-bench",
        )
        for n in range(first, first + count)
    ]


# -- batched and single -----------------------------------------------------------------------


def batched(dsn: str, total: int, per_call: int, rounds: int, *, group: bool) -> list[float]:
    """``append(stream, events)`` of ``per_call`` events, on the store or its committer."""
    store = PostgresStore(fresh_database(dsn, "tb_batched"), schema="bench")
    target: Any = GroupCommitter(store) if group else store
    rates = []
    try:
        n = 0
        for _ in range(rounds):
            chunks = [events(n + i, per_call) for i in range(0, total, per_call)]
            n += total
            with frozen_inputs():
                t0 = time.perf_counter()
                for chunk in chunks:
                    target.append("batched", chunk)
                rates.append(total / (time.perf_counter() - t0))
    finally:
        target.close()
    return rates


def single(dsn: str, total: int, rounds: int) -> list[float]:
    store = PostgresStore(fresh_database(dsn, "tb_single"), schema="bench")
    rates = []
    try:
        n = 0
        for _ in range(rounds):
            evs = events(n, total)
            n += total
            with frozen_inputs():
                t0 = time.perf_counter()
                for e in evs:
                    store.append("single", [e])
                rates.append(total / (time.perf_counter() - t0))
    finally:
        store.close()
    return rates


# -- group commit load with a live subscriber --------------------------------------------------


def _subscriber(dsn: str, last: int, ready: Any, out: Any) -> None:
    """In its own process: follow the log until ``last``; send (position, t) pairs back."""
    store = PostgresStore(dsn, schema="bench", create=False)
    seen: list[tuple[int, float]] = []
    with store.subscribe(1) as sub:
        ready.set()
        while sub.last_position < last:
            event = sub.next_event(timeout=60)
            if event is None:
                break
            seen.append((event.position, time.monotonic()))
    store.close()
    out.send(seen)
    out.close()


def run_threads(
    committer: GroupCommitter[Any], per_thread: Sequence[list[Event]]
) -> tuple[float, int]:
    """Each thread appends its events one per call (expected version checked); rate, n."""
    barrier = threading.Barrier(len(per_thread) + 1)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        stream = f"client-{t}"
        head = committer.stream_head(stream)
        version = 0 if head is None else head.version
        barrier.wait()
        try:
            for event in per_thread[t]:
                committer.append(stream, [event], expected_version=version)
                version += 1
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(per_thread))]
    for th in threads:
        th.start()
    barrier.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    n = sum(len(x) for x in per_thread)
    return n / elapsed, n


def latency(dsn: str, clients: int, per_client: int) -> dict[str, Any]:
    """Group-commit load from ``clients`` threads while another process subscribes."""
    db = fresh_database(dsn, "tb_latency")
    store = PostgresStore(db, schema="bench")
    committer: GroupCommitter[Any] = GroupCommitter(store)
    commits: list[tuple[int, float]] = []  # (last position of a group, COMMIT returned)
    inner = store._append_prepared

    def timed(batches: Sequence[Any]) -> Any:
        results = inner(batches)
        done = time.monotonic()
        last = max((r[-1].position for r in results if isinstance(r, list) and r), default=0)
        if last:
            commits.append((last, done))
        return results

    store._append_prepared = timed  # type: ignore[method-assign]
    per_thread = [events(t * per_client, per_client) for t in range(clients)]
    total = clients * per_client
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_subscriber, args=(db, total, ready, send))
    proc.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the subscriber did not start")
        with frozen_inputs():
            rate, _ = run_threads(committer, per_thread)
        seen: list[tuple[int, float]] = receive.recv()
    finally:
        proc.join(60)
        groups, grouped = committer.groups, committer.grouped_requests
        committer.close()
    lasts = [c[0] for c in commits]
    delays = []
    for position, at in seen:
        i = bisect.bisect_left(lasts, position)
        delays.append((at - commits[i][1]) * 1000)
    delays.sort()
    return {
        "clients": clients,
        "events": total,
        "delivered": len(seen),
        "events_per_s": rate,
        "avg_group": grouped / max(groups, 1),
        "p50_ms": _pct(delays, 50),
        "p99_ms": _pct(delays, 99),
        "max_ms": delays[-1] if delays else float("nan"),
    }


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


# -- the run ----------------------------------------------------------------------------------


def run(
    dsn: str | None,
    *,
    rounds: int = 3,
    batched_events: int = 50_000,
    per_call: int = 5_000,
    single_events: int = 2_000,
    clients: int = 16,
    per_client: int = 300,
) -> dict[str, Any]:
    with server(dsn) as url:
        settings = server_settings(url)
        print(f"  {settings}", flush=True)
        b = batched(url, batched_events, per_call, rounds, group=False)
        print(f"  batched {per_call}/call: {statistics.median(b):,.0f} events/s", flush=True)
        bg = batched(url, batched_events, per_call, rounds, group=True)
        print(f"  batched via group commit: {statistics.median(bg):,.0f} events/s", flush=True)
        s = single(url, single_events, rounds)
        print(f"  single client: {statistics.median(s):,.0f} events/s", flush=True)
        lat = [latency(url, clients, per_client) for _ in range(rounds)]
        for x in lat:
            print(
                f"  {clients} clients + subscriber: {x['events_per_s']:,.0f} events/s, "
                f"p50 {x['p50_ms']:.2f} ms, p99 {x['p99_ms']:.2f} ms",
                flush=True,
            )
    p99 = statistics.median([x["p99_ms"] for x in lat])
    return {
        "settings": settings,
        "batched": {"per_call": per_call, "rates": b, "events_per_s": statistics.median(b)},
        "batched_group": {"rates": bg, "events_per_s": statistics.median(bg)},
        "single": {"rates": s, "events_per_s": statistics.median(s)},
        "latency": lat,
        "targets": [
            {
                "target": "batched (COPY), chained, durable >= 70k events/s",
                "measured": f"{statistics.median(b):,.0f}/s (store), "
                f"{statistics.median(bg):,.0f}/s (group commit)",
                "met": max(statistics.median(b), statistics.median(bg)) >= TARGET_BATCHED,
            },
            {
                "target": f"subscriber p99 <= 50 ms under {clients}-client group commit",
                "measured": f"{p99:.2f} ms (median of {rounds} runs' p99)",
                "met": p99 <= TARGET_LATENCY_P99_MS,
            },
        ],
    }


def report(results: dict[str, Any]) -> None:
    print_table(
        f"PostgreSQL ({results['settings']})",
        ["scenario", "events/s (median)", "rounds"],
        [
            [
                f"batched, {results['batched']['per_call']} events/append (COPY)",
                results["batched"]["events_per_s"],
                ", ".join(f"{r:,.0f}" for r in results["batched"]["rates"]),
            ],
            [
                f"batched, {results['batched']['per_call']} events/append, via GroupCommitter",
                results["batched_group"]["events_per_s"],
                ", ".join(f"{r:,.0f}" for r in results["batched_group"]["rates"]),
            ],
            [
                "1 event/append, 1 client, no group commit",
                results["single"]["events_per_s"],
                ", ".join(f"{r:,.0f}" for r in results["single"]["rates"]),
            ],
        ],
    )
    print_table(
        "Subscriber latency (commit -> delivery, other process) under group-commit load",
        ["clients", "events", "events/s", "avg group", "p50 ms", "p99 ms", "max ms"],
        [
            [
                x["clients"],
                x["events"],
                x["events_per_s"],
                x["avg_group"],
                x["p50_ms"],
                x["p99_ms"],
                x["max_ms"],
            ]
            for x in results["latency"]
        ],
    )
    print_table(
        "PostgreSQL targets",
        ["target", "measured", "met"],
        [[t["target"], t["measured"], "yes" if t["met"] else "no"] for t in results["targets"]],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=None, help="an existing server (default: start one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batched", type=int, default=50_000, help="events per batched round")
    parser.add_argument("--per-call", type=int, default=5_000, help="events per batched append")
    parser.add_argument("--single", type=int, default=2_000, help="events per single round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--per-client", type=int, default=300)
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave the prebuilt inputs in the cyclic GC's sight (see the module docstring)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    global FREEZE  # noqa: PLW0603 - one switch for the whole run, set once here
    FREEZE = not args.no_freeze
    results: dict[str, Any] = {"machine": machine(), "gc_freeze": FREEZE}
    show_machine(results["machine"])
    results["postgres"] = run(
        args.dsn,
        rounds=args.rounds,
        batched_events=args.batched,
        per_call=args.per_call,
        single_events=args.single,
        clients=args.clients,
        per_client=args.per_client,
    )
    report(results["postgres"])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
