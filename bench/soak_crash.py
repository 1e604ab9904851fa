"""Crash soak: SIGKILL a writer hundreds of times and count what was lost (must be nothing).

Usage::

    .venv/bin/python -m bench.soak_crash --trials 100 --backend jsonl|sqlite|postgresql|all
                                         [--seed 0] [--dir DIR] [--json PATH]

Each trial starts a fresh store, runs a writer process that appends batches of 1 to 2,000
events (acknowledging each append in an fsynced side file) and kills it with SIGKILL:
every other trial after a random delay, the rest the moment the store's file is seen to
grow, so that the kill lands inside ``write``/``fsync`` often. The store is then checked as
the crash left it (see ``tests/crash_harness.py``): acknowledged events present at their
positions, no batch split, no position twice, ``verify`` clean or (JSONL) exactly a torn
tail that ``tracebound repair --yes`` cuts. Exit status 1 if any trial failed.

PostgreSQL runs on a throwaway server started from the machine's binaries (as the tests
do, ``fsync`` and ``synchronous_commit`` on), one fresh schema per trial; its "mid-write"
kills follow the child's intent line, since there is no store file to watch.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.crash_harness import ALL_BACKENDS, KILL_MODES, POSTGRES, postgres_database, run_trial


def soak(
    backend: str, trials: int, seed: int, root: Path | None, base_url: str | None = None
) -> dict[str, Any]:
    results = []
    started = time.monotonic()
    for i in range(trials):
        kill = KILL_MODES[i % len(KILL_MODES)]
        with tempfile.TemporaryDirectory(dir=root, prefix=f"soak-{backend}-") as tmp:
            url = None if base_url is None else f"{base_url}?schema=crash_{seed + i}"
            result = run_trial(backend, Path(tmp), seed + i, kill=kill, url=url)
        results.append(result)
        mark = "ok" if result.ok else "FAILED"
        torn = " torn tail, repaired" if result.torn and result.repaired else ""
        print(
            f"{backend} trial {i + 1:>4}/{trials} ({kill:<9}) {mark}: acked {result.acked:>6}, "
            f"present {result.present:>6}{torn}",
            flush=True,
        )
        if not result.ok:
            print(json.dumps(result.as_dict(), indent=2), flush=True)
    return {
        "backend": backend,
        "trials": trials,
        "seconds": round(time.monotonic() - started, 1),
        "failed": sum(not r.ok for r in results),
        "acknowledged": sum(r.acked for r in results),
        "acknowledged_lost": sum(len(r.lost) for r in results),
        "partial_batches": sum(len(r.partial_batches) for r in results),
        "torn_tails": sum(r.torn is not None for r in results),
        "torn_tails_repaired": sum(r.torn is not None and r.repaired for r in results),
        "unacknowledged_present": sum(r.present - r.acked for r in results),
        "kills": {k: sum(r.kill == k for r in results) for k in KILL_MODES},
        "failures": [r.as_dict() for r in results if not r.ok],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak_crash", description=__doc__)
    parser.add_argument("--trials", type=int, default=100, help="kills per backend")
    parser.add_argument("--backend", choices=[*ALL_BACKENDS, "all"], default="all")
    parser.add_argument("--seed", type=int, default=0, help="first trial's seed")
    parser.add_argument("--dir", type=Path, default=None, help="where the stores go")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)
    backends = ALL_BACKENDS if args.backend == "all" else (args.backend,)
    summaries = []
    for b in backends:
        if b == POSTGRES:
            with postgres_database("soak_crash") as base_url:
                summaries.append(soak(b, args.trials, args.seed, args.dir, base_url))
        else:
            summaries.append(soak(b, args.trials, args.seed, args.dir))
    for s in summaries:
        print(
            f"\n{s['backend']}: {s['trials']} trials in {s['seconds']} s, {s['failed']} failed; "
            f"{s['acknowledged']} events acknowledged, {s['acknowledged_lost']} of them lost; "
            f"{s['partial_batches']} batches split; {s['torn_tails']} torn tails "
            f"({s['torn_tails_repaired']} repaired); {s['unacknowledged_present']} events "
            "written but killed before their acknowledgement"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(summaries, indent=2) + "\n", encoding="utf-8")
    return 1 if any(s["failed"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
