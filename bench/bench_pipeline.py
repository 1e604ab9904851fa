"""What tracing adds to a pipeline step: a no-op step, traced, against the bare function.

Usage::

    .venv/bin/python -m bench.bench_pipeline [--runs 60] [--steps 20] [--dir DIR]
        [--blobs sqlite|file] [--profile] [--json PATH]

Target (issue 4): a traced step (validate the TPC artifact and the handoff envelope, store
the artifact, append the durable ARL entry) adds <= 1 ms p50 and <= 5 ms p99 over the bare
function.

Set-up: a durable SQLite ledger (``synchronous=FULL``, WAL: each append fsyncs) in
``--dir``, and its blob store: ``--blobs sqlite`` (the default, as ``RunnerConfig`` chooses
for a SQLite ledger) keeps blobs in the ledger's own file, committed without fsync and made
durable by the append that names them (ADR 0009: one fsync per step); ``--blobs file``
writes each new blob as a file (write, fsync, rename, directory fsync: three fsyncs per
step with the append's). The pipeline is ``--steps`` Planner steps in a chain; each step
returns a prebuilt TPC artifact that differs from every other (so every blob is new and
really written, no dedup), and each passes the next a complete handoff envelope, which the
runner validates. The policy gates nothing these steps ask for, so nothing pauses.

Measurement: the Runner's ``on_event`` hook stamps ``perf_counter`` when each event is
durable. One step's traced time is the gap between its ``step_recorded`` and the event
before it (the previous step's, or ``run_started``); the bare function's own time (measured
alone, median of many calls) is subtracted. ``--runs`` runs of ``--steps`` steps give the
samples; the first run warms caches and is dropped.

For scale, each part alone on the same machine: one durable ``Ledger.record`` of the
step's ARL entry, one ``put`` of a new artifact into the same kind of blob store, and the
two CPU-bound checks (redacting the artifact, validating it against the TPC contract), the
last also with the compiled fast path switched off (the jsonschema reference alone, ADR
0008). The disk's own fsync latency (1 KB ``write`` + ``fsync`` of a file in ``--dir``) is
probed right before and right after the steps: it drifts with other processes' I/O.

Tip: ``--dir /dev/shm`` takes fsync out (tmpfs), leaving the CPU part; on a shared disk the
fsyncs' latency swings with other processes' I/O, so compare CPU ms per step across runs.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

from bench._common import machine, print_table, show_machine, write_json
from tracebound import Ledger, NoteSigner, RandomIds, SQLiteStore, SystemClock
from tracebound.canonical import canonical_bytes
from tracebound.contract import validate as contract_validate
from tracebound.contract import validate_tpc
from tracebound.events.catalog import CostEstimate, StepRecorded
from tracebound.events.envelope import RecordedEvent
from tracebound.ids import RunId, Sha256Digest, StepId
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.store.blobs import BlobStore, FileBlobStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore

TARGET_P50_MS = 1.0
TARGET_P99_MS = 5.0
BLOB_STORES = ("sqlite", "file")

POLICY = {"version": 1, "gate": {"sensitive_paths": ["secrets/**"]}}


def artifact(run: int, step: int) -> dict[str, Any]:
    """A realistic small TPC artifact (about 1 KB canonical), unique per (run, step)."""
    return {
        "role": "Planner",
        "goal": f"run {run} step {step}: upgrade urllib3 past GHSA-v845-jxx5-vc9f",
        "input_refs": [f"input://advisories/GHSA-v845-jxx5-vc9f#{run}-{step}"],
        "assumptions": ["the lockfile is the source of truth"],
        "constraints": ["time<=60s", "no-write-to-prod"],
        "actions": ["summarize requirements", "plan the smallest upgrade"],
        "outputs": {"summary": f"plan {run}.{step}: pin urllib3==2.2.2", "artifacts": []},
        "diffs": [],
        "tests_run": [],
        "confidence": 8000,
        "risks": ["transitive pins may conflict"],
        "cost_est": {"prompt_tokens": 1200, "compute_usd_est": "0.02"},
        "latency_est": {"p50_ms": 800, "p95_ms": 1500},
        "required_validations": [],
        "handoff_envelope": {
            "assumptions": ["db schema frozen"],
            "constraints": ["no-exec", "paths:requirements.txt"],
            "required_validations": ["schema-validation"],
            "minimal_diff": "one pin in requirements.txt",
        },
    }


def no_op_pipeline(steps: int, prepared: dict[tuple[int, int], dict[str, Any]]) -> Pipeline:
    """``steps`` Planner steps; step ``i`` returns the prepared artifact for (run, i)."""
    pipe = Pipeline("bench", pipeline_type="bench")
    for i in range(steps):

        def step(ctx: StepContext, i: int = i) -> dict[str, Any]:
            return prepared[(int(ctx.inputs["run"]), i)]

        pipe.planner(name=f"s{i}")(step)
    return pipe


def bare_call_ns(prepared: dict[tuple[int, int], dict[str, Any]]) -> float:
    """The bare function's own time: a dict lookup keyed by an input, median of 10k calls."""
    inputs = {"run": 0}

    def bare(i: int) -> dict[str, Any]:
        return prepared[(int(inputs["run"]), i)]

    samples = []
    for _ in range(100):
        t0 = time.perf_counter_ns()
        for i in range(100):
            bare(i % 20)
        samples.append((time.perf_counter_ns() - t0) / 100)
    return statistics.median(samples)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {
        "n": len(ordered),
        "p50": q(0.50),
        "p90": q(0.90),
        "p99": q(0.99),
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
    }


def blob_store(kind: str, store: SQLiteStore, directory: Path) -> BlobStore:
    """The blob store ``--blobs`` names, for the ledger ``store``."""
    return SQLiteBlobStore(store) if kind == "sqlite" else FileBlobStore(directory)


def fsync_probe(directory: Path, n: int = 200) -> dict[str, float]:
    """The disk's fsync latency right now: ``n`` times a 1 KB append and its fsync."""
    path = directory / "fsync-probe.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    out = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, b"p" * 1024)
            os.fsync(fd)
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return percentiles(out)


def measure_steps(
    root: Path, runs: int, steps: int, profile: bool, blobs: str = "sqlite"
) -> dict[str, Any]:
    prepared = {(r, i): artifact(r, i) for r in range(runs + 1) for i in range(steps)}
    pipe = no_op_pipeline(steps, prepared)
    stamps: list[tuple[str, float]] = []

    def on_event(event: RecordedEvent) -> None:
        stamps.append((event.event_type, time.perf_counter()))

    store = SQLiteStore(root / "store", synchronous="FULL")
    ledger = Ledger(
        store,
        clock=SystemClock(),
        ids=RandomIds(),
        signer=NoteSigner("bench", bytes(32)),
        origin="bench.local/pipeline",
    )
    runner = Runner(
        ledger,
        blobs=blob_store(blobs, store, root / "blobs"),
        policy=Policy.from_dict(POLICY),
        redactor=Redactor(b"bench-redaction-key-0123456789ab"),
        on_event=on_event,
    )
    runner.run(pipe, {"run": runs})  # warm-up run: imports, schema caches, first blobs dir
    profiler: Any = None
    if profile:
        from pyinstrument import Profiler  # noqa: PLC0415 - optional

        profiler = Profiler(interval=0.0002)
        profiler.start()
    gc.collect()
    gc.freeze()
    samples_ms: list[float] = []
    bare_ns = bare_call_ns(prepared)
    started, cpu_started = time.perf_counter(), time.process_time()
    for r in range(runs):
        stamps.clear()
        result = runner.run(pipe, {"run": r})
        assert result.status == "completed", result
        previous = None
        for kind, t in stamps:
            if kind == "step_recorded" and previous is not None:
                samples_ms.append((t - previous) * 1000 - bare_ns / 1e6)
            if kind in {"run_started", "step_recorded"}:
                previous = t
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    gc.unfreeze()
    if profiler is not None:
        profiler.stop()
        (root / "profile.html").write_text(profiler.output_html())
        print(profiler.output_text(unicode=True, color=False, show_all=False)[:6000])
    ledger.close()
    return {
        "blobs": blobs,
        "runs": runs,
        "steps_per_run": steps,
        "bare_function_us": bare_ns / 1000,
        "overhead_ms": percentiles(samples_ms),
        "steps_per_second": runs * steps / wall,
        "cpu_ms_per_step": cpu * 1000 / (runs * steps),
    }


def measure_floor(root: Path, n: int, blob_kind: str = "sqlite") -> dict[str, Any]:
    """The durable append and the blob write alone, for scale."""
    store = SQLiteStore(root / "floor", synchronous="FULL")
    ledger = Ledger(store, clock=SystemClock(), ids=RandomIds(), origin="bench.local/floor")
    blobs = blob_store(blob_kind, store, root / "floor-blobs")
    now = SystemClock().now()
    entry = StepRecorded(
        run_id=RunId("bench-floor"),
        step_id=StepId("s0"),
        parent_step_id=None,
        role="Planner",
        timestamp_start=now,
        timestamp_end=now,
        duration_ms=0,
        artifact_hash=Sha256Digest("sha256:" + "ab" * 32),
        payload_pointer="blob://sha256:" + "ab" * 32,
        status="success",
        cost_est=CostEstimate(prompt_tokens=1200, compute_usd_est=Decimal("0.02")),
        latency_ms=0,
        storage="db",
        scopes_granted=("read",),
    )

    def timed(fn: Callable[[int], object]) -> dict[str, float]:
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            out.append((time.perf_counter() - t0) * 1000)
        return percentiles(out)

    append = timed(lambda _i: ledger.record("run/bench-floor", [entry], workflow_id="f"))
    put = timed(lambda i: blobs.put(canonical_bytes(artifact(10_000 + i, 0))))
    ledger.close()
    redactor = Redactor(b"bench-redaction-key-0123456789ab")
    docs = [artifact(20_000 + i, 0) for i in range(n)]
    redact = timed(lambda i: redactor.redact(docs[i]))
    tpc = timed(lambda i: validate_tpc(docs[i]))
    # The same check with the compiled fast path switched off: the jsonschema reference
    # alone, as before ADR 0008 (side by side, same documents, same run).
    with mock.patch.object(contract_validate, "_fast_accepts", return_value=False):
        tpc_reference = timed(lambda i: validate_tpc(docs[i]))
    return {"durable_append_ms": append, "blob_put_ms": put, "redact_ms": redact,
            "validate_tpc_ms": tpc, "validate_tpc_reference_ms": tpc_reference}  # fmt: skip


def run(
    runs: int, steps: int, directory: Path | None, profile: bool, blobs: str = "sqlite"
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tb-bench-pipeline-", dir=directory) as tmp:
        root = Path(tmp)
        load, before = os.getloadavg(), fsync_probe(root)
        result = measure_steps(root, runs, steps, profile, blobs)
        result["fsync_ms"] = {"before": before, "after": fsync_probe(root)}
        result["load_average"] = {"before": load, "after": os.getloadavg()}
        result["floor"] = measure_floor(root, runs * steps // 2, blobs)
    return result


def report(result: dict[str, Any]) -> None:
    o = result["overhead_ms"]
    rows = [
        ["traced step overhead (ms)", f"{o['p50']:.3f}", f"{o['p90']:.3f}", f"{o['p99']:.3f}",
         f"{o['max']:.3f}", f"{o['mean']:.3f}"],
    ]  # fmt: skip
    parts = (
        ("durable append alone", "durable_append_ms"),
        ("blob put alone", "blob_put_ms"),
        ("redact the artifact alone", "redact_ms"),
        ("validate_tpc alone", "validate_tpc_ms"),
        ("validate_tpc, jsonschema only", "validate_tpc_reference_ms"),
    )
    for name, key in parts:
        f = result["floor"][key]
        rows.append([f"{name} (ms)", f"{f['p50']:.3f}", f"{f['p90']:.3f}", f"{f['p99']:.3f}",
                     f"{f['max']:.3f}", f"{f['mean']:.3f}"])  # fmt: skip
    for when in ("before", "after"):
        f = result["fsync_ms"][when]
        rows.append([f"1 KB write + fsync, {when} the steps (ms)", f"{f['p50']:.3f}",
                     f"{f['p90']:.3f}", f"{f['p99']:.3f}", f"{f['max']:.3f}",
                     f"{f['mean']:.3f}"])  # fmt: skip
    print_table(
        f"Pipeline step overhead ({result['runs']} runs x {result['steps_per_run']} steps, "
        f"{o['n']} samples; bare function {result['bare_function_us']:.2f} us; "
        f"blobs: {result['blobs']})",
        ["what", "p50", "p90", "p99", "max", "mean"],
        rows,
    )
    load = result["load_average"]
    print(
        "load average (1, 5, 15 min): before "
        + ", ".join(f"{x:.2f}" for x in load["before"])
        + "; after "
        + ", ".join(f"{x:.2f}" for x in load["after"])
    )
    ok50, ok99 = o["p50"] <= TARGET_P50_MS, o["p99"] <= TARGET_P99_MS
    print(
        f"\ntarget p50 <= {TARGET_P50_MS} ms: {'met' if ok50 else 'MISSED'}; "
        f"p99 <= {TARGET_P99_MS} ms: {'met' if ok99 else 'MISSED'}; "
        f"{result['steps_per_second']:.0f} traced steps/s; "
        f"CPU {result['cpu_ms_per_step']:.3f} ms per step (whole run, this process)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_pipeline")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument(
        "--blobs",
        choices=BLOB_STORES,
        default="sqlite",
        help="blob store: in the ledger's file (default, ADR 0009) or one file per blob",
    )
    parser.add_argument("--profile", action="store_true", help="pyinstrument the timed runs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    info = machine(args.dir)
    show_machine(info)
    result = run(args.runs, args.steps, args.dir, args.profile, args.blobs)
    report(result)
    write_json(args.json, {"machine": info, "pipeline": result})


if __name__ == "__main__":
    main()
