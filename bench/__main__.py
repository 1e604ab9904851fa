"""``python -m bench``: every benchmark, quick sizes by default, ``--full`` for the big ones.

Quick: appends with 2,000 single-event and 20,000 batched events per round (5 rounds),
verify of a 1,000,000-event ledger, group commit (16 threads, one event per append) and
PostgreSQL (batched COPY, a single client, subscriber latency; a throwaway server is started
from the machine's binaries unless ``--dsn`` names one). Full: 5,000 / 100,000 events per
round and verify of 1,000,000 and 5,000,000 events. ``--events`` overrides the verify sizes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench import bench_append, bench_group_commit, bench_postgres, bench_verify
from bench._common import machine, show_machine, write_json


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the big sizes (5M-event verify)")
    parser.add_argument("--events", type=int, nargs="+", default=None, help="verify sizes")
    parser.add_argument("--rounds", type=int, default=5, help="alternating append rounds")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument("--json", default=None, help="write all results here as JSON")
    parser.add_argument("--skip-verify", action="store_true", help="appends only")
    parser.add_argument("--skip-group-commit", action="store_true", help="no group commit")
    parser.add_argument("--skip-postgres", action="store_true", help="no PostgreSQL at all")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL server (default: start one)")
    args = parser.parse_args(argv)
    single, batched = (5_000, 100_000) if args.full else (2_000, 20_000)
    sizes = args.events or ([1_000_000, 5_000_000] if args.full else [1_000_000])
    info = machine(args.dir)
    show_machine(info)
    results: dict[str, Any] = {"machine": info}
    print("\nappend:")
    results["append"] = bench_append.run(single, batched, args.rounds, args.dir)
    bench_append.report(results["append"])
    if not args.skip_verify:
        print("\nverify:")
        results["verify"] = bench_verify.run(sizes, [2, 1], args.dir)
        bench_verify.report(results["verify"])
    if not args.skip_group_commit:
        print("\ngroup commit:")
        results["group_commit"] = bench_group_commit.run(
            16, 1_000 if args.full else 300, 3, args.dir, args.dsn, postgres=not args.skip_postgres
        )
        bench_group_commit.report(results["group_commit"])
    if not args.skip_postgres:
        print("\npostgres:")
        results["postgres"] = bench_postgres.run(args.dsn, rounds=3)
        bench_postgres.report(results["postgres"])
    write_json(args.json, results)


if __name__ == "__main__":
    main()
