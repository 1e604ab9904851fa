"""Canonical JSON encoding throughput: tracebound (C and pure Python) against its peers.

Usage::

    .venv/bin/python bench/bench_canonical.py [--json] [--repeats N] [--seconds S]

Every encoder runs in the same process on the same ~1 KB event, so the ratios are comparable
even when absolute numbers move with the machine. Each repeat times a loop of calls with
``time.perf_counter``; the best repeat is reported (the least disturbed by other load).

Peers:

* ``rfc8785`` package: exact RFC 8785, the correctness baseline the ratios are taken against.
* ``orjson`` with sorted keys: a speed reference only. It is *not* hash-safe: it accepts floats
  and sorts keys by code point rather than by UTF-16 code unit.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import cast

import orjson
import rfc8785

from tracebound import canonical

Encoder = Callable[[object], bytes]


def make_event() -> dict[str, object]:
    """A realistic hashed ledger record of about 1 KB (envelope + nested payload)."""
    return {
        "event_id": "01J9Z8K6V3X4T7QW2M5N8P0R1S",
        "event_type": "StepCompleted",
        "workflow_id": "wf-remediation-2024-11-05-7f3a9c",
        "timestamp": "2024-11-05T14:32:07.123456Z",
        "correlation_id": "corr-4d1e8b2a-93f0-4c61-a7de-5b0c2e9f8a17",
        "stream_id": "run-7f3a9c/step-0042",
        "stream_version": 42,
        "schema_version": 1,
        "payload": {
            "kind": "step_completed",
            "step_id": "step-0042",
            "role": "implementer",
            "model": "gpt-4o-2024-08-06",
            "status": "succeeded",
            "attempt": 2,
            "duration_ms": 18342,
            "input_tokens": 12873,
            "output_tokens": 1894,
            "cost_micro_usd": 51237,
            "summary": (
                "Applied the patch to src/payments/ledger.py; all 214 tests pass. "
                "Refactored the rounding helper to use integer micro-units (naïve floats removed)."
            ),
            "artifacts": [
                {"name": "patch.diff", "digest": "sha256:" + "9f2c" * 16, "size": 4821},
                {"name": "test-report.xml", "digest": "sha256:" + "1ab7" * 16, "size": 18211},
            ],
            "files_changed": ["src/payments/ledger.py", "tests/test_ledger.py", "CHANGELOG.md"],
            "checks": {"lint": True, "typecheck": True, "tests": True, "coverage_pct_x100": 9137},
            "labels": ["payments", "p1", "auto-remediation"],
            "parent_step_id": None,
        },
    }


def encoders() -> dict[str, tuple[Encoder, str]]:
    """Every encoder measured, with a note on what it guarantees."""
    found: dict[str, tuple[Encoder, str]] = {}
    if "c" in canonical._IMPLEMENTATIONS:
        found["tracebound (C)"] = (canonical._IMPLEMENTATIONS["c"][0], "hash-safe RFC 8785")
    found["tracebound (pure Python)"] = (
        canonical._IMPLEMENTATIONS["python"][0],
        "hash-safe RFC 8785",
    )
    found["rfc8785 package"] = (cast(Encoder, rfc8785.dumps), "RFC 8785, baseline")
    sorted_keys = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER

    def orjson_sorted(value: object) -> bytes:
        return orjson.dumps(value, option=sorted_keys)

    found["orjson sorted (reference)"] = (orjson_sorted, "NOT hash-safe: floats, code-point order")
    return found


def events_per_second(encode: Encoder, value: object, seconds: float, repeats: int) -> float:
    """Best-of-``repeats`` throughput, each repeat timing a loop of about ``seconds``."""
    loops = 1
    while True:  # calibrate the loop count so one repeat lasts about `seconds`
        start = time.perf_counter()
        for _ in range(loops):
            encode(value)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 5:
            break
        loops *= 2
    loops = max(1, int(loops * seconds / elapsed))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            encode(value)
        best = min(best, time.perf_counter() - start)
    return loops / best


@dataclass(frozen=True)
class Result:
    """One encoder's measurement on the benchmark event."""

    encoder: str
    events_per_s: float
    ratio_vs_rfc8785: float
    same_bytes_as_rfc8785: bool
    note: str


def run(repeats: int, seconds: float) -> tuple[int, list[Result]]:
    """Measure every encoder on the same event; returns the event size and the results."""
    event = make_event()
    expected = cast(Encoder, rfc8785.dumps)(event)
    measured = [
        (name, events_per_second(encode, event, seconds, repeats), encode(event) == expected, note)
        for name, (encode, note) in encoders().items()
    ]
    baseline = next(rate for name, rate, _, _ in measured if name == "rfc8785 package")
    results = [
        Result(name, rate, rate / baseline, exact, note) for name, rate, exact, note in measured
    ]
    return len(expected), results


def main(argv: list[str] | None = None) -> int:
    """Run every encoder on the same event and print a table (or JSON) with ratios."""
    parser = argparse.ArgumentParser(description="Canonical JSON encoding throughput.")
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats; best is kept")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one repeat")
    args = parser.parse_args(argv)

    event_bytes, results = run(args.repeats, args.seconds)
    meta = {
        "command": "python bench/bench_canonical.py " + " ".join(sys.argv[1:]),
        "event_bytes": event_bytes,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "default_implementation": canonical._IMPLEMENTATION,
        "repeats": args.repeats,
        "seconds_per_repeat": args.seconds,
    }
    if args.json:
        print(json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=2))
        return 0
    print(
        f"canonical encoding of one {event_bytes}-byte event "
        f"(Python {meta['python']}, {meta['machine']}, best of {args.repeats})"
    )
    print(f"{'encoder':<28}{'events/s':>14}{'vs rfc8785':>12}  {'same bytes':<11}note")
    for r in results:
        print(
            f"{r.encoder:<28}{r.events_per_s:>14,.0f}{r.ratio_vs_rfc8785:>11.1f}x  "
            f"{'yes' if r.same_bytes_as_rfc8785 else 'NO':<11}{r.note}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
