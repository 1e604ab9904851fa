"""Durable single-row commits while SQLite's WAL grows, and once it is rewritten in place.

Usage::

    .venv/bin/python -m bench.bench_wal_growth [--dir DIR] [--commits 2000] [--blocks 6]
        [--checkpoint 1000 10000] [--page-size 4096]

Plain ``sqlite3``, no tracebound code: ``BEGIN IMMEDIATE``, one ~1 KB row into a table with
a ``UNIQUE (stream, version)`` index (the shape of the store's ``events`` table), ``COMMIT``,
WAL + ``synchronous=FULL``. It prints the mean µs per commit for each block of commits, per
``wal_autocheckpoint`` value, so the cost of the growth phase (the WAL file getting longer,
which makes each ``fdatasync`` commit the new size to the file-system journal too) shows
next to the steady state (after a checkpoint the WAL is overwritten from its start). This is
why the store keeps SQLite's default of 1,000 pages (BENCHMARKS.md, round 7).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
from pathlib import Path


def run(directory: Path, checkpoint: int, commits: int, blocks: int, page_size: int) -> list[float]:
    """Mean µs per commit for each of ``blocks`` blocks of ``commits`` commits."""
    path = directory / f"wal-{checkpoint}-{page_size}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(f"PRAGMA wal_autocheckpoint={checkpoint}")
        conn.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, stream TEXT, version INTEGER, "
            "body BLOB, UNIQUE (stream, version))"
        )
        body = os.urandom(1000)
        means: list[float] = []
        position = 0
        for _ in range(blocks):
            start = time.perf_counter()
            for _ in range(commits):
                position += 1
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "INSERT INTO events VALUES (?, ?, ?, ?)", (position, "s", position, body)
                )
                conn.execute("COMMIT")
            means.append((time.perf_counter() - start) / commits * 1e6)
        return means
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where the database goes (default: a temp dir)")
    parser.add_argument("--commits", type=int, default=2000, help="commits per block")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--checkpoint", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--page-size", type=int, default=4096)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for pages in args.checkpoint:
            means = run(Path(tmp), pages, args.commits, args.blocks, args.page_size)
            shown = ", ".join(f"{m:.1f}" for m in means)
            print(f"wal_autocheckpoint={pages:>6}: µs per commit by block: {shown}")


if __name__ == "__main__":
    main()
