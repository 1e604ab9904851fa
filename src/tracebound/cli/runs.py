"""Pipeline runs from the shell: list, approve or reject a gate, resume, metrics, replay, evidence.

A gated run waits in the ledger, not in a process: whoever owns the touched paths approves
it from a terminal (`approve RUN STEP --as NAME`, checked against CODEOWNERS), and any
process resumes it later (`resume RUN`, which imports the pipeline from the reference the
run recorded). Every command reads the same files a Runner uses; see
:mod:`tracebound.pipeline.config` for where they are by default.

Exit codes: 0 success; 1 a check failed (damaged chain or blob, tampered evidence, a
divergent rerun, an SLO violation with `metrics --check`, a resumed run that failed or was
rejected); 2 usage or configuration (not an owner, not gated, no policy, a run another
`resume` already claimed); 3 incomplete (a resumed run still waits at a gate; evidence that
carries no signature).
"""

from __future__ import annotations

import heapq
import importlib
import shlex
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.table import Table

from tracebound.cli._common import (
    EXIT_DAMAGED,
    EXIT_INCOMPLETE,
    JsonOpt,
    KeyOpt,
    OfflineKeyOpt,
    OfflineVerifierOpt,
    OriginOpt,
    RedactionKeyOpt,
    StoreOpt,
    WitnessOpt,
    console,
    emit_json,
    handled,
    progress_bar,
    safe_text,
    try_verifier,
)
from tracebound.cli._tables import fit, short_digest, utc_text
from tracebound.errors import ConfigError, PolicyUnusable
from tracebound.events.envelope import format_timestamp
from tracebound.ids import RunId, StepId

if TYPE_CHECKING:
    from decimal import Decimal

    from tracebound.events.catalog import GateRequested
    from tracebound.events.envelope import RecordedEvent
    from tracebound.events.record import RawRecord
    from tracebound.export.evidence import EvidenceReport, Spend
    from tracebound.ledger import Ledger
    from tracebound.pipeline.config import RunnerConfig
    from tracebound.pipeline.metrics import GroupMetrics
    from tracebound.pipeline.runner import RunResult
    from tracebound.pipeline.validations import ValidationRegistry
    from tracebound.replay.rebuild import ReplayReport
    from tracebound.store.port import LedgerStore

# The runtime, replay and export are imported inside each command: they pull in the event
# catalog, the redaction detectors and the contract schemas, which would triple the startup
# time of every other `tracebound` command.

__all__ = ["register"]

PolicyOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        envvar="TRACEBOUND_POLICY",
        help="Policy file (TOML). Default: ./tracebound-policy.toml; required.",
        show_default=False,
    ),
]
CodeownersOpt = Annotated[
    Path | None,
    typer.Option(
        "--codeowners",
        envvar="TRACEBOUND_CODEOWNERS",
        help="CODEOWNERS file. Default: ./CODEOWNERS, then ./.github/CODEOWNERS",
        show_default=False,
    ),
]
BlobsOpt = Annotated[
    Path | None,
    typer.Option(
        "--blobs",
        envvar="TRACEBOUND_BLOBS",
        help="Keep blobs as files in this directory. Default: inside a SQLite ledger's "
        "own file; <store dir>/blobs for a JSONL ledger; required for a PostgreSQL ledger",
        show_default=False,
    ),
]
PipelineRefOpt = Annotated[
    str | None,
    typer.Option(
        "--pipeline",
        help="The pipeline as module:attribute. Default: the reference the run recorded.",
        show_default=False,
    ),
]
ValidationsOpt = Annotated[
    str | None,
    typer.Option(
        "--validations",
        help="A ValidationRegistry as module:attribute, for pipelines that register "
        "their own checks or test commands.",
        show_default=False,
    ),
]
AsOpt = Annotated[str, typer.Option("--as", help="Who decides (a CODEOWNERS name, e.g. @alice).")]
RunArg = Annotated[str, typer.Argument(help="The run id.")]
StepArg = Annotated[str, typer.Argument(help="The gated step id (as `runs` shows it).")]


def _config(
    store: str | None,
    *,
    policy: Path | None = None,
    codeowners: Path | None = None,
    blobs: Path | None = None,
    redaction_key: Path | None = None,
    key: Path | None = None,
    verifier_key: str | None = None,
    witness: Path | None = None,
) -> RunnerConfig:
    from tracebound.pipeline.config import RunnerConfig  # noqa: PLC0415 - lazy, for startup time

    return RunnerConfig(
        store=store,
        policy=policy,
        codeowners=codeowners,
        blobs=blobs,
        redaction_key=redaction_key,
        key=key,
        verifier_key=verifier_key,
        witness=witness,
    )


def _importable_cwd() -> None:
    """Let `module:attr` references name modules in the working directory, as with
    ``python -m``; the `tracebound` script alone would not look there."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def _validations(ref: str | None) -> ValidationRegistry | None:
    from tracebound.pipeline.validations import ValidationRegistry  # noqa: PLC0415 - lazy, for startup time

    if ref is None:
        return None
    module, _, attr = ref.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot import validations {ref!r}: {exc}") from exc
    if not isinstance(obj, ValidationRegistry):
        raise ConfigError(f"{ref!r} is a {type(obj).__name__}, not a ValidationRegistry")
    return obj


# -- runs ----------------------------------------------------------------------------------


def _run_rows(events: Iterable[RecordedEvent]) -> list[dict[str, Any]]:
    """One row per run, folded from the log: latest status, steps, and who it waits for.

    ``steps`` counts the records the run stands on: a take-over's ``take_overs`` entry
    (the claim's position, who took over, what it abandoned) accounts for the rest."""
    from tracebound.events.catalog import (  # noqa: PLC0415 - lazy, for startup time
        ApprovalRecorded,
        GateRequested,
        RunFinished,
        RunResumed,
        RunStarted,
        StepRecorded,
    )
    from tracebound.events.takeover import TakeOvers  # noqa: PLC0415 - lazy, for startup time

    rows: dict[str, dict[str, Any]] = {}
    take_overs = TakeOvers()
    for e in events:
        taken = take_overs.add(e)
        p = e.payload
        if isinstance(p, RunStarted):
            rows[p.run_id] = {
                "run_id": p.run_id,
                "pipeline": p.pipeline,
                "pipeline_type": p.pipeline_type,
                "critical": p.critical,
                "started": format_timestamp(e.timestamp),
                "status": "running",
                "steps": 0,
                "waiting_at": None,
                "owners": [],
                "decision": None,
                "reason": None,
                "take_overs": [],
            }
            continue
        row = rows.get(str(getattr(p, "run_id", "")))
        if row is None:
            continue
        if taken is not None:
            # The steps the dead claimant recorded are abandoned: the run's step count is
            # the take-over's; the take-over names who took over, where, and what it left.
            row["steps"] -= len(taken.steps)
            row["take_overs"].append(taken.as_dict())
        if isinstance(p, StepRecorded):
            row["steps"] += 1
        elif isinstance(p, GateRequested):
            row["waiting_at"], row["owners"], row["decision"] = p.step_id, list(p.owners), None
        elif isinstance(p, ApprovalRecorded):
            row["decision"] = f"{p.decision} by {p.approver}"
        elif isinstance(p, RunResumed):  # a process claimed it: no longer waiting for anyone
            row["status"], row["reason"] = "running", None  # the pause's reason is over
        elif isinstance(p, RunFinished):
            row["status"], row["reason"] = p.status, p.reason
    for row in rows.values():
        if row["status"] != "gated":
            row["waiting_at"], row["owners"], row["decision"] = None, [], None
    return list(rows.values())


def _run_records(store: LedgerStore) -> Iterator[RawRecord]:
    """The records :func:`_run_rows` folds, in log order: the run events, and every record
    of a stream from its first gate on (what a take-over abandons is counted, of any type).

    Picked by the store's event type and stream columns, as before, but inside the store:
    the run events through its filter, a gated stream's other records through its stream
    index, so the bulk of a big log (costs, a team's own events) never reaches Python."""
    from tracebound.events.takeover import TAKE_OVER_KINDS  # noqa: PLC0415 - lazy, for startup time
    from tracebound.store.port import RecordFilter, StreamIndex, read_matching  # noqa: PLC0415 - lazy, for startup time

    kinds = TAKE_OVER_KINDS | {"run_started", "step_recorded", "approval_recorded"}
    if not isinstance(store, StreamIndex):
        yield from _run_records_scan(store.read_raw(), kinds)
        return
    stop = store.size()  # both reads end here: a gate appended meanwhile is not half-read
    gates = RecordFilter(kinds=frozenset({"gate_requested"}))
    first_gate: dict[str, int] = {}
    for raw in read_matching(store, gates, stop=stop):
        first_gate.setdefault(raw.stream_id, raw.position)
    # The run events among them come with the first read.
    others = (raw for raw in _gated_records(store, first_gate, stop) if raw.event_type not in kinds)
    yield from heapq.merge(
        read_matching(store, RecordFilter(kinds=kinds), stop=stop),
        others,
        key=attrgetter("position"),
    )


def _gated_records(
    store: LedgerStore, first_gate: dict[str, int], stop: int
) -> Iterator[RawRecord]:
    """The records of the gated streams from their first gate on, in log order."""
    from tracebound.store.port import indexed_positions, position_runs  # noqa: PLC0415 - lazy, for startup time

    positions = sorted(
        p
        for stream, first in first_gate.items()
        for p in indexed_positions(store, stream, start=first)
        if p <= stop
    )
    for first, last in position_runs(positions):
        yield from store.read_raw(start=first, stop=last)


def _run_records_scan(raws: Iterable[RawRecord], kinds: frozenset[str]) -> Iterator[RawRecord]:
    """:func:`_run_records` of a store without a stream index, in one pass over the log."""
    gated: set[str] = set()
    for raw in raws:
        if raw.event_type == "gate_requested":
            gated.add(raw.stream_id)
        if raw.event_type in kinds or raw.stream_id in gated:
            yield raw


RUN_STATUSES: Final = ("running", "completed", "failed", "gated", "rejected")


def _run_status(value: str | None) -> str | None:
    # Checked here, with the choices named: a misspelt status would otherwise list nothing.
    if value is not None and value not in RUN_STATUSES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(RUN_STATUSES)}")
    return value


def runs(
    store: StoreOpt = None,
    pipeline: Annotated[str | None, typer.Option(help="Only runs of this pipeline.")] = None,
    status: Annotated[
        str | None,
        typer.Option(
            callback=_run_status,
            metavar="STATUS",
            help=f"Only runs with this status: {', '.join(RUN_STATUSES)} (gated: waiting).",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            min=0, help="The table shows the newest this many runs; 0 for all. --json has all."
        ),
    ] = 50,
    as_json: JsonOpt = False,
) -> None:
    """List pipeline runs with their status; gated runs show the step and its owners.

    Oldest first. The table stops at the newest --limit runs (default 50) and says how many
    older ones it left out, and how many of those wait at a gate (`--status gated` lists
    them); --json always has every run that matches.
    """
    from tracebound.events.record import decode_known  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        ledger = _config(store).open_ledger()
        try:
            rows = _run_rows(decode_known(_run_records(ledger.store)))
            _known_pipeline(rows, pipeline)
            _add_idle(ledger, rows)
        finally:
            ledger.close()
    rows = [r for r in rows if pipeline in (None, r["pipeline"]) and status in (None, r["status"])]
    if as_json:
        emit_json({"ok": True, "runs": rows})
        return
    # Drawing a table costs ~1 ms a row: a year of runs would take minutes to scroll past.
    older = rows[:-limit] if 0 < limit < len(rows) else []
    rows = rows[len(older) :]
    _print_runs_table(rows, title=f"{len(rows) + len(older):,} run(s)")
    if older:
        waiting = sum(r["status"] == "gated" for r in older)
        gated = f"; {waiting:,} of them gated: --status gated lists them" if waiting else ""
        console.print(f"[dim]{len(older):,} older run(s) not shown (--limit 0: all){gated}[/]")


def _known_pipeline(rows: list[dict[str, Any]], pipeline: str | None) -> None:
    """Refuse a --pipeline no run of the ledger has: an empty table for a mistyped name read
    as "it never ran" (`metrics --pipeline` refuses it too)."""
    names = {str(r["pipeline"]) for r in rows}
    if pipeline is not None and pipeline not in names:
        raise _no_such_pipeline(pipeline, names)


def _no_such_pipeline(pipeline: str, names: set[str]) -> ConfigError:
    """The refusal of a pipeline no run has, named with the ones the ledger has."""
    known = sorted(names)
    shown = ", ".join(known[:_PIPELINES_NAMED])
    more = f" and {len(known) - _PIPELINES_NAMED:,} more" if len(known) > _PIPELINES_NAMED else ""
    has = f" (its pipelines: {shown}{more})" if known else ""
    return ConfigError(f"no runs of pipeline {pipeline!r} in this ledger{has}")


_PIPELINES_NAMED: Final = 10


def _add_idle(ledger: Ledger, rows: list[dict[str, Any]]) -> None:
    """For each running run: when its stream's last event was recorded, and how long ago by
    the ledger's clock. A run whose process died stays running for good; this is what makes
    it stand out (`tracebound abandon` ends it). None for the other runs."""
    from tracebound.pipeline.runner import run_stream  # noqa: PLC0415 - lazy, for startup time

    now = ledger.clock.now()
    for row in rows:
        row["last_event"] = row["idle_seconds"] = None
        if row["status"] != "running":
            continue
        stream = run_stream(row["run_id"])
        head = ledger.store.stream_head(stream)
        if head is None:
            continue
        last = next(ledger.store.read_stream(stream, from_version=head.version), None)
        if last is not None:
            row["last_event"] = format_timestamp(last.timestamp)
            row["idle_seconds"] = max(0, int((now - last.timestamp).total_seconds()))


def _idle_text(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _print_runs_table(rows: list[dict[str, Any]], *, title: str) -> None:
    table = Table(title=title)
    for col in ("run", "pipeline", "status", "steps", "waiting at", "started (UTC)"):
        table.add_column(col, justify="right" if col == "steps" else "left")
    colours = {"completed": "green", "failed": "red", "rejected": "red", "gated": "yellow"}
    for r in rows:
        waiting = ""
        if r["waiting_at"]:
            waiting = f"{r['waiting_at']} ({' '.join(r['owners']) or 'no owner'})"
            waiting += f", {r['decision']}: resume it" if r["decision"] else ""
        colour = colours.get(r["status"], "white")
        status = safe_text(r["status"])
        if r.get("idle_seconds") is not None:
            status += f" [dim](idle {_idle_text(r['idle_seconds'])})[/]"
        # Run ids, names and reasons are recorded data, not markup: escaped, a "[/x]" in one
        # cannot crash the table and a "[green]" cannot restyle it.
        table.add_row(
            safe_text(r["run_id"]),
            safe_text(r["pipeline"]),
            f"[{colour}]{status}[/]",
            str(r["steps"]),
            safe_text(waiting),
            utc_text(datetime.fromisoformat(r["started"]), seconds=True),
        )
    # A run id is what approve, reject and resume take: folded onto more lines, never cut.
    fit(
        table,
        give={"run": "fold", "pipeline": "ellipsis", "waiting at": "fold", "started (UTC)": "fold"},
        prefer="run",
        console=console,
    )
    console.print(table)


# -- approve / reject ----------------------------------------------------------------------


def _record_decision(
    decision: str,
    run: str,
    step: str,
    name: str,
    *,
    store: str | None,
    codeowners: Path | None,
    as_json: bool,
) -> None:
    from tracebound.pipeline.config import RunnerConfig  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.runner import approve  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        config = RunnerConfig(store=store, codeowners=codeowners)
        owners = config.load_codeowners(required=True)
        assert owners is not None
        ledger = config.open_ledger()
        try:
            _gate(ledger, run, step)  # for its errors: no such run, or the step is not gated
            ref = _pipeline_ref(ledger, run)
            # approve checks the name against CODEOWNERS for either decision, and re-judges
            # if another decision races this one.
            record = approve(
                ledger,
                RunId(run),
                StepId(step),
                name,
                codeowners=owners,
                decision="approved" if decision == "approve" else "rejected",
            )
        finally:
            ledger.close()
    # The same store and CODEOWNERS as this command, so the line works when pasted.
    nxt = ["tracebound", "resume", run]
    # A run whose Pipeline has no `ref` can only be resumed with --pipeline: say so rather
    # than print a command that fails ("recorded no pipeline reference").
    nxt += ["--pipeline", _NO_REF] if ref is None else []
    nxt += [] if store is None else ["--store", store]
    nxt += [] if codeowners is None else ["--codeowners", str(codeowners)]
    next_cmd = shlex.join(nxt)
    if as_json:
        emit_json(
            {
                "ok": True,
                "run_id": run,
                "step_id": step,
                "next": next_cmd,
                "approver": record.approver,
                "decision": record.decision,
                "paths": list(record.paths),
                "timestamp": format_timestamp(record.timestamp),
            }
        )
        return
    console.print(
        f"[bold]{record.decision.capitalize()}[/] {safe_text(step)} of run {safe_text(run)} as "
        f"{safe_text(record.approver)} at {utc_text(record.timestamp, seconds=True)} UTC "
        f"(paths: {safe_text(', '.join(record.paths) or '-')})."
    )
    console.print(f"Next: {next_cmd}", soft_wrap=True, markup=False, highlight=False)
    if ref is None:
        console.print(
            f"(the run recorded no pipeline reference: {_NO_REF} names where its Pipeline "
            "is defined; a program that builds its pipeline itself may resume it its own way)",
            markup=False,
            highlight=False,
        )


_NO_REF: Final = "MODULE:ATTR"


def _gate(ledger: Ledger, run: str, step: str) -> GateRequested:
    from tracebound.events.catalog import GateRequested, RunStarted  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.runner import no_such_run, run_stream  # noqa: PLC0415 - lazy, for startup time

    gate: GateRequested | None = None
    started = False
    for e in ledger.store.read_stream(run_stream(run)):
        started = started or isinstance(e.payload, RunStarted)
        if isinstance(e.payload, GateRequested) and e.payload.step_id == step:
            gate = e.payload
    if not started:
        raise no_such_run(ledger.store, run)
    if gate is None:
        raise ConfigError(f"step {step!r} of run {run!r} is not gated; `tracebound runs` shows it")
    return gate


def approve_cmd(
    run: RunArg,
    step: StepArg,
    name: AsOpt,
    store: StoreOpt = None,
    codeowners: CodeownersOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve a gated step as NAME, who must own every path the gate names (CODEOWNERS).

    When a reason names no path (an exec: action, a scope the policy does not allow), NAME
    must be a default owner (the catch-all `*` line) as well. The approver's identity and
    the time are recorded in the run's ledger stream; the run continues with
    `tracebound resume RUN`.
    """
    _record_decision(
        "approve", run, step, name, store=store, codeowners=codeowners, as_json=as_json
    )


def reject_cmd(
    run: RunArg,
    step: StepArg,
    name: AsOpt,
    store: StoreOpt = None,
    codeowners: CodeownersOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject a gated step as NAME (a CODEOWNER of its paths); `resume` then ends the run."""
    _record_decision("reject", run, step, name, store=store, codeowners=codeowners, as_json=as_json)


# -- resume --------------------------------------------------------------------------------


def _steps_table(result: RunResult) -> Table:
    table = Table(title=f"run {safe_text(result.run_id)}: {result.status}")
    for col in ("step", "role", "status", "artifact", "reason"):
        table.add_column(col)
    for s in result.steps:
        table.add_row(
            safe_text(s.step_id),
            s.role,
            s.status,
            short_digest(s.artifact_hash or "-"),
            safe_text((s.reason or "")[:80]),
        )
    # The digest (19 characters, as `replay` shows it) never gives way: it is what an
    # auditor matches against the evidence file, and cropped to its floor it read
    # `sha256:5` whenever a long reason took the room. The reason folds instead.
    fit(table, give={"step": "ellipsis", "reason": "fold"}, console=console)
    return table


def resume(
    run: RunArg,
    pipeline: PipelineRefOpt = None,
    validations: ValidationsOpt = None,
    evidence_dir: Annotated[
        Path, typer.Option(help="Where the run's evidence file is written.")
    ] = Path("artifacts") / "agent-runs",
    store: StoreOpt = None,
    policy: PolicyOpt = None,
    codeowners: CodeownersOpt = None,
    blobs: BlobsOpt = None,
    redaction_key: RedactionKeyOpt = None,
    key: KeyOpt = None,
    witness: WitnessOpt = None,
    take_over: Annotated[
        bool,
        typer.Option(
            "--take-over",
            help="Claim a run another resume claimed and never finished because its process "
            "died (a live one would stop at its next write, RunTakenOver, but finish what it "
            "was doing). Needs --as NAME. The gated step's apply hook runs again; a gate "
            "approved whose artifact was never recorded ends the run failed instead.",
        ),
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="With --take-over: the human who takes the run over (recorded in the "
            "run_resumed event as taken_over_by).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Continue a gated run after a human decided; prints how it ended.

    The pipeline is imported from the reference the run recorded (`Pipeline(ref=...)`)
    unless --pipeline names it. The run is claimed before anything runs: when another
    resume got there first, this one runs nothing and exits 2 (RunAlreadyResumed). If that
    resume's process is known to be dead (killed, its machine lost) and the run never
    finished, `--take-over --as NAME` claims it again in NAME's name and runs the gated
    step's apply hook again, so side effects the dead process made may repeat (if the dead
    process never recorded the gated artifact an owner then approved, the take-over ends the
    run failed at that gate and applies nothing: docs/adr/0015). The run's
    evidence is written to <evidence-dir>/<run>.json, signed when a signing key exists.
    Exit 0 completed, 1 failed or rejected, 2 not resumable (not gated or finished, claimed
    by another resume, nothing to take over, --take-over without --as), 3 still waiting at
    a gate.
    """
    from tracebound.export.evidence import EvidenceWriter  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.config import load_pipeline  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        if take_over and name is None:
            raise ConfigError(
                "--take-over needs --as NAME: the human who takes the run over is recorded"
            )
        if name is not None and not take_over:
            raise ConfigError(
                "--as names who takes a run over and goes with --take-over; a plain resume "
                "records no name"
            )
        config = _config(
            store,
            policy=policy,
            codeowners=codeowners,
            blobs=blobs,
            redaction_key=redaction_key,
            key=key,
            witness=witness,
        )
        ledger = config.open_ledger()
        try:
            ref = pipeline or _recorded_ref(ledger, run)
            _importable_cwd()
            pipe = load_pipeline(ref)
            writer = EvidenceWriter(evidence_dir)
            runner = config.build_runner(
                ledger, validations=_validations(validations), evidence=writer
            )
            result = runner.resume(pipe, run, take_over_by=name if take_over else None)
        finally:
            ledger.close()
    code = {"completed": 0, "gated": EXIT_INCOMPLETE}.get(result.status, EXIT_DAMAGED)
    evidence = str(writer.written[-1]) if writer.written else None
    if as_json:
        emit_json(
            {
                "ok": result.status == "completed",
                "run_id": result.run_id,
                "status": result.status,
                "gated_step": result.gated_step,
                "failed_step": result.failed_step,
                "reason": result.reason,
                "evidence": evidence,
                "steps": [
                    {"step_id": s.step_id, "role": s.role, "status": s.status,
                     "artifact_hash": s.artifact_hash}
                    for s in result.steps
                ],
            }
        )  # fmt: skip
        raise typer.Exit(code)
    console.print(_steps_table(result))
    if result.status == "gated":
        console.print(
            f"[yellow]Still waiting[/] at {safe_text(result.gated_step or '')}: approve it first."
        )
    elif result.status != "completed":
        console.print(f"[red]{result.status}[/]: {safe_text(result.reason or '')}")
    if evidence:
        console.print(f"Evidence: [bold]{safe_text(evidence)}[/]")
    raise typer.Exit(code)


def _recorded_ref(ledger: Ledger, run: str) -> str:
    ref = _pipeline_ref(ledger, run)
    if ref is None:
        raise ConfigError(f"run {run} recorded no pipeline reference; pass --pipeline module:attr")
    return ref


def _pipeline_ref(ledger: Ledger, run: str) -> str | None:
    """The ``module:attr`` the run's ``run_started`` recorded (None: its Pipeline had no
    ``ref``)."""
    from tracebound.events.catalog import RunStarted  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.runner import no_such_run, run_stream  # noqa: PLC0415 - lazy, for startup time

    for e in ledger.store.read_stream(run_stream(run), to_version=1):
        if isinstance(e.payload, RunStarted):
            return e.payload.pipeline_ref
    raise no_such_run(ledger.store, run)


# -- abandon -------------------------------------------------------------------------------


def abandon_cmd(
    run: RunArg,
    name: Annotated[
        str,
        typer.Option(
            "--as",
            "--by",
            help="The human who ends the run (recorded in its run_finished reason).",
        ),
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded: what an auditor reads).")],
    min_idle: Annotated[
        int,
        typer.Option(
            "--min-idle",
            min=0,
            help="Seconds since the run's last event below which its process may be alive: "
            "refused then, unless --yes.",
        ),
    ] = 300,
    yes: Annotated[
        bool,
        typer.Option("--yes", help="End the run even though its last event is recent."),
    ] = False,
    evidence_dir: Annotated[
        Path, typer.Option(help="Where the run's evidence file is written.")
    ] = Path("artifacts") / "agent-runs",
    store: StoreOpt = None,
    blobs: BlobsOpt = None,
    redaction_key: RedactionKeyOpt = None,
    key: KeyOpt = None,
    witness: WitnessOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """End a run whose process died before it finished: record it failed, by NAME, and why.

    For a run `runs` shows `running` long after its last event (its process killed, its
    host lost, a database outage it gave up on): `resume` needs a gate and a take-over a
    claim, so nothing else ends it. Records `run_finished` (failed) with the reason
    "abandoned by NAME: REASON", appended at the run's stream version read first: a process
    that was in fact alive stops at its next write (RunEnded), and when the run moves
    meanwhile nothing is recorded (exit 2). Refused (exit 2) for an unknown run, a run that
    ended, a run waiting at a gate (`reject` it, then `resume`), and, unless --yes, a run
    whose last event is younger than --min-idle seconds. Then writes the run's evidence to
    <evidence-dir>/<run>.json, signed when a signing key exists.
    """
    from tracebound.events.catalog import RunFinished  # noqa: PLC0415 - lazy, for startup time
    from tracebound.export.evidence import EvidenceWriter  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.abandon import abandon, abandon_reason, stale_run  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        config = _config(store, blobs=blobs, redaction_key=redaction_key, key=key, witness=witness)
        ledger = config.open_ledger()
        try:
            stale = stale_run(ledger, run)
            if stale.idle_seconds < min_idle and not yes:
                would = abandon_reason(stale, name, reason)
                raise ConfigError(
                    f"run {run}'s last event ({stale.last_event.event_type}, position "
                    f"{stale.last_event.position}) is {stale.idle_seconds}s old, under "
                    f"--min-idle {min_idle}s: its process may be alive. This would record "
                    f"run_finished (failed, {would!r}) at version {stale.version + 1} of its "
                    "stream and write its evidence. Once the process is known dead: --yes"
                )
            recorded = abandon(ledger, stale, name, reason, redactor=config.redactor())
            evidence = EvidenceWriter(evidence_dir)(ledger, config.blob_store(ledger), run)
        finally:
            ledger.close()
    ended = recorded.payload
    assert isinstance(ended, RunFinished)
    if as_json:
        emit_json(
            {
                "ok": True,
                "run_id": run,
                "status": ended.status,
                "reason": ended.reason,
                "position": recorded.position,
                "idle_seconds": stale.idle_seconds,
                "evidence": str(evidence),
            }
        )
        return
    console.print(
        f"[red]{ended.status}[/]: run {safe_text(run)} ({safe_text(stale.pipeline)}) "
        + safe_text(f"{ended.reason} (recorded at position {recorded.position}).")
    )
    console.print(f"Evidence: [bold]{safe_text(str(evidence))}[/]")


# -- metrics -------------------------------------------------------------------------------


def _percentile(values: list[int], q: int) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, (len(ordered) * q + 99) // 100 - 1)]


def _group(g: GroupMetrics) -> dict[str, Any]:
    d = g.as_dict()
    d["p50_latency_ms"] = _percentile(g.latencies_ms, 50)
    d["p95_latency_ms"] = _percentile(g.latencies_ms, 95)
    return d


def _metrics_table(title: str, groups: dict[str, GroupMetrics]) -> Table:
    table = Table(title=title)
    # The steps' own estimate per output, beside what was recorded as spent (the
    # `cost_incurred` events `report cost` totals): two figures, each named for what it is.
    cols = ("", "out", "fail", "repair", "harm", "unres", "est $/step", "spent $", "p50 ms",
            "p95 ms")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if not col else "right", no_wrap=True)
    for name, g in sorted(groups.items()):
        d = _group(g)
        table.add_row(
            safe_text(name), str(g.outputs), str(g.failures), d["repair_rate"] or "-",
            d["harm_rate"] or "-", str(g.unresolved), d["cost_est_per_step_usd"] or "-",
            d["cost_usd"],
            str(d["p50_latency_ms"] if d["p50_latency_ms"] is not None else "-"),
            str(d["p95_latency_ms"] if d["p95_latency_ms"] is not None else "-"),
        )  # fmt: skip
    fit(table, give={"": "ellipsis"}, console=console)
    return table


def _runs_of(ledger: Ledger, pipeline: str | None, workflow: str | None) -> set[str]:
    """The ids of the pipeline's runs, or the one run ``workflow`` names (a first pass that
    decodes only ``run_started``)."""
    from tracebound.events.catalog import RunStarted  # noqa: PLC0415 - lazy, for startup time
    from tracebound.events.record import decode_known  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.runner import no_such_run  # noqa: PLC0415 - lazy, for startup time
    from tracebound.store.port import RecordFilter, read_matching  # noqa: PLC0415 - lazy, for startup time

    started = read_matching(ledger.store, RecordFilter(kinds=frozenset({"run_started"})))
    run_ids: set[str] = set()
    names: set[str] = set()
    for e in decode_known(started, kinds={"run_started"}):
        if isinstance(e.payload, RunStarted):
            names.add(e.payload.pipeline)
            if pipeline in (None, e.payload.pipeline) and workflow in (None, str(e.payload.run_id)):
                run_ids.add(str(e.payload.run_id))
    if run_ids:
        return run_ids
    if workflow is None:
        raise _no_such_pipeline(str(pipeline), names)
    if pipeline is None:
        raise no_such_run(ledger.store, workflow)
    raise ConfigError(
        f"no run {workflow!r} of pipeline {pipeline!r} in this ledger "
        "(`tracebound runs` lists them)"
    )


def metrics(
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit 1 when a critical pipeline has harm_rate > 0 or unresolved_origin > 0.",
        ),
    ] = False,
    pipeline: Annotated[
        str | None, typer.Option("--pipeline", help="Only runs of this pipeline.")
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option("--workflow", "-w", help="Only this run (its run id), as `report cost`."),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Blame, repair and harm metrics, cost and latency per step, by role and pipeline type.

    Computed from the ledger every time (nothing is cached). `est $/step` is the steps'
    own estimate per output; `spent $` the recorded costs (cost_incurred), which `report
    cost` totals. With --check, each SLO violation of a critical pipeline is listed and
    the exit code is 1.
    """
    from tracebound.pipeline.metrics import slo_violations, store_metrics  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        ledger = _config(store).open_ledger()
        try:
            runs = (
                None
                if pipeline is None and workflow is None
                else frozenset(_runs_of(ledger, pipeline, workflow))
            )
            # One pass, one record at a time: the log is not held in memory.
            m = store_metrics(ledger.store, workflows=runs)
        finally:
            ledger.close()
        violations = slo_violations(m)
    failed = check and bool(violations)
    if as_json:
        emit_json(
            {
                "ok": not failed,
                "overall": _group(m.overall),
                "by_role": {k: _group(v) for k, v in sorted(m.by_role.items())},
                "by_pipeline_type": {k: _group(v) for k, v in sorted(m.by_pipeline_type.items())},
                "by_pipeline": {k: _group(v) for k, v in sorted(m.by_pipeline.items())},
                "violations": [
                    {"pipeline": v.pipeline, "pipeline_type": v.pipeline_type,
                     "metric": v.metric, "role": v.role, "value": v.value}
                    for v in violations
                ],
            }
        )  # fmt: skip
    else:
        # Narrowed figures (an SLO line among them) say what they were narrowed to.
        only = "" if workflow is None else f", run {workflow} only"
        console.print(_metrics_table(f"by role{only}", m.by_role))
        console.print(_metrics_table(f"by pipeline type{only}", m.by_pipeline_type))
        for v in violations:
            console.print(f"[bold red]SLO violation[/]: {safe_text(v.describe())}")
        if not violations:
            console.print("[green]No SLO violations[/] in critical pipelines.")
    if failed:
        raise typer.Exit(EXIT_DAMAGED)


# -- replay --------------------------------------------------------------------------------


def _print_take_overs(report: ReplayReport) -> None:
    for t in report.take_overs:
        by_it = (
            s for s in report.steps if s.abandoned_by and s.abandoned_by.position == t.position
        )
        abandoned = [s.position for s in by_it]
        who = f"take-over at position {t.position} ({t.taken_over_by})"
        note = (
            f"* steps at positions {abandoned[0]}..{abandoned[-1]} ({len(abandoned)}): "
            f"abandoned by {who}; not counted as the run's"
            if abandoned
            else f"the {who} abandoned no step"
        )
        console.print(f"[dim]{safe_text(note)}[/]")


def _print_blames_and_approvals(report: ReplayReport) -> None:
    """Who caused what, and who let it through, each with the position `prove` takes: the
    table shows what ran, these lines why it ran again and who lifted its gates."""
    for b in report.blames:
        origin = "unresolved" if b.origin is None else f"{b.origin} ({b.origin_role})"
        harmful = " (harmful)" if b.harmful else ""
        line = (
            f"blame (position {b.position}): {b.failed} ({b.failed_role}) failed{harmful}, "
            f"found by {b.detected_by}; origin {origin}: {b.reason}"
        )
        if b.abandoned_by is not None:
            line += f" [abandoned by the take-over at position {b.abandoned_by.position}]"
        console.print(f"[dim]{safe_text(line)}[/]" if b.abandoned_by else safe_text(line))
    for a, position in zip(report.approvals, report.approval_positions, strict=True):
        at = utc_text(a.timestamp, seconds=True)
        console.print(
            safe_text(f"{a.decision} {a.step_id} as {a.approver} at {at} UTC (position {position})")
        )


def replay(
    run: RunArg,
    rerun: Annotated[
        bool,
        typer.Option(
            "--rerun",
            help="Also re-execute the pipeline on the recorded inputs in a scratch ledger "
            "and report the first divergence.",
        ),
    ] = False,
    pipeline: PipelineRefOpt = None,
    validations: ValidationsOpt = None,
    store: StoreOpt = None,
    policy: PolicyOpt = None,
    codeowners: CodeownersOpt = None,
    blobs: BlobsOpt = None,
    redaction_key: RedactionKeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Rebuild a run from the ledger and its blobs, checking every link and digest.

    Exit 1 when the chain is broken, a blob is missing or altered, an artifact no longer
    meets the TPC contract, or (with --rerun) the rerun diverges.
    """
    from tracebound.replay import replay_run, rerun_run  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        config = _config(
            store, policy=policy, codeowners=codeowners, blobs=blobs, redaction_key=redaction_key
        )
        ledger = config.open_ledger()
        try:
            blob_store = config.blob_store(ledger)
            report = replay_run(ledger, blob_store, run)
            again = None
            if rerun:
                _importable_cwd()
                with progress_bar("re-running", enabled=not as_json):
                    again = rerun_run(
                        ledger,
                        blob_store,
                        run,
                        pipeline=pipeline,
                        policy=config.load_policy(),
                        redactor=config.redactor(),
                        validations=_validations(validations),
                        codeowners=config.load_codeowners(),
                        workspace=None if config.workspace is None else Path(config.workspace),
                    )
        finally:
            ledger.close()
    failed = not report.ok or (again is not None and not again.identical)
    if as_json:
        out = report.as_dict()
        out["ok"] = not failed
        out["rerun"] = None if again is None else again.as_dict()
        emit_json(out)
        raise typer.Exit(EXIT_DAMAGED if failed else 0)
    table = Table(title=safe_text(f"run {run} ({report.pipeline}): {report.status}"))
    for col in ("pos", "step", "parent", "role", "status", "artifact", "blob"):
        table.add_column(col)
    for s in report.steps:
        colour = "green" if s.blob == "ok" else "red"
        # A taken-over run lists the dead claimant's steps too (they happened, and were
        # checked): dimmed, their position starred, and named in a note below, so that the
        # steps the run stands on read apart from them without a column a narrow terminal
        # would pay for with the artifact hash. A run without a take-over looks as before.
        gone = s.abandoned_by is not None
        table.add_row(
            f"{s.position}*" if gone else str(s.position), safe_text(s.step_id),
            safe_text(s.parent_step_id or "-"), s.role, s.status, short_digest(s.artifact_hash),
            f"[{colour}]{safe_text(s.blob)}[/]", style="dim" if gone else None,
        )  # fmt: skip
    fit(
        table,
        give={"step": "ellipsis", "parent": "ellipsis", "artifact": "crop"},
        console=console,
    )
    console.print(table)
    _print_take_overs(report)
    _print_blames_and_approvals(report)
    first, last = report.positions
    console.print(
        f"[green]chain ok[/]: {report.events} event(s), head {report.head.hex()[:16]}…; "
        f"log positions {first}..{last} contiguous (edits outside the run: `tracebound verify`)"
    )
    if report.covered < report.size:
        console.print(
            f"[yellow]note[/]: no signed checkpoint covers positions {report.covered + 1}.."
            f"{report.size}: events cut off the end of the log there would not show "
            "(`tracebound checkpoint` signs the length)"
        )
    for f in report.failures:
        console.print(
            f"[bold red]{safe_text(f.kind)}[/] "
            + safe_text(f"{f.what} of {f.step_id or 'the run'}: {f.detail}")
        )
    if again is not None:
        # The rerun is compared with the steps that count: say how many it left out.
        skipped = (
            f" [dim](the {again.abandoned} step(s) a take-over abandoned are not compared)[/]"
            if again.abandoned
            else ""
        )
        if again.divergence is None:
            console.print(
                f"[green]rerun identical[/]: {len(again.rerun)} step(s), {again.rerun_status}"
                + skipped
            )
        else:
            console.print(
                f"[bold red]rerun diverges[/] at {safe_text(again.divergence.describe())}" + skipped
            )
    raise typer.Exit(EXIT_DAMAGED if failed else 0)


# -- evidence ------------------------------------------------------------------------------


def verify_evidence_cmd(
    file: Annotated[Path, typer.Argument(help="Evidence file (artifacts/agent-runs/<run>.json).")],
    key: OfflineKeyOpt = None,
    verifier_key: OfflineVerifierOpt = None,
    origin: OriginOpt = None,
    require_head: Annotated[
        bool,
        typer.Option(
            "--require-head",
            help="Refuse (exit 1) a file without a signed run head (or, in a file that carries "
            "the run's spend, without its signed spend head): its end is then unproven.",
        ),
    ] = False,
    require_spend: Annotated[
        bool,
        typer.Option(
            "--require-spend",
            help="Refuse (exit 1) a file whose spend is not proven: one written before files "
            "carried the run's spend stream (tracebound-evidence/2 or /1), or without its signed "
            "spend head.",
        ),
    ] = False,
    show: Annotated[
        bool,
        typer.Option(
            "--show",
            help="Then list the file's records (position, stream, version, type, time, hash "
            "and what each is about; with --json, `records`, as `log --json` gives them), then "
            "its spend records (`cost_records`). "
            "Only a file that passed is listed; an unsigned one is marked NOT SIGNED.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check a run's evidence file offline, with only the verifier key (no ledger needed).

    Checks the integrity hash, the checkpoint signature, every record's BLAKE3 link and the
    run stream's continuity, every inclusion proof, that each artifact digest is listed,
    and the signed run head: the records end exactly where it says (a run cut back is
    refused). Then the run's spend stream (costs/RUN) the same way, with its own signed head,
    and reports the proven spend: the exact total in USD and its sums by role, source and
    tier (JSON ``spend``). Exit 1 names what failed; 3 when the file carries no signed
    checkpoint. A file without a run head (older, or stripped) verifies with
    ``"run_head": null`` and a warning, unless ``--require-head``; one whose spend is not
    proven (older, or its spend head stripped) with a warning, unless ``--require-spend``.
    A status of running or gated is reported as not final (JSON ``"final": false``): the
    run may have gone on after this file's tree.
    """
    from tracebound.export.evidence import verify_evidence  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        verifier = try_verifier(verifier_key, key)
        if verifier is None:
            raise PolicyUnusable(
                "verify-evidence needs --verifier-key (the ledger's public key): without it "
                "nothing in the file can be trusted"
            )
        report = verify_evidence(
            file,
            verifier,
            require_signed=False,
            require_head=require_head,
            require_spend=require_spend,
            origin=origin,
        )
        # Decoded only now: `report` exists only for a file every check passed on.
        rows = _evidence_rows(report.records) if show else None
        cost_rows = _evidence_rows(report.cost_records) if show else None
    code = 0 if report.signed else EXIT_INCOMPLETE
    if as_json:
        out = report.as_dict()
        out["ok"] = report.signed
        if rows is not None:
            out["records"] = rows
            out["cost_records"] = cost_rows
        emit_json(out)
        raise typer.Exit(code)
    if report.signed:
        console.print(
            "[bold green]OK[/]: "
            + safe_text(
                f"run {report.run_id} ({report.pipeline}, {report.status}): "
                f"{report.events} event(s) and {report.artifacts} digest(s), in {report.origin} "
                f"(signed tree of {report.tree_size})."
            )
        )
        if report.run_head is None:
            # Older files have none, and the unkeyed integrity hash lets anyone strip it
            # (module docstring of tracebound.export.evidence).
            console.print(
                "[yellow]NO RUN HEAD[/]: nothing signed says where the run ends, so a longer "
                "run cut back to here verifies the same (--require-head refuses such a file)."
            )
        if not report.final:
            console.print(
                f"[yellow]NOT FINAL[/]: {safe_text(report.status)} is not how a run ends; the "
                "file shows the run up to here, and a later copy may hold more of it."
            )
        _print_spend(report)
    else:
        console.print(
            f"[yellow]UNSIGNED[/]: run {safe_text(str(report.run_id))}'s records chain correctly, "
            "but no "
            "signed checkpoint vouches for them (run `tracebound keys init`, then resume or "
            "re-export)."
        )
    if rows is not None:
        _print_evidence_rows(rows, report.run_id, signed=report.signed)
    if cost_rows:
        _print_evidence_rows(cost_rows, report.run_id, signed=report.signed, what="spend record")
    raise typer.Exit(code)


def _evidence_rows(records: Iterable[RawRecord]) -> list[dict[str, Any]]:
    from tracebound.cli._events import raw_row  # noqa: PLC0415 - lazy, for startup time

    return [raw_row(raw) for raw in records]


def _print_spend(report: EvidenceReport) -> None:
    """The spend a signed file proves (or says nothing about), with its sums by role."""
    spend = report.spend
    if spend is None:
        console.print(
            "[yellow]NO SPEND[/]: this file's format does not carry the run's spend stream, so "
            "it proves nothing about what the run cost (--require-spend refuses such a file)."
        )
        return
    if not spend.proven:
        console.print(
            f"[yellow]SPEND NOT PROVEN[/]: {spend.records} cost record(s), but no signed head "
            f"says they are all of {safe_text(spend.stream_id)} (--require-spend refuses such "
            "a file)."
        )
        return
    console.print(
        "Spend: "
        + safe_text(
            f"{_usd_text(spend.total_usd)} USD in {spend.records} cost record(s) of "
            f"{spend.stream_id}, all of them up to the signed tree of {report.tree_size}."
        )
    )
    if spend.records:
        console.print(_spend_table(spend))


def _usd_text(amount: Decimal) -> str:
    return format(amount, "f")


def _spend_table(spend: Spend) -> Table:
    table = Table(title="Proven spend, by role, source and tier", title_justify="left")
    for name in ("by", "name", "USD", "records"):
        table.add_column(name, justify="right" if name in {"USD", "records"} else "left")
    for by, shares in (("role", spend.by_role), ("source", spend.by_source),
                       ("tier", spend.by_tier)):  # fmt: skip
        for share in shares:
            name = "unattributed" if share.key is None else share.key
            table.add_row(by, safe_text(name), _usd_text(share.total_usd), str(share.records))
    return table


def _print_evidence_rows(
    rows: list[dict[str, Any]], run_id: str, *, signed: bool, what: str = "event"
) -> None:
    from tracebound.cli._events import events_table  # noqa: PLC0415 - lazy, for startup time

    title = (
        f"{len(rows)} verified {what}(s) of run {run_id}"
        if signed
        else f"{len(rows)} {what}(s) of run {run_id}, NOT SIGNED: chain-checked only"
    )
    console.print(events_table(rows, title, detail=True))


def register(app: typer.Typer) -> None:
    """Add the run commands to the `tracebound` app."""
    app.command("runs")(runs)
    app.command("approve")(approve_cmd)
    app.command("reject")(reject_cmd)
    app.command("resume")(resume)
    app.command("abandon")(abandon_cmd)
    app.command("metrics")(metrics)
    app.command("replay")(replay)
    app.command("verify-evidence")(verify_evidence_cmd)
