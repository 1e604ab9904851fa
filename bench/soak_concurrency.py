"""Concurrency proof: 8 writer processes x 5,000 appends on SQLite and on PostgreSQL.

Usage::

    .venv/bin/python -m bench.soak_concurrency [--backend sqlite|postgresql|all]
                                               [--writers 8] [--appends 5000] [--seed 0]
                                               [--dir DIR] [--json PATH]

Half of the writers contend on two shared streams with ``expected_version`` and retry on
``ConcurrencyConflict``; the others own a stream each and share one without a version
check. The parent signs checkpoints of the growing log meanwhile. Afterwards every
acknowledged event must be present once at its position, nothing unacknowledged or
conflicted may be there, ``verify`` must pass (chain, Merkle root, signatures, witness),
and every mid-run checkpoint must be consistent with the final one. See
``tests/concurrency_harness.py``. PostgreSQL runs on a throwaway server started from the
machine's binaries (as the tests do), with ``fsync`` and ``synchronous_commit`` on. Exit
status 1 if any property failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.concurrency_harness import run_proof
from tests.crash_harness import postgres_database

BACKENDS = ("sqlite", "postgresql")


def proof(backend: str, writers: int, appends: int, seed: int, root: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=root, prefix=f"soak-concurrency-{backend}-") as tmp:
        work = Path(tmp)
        if backend == "sqlite":
            url = f"sqlite:///{(work / 'store').resolve()}"
            result = run_proof(
                backend, url, work, writers=writers, appends=appends, seed=seed,
                checkpoint_every=2.0,
            )  # fmt: skip
        else:
            with postgres_database("soak_concurrency") as server_url:
                result = run_proof(
                    backend, f"{server_url}?schema=proof", work, writers=writers,
                    appends=appends, seed=seed, checkpoint_every=2.0,
                )  # fmt: skip
    return result.as_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak_concurrency", description=__doc__)
    parser.add_argument("--backend", choices=[*BACKENDS, "all"], default="all")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--appends", type=int, default=5000, help="appends per writer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go")
    parser.add_argument("--json", type=Path, default=None, help="write the summaries here")
    args = parser.parse_args(argv)
    backends = BACKENDS if args.backend == "all" else (args.backend,)
    summaries = []
    for backend in backends:
        s = proof(backend, args.writers, args.appends, args.seed, args.dir)
        summaries.append(s)
        print(
            f"{backend}: {s['writers']} writers x {s['appends_per_writer']} appends in "
            f"{s['seconds']} s ({s['appends_per_second']} appends/s); {s['events']} events, "
            f"{s['acked']} acknowledged; lost {s['lost']}, duplicated {s['duplicated']}, "
            f"unacknowledged present {s['phantom']}, misplaced {s['misplaced']}; "
            f"{s['conflicts']} ConcurrencyConflicts retried; "
            f"{len(s['checkpoints'])} checkpoints, all consistent: {not s['problems']}; "
            f"verify ok: {s['verify'].get('ok')} -> {'OK' if s['ok'] else 'FAILED'}",
            flush=True,
        )
        if not s["ok"]:
            print(json.dumps(s, indent=2, default=str), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(summaries, indent=2, default=str) + "\n", encoding="utf-8")
    return 0 if all(s["ok"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
