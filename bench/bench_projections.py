"""Projection throughput (rebuild from a big ledger) and live lag (follow mode under load).

Usage::

    .venv/bin/python -m bench.bench_projections [--events N] [--dir DIR] [--profile]
        [--lag-seconds S] [--rate R] [--json PATH]

Rebuild: a SQLite ledger of ``--events`` events (default 1,000,000; about 20 per workflow,
every built-in kind that a remediation run emits) is built once and cached in ``--dir``.
Then, each timed on its own:

* ``read+decode``: :func:`read_records` (the runner's narrow SQLite read, one
  ``orjson.loads`` of every stored body into its record dict): the floor.
* ``fold``: read+decode plus ``fold_all`` (every workflow's state, in memory).
* ``rebuild``: ``ProjectionRunner.rebuild()`` of the fold and all six projections into a
  fresh views database, committed in 20,000-event transactions; then again with
  ``rebuild(workers=2)`` (projections split over two processes; ``--workers``).
  Both wall time and CPU time (this process plus its workers) are reported: the bench
  VM has 2 vCPUs with noisy neighbours.
* for reference, ``model_validate_json``: what re-validating every record would cost.

Target: rebuild >= 300,000 events/s (stretch 500,000).

``--phases`` adds a CPU breakdown per ledger event, in one process and in memory: the
read, each projection's ``apply_many`` (or ``apply``) over its pre-read records, the
drains; the rest of a rebuild's CPU is the views commit (encoding and SQLite).

Live lag: a writer thread appends ``--rate`` events/s (default 5,000) in small batches for
``--lag-seconds`` while ``ProjectionRunner.follow`` runs in another thread; for each commit
the delay from the append's return to the runner's commit of that position is recorded.
Target: p99 <= 100 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any, TypedDict
from uuid import UUID

from bench._common import machine, print_table, show_machine, write_json
from tracebound.events.anchor import AttemptAnchor
from tracebound.events.catalog import (
    AttemptAnchorRecorded,
    AttemptCompleted,
    BudgetPrecharged,
    BudgetPrechecked,
    BudgetReconciled,
    CostIncurred,
    CostSource,
    LeafInvoked,
    LeafReturned,
    MergeOutcome,
    PlanOutcomeEmitted,
    PluginResolved,
    PluginScope,
    PromptBuilt,
    ProvenanceClassified,
    RagHit,
    RetryRequested,
    SignalKind,
    SolutionFound,
    TransformBuilt,
    TrustGateFailed,
    TrustGatePassed,
)
from tracebound.events.envelope import Event, Payload, RecordedEvent
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    ChainHead,
    GateId,
    PatchDigest,
    PluginId,
    PromptDigest,
    RagRecordId,
    ResponseDigest,
    SandboxRunId,
    Sha256Digest,
    StreamId,
    WorkflowId,
)
from tracebound.projections import ProjectionRunner, SQLiteViews, fold_all, read_records
from tracebound.store.port import AppendRequest
from tracebound.store.sqlite import SQLiteStore

TARGET_RATE = 300_000.0
STRETCH_RATE = 500_000.0
TARGET_P99_MS = 100.0
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


class _Attempt(TypedDict):
    attempt_id: AttemptId
    attempt_index: int


def _workflow(i: int) -> list[Payload]:
    """One remediation run: about 20 events; every 4th fails a gate and retries."""
    attempt = AttemptId(UUID(int=i))
    at: _Attempt = {"attempt_id": attempt, "attempt_index": 0}
    digest = f"{i:064x}"
    failed = i % 4 == 0
    out: list[Payload] = [
        PluginResolved(
            plugin_id=PluginId(f"plugin-{i % 5}"),
            extends_chain=(PluginId("base"),),
            matched_scope=PluginScope("npm/express"),
            fallback_used=i % 9 == 0,
        ),
        ProvenanceClassified(**at, advisory_id=AdvisoryId(f"GHSA-{i % 500}"), provenance="llm"),
        BudgetPrechecked(
            **at, estimated_usd=Decimal("0.02"), available_usd=Decimal("5"), allowed=True
        ),
        RagHit(
            **at,
            record_ids=(RagRecordId("rec-1"), RagRecordId("rec-2")),
            evidence_chain_head=ChainHead(bytes(32)),
        ),
        PromptBuilt(**at, prompt_digest_blake3=PromptDigest(digest), prompt_bytes=4096),
        BudgetPrecharged(**at, precharged_usd=Decimal("0.02"), model="gpt-5"),
        LeafInvoked(**at, model="gpt-5", prompt_digest_blake3=PromptDigest(digest)),
        LeafReturned(
            **at,
            model="gpt-5",
            response_digest_blake3=ResponseDigest(digest),
            tokens_in=1200,
            tokens_out=300,
            cached_input_tokens=1000,
            reasoning_tokens=120,
        ),
        BudgetReconciled(
            **at,
            precharged_usd=Decimal("0.02"),
            actual_usd=Decimal("0.0213"),
            remaining_usd=Decimal("4.97"),
            tokens_in=1200,
            tokens_out=300,
        ),
        CostIncurred(
            tier="direct",
            amount_usd=Decimal(f"0.{i % 10000:04d}"),
            source=CostSource("openai"),
            tokens_in=1200,
            tokens_out=300,
            cached_input_tokens=1000,
            reasoning_tokens=120,
            model="gpt-5",
            role="Planner",
        ),
        TransformBuilt(**at, patch_digest_blake3=PatchDigest(digest), files_changed=2),
        PlanOutcomeEmitted(**at, plan_proposal_kind="apply_transform", outcome="AppliedFromLlm"),
    ]
    if failed:
        out += [
            TrustGateFailed(
                gate=GateId("tests"),
                failing_signals=(SignalKind("tests_pass"),),
                score=4200,
                retry_count=0,
            ),
            RetryRequested(
                **at,
                gate=GateId("tests"),
                sandbox_run_id=SandboxRunId(f"sbx-{i}"),
                failing_signals=(SignalKind("tests_pass"),),
                summary_pointer=Sha256Digest("sha256:" + "ab" * 32),
            ),
        ]
    else:
        out.append(
            TrustGatePassed(
                gate=GateId("tests"), signals={SignalKind("tests_pass"): True}, score=9100
            )
        )
    out += [
        AttemptCompleted(
            **at,
            advisory_id=AdvisoryId(f"GHSA-{i % 500}"),
            outcome="AppliedFromLlm",
            trust_outcome_passed=not failed,
            cost_usd=Decimal("0.0213"),
            duration_ms=5300,
        ),
        CostIncurred(tier="amortized", amount_usd=Decimal("0.0031"), source=CostSource("sandbox")),
        SolutionFound(
            **at,
            advisory_id=AdvisoryId(f"GHSA-{i % 500}"),
            patch_digest_blake3=PatchDigest(digest),
            outcome="AppliedFromLlm",
        ),
        MergeOutcome(
            pr_url=f"https://example.test/pr/{i}",
            decision=("merged", "modified", "closed")[i % 3],
            reviewer=None,
        ),
    ]
    return out


def _anchor_event(i: int) -> Payload:
    return AttemptAnchorRecorded(
        anchor=AttemptAnchor(
            attempt_id=AttemptId(UUID(int=i)),
            workflow_id=WorkflowId(f"wf-{i:07d}"),
            attempt_index=0,
            advisory_id=AdvisoryId(f"GHSA-{i % 500}"),
            prompt_digest_blake3=PromptDigest(f"{i:064x}"),
            retrieved_evidence_chain_head=None,
            retrieved_record_ids=(),
            plan_proposal_kind="apply_transform",
            response_digest_blake3=ResponseDigest(f"{i:064x}"),
            validator_outcome="AppliedFromLlm",
            tokens_in=1200,
            tokens_out=300,
            cost_usd=Decimal("0.0213"),
            timestamp_utc=_ts(i, 0),
        )
    )


def _ts(i: int, j: int) -> Any:
    from datetime import UTC, datetime  # noqa: PLC0415 - local to keep the top light

    return datetime.fromtimestamp(T0 + i * 0.05 + j * 0.001, tz=UTC)


def _events_for(i: int) -> list[Event]:
    payloads = [*_workflow(i), _anchor_event(i)]
    return [
        Event.create(
            p, event_id=UUID(int=(i << 8) | j), timestamp=_ts(i, j), workflow_id=f"wf-{i:07d}"
        )
        for j, p in enumerate(payloads)
    ]


def build_ledger(path: Path, events: int) -> SQLiteStore:
    """The bench ledger, built once per size (appends are measured by bench_append)."""
    store = SQLiteStore(path, synchronous="NORMAL")
    have = store.size()
    if have >= events:
        return store
    if have:
        store.close()
        path.unlink()
        store = SQLiteStore(path, synchronous="NORMAL")
    print(f"building a {events:,}-event ledger at {path} (once) ...", flush=True)
    i = written = 0
    t = time.perf_counter()
    while written < events:
        requests: list[AppendRequest] = []
        while written < events and len(requests) < 200:
            evs = _events_for(i)[: events - written]
            requests.append(AppendRequest(StreamId(f"wf-{i:07d}"), evs))
            written += len(evs)
            i += 1
        store.append_batch(requests)
    print(f"  built in {time.perf_counter() - t:.0f}s", flush=True)
    return store


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds else float("inf")


def _cpu() -> float:
    import resource  # noqa: PLC0415 - POSIX only, like the bench

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure_rebuild(
    store: SQLiteStore, workdir: Path, *, profile: bool, workers: int = 2
) -> dict[str, Any]:
    n = store.size()
    out: dict[str, Any] = {"events": n}

    t = time.perf_counter()
    count = sum(1 for _ in read_records(store))
    out["read_decode_rate"] = _rate(count, time.perf_counter() - t)

    t = time.perf_counter()
    states = fold_all(read_records(store))
    out["fold_rate"] = _rate(n, time.perf_counter() - t)
    out["workflows"] = len(states)

    sample = [raw.body for _, raw in zip(range(100_000), store.read_raw(), strict=False)]
    t = time.perf_counter()
    for body in sample:
        # The stored body plus the hash field is a RecordedEvent's JSON.
        RecordedEvent.model_validate_json(body[:-1] + b',"hash":"' + b"00" * 32 + b'"}')
    out["validate_rate"] = _rate(len(sample), time.perf_counter() - t)

    views_path = workdir / "views.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{views_path}{suffix}").unlink(missing_ok=True)
    views = SQLiteViews(views_path)
    runner = ProjectionRunner(store, views)
    profiler = None
    if profile:
        from pyinstrument import Profiler  # noqa: PLC0415 - optional

        profiler = Profiler()
        profiler.start()
    t, cpu = time.perf_counter(), _cpu()
    report = runner.rebuild()
    seconds, cpu = time.perf_counter() - t, _cpu() - cpu
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False, show_all=False))
    views.close()
    out["rebuild_seconds"] = seconds
    out["rebuild_rate"] = _rate(report.events, seconds)
    out["rebuild_cpu_us_per_event"] = cpu / max(report.events, 1) * 1e6
    out["views_mb"] = views_path.stat().st_size / 1e6
    if workers > 1:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{views_path}{suffix}").unlink(missing_ok=True)
        views = SQLiteViews(views_path)
        runner = ProjectionRunner(store, views)
        t, cpu = time.perf_counter(), _cpu()
        report = runner.rebuild(workers=workers)
        seconds, cpu = time.perf_counter() - t, _cpu() - cpu
        views.close()
        out["workers"] = workers
        out["parallel_seconds"] = seconds
        out["parallel_rate"] = _rate(report.events, seconds)
        out["parallel_cpu_us_per_event"] = cpu / max(report.events, 1) * 1e6
    return out


def measure_phases(store: SQLiteStore) -> dict[str, float]:
    """CPU us per ledger event of each phase of a rebuild, in memory (no views database)."""
    import gc  # noqa: PLC0415 - only this measurement pauses the collector, like the runner

    from tracebound.projections.base import Rows  # noqa: PLC0415
    from tracebound.projections.memory import MemorySink  # noqa: PLC0415
    from tracebound.projections.runner import default_projections  # noqa: PLC0415

    n = store.size()
    out: dict[str, float] = {}
    was = gc.isenabled()
    gc.disable()
    try:
        cpu = time.process_time()
        records = list(read_records(store))
        out["read+decode"] = (time.process_time() - cpu) / n * 1e6
        drains = 0.0
        for p in default_projections():
            kinds = p.kinds
            mine = [r for r in records if kinds is None or r["event_type"] in kinds]
            rows = Rows(MemorySink(), fresh=[t.name for t in p.tables])
            many = getattr(p, "apply_many", None)
            cpu = time.process_time()
            for start in range(0, len(mine), 2048):
                chunk = mine[start : start + 2048]
                if many is not None:
                    many(chunk, rows)
                else:
                    for r in chunk:
                        p.apply(r, rows)
                if start % 20_480 == 0:
                    d = time.process_time()
                    rows.drain()
                    drains += time.process_time() - d
            out[f"apply {p.name}"] = (time.process_time() - cpu) / n * 1e6
        out["drains"] = drains / n * 1e6
        cpu = time.process_time()
        del records, mine
        out["free the records"] = (time.process_time() - cpu) / n * 1e6
    finally:
        if was:
            gc.enable()
    return out


def measure_lag(workdir: Path, *, seconds: float, rate: float) -> dict[str, Any]:
    """Append at ``rate`` events/s while following; lag = commit-visible minus append-return."""
    ledger_path = workdir / "lag-ledger.db"
    views_path = workdir / "lag-views.db"
    for p in (ledger_path, views_path):
        for suffix in ("", "-wal", "-shm"):
            Path(f"{p}{suffix}").unlink(missing_ok=True)
    store = SQLiteStore(ledger_path)  # FULL: what a production writer would use
    views = SQLiteViews(views_path)
    appended: dict[int, float] = {}
    lags: list[float] = []
    lock = threading.Lock()
    seen = [0]

    def on_commit(position: int) -> None:
        now = time.perf_counter()
        with lock:
            for pos in range(seen[0] + 1, position + 1):
                t0 = appended.pop(pos, None)
                if t0 is not None:
                    lags.append(now - t0)
            seen[0] = max(seen[0], position)

    runner = ProjectionRunner(store, views, on_commit=on_commit)
    stop = threading.Event()
    follower = threading.Thread(target=runner.follow, args=(stop,), kwargs={"interval": 0.002})
    follower.start()
    batch = 20  # events per append: 250 commits/s at 5k events/s
    interval = batch / rate
    i = 0
    start = time.perf_counter()
    next_at = start
    while time.perf_counter() - start < seconds:
        evs = _events_for(i)[:batch]
        recorded = store.append(f"wf-{i:07d}", evs)
        now = time.perf_counter()
        with lock:
            for r in recorded:
                if r.position > seen[0]:
                    appended[r.position] = now
        i += 1
        next_at += interval
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.perf_counter() - start
    deadline = time.perf_counter() + 5
    while appended and time.perf_counter() < deadline:
        time.sleep(0.01)
    stop.set()
    follower.join()
    n = store.size()
    store.close()
    views.close()
    lags.sort()
    ms = [x * 1000 for x in lags]
    return {
        "events": n,
        "append_rate": n / elapsed,
        "samples": len(ms),
        "p50_ms": statistics.median(ms) if ms else None,
        "p99_ms": ms[int(len(ms) * 0.99) - 1] if ms else None,
        "max_ms": ms[-1] if ms else None,
        "unseen": len(appended),
    }


def report(results: dict[str, Any]) -> None:
    r = results.get("rebuild")
    if r:

        def verdict(rate: float) -> str:
            met = "MET" if rate >= TARGET_RATE else "MISSED"
            return f">= {TARGET_RATE:,.0f} (stretch {STRETCH_RATE:,.0f}): {met}"

        rows = [
            ["read+decode (floor)", r["read_decode_rate"], ""],
            ["fold (all workflows)", r["fold_rate"], ""],
            ["model_validate_json (not used)", r["validate_rate"], ""],
            [
                f"rebuild: fold + 6 projections ({r['rebuild_cpu_us_per_event']:.1f} us CPU/ev)",
                r["rebuild_rate"],
                verdict(r["rebuild_rate"]),
            ],
        ]
        if "parallel_rate" in r:
            rows.append(
                [
                    f"rebuild, {r['workers']} workers ({r['parallel_cpu_us_per_event']:.1f} us/ev)",
                    r["parallel_rate"],
                    verdict(r["parallel_rate"]),
                ]
            )
        print_table(
            f"Projections over {r['events']:,} events ({r['workflows']:,} workflows)",
            ["what", "events/s", "target"],
            rows,
        )
        print(f"  rebuild took {r['rebuild_seconds']:.2f}s; views file {r['views_mb']:.0f} MB")
    phases = results.get("phases")
    if phases:
        print_table(
            "CPU per ledger event, in memory (the rest of a rebuild is the views commit)",
            ["phase", "us/event"],
            [[k, f"{v:.3f}"] for k, v in phases.items()],
        )
    lag = results.get("lag")
    if lag:
        print_table(
            "Live lag (follow mode)",
            ["appended", "append rate/s", "p50 ms", "p99 ms", "max ms", "target"],
            [
                [
                    lag["events"],
                    lag["append_rate"],
                    lag["p50_ms"],
                    lag["p99_ms"],
                    lag["max_ms"],
                    f"p99 <= {TARGET_P99_MS:.0f} ms: "
                    + ("MET" if (lag["p99_ms"] or 1e9) <= TARGET_P99_MS else "MISSED"),
                ]
            ],
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="cache dir for the ledger")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the rebuild")
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=5_000.0)
    parser.add_argument("--workers", type=int, default=2, help="processes for the 2nd rebuild")
    parser.add_argument("--skip-rebuild", action="store_true")
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument("--phases", action="store_true", help="CPU breakdown per phase")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    workdir = args.dir or Path(tempfile.gettempdir()) / "tracebound-bench-projections"
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine(workdir)}
    show_machine(results["machine"])
    if not args.skip_rebuild:
        store = build_ledger(workdir / f"ledger-{args.events}.db", args.events)
        results["rebuild"] = measure_rebuild(
            store, workdir, profile=args.profile, workers=args.workers
        )
        if args.phases:
            results["phases"] = measure_phases(store)
        store.close()
    if not args.skip_lag:
        results["lag"] = measure_lag(workdir, seconds=args.lag_seconds, rate=args.rate)
    report(results)
    write_json(args.json, results)


if __name__ == "__main__":
    main()
