"""Group commit: 16 threads, one event per append, each append durable when it returns.

Usage::

    .venv/bin/python -m bench.bench_group_commit [--threads 16] [--per-thread 300]
        [--rounds 3] [--dsn DSN] [--no-postgres] [--dir DIR] [--json PATH]

Every system runs ``--threads`` threads; each thread appends ``--per-thread`` events to its
own stream (aggregate), one event per append (save), with the optimistic-concurrency check
on, and the clock runs from the moment all threads are released until the last one is done.
The systems alternate within each round, and medians over the rounds are reported, because
this machine's fsync latency drifts by 10x within minutes.

* **tracebound + group commit**: ``GroupCommitter(store).append(stream, [event],
  expected_version=v)`` on ``SQLiteStore`` (WAL, ``synchronous=FULL``), ``JsonlStore``
  (``write`` + ``fsync`` per group) and ``PostgresStore`` (``synchronous_commit=on``).
* **tracebound, no group commit**: the same threads calling the store's own ``append``
  (each append its own transaction and fsync), for SQLite and PostgreSQL.
* **eventsourcing SQLite**: ``app.save(aggregate)`` after one ``aggregate.incur(...)``, one
  application shared by the threads, ``PERSISTENCE_MODULE=eventsourcing.sqlite`` (WAL, FULL),
  with the same thread count and, as the 1-event-per-save reference, one thread alone.
* **eventsourcing PostgreSQL**: ``PERSISTENCE_MODULE=eventsourcing.postgres`` on the same
  server (its own database), ``POSTGRES_POOL_SIZE`` = thread count, same threads.

Payloads and tracebound's ``Event`` envelopes are built before the clock starts; the peer's
aggregate events are created inside ``incur``, as its API does. The CPU time reported per
event is this process's (every thread's) over the timed part only, not the building of the
inputs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench._common import machine, peer_fields, print_table, show_machine, write_json
from bench.bench_postgres import events, fresh_database, server, server_settings
from tracebound.store.group_commit import GroupCommitter
from tracebound.store.jsonl import JsonlStore
from tracebound.store.postgres import PostgresStore
from tracebound.store.sqlite import SQLiteStore

TARGET_EMBEDDED = 50_000.0  # SQLite and JSONL, 16 threads, group commit
TARGET_EMBEDDED_VS_ES = 15.0  # vs eventsourcing SQLite, 1 event per save
TARGET_PG = 10_000.0  # PostgreSQL, 16 clients, group commit
TARGET_PG_VS_ES = 3.0  # vs eventsourcing's PostgreSQL recorder, same client count


_cpu_used = [0.0]
"""CPU seconds (this process, all threads) of the last timed part: the harness's building
of inputs before the clock starts does not count."""


def _threads(work: Callable[[int], None], count: int) -> float:
    """Run ``work(t)`` in ``count`` threads released together; seconds until all end."""
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def run(t: int) -> None:
        barrier.wait()
        try:
            work(t)
        except BaseException as exc:  # noqa: BLE001 - re-raised after the join
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(count)]
    for th in threads:
        th.start()
    gc.collect()
    gc.freeze()  # the prepared inputs are the harness's: keep them out of the GC's scans
    try:
        cpu = time.process_time()
        barrier.wait()
        t0 = time.perf_counter()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - t0
        _cpu_used[0] = time.process_time() - cpu
    finally:
        gc.unfreeze()
    if errors:
        raise errors[0]
    return elapsed


class _Tracebound:
    """Threads appending one event per call to their own stream, version checked."""

    def __init__(self, name: str, store: Any, *, group: bool) -> None:
        self.name = name
        self.store = store
        self.target: Any = GroupCommitter(store) if group else store
        self.n = 0
        self.versions: dict[int, int] = {}

    def round(self, threads: int, per_thread: int) -> float:
        batches = [events(self.n + t * per_thread, per_thread) for t in range(threads)]
        self.n += threads * per_thread
        append = self.target.append

        def work(t: int) -> None:
            stream, version = f"bench-{t}", self.versions.get(t, 0)
            for event in batches[t]:
                append(stream, [event], expected_version=version)
                version += 1
            self.versions[t] = version

        return threads * per_thread / _threads(work, threads)

    def stats(self) -> dict[str, Any]:
        if isinstance(self.target, GroupCommitter):
            return {"avg_group": self.target.grouped_requests / max(self.target.groups, 1)}
        return {}

    def close(self) -> None:
        self.target.close()


class _TraceboundAsync(_Tracebound):
    """The same appends from asyncio tasks (``append_async``) on one event loop: no thread
    per appender, so no thread wake-up per acknowledged append."""

    def __init__(self, name: str, store: Any) -> None:
        super().__init__(name, store, group=True)

    def round(self, threads: int, per_thread: int) -> float:
        batches = [events(self.n + t * per_thread, per_thread) for t in range(threads)]
        self.n += threads * per_thread
        append = self.target.append_async

        async def work(t: int) -> None:
            stream, version = f"bench-{t}", self.versions.get(t, 0)
            for event in batches[t]:
                await append(stream, [event], expected_version=version)
                version += 1
            self.versions[t] = version

        async def all_tasks() -> float:
            start = time.perf_counter()
            await asyncio.gather(*(work(t) for t in range(threads)))
            return time.perf_counter() - start

        gc.collect()
        gc.freeze()  # as for the threads: keep the prepared inputs out of the GC's scans
        try:
            cpu = time.process_time()
            rate = threads * per_thread / asyncio.run(all_tasks())
            _cpu_used[0] = time.process_time() - cpu
            return rate
        finally:
            gc.unfreeze()


class _Eventsourcing:
    """The peer: one application, an aggregate per thread, ``save`` after each event."""

    def __init__(self, name: str, env: dict[str, str], *, threads: int | None = None) -> None:
        from bench._es_peer import CostAccount, CostApp  # noqa: PLC0415 - optional peer

        self.name = name
        self.app = CostApp(env=env)
        self.fixed_threads = threads
        self.accounts: dict[int, Any] = {}
        self._account = CostAccount
        self.n = 0

    def round(self, threads: int, per_thread: int) -> float:
        threads = self.fixed_threads or threads
        for t in range(threads):
            if t not in self.accounts:
                self.accounts[t] = self._account()
                self.app.save(self.accounts[t])
        fields = [
            [peer_fields(self.n + t * per_thread + i) for i in range(per_thread)]
            for t in range(threads)
        ]
        self.n += threads * per_thread
        save = self.app.save

        def work(t: int) -> None:
            account = self.accounts[t]
            for f in fields[t]:
                account.incur(**f)
                save(account)

        return threads * per_thread / _threads(work, threads)

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.app.close()


def _systems(directory: Path, dsn: str | None, threads: int, postgres: bool) -> list[Any]:
    systems: list[Any] = [
        _Tracebound(
            "tracebound sqlite + group commit", SQLiteStore(directory / "tb-gc"), group=True
        ),
        _Tracebound(
            "tracebound jsonl + group commit", JsonlStore(directory / "tb-jsonl"), group=True
        ),
        _TraceboundAsync(
            "tracebound sqlite + group commit, asyncio tasks", SQLiteStore(directory / "tb-gc-a")
        ),
        _TraceboundAsync(
            "tracebound jsonl + group commit, asyncio tasks", JsonlStore(directory / "tb-jsonl-a")
        ),
        _Tracebound(
            "tracebound sqlite, no group commit", SQLiteStore(directory / "tb-plain"), group=False
        ),
    ]
    with contextlib.suppress(ImportError):
        sqlite_env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "IS_SNAPSHOTTING_ENABLED": "n",
        }
        systems.append(
            _Eventsourcing(
                "eventsourcing sqlite, 1/save",
                {**sqlite_env, "SQLITE_DBNAME": str(directory / "es.db")},
            )
        )
        systems.append(
            _Eventsourcing(
                "eventsourcing sqlite, 1/save, 1 thread",
                {**sqlite_env, "SQLITE_DBNAME": str(directory / "es1.db")},
                threads=1,
            )
        )
    if postgres and dsn is not None:
        systems.append(
            _Tracebound(
                "tracebound postgres + group commit",
                PostgresStore(fresh_database(dsn, "tb_gc"), schema="bench"),
                group=True,
            )
        )
        systems.append(
            _Tracebound(
                "tracebound postgres, no group commit",
                PostgresStore(fresh_database(dsn, "tb_plain"), schema="bench"),
                group=False,
            )
        )
        with contextlib.suppress(ImportError):
            systems.append(_Eventsourcing("eventsourcing postgres", _es_postgres_env(dsn, threads)))
    return systems


def _es_postgres_env(dsn: str, threads: int) -> dict[str, str]:
    import psycopg  # noqa: PLC0415

    fresh = fresh_database(dsn, "es_bench")
    p = psycopg.conninfo.conninfo_to_dict(fresh)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "IS_SNAPSHOTTING_ENABLED": "n",
        "POSTGRES_DBNAME": str(p["dbname"]),
        "POSTGRES_HOST": str(p.get("host", "127.0.0.1")),
        "POSTGRES_PORT": str(p.get("port", "5432")),
        "POSTGRES_USER": str(p.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(p.get("password", "")),
        "POSTGRES_POOL_SIZE": str(threads),
        "POSTGRES_MAX_OVERFLOW": "0",
        "POSTGRES_CONNECT_TIMEOUT": "30",
    }


def run(
    threads: int,
    per_thread: int,
    rounds: int,
    directory: Path | None,
    dsn: str | None,
    *,
    postgres: bool = True,
) -> dict[str, Any]:
    es_per_thread = max(per_thread // 3, 20)  # the peers are slower: keep rounds short
    with (
        tempfile.TemporaryDirectory(prefix="bench-gc-", dir=directory) as tmp,
        server(dsn) if postgres else contextlib.nullcontext(None) as url,
    ):
        settings = server_settings(url) if url else "no PostgreSQL"
        systems = _systems(Path(tmp), url, threads, postgres)
        rates: dict[str, list[float]] = {s.name: [] for s in systems}
        cpu: dict[str, list[float]] = {s.name: [] for s in systems}
        try:
            for r in range(rounds):
                order = systems if r % 2 == 0 else systems[::-1]
                for s in order:
                    n = es_per_thread if isinstance(s, _Eventsourcing) else per_thread
                    if "no group commit" in s.name:
                        n = es_per_thread
                    rate = s.round(threads, n)
                    used = _cpu_used[0]  # the timed part, this process: the peers' too
                    count = (1 if s.name.endswith("1 thread") else threads) * n
                    rates[s.name].append(rate)
                    cpu[s.name].append(used / count * 1e6)
                    print(
                        f"  round {r + 1}: {s.name:48} {rate:10,.0f} events/s "
                        f"{cpu[s.name][-1]:6.1f} us CPU/event",
                        flush=True,
                    )
            stats = {s.name: s.stats() for s in systems}
        finally:
            for s in systems:
                s.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    rows = [
        {
            "system": name,
            "threads": 1 if name.endswith("1 thread") else threads,
            "events_per_s": med[name],
            "round_rates": rates[name],
            "cpu_us_per_event": statistics.median(cpu[name]),
            **stats[name],
        }
        for name in rates
    ]
    return {"settings": settings, "rows": rows, "targets": _targets(rates, med, threads)}


def _ratio(rates: dict[str, list[float]], a: str, b: str) -> float | None:
    """The median of per-round ratios a/b (paired rounds see the same disk)."""
    if a not in rates or b not in rates:
        return None
    return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))


def _targets(
    rates: dict[str, list[float]], med: dict[str, float], threads: int
) -> list[dict[str, Any]]:
    out = []
    es_many = "eventsourcing sqlite, 1/save"
    es_one = "eventsourcing sqlite, 1/save, 1 thread"
    for backend in ("sqlite", "jsonl"):
        name = f"tracebound {backend} + group commit"
        out.append(
            {
                "target": f"{backend}, {threads} threads, group commit >= 50k events/s",
                "measured": f"{med[name]:,.0f}/s",
                "met": med[name] >= TARGET_EMBEDDED,
            }
        )
        tasks = f"{name}, asyncio tasks"
        if tasks in med:
            out.append(
                {
                    "target": f"{backend}, {threads} asyncio tasks, group commit >= 50k events/s",
                    "measured": f"{med[tasks]:,.0f}/s",
                    "met": med[tasks] >= TARGET_EMBEDDED,
                }
            )
        # The stricter of the two peer rates is the baseline (the faster one).
        ratios = [x for x in (_ratio(rates, name, es_many), _ratio(rates, name, es_one)) if x]
        if ratios:
            out.append(
                {
                    "target": f"{backend} >= 15x eventsourcing sqlite 1/save",
                    "measured": " / ".join(f"{x:.1f}x" for x in ratios)
                    + f" (vs {threads} threads / 1 thread)",
                    "met": min(ratios) >= TARGET_EMBEDDED_VS_ES,
                }
            )
    pg = "tracebound postgres + group commit"
    if pg in med:
        out.append(
            {
                "target": f"postgres, {threads} clients, group commit >= 10k events/s",
                "measured": f"{med[pg]:,.0f}/s",
                "met": med[pg] >= TARGET_PG,
            }
        )
        ratio = _ratio(rates, pg, "eventsourcing postgres")
        if ratio is not None:
            out.append(
                {
                    "target": f"postgres >= 3x eventsourcing postgres ({threads} clients)",
                    "measured": f"{ratio:.1f}x",
                    "met": ratio >= TARGET_PG_VS_ES,
                }
            )
    return out


def report(results: dict[str, Any]) -> None:
    print_table(
        f"Group commit, one event per append, durable ({results['settings']})",
        ["system", "threads", "events/s (median)", "CPU us/event", "avg group", "rounds"],
        [
            [
                r["system"],
                r["threads"],
                r["events_per_s"],
                round(r["cpu_us_per_event"], 1),
                r.get("avg_group"),
                ", ".join(f"{x:,.0f}" for x in r["round_rates"]),
            ]
            for r in results["rows"]
        ],
    )
    print_table(
        "Group commit targets",
        ["target", "measured", "met"],
        [[t["target"], t["measured"], "yes" if t["met"] else "no"] for t in results["targets"]],
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--per-thread", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dsn", default=None, help="an existing server (default: start one)")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"machine": machine(args.dir)}
    show_machine(results["machine"])
    results["group_commit"] = run(
        args.threads,
        args.per_thread,
        args.rounds,
        args.dir,
        args.dsn,
        postgres=not args.no_postgres,
    )
    report(results["group_commit"])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
