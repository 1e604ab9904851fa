"""The `tracebound` command. Thin: parse input, call the library, render the result."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, TextIO

import typer
from pydantic import ValidationError
from rich.table import Table

from tracebound.canonical import canonical_bytes
from tracebound.cli._common import (
    EXIT_DAMAGED,
    EXIT_INCOMPLETE,
    EXIT_OK,
    EXIT_USAGE,
    FollowIntervalOpt,
    GiveUpAfterOpt,
    JsonOpt,
    KeyOpt,
    OfflineKeyOpt,
    OfflineVerifierOpt,
    OriginOpt,
    ProofOutputOpt,
    RedactionKeyOpt,
    StoreOpt,
    VerifierOpt,
    WitnessOpt,
    console,
    emit_json,
    err_console,
    fail,
    give_up_after,
    handled,
    interruption,
    open_ledger,
    open_ledger_checked,
    progress_bar,
    prove_into,
    reader_gone,
    refuse_inside_store,
    resolve_key_path,
    safe_text,
    say_on_stderr,
    signals_held,
    stdout_broken,
    stdout_failed,
    stop_on_sigterm,
    store_dir,
    try_verifier,
    write_output,
    write_stdout,
)
from tracebound.cli._events import events_table, raw_row, record_row
from tracebound.cli._group import RootGroup, UsageError
from tracebound.cli._tables import utc_text
from tracebound.cli.consistency import prove_consistency, verify_consistency
from tracebound.cli.copy import copy
from tracebound.cli.export import export_app
from tracebound.cli.inspect import AttemptsOpt, inspect_remediation
from tracebound.cli.project import project_app
from tracebound.cli.repair import repair
from tracebound.cli.report import report_app
from tracebound.cli.rotate import keys_rotate, retired_key_refusal
from tracebound.cli.runs import register as register_runs
from tracebound.errors import (
    CheckpointError,
    ConcurrencyConflict,
    ConfigError,
    ConnectionLost,
    DamageKind,
    IntegrityError,
    KeyRotationRefused,
    LedgerDamaged,
    ProofError,
    TraceboundError,
    UnknownEventType,
)
from tracebound.events.envelope import Event, RecordedEvent
from tracebound.events.record import RawRecord
from tracebound.events.registry import default_registry
from tracebound.ids import StreamId
from tracebound.integrity.chain import GENESIS, chain_hash
from tracebound.integrity.merkle import EMPTY_ROOT
from tracebound.integrity.note import Checkpoint
from tracebound.integrity.rotation import KEY_STREAM, ROTATION_TYPE
from tracebound.integrity.verify import link_damage
from tracebound.ledger import (
    NO_VERIFIER_KEY,
    ORIGIN_KEY,
    InclusionBundle,
    VerifyReport,
    stored_origin,
    verify_bundle,
)
from tracebound.store.keyfile import generate_keypair
from tracebound.store.port import (
    AppendRequest,
    LedgerStore,
    RecordFilter,
    StreamIndex,
    indexed_positions,
    position_runs,
    read_matching,
)
from tracebound.store.reconnect import DEFAULT_GIVE_UP_AFTER, Outage
from tracebound.store.url import open_store
from tracebound.store.witness import bind_store, binding_path, store_identity
from tracebound.system import RandomIds, SystemClock

if TYPE_CHECKING:
    from tracebound.pipeline.redaction import Redactor


class _Root(RootGroup):
    panels = {  # noqa: RUF012 - a class constant
        "Ledger": (
            "init", "keys", "append", "log", "tail", "inspect",
            "checkpoint", "verify", "prove", "verify-proof", "prove-consistency",
            "verify-consistency", "demo",
        ),
        "Runs and approvals": (
            "runs", "approve", "reject", "resume", "abandon", "replay", "verify-evidence",
            "metrics",
        ),
        "Projections and reports": ("project", "report", "export"),
        "Moving and repairing": ("copy", "repair"),
    }  # fmt: skip


app = typer.Typer(
    name="tracebound",
    cls=_Root,
    help="Tamper-evident flight recorder for multi-agent LLM pipelines.\n\n"
    "Events go into an append-only, BLAKE3-chained ledger covered by Ed25519-signed "
    "Merkle checkpoints. `verify` detects tampering, truncation, reordering, forgery and "
    "rollback. Every command accepts --json.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        write_stdout(f"tracebound {metadata.version('tracebound')}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


keys_app = typer.Typer(
    help="Create, show and rotate the Ed25519 checkpoint signing key.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")
app.add_typer(export_app, name="export")
app.command()(repair)
app.command()(copy)
app.command("prove-consistency")(prove_consistency)
app.command("verify-consistency")(verify_consistency)
app.add_typer(project_app, name="project")
app.add_typer(report_app, name="report")
register_runs(app)

_APPEND_BATCH = 1000
_LINE_KEYS = {
    "stream_id",
    "payload",
    "event_type",
    "workflow_id",
    "correlation_id",
    "event_id",
    "timestamp",
    "expected_version",
}


# -- init and keys ------------------------------------------------------------------------


@app.command()
def init(
    store: StoreOpt = None,
    origin: Annotated[
        str | None,
        typer.Option(help="Checkpoint origin: a stable name for this log. Default: random."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an empty ledger (default ./.tracebound/ledger.db)."""
    with handled(as_json):
        if origin is not None:
            try:
                Checkpoint(origin=origin, size=0, root=EMPTY_ROOT)  # checks the origin line
            except CheckpointError as exc:
                raise ConfigError(f"invalid origin {origin!r}: {exc}") from None
        backend = open_store(store, create=True)
        try:
            # A store written through the library may hold checkpoints but no origin
            # yet: it keeps the one they were signed for, not a new random one.
            existing = stored_origin(backend)
            name = existing or origin or f"tracebound.local/{RandomIds().new_id()}"
            if existing is not None and origin is not None and origin != existing:
                raise ConfigError(f"this ledger's origin is already {existing!r}")
            created = backend.get_meta(ORIGIN_KEY) is None
            if created:
                backend.set_meta(ORIGIN_KEY, name)
            # The store's place is bound to its origin outside the store, beside the
            # witness: a store renamed later is not this log (docs: README, witness).
            identity = store_identity(backend)
            bound = bind_store(identity, name)
            if bound != name:
                place = getattr(backend, "path", None) or identity  # a path pastes as --store
                raise ConfigError(
                    f"the store at {place} is bound to the origin {bound!r} "
                    f"({binding_path(identity)}), not {name!r}; if this store is a new "
                    "ledger on purpose, delete that file (its witness no longer guards "
                    "this place) and run init again"
                )
        finally:
            backend.close()
    if as_json:
        emit_json({"ok": True, "store": backend.url, "origin": name, "created": created})
    else:
        verb = "Created" if created else "Already initialised:"
        console.print(
            f"{verb} [bold]{safe_text(backend.url)}[/] (origin [cyan]{safe_text(name)}[/])"
        )
        if not resolve_key_path(None).exists():
            console.print("Next: [bold]tracebound keys init[/] to create the signing key.")


@keys_app.command("init")
def keys_init(
    key: KeyOpt = None,
    name: Annotated[
        str, typer.Option(help="Key name, shown in signed checkpoints.")
    ] = "tracebound",
    force: Annotated[
        bool,
        typer.Option(
            help="Replace an existing key (old checkpoints then need the old public key)."
        ),
    ] = False,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create the signing key outside the store directory (mode 0600) and its .pub file.

    A key that is there already is kept; only its .pub is written again when it is
    missing or another key's (a `keys init` killed between the two files). A .pub whose
    key is gone is kept too: it still verifies what that key signed (--force replaces it).
    """
    with handled(as_json):
        path = resolve_key_path(key)
        generated = generate_keypair(name, path=path, store_dir=store_dir(store), force=force)
    verifier = generated.verifier.format()
    if as_json:
        emit_json(
            {
                "ok": True,
                "key": str(path),
                "public": str(generated.public_path),
                "verifier_key": verifier,
                "completed": generated.completed,
                "replaced_verifier_key": (
                    None if generated.replaced is None else generated.replaced.format()
                ),
            }
        )
    elif generated.completed:
        console.print(
            f"Signing key already at [bold]{safe_text(str(path))}[/] (kept); its public key "
            f"file was missing or another key's, and is written again: "
            f"[bold]{safe_text(str(generated.public_path))}[/]"
        )
        console.print(f"Verifier key (give this to auditors): [cyan]{verifier}[/]")
    else:
        console.print(
            f"Signing key: [bold]{safe_text(str(path))}[/] "
            "(keep it secret, keep it away from the store)"
        )
        console.print(f"Verifier key (give this to auditors): [cyan]{verifier}[/]")
        if generated.replaced is not None and generated.replaced.format() != verifier:
            console.print(
                f"It replaces [cyan]{generated.replaced.format()}[/]: the checkpoints signed "
                "before verify only with that key (`--verifier-key`); keep it."
            )


keys_app.command("rotate")(keys_rotate)


@keys_app.command("show")
def keys_show(
    key: KeyOpt = None, verifier_key: VerifierOpt = None, as_json: JsonOpt = False
) -> None:
    """Print the public verifier key that checks this ledger's checkpoints."""
    with handled(as_json):
        verifier = try_verifier(verifier_key, key)
        if verifier is None:
            raise ConfigError(f"no key at {resolve_key_path(key)}; run `tracebound keys init`")
    if as_json:
        emit_json({"ok": True, "verifier_key": verifier.format(), "name": verifier.name})
    else:
        console.print(verifier.format())


# -- writing ------------------------------------------------------------------------------


def _not_json(number: int, line: str, exc: json.JSONDecodeError) -> ConfigError:
    """Where a line stops being JSON, in its own columns."""
    # json's messages read "Expecting value" but "Unterminated string starting at".
    at = "" if exc.msg.endswith(" at") else " at"
    why = f"{exc.msg}{at} column {exc.colno}"
    if exc.pos >= len(line.rstrip()) or exc.msg.startswith("Unterminated string"):
        why += "; the line ends before the JSON does"
    return ConfigError(
        f"line {number}: not JSON ({why}); the input is JSON Lines: one event per line"
    )


def _line_json(number: int, line: str) -> Any:
    """Line ``number`` parsed; ``line`` comes without its newline (a position past it would
    name "column 1")."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise _not_json(number, line, exc) from exc
    except (ValueError, RecursionError) as exc:
        # Valid JSON Python cannot hold: a number of more than 4300 digits (int()'s limit),
        # or arrays and objects nested deeper than the interpreter's stack.
        what = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise ConfigError(f"line {number}: not JSON this tool reads ({what})") from None


def _parse_line(
    number: int, line: str, clock: SystemClock, ids: RandomIds, redactor: Redactor | None
) -> AppendRequest:
    data = _line_json(number, line.rstrip("\r\n"))
    if not isinstance(data, dict):
        got = "an array" if isinstance(data, list) else type(data).__name__
        raise ConfigError(
            f"line {number}: expected a JSON object, got {got} "
            "(JSON Lines: one event object per line)"
        )
    unknown = set(data) - _LINE_KEYS
    if unknown:
        raise ConfigError(f"line {number}: unknown field(s) {', '.join(sorted(unknown))}")
    if "stream_id" not in data or "payload" not in data:
        raise ConfigError(f"line {number}: `stream_id` and `payload` are required")
    stream_id = data["stream_id"]
    if not isinstance(stream_id, str) or not stream_id:
        raise ConfigError(f"line {number}: `stream_id` must be a non-empty string")
    try:
        canonical_bytes(stream_id)  # hashed data: a lone surrogate has no UTF-8 form
    except TraceboundError as exc:
        raise ConfigError(f"line {number}: stream_id: {exc}") from exc
    expected = data.get("expected_version")
    if expected is not None and (type(expected) is not int or expected < 0):
        raise ConfigError(
            f"line {number}: `expected_version` must be an integer >= 0 "
            "(the stream's version before this line; 0 for a new stream)"
        )
    payload = data["payload"]
    if not isinstance(payload, dict):
        raise ConfigError(f"line {number}: `payload` must be an object")
    kind = payload.get("kind", data.get("event_type"))
    if redactor is not None:
        payload = _scrubbed(redactor, payload)
    try:
        event = Event.model_validate(
            {
                "event_id": _event_id(data.get("event_id"), ids),
                "event_type": data.get("event_type", kind),
                "workflow_id": data.get("workflow_id"),
                "correlation_id": data.get("correlation_id"),
                "timestamp": _timestamp(data.get("timestamp"), clock),
                "payload": {"kind": kind, **payload},
            }
        )
    except ValidationError as exc:
        # Every problem of the line at once (a new kind's required fields, say), not one
        # per attempt.
        errors = exc.errors()
        found = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'event'}: {err['msg']}"
            for err in errors[:_SHOWN_ERRORS]
        )
        more = f" (and {len(errors) - _SHOWN_ERRORS} more)" if len(errors) > _SHOWN_ERRORS else ""
        raise ConfigError(f"line {number}: {found}{more}") from exc
    except UnknownEventType as exc:
        kinds = ", ".join(default_registry().kinds())
        raise ConfigError(
            f"line {number}: {exc}; the CLI writes the built-in kinds ({kinds}); kinds of "
            "your own are registered in Python (`register_event`, README)"
        ) from exc
    except TraceboundError as exc:
        raise ConfigError(f"line {number}: {exc}") from exc
    if stream_id == KEY_STREAM or event.event_type == ROTATION_TYPE:
        raise ConfigError(
            f"line {number}: the stream {KEY_STREAM!r} and {ROTATION_TYPE!r} events are the "
            "ledger's own: `tracebound keys rotate` writes them"
        )
    return AppendRequest(StreamId(stream_id), [event], expected)


_SHOWN_ERRORS: Final = 12

_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})", re.ASCII
)


def _timestamp(value: object, clock: SystemClock) -> object:
    """A line's ``timestamp`` as the event takes it: RFC 3339 text with a zone, or the time
    of appending when there is none. Pydantic alone read a number (or its text) as Unix
    seconds, and ``or`` turned 0, "" and false into now: a wrong time recorded for good.

    Digits past the microsecond are cut (the hashed form keeps six), and an offset is
    converted to UTC, so the same line hashes the same on every host, whatever its zone.
    Its errors say no line number: the caller's handler of every error of a line adds it.
    """
    if value is None:
        return clock.now()
    if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
        raise ConfigError(
            "`timestamp` must be RFC 3339 text with a zone, such as "
            f'"2026-05-18T12:00:00Z" or "2026-05-18T17:45:00+05:45", not {value!r:.60}; '
            "leave it out to record the time of appending"
        )
    if value[17:19] == "60":
        raise ConfigError(
            f"`timestamp` {value[11:19]} is a leap second, which a recorded "
            "time cannot hold; write :59.999999 of that minute"
        )
    return value


def _event_id(value: object, ids: RandomIds) -> object:
    """A line's ``event_id``, or a new one when there is none (absent or null). ``or`` made
    "" and false a fresh id too: an id the line gave, dropped without a word. A text that
    is no UUID is left to the event's validation. Its errors say no line number: the
    caller's handler of every error of a line adds it."""
    if value is None:
        return ids.new_id()
    if not isinstance(value, str) or not value:
        raise ConfigError(
            "`event_id` must be a UUID as text, such as "
            f'"00000000-0000-0000-0000-000000000001", not {value!r:.60}; leave it out to '
            "have one made"
        )
    return value


def _scrubbed(redactor: Redactor, payload: dict[str, Any]) -> dict[str, Any]:
    """`append`'s payload redacted before it is validated and written, as the runner redacts
    what a step hands on: a secret piped in is never hashed into the log. ``kind`` names the
    event type and is left as it is."""
    rest = redactor.redact({k: v for k, v in payload.items() if k != "kind"}).value
    return rest if "kind" not in payload else {"kind": payload["kind"], **rest}


def _read_requests(
    source: TextIO, redactor: Redactor | None
) -> tuple[list[int], list[AppendRequest]]:
    """The requests of the non-blank lines, and the number of the line each came from."""
    clock, ids = SystemClock(), RandomIds()
    numbers, requests = [], []
    for number, line in enumerate(source, start=1):
        if line.strip():
            numbers.append(number)
            requests.append(_parse_line(number, line, clock, ids, redactor))
    return numbers, requests


def _read_input(
    file: Path | None, redactor: Redactor | None
) -> tuple[list[int], list[AppendRequest]]:
    """The requests of `append`'s FILE, or of stdin when it is omitted or `-`."""
    stdin = file is None or str(file) == "-"
    try:
        if file is not None and not stdin:
            with file.open(encoding="utf-8-sig") as fh:
                return _read_requests(fh, redactor)
        if sys.stdin is None:  # fd 0 closed (`<&-`): Python has no stdin at all
            raise ConfigError("no input: stdin is closed; name a FILE or pipe the lines in")
        if sys.stdin.isatty():  # else a bare `tracebound append` just seems to hang
            err_console.print("Reading JSON lines from stdin; end with Ctrl-D.")
        # Strict UTF-8, as for a file: the locale's decoder would let bytes that are not
        # UTF-8 through as lone surrogates. utf-8-sig: a leading BOM is skipped.
        source = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig")
        try:
            return _read_requests(source, redactor)
        finally:
            source.detach()  # closing the wrapper would close stdin
    except UnicodeDecodeError as exc:
        where = "stdin" if stdin else file
        raise ConfigError(f"{where} is not UTF-8 text: {exc.reason}") from None


def _check_expected_versions(
    backend: LedgerStore, numbers: list[int], requests: list[AppendRequest], as_json: bool
) -> None:
    """Refuse the input, before anything is written, when a line's ``expected_version`` is
    not what its stream will be at once the lines before it are appended.

    The store checks it again as it writes (another writer may get in between), but it
    writes in batches: without this, a conflict on line 1201 would leave lines 1..1000
    written.
    """
    checked = {r.stream_id for r in requests if r.expected_version is not None}
    versions: dict[str, int] = {}
    for number, request in zip(numbers, requests, strict=True):
        sid = request.stream_id
        if sid not in checked:
            continue
        if sid not in versions:
            head = backend.stream_head(sid)
            versions[sid] = 0 if head is None else head.version
        expected = request.expected_version
        if expected is not None and expected != versions[sid]:
            fail(
                f"line {number}: stream {sid!r} is at version {versions[sid]} (counting the "
                f"lines before this one), not {expected}; nothing was written",
                code=EXIT_USAGE,
                as_json=as_json,
                kind=ConcurrencyConflict.__name__,
            )
        versions[sid] += len(request.events)


def _partly_written(
    exc: TraceboundError | KeyboardInterrupt, recorded: list[RecordedEvent], as_json: bool
) -> NoReturn:
    """A batch failed after earlier ones were written (a concurrent writer, a full disk), or
    Ctrl-C or SIGTERM came between two: say what is in the ledger now, as well as what went
    wrong (the same input appended again would write those events twice)."""
    first, last = recorded[0].position, recorded[-1].position
    if isinstance(exc, KeyboardInterrupt):
        message, code, extra = interruption(exc)
    else:
        message, code = str(exc), EXIT_DAMAGED if isinstance(exc, IntegrityError) else EXIT_USAGE
        extra = {"kind": type(exc).__name__}
    fail(
        f"{message}; the first {len(recorded)} event(s) were written before it (positions "
        f"{first}..{last}), none after",
        code=code,
        as_json=as_json,
        appended=len(recorded),
        first_position=first,
        last_position=last,
        **extra,
    )


@app.command()
def append(
    file: Annotated[
        Path | None,
        typer.Argument(help="JSON-lines file of events; `-` or omitted reads stdin."),
    ] = None,
    store: StoreOpt = None,
    redaction_key: RedactionKeyOpt = None,
    no_redact: Annotated[
        bool,
        typer.Option(
            "--no-redact",
            help="Write payloads as given, for input already redacted (a secret in it "
            "is then hashed into the log for good).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Append events given as JSON lines.

    Each line: {"stream_id": "run-1", "payload": {"kind": "cost_incurred", ...}} with optional
    workflow_id, correlation_id, event_id, timestamp and expected_version. Secrets and
    personal data in each payload are redacted first (docs/redaction.md), with the
    redaction key (created on first use). All lines are validated before anything is
    written; a bad line writes nothing.
    """
    with handled(as_json):
        backend = open_store(store)  # first: no waiting for stdin to learn there is no ledger
        recorded: list[RecordedEvent] = []
        redacted: dict[str, int] = {}
        try:
            config = None
            if not no_redact:
                from tracebound.pipeline.config import RunnerConfig  # noqa: PLC0415 - startup

                config = RunnerConfig(store=store, redaction_key=redaction_key)
            numbers, requests = _read_input(file, None if config is None else config.redactor())
            if config is not None:
                redacted = dict(sorted(config.stats.by_detector().items()))
            # The input may have taken hours (`producer | tracebound append`): a server
            # restarted meanwhile left a dead session, which the append would find only
            # once the input is gone with the pipe. A read replaces a dead session (reads
            # retry once on a new one), so the append goes to a live one.
            backend.size()
            _check_expected_versions(backend, numbers, requests, as_json)
            with progress_bar("appending", enabled=not as_json) as update:
                for i in range(0, len(requests), _APPEND_BATCH):
                    try:
                        # Never cut by Ctrl-C or SIGTERM: held till the batch is counted,
                        # what the store committed is what the command reports written.
                        with signals_held():
                            recorded += backend.append_batch(requests[i : i + _APPEND_BATCH])
                    except (TraceboundError, KeyboardInterrupt) as exc:
                        if recorded:
                            _partly_written(exc, recorded, as_json)
                        raise
                    update(len(recorded), len(requests))
        finally:
            backend.close()
    first = recorded[0].position if recorded else None
    last = recorded[-1].position if recorded else None
    if as_json:
        emit_json(
            {
                "ok": True,
                "appended": len(recorded),
                "first_position": first,
                "last_position": last,
                "redacted": redacted,
            }
        )
    else:
        console.print(
            f"Appended {len(recorded)} event(s)"
            + (f", positions {first}..{last}" if recorded else "")
        )
        if redacted:
            said = ", ".join(f"{name} {n}" for name, n in redacted.items())
            console.print(f"Redacted before writing: {said}")


# -- reading ------------------------------------------------------------------------------


@app.command("log")
def log_cmd(
    store: StoreOpt = None,
    start: Annotated[int, typer.Option(min=1, help="First position.")] = 1,
    limit: Annotated[int, typer.Option(min=0, help="At most this many events (0: all).")] = 50,
    stream: Annotated[str | None, typer.Option(help="Only this stream.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Only this workflow.")] = None,
    event_type: Annotated[str | None, typer.Option("--type", help="Only this event type.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List events in log order, optionally filtered.

    At most --limit events (default 50); when the limit cut the list, the JSON's
    ``next_start`` (else null) is the --start that continues it.
    """
    next_start: int | None = None
    with handled(as_json):
        backend = open_store(store)
        try:
            rows: list[dict[str, Any]] = []
            for raw in _log_records(backend, start, stream, workflow, event_type):
                row = raw_row(raw)
                if stream and row["stream_id"] != stream:
                    continue
                if workflow and row["workflow_id"] != workflow:
                    continue
                if event_type and row["event_type"] != event_type:
                    continue
                rows.append(row)
                if len(rows) == limit:
                    next_start = row["position"] + 1
                    break
            if not rows:
                _refuse_unknown_names(backend, stream, workflow)
        finally:
            backend.close()
    if as_json:
        emit_json({"ok": True, "events": rows, "next_start": next_start})
        return
    console.print(events_table(rows, f"{len(rows)} event(s) from position {start}"))
    if next_start is not None:
        console.print(
            f"[dim]--limit {limit} reached: --start {next_start} continues (--limit 0: all)[/]"
        )


def _refuse_unknown_names(backend: LedgerStore, stream: str | None, workflow: str | None) -> None:
    """Refuse a --stream or --workflow no event of the ledger has: an empty listing of a
    mistyped run id read as "the run did nothing" (`report trail`, `metrics` and `inspect`
    refuse such a name too). A name the ledger has, with nothing at --start or after, is
    an empty listing."""
    if stream and backend.stream_head(stream) is None:
        raise _missing_stream(backend, stream, show="tracebound log --stream")
    if workflow is None or _has_workflow(backend, workflow):
        return
    for prefix in ("run/", "costs/"):  # a run's streams, as `log` prints them
        run = workflow.removeprefix(prefix)
        if run != workflow and backend.stream_head(f"run/{run}") is not None:
            raise ConfigError(
                f"no event in this ledger has workflow {workflow!r}: that is a stream of run "
                f"{run}, whose workflow is the run id (--workflow {run}, or --stream {workflow})"
            )
    raise ConfigError(
        f"no event in this ledger has workflow {workflow!r} (`tracebound runs` lists run ids)"
    )


def _has_workflow(backend: LedgerStore, workflow: str) -> bool:
    """Whether a record's hashed body names ``workflow`` (the store's filter may match more:
    each candidate is decoded, as `log` decodes what it lists)."""
    where = RecordFilter(workflows=frozenset({workflow}), in_body=True)
    return any(raw_row(raw)["workflow_id"] == workflow for raw in read_matching(backend, where))


def _log_records(
    backend: LedgerStore,
    start: int,
    stream: str | None,
    workflow: str | None,
    event_type: str | None,
) -> Iterator[RawRecord]:
    """The records ``log`` decodes, in log order: all it lists, and maybe a few more, since
    it filters by what the decoded body says. A stream comes from the store's stream index;
    a type or workflow from the store's filter, which searches the bodies as well as its
    columns, so a column edited behind the chain does not hide a record from the listing."""
    if stream and isinstance(backend, StreamIndex):
        return _indexed_stream(backend, stream, start=start)
    if not (workflow or event_type):
        return backend.read_raw(start=start)
    where = RecordFilter(
        kinds=frozenset({event_type}) if event_type else None,
        workflows=frozenset({workflow}) if workflow else None,
        in_body=True,
    )
    return read_matching(backend, where, start=start)


@app.command()
def tail(
    store: StoreOpt = None,
    lines: Annotated[
        int, typer.Option("-n", "--lines", min=1, help="How many of the newest.")
    ] = 20,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events.")
    ] = False,
    interval: FollowIntervalOpt = 0.5,
    give_up: GiveUpAfterOpt = DEFAULT_GIVE_UP_AFTER,
    as_json: JsonOpt = False,
) -> None:
    """Show the newest events; with --follow, keep printing as they are appended.

    With --json: one JSON document, {"ok": true, "events": [...]}; with --follow --json,
    one JSON object per event per line (JSON Lines), printed as events arrive, and an error
    it ends on as one more line. A PostgreSQL server that goes away while followed (a
    restart, a failover) is said on stderr and waited for, up to --give-up-after seconds;
    printing goes on after the last event printed.
    """
    with handled(as_json, one_line=follow):
        backend = open_store(store)
        try:
            size = backend.size()
            rows = [raw_row(raw) for raw in backend.read_raw(start=max(1, size - lines + 1))]
            if not follow:
                if as_json:
                    emit_json({"ok": True, "events": rows})
                else:
                    console.print(events_table(rows, f"last {len(rows)} of {size} event(s)"))
                return
            next_pos = 1 if not rows else rows[-1]["position"] + 1
            for row in rows:
                _print_follow(row, as_json)
            try:
                _follow_log(
                    backend,
                    next_pos,
                    interval,
                    Outage(give_up_after(give_up), say=say_on_stderr),
                    as_json=as_json,
                )
            except KeyboardInterrupt:
                return
        finally:
            backend.close()


def _follow_log(
    backend: LedgerStore, next_pos: int, interval: float, outage: Outage, *, as_json: bool
) -> NoReturn:
    """Print events from ``next_pos`` on as they are appended, riding out a lost server."""
    while True:
        try:
            for raw in backend.read_raw(start=next_pos):
                _print_follow(raw_row(raw), as_json)
                next_pos = raw.position + 1
        except ConnectionLost as exc:
            outage.wait(exc)
            continue
        outage.over(f"following from position {next_pos:,}")
        time.sleep(interval)


def _print_follow(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        write_stdout(json.dumps(row, sort_keys=True) + "\n")
    else:
        # A follow can run past midnight and has no header: each line has its date and UTC.
        stamp = utc_text(datetime.fromisoformat(row["timestamp"]))
        console.print(
            f"{row['position']:>8} {stamp} UTC [cyan]{safe_text(row['stream_id'])}[/]"
            f"#{row['stream_version']} [bold]{row['event_type']}[/] "
            + safe_text(row["workflow_id"] or "")
        )


def _stream_to_show(
    ctx: typer.Context,
    stream: str | None,
    *,
    store: str | None,
    attempts: Path | None,
    as_json: bool,
) -> str | None:
    """The stream `inspect` is to show, or None when it showed a remediation run instead."""
    if stream is None and attempts is None:
        raise UsageError(
            "Missing argument 'STREAM': give a stream id or a remediation run id, "
            "or --attempts PATH.",
            ctx,
        )
    if inspect_remediation(stream, store=store, attempts=attempts, as_json=as_json):
        return None
    return stream


def _indexed_stream(backend: LedgerStore, stream: str, *, start: int = 1) -> Iterator[RawRecord]:
    """A stream's stored records at positions >= ``start``, in version order, found through
    the store's stream index: the work is the stream's, not the log's. Undecoded, so of
    any type."""
    for first, last in position_runs(indexed_positions(backend, stream, start=start)):
        yield from backend.read_raw(start=first, stop=last)


def _stream_records(backend: LedgerStore, stream: str) -> Iterator[RawRecord]:
    """A stream's stored records in version order, undecoded."""
    if isinstance(backend, StreamIndex):
        yield from _indexed_stream(backend, stream)
        return
    try:
        positions = [e.position for e in backend.read_stream(stream)]
    except UnknownEventType:
        # The stream holds a type registered only in the Python code that wrote it: the
        # store cannot decode it by stream, so find the stream's records in the log.
        yield from (raw for raw in backend.read_raw() if raw.stream_id == stream)
        return
    for position in positions:
        (raw,) = backend.read_raw(start=position, stop=position)
        yield raw


@dataclass
class _StreamWalk:
    """A stream verified from genesis: the events in the asked-for window, and how many
    verified events lay before and after it."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    version: int = 0
    head: bytes = bytes(GENESIS)
    damage: LedgerDamaged | None = None
    before: int = 0
    after: int = 0

    @property
    def next_start(self) -> int | None:
        return self.rows[-1]["stream_version"] + 1 if self.after else None


def _walk_stream(backend: LedgerStore, stream: str, *, start: int, limit: int) -> _StreamWalk:
    """Verify every link of ``stream``, keeping only versions ``start`` onwards, at most
    ``limit`` of them (0: all): the verdict is the whole stream's, what is held in memory
    the window's."""
    walk = _StreamWalk()
    for raw in _stream_records(backend, stream):
        # Re-hash the stored bytes, not the decoded event: that is what was signed.
        walk.damage = link_damage(stream, walk.version, walk.head, raw)
        if walk.damage is None and chain_hash(raw.prev_hash, raw.body) != raw.hash:
            walk.damage = LedgerDamaged(
                DamageKind.TAMPER, raw.position, "the bytes do not hash to the stored hash"
            )
        if walk.damage is not None:
            break
        row = raw_row(raw)  # decoded outside the window too: its position is checked
        walk.version, walk.head = raw.stream_version, raw.hash
        if raw.stream_version < start:
            walk.before += 1
        elif limit and len(walk.rows) == limit:
            walk.after += 1
        else:
            walk.rows.append(row)
    return walk


def _missing_stream(
    backend: LedgerStore, stream: str, *, show: str = "tracebound inspect"
) -> ConfigError:
    hint = ""
    if backend.stream_head(f"run/{stream}") is not None:
        # `tracebound runs` lists run ids; a pipeline run's events are run/<id>.
        hint = f" (a pipeline run's stream is run/{stream}: {show} run/{stream})"
    return ConfigError(f"no stream {stream!r} in this ledger{hint}")


def _print_walk(walk: _StreamWalk, stream: str, *, start: int, limit: int) -> None:
    console.print(events_table(walk.rows, f"stream {stream}"))
    if not walk.rows and walk.before:
        console.print(f"[dim]no event at --start {start} or later[/]")
    if walk.next_start is not None:
        console.print(
            f"[dim]--limit {limit} reached: --start {walk.next_start} continues (--limit 0: all)[/]"
        )
    if walk.damage is None:
        console.print(f"[green]chain ok[/]: {walk.version} event(s), head {walk.head.hex()[:16]}…")
        return
    console.print(f"[bold red]chain broken[/]: {safe_text(str(walk.damage))}")
    console.print(
        "Run `tracebound verify` for the whole-ledger report. Do not append "
        "to this ledger until the damage is understood."
    )


@app.command()
def inspect(
    ctx: typer.Context,
    stream: Annotated[
        str | None,
        typer.Argument(
            help="Stream id, or remediation run id, to show and re-verify. "
            "Not needed with --attempts.",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    start: Annotated[
        int, typer.Option(min=1, help="First stream version shown (every one is verified).")
    ] = 1,
    limit: Annotated[int, typer.Option(min=0, help="At most this many events shown (0: all).")] = 0,
    attempts: AttemptsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one stream and re-verify its chain from genesis (every time it runs).

    Every event is shown unless --start/--limit bound the stream's events shown; the chain
    is verified through the last event either way, and the JSON's ``omitted`` counts the
    events left out before and after, ``next_start`` (else null) the --start that continues.

    A remediation run id (<store>/remediation/<id>/) or --attempts PATH re-verifies that
    run's attempts log from chain_head.bin through every line instead (docs/retry.md).
    """
    stream = _stream_to_show(ctx, stream, store=store, attempts=attempts, as_json=as_json)
    if stream is None:
        return
    with handled(as_json):
        backend = open_store(store)
        try:
            walk = _walk_stream(backend, stream, start=start, limit=limit)
            if walk.version == 0 and walk.damage is None:
                raise _missing_stream(backend, stream)
        finally:
            backend.close()
    if as_json:
        damage = walk.damage
        emit_json(
            {
                "ok": damage is None,
                "stream_id": stream,
                "version": walk.version,
                "head": walk.head.hex(),
                "damage": None if damage is None else {**damage.as_dict(), "message": str(damage)},
                "events": walk.rows,
                "omitted": {"before": walk.before, "after": walk.after},
                "next_start": walk.next_start,
            }
        )
    else:
        _print_walk(walk, stream, start=start, limit=limit)
    if walk.damage is not None:
        raise typer.Exit(EXIT_DAMAGED)


# -- integrity ----------------------------------------------------------------------------


@app.command()
def checkpoint(
    store: StoreOpt = None,
    key: KeyOpt = None,
    witness: WitnessOpt = None,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Re-verify the whole log, not only the events since the last checkpoint, "
            "and store its Merkle nodes again.",
        ),
    ] = False,
    note_file: Annotated[
        Path | None,
        typer.Option(
            "--note",
            help="Also write the signed checkpoint to this file: whoever keeps it can later "
            "ask for `tracebound prove-consistency` from it and check that nothing signed "
            "up to it was changed since.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify the new events, sign the log's Merkle root (C2SP signed note), update the witness.

    Incremental by default: the events up to the newest signed checkpoint are vouched for
    by its signature (through the stored Merkle nodes, which must hash to its root), and
    only the events after it are read and verified. `tracebound verify` and `--full`
    check the whole log.
    """
    with handled(as_json):
        if note_file is not None:
            refuse_inside_store(note_file, store, "--note")
        ledger = open_ledger(store, key=key, witness=witness, need_signer=True)
        try:
            with progress_bar("verifying before signing", enabled=not as_json) as update:
                try:
                    run = ledger.checkpoint_run(progress=update, full=full)
                except KeyRotationRefused as exc:
                    said = retired_key_refusal(ledger, key, exc)
                    if said is exc:
                        raise
                    raise said from exc
            note = ledger.store.latest_checkpoint()
        finally:
            ledger.close()
        if note_file is not None and note is not None:
            write_output(note_file, note.encode("utf-8"), "--note")
    cp = run.checkpoint
    if as_json:
        emit_json({"ok": True, **run.as_dict(), "note": note})
        return
    console.print(
        f"Signed checkpoint of [cyan]{safe_text(cp.origin)}[/]: [bold]{cp.size}[/] event(s), "
        f"root {cp.root.hex()[:16]}…"
    )
    if run.incremental and run.verified_from > cp.size:
        console.print(
            "No events since the previous checkpoint; it stays the newest (kept as signed, "
            "with every signature it carries)."
        )
    elif run.incremental:
        new = cp.size - run.verified_from + 1
        console.print(
            f"Verified the {new:,} event(s) since the previous checkpoint "
            f"(positions {run.verified_from:,}..{cp.size:,}); `--full` re-verifies all."
        )
    else:
        console.print(f"Verified the whole log first ({run.full_reason}).")
    console.print("The witness now holds it; a rollback of the store will be detected.")
    if note_file is not None:
        console.print(
            f"Signed note written to [bold]{safe_text(note_file)}[/]: keep it to ask for "
            "`tracebound prove-consistency` from it later."
        )


def _verify_table(report: VerifyReport) -> Table:
    """The checks and counts of a verify report, as the table ``verify`` prints."""
    newest_stored = report.stored_checkpoint_size
    coverage = report.coverage()
    table = Table(title="tracebound verify", show_header=False)
    table.add_column("check")
    table.add_column("result")
    if report.origin is not None:  # the name `verify-evidence --origin` takes
        table.add_row("origin", safe_text(report.origin))
    for check in ("chain", "positions", "merkle", "signature", "witness"):
        status = report.checks.get(check, "not reached")
        colour = "green" if status == "ok" else ("red" if status in {"failed"} else "yellow")
        table.add_row(check, f"[{colour}]{safe_text(status)}[/]")
    if report.checks.get("chain") == "failed" and report.damage is not None:
        # The chain stopped at the damage: what lies before it was checked, not counted.
        before = max((report.damage.position or 1) - 1, 0)
        table.add_row("events", f"{before:,} checked before the damage")
    else:
        table.add_row("events", f"{report.size:,} in {report.streams:,} stream(s)")
    unchecked = report.checks.get("signature") == NO_VERIFIER_KEY
    signed_up_to = "-" if report.checkpoint_size is None else f"{report.checkpoint_size:,}"
    if unchecked and newest_stored is not None:
        # The checkpoints are there; only their signatures could not be checked.
        signed_up_to = f"{newest_stored:,} (signature not checked: no verifier key)"
    table.add_row("signed up to", signed_up_to)
    table.add_row(
        "witness holds", "-" if report.witness_size is None else f"{report.witness_size:,}"
    )
    for rotation in report.rotations:  # who handed the ledger to which key, and when
        why = f"; {safe_text(rotation.reason)}" if rotation.reason else ""
        table.add_row(
            "key rotated",
            f"at position {rotation.position:,} ({rotation.timestamp}) by "
            f"{safe_text(rotation.rotated_by)}{why}: {rotation.old.key_hash:08x} -> "
            f"[cyan]{safe_text(rotation.new.format())}[/]",
        )
    pending = report.pending_rotation
    if pending is not None:
        table.add_row(
            "key rotation",
            f"[yellow]unfinished at position {pending.position:,} by "
            f"{safe_text(pending.rotated_by)}: {pending.old.key_hash:08x} -> "
            f"{pending.new.key_hash:08x}; checkpoints wait until `tracebound keys rotate` "
            "finishes it with both keys (if nobody here started it, it is not genuine)[/]",
        )
    if coverage and coverage["after_last_checkpoint"]:
        table.add_row(
            "not yet signed",
            f"{coverage['after_last_checkpoint']:,} after the newest checkpoint "
            "(chain-checked; run `tracebound checkpoint`)",
        )
    return table


@app.command()
def verify(
    store: StoreOpt = None,
    key: KeyOpt = None,
    verifier_key: VerifierOpt = None,
    witness: WitnessOpt = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Processes hashing in parallel. Default: CPU count.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check chain, positions, Merkle root, checkpoint signatures and the witness.

    Exit 0 only when everything agrees; 1 names the first bad position and the kind of
    damage; 3 when nothing is damaged but something could not be checked (no checkpoint,
    key or witness yet).

    Without a verifier key the stored checkpoints are there but unchecked: the events they
    cover are reported as signed, signature not checked; only the events after the newest
    stored checkpoint are "not yet signed" (``coverage`` in the JSON).
    """
    with handled(as_json):
        ledger, mismatch = open_ledger_checked(
            store, key=key, verifier_key=verifier_key, witness=witness
        )
        try:
            with progress_bar("verifying", enabled=not as_json) as update:
                report = ledger.verify(progress=update, workers=workers)
        finally:
            ledger.close()
    if mismatch is not None:
        # Checked against the witness the store is bound to; whatever that found, the
        # store naming another log is damage too.
        report.damage = mismatch.damage(report.damage)
        report.checks["witness"] = "failed"
    code = EXIT_OK if report.ok else EXIT_INCOMPLETE
    if report.damage is not None:
        code = EXIT_DAMAGED
    if as_json:
        # `uncovered` keeps its meaning (no checked signature covers these events); the
        # `coverage` keys say which of them are signed but unchecked (docs: README).
        emit_json(report.as_dict())
        raise typer.Exit(code)
    console.print(_verify_table(report))
    unchecked = report.checks.get("signature") == NO_VERIFIER_KEY
    if unchecked and report.damage is None:
        console.print(
            "The checkpoints were not checked: there is no verifier key here. Pass the "
            "ledger's public key with --verifier-key (`tracebound keys show` prints it where "
            "the signing key is)."
        )
    if report.damage is not None:
        d = report.damage
        where = "" if d.position is None else f" at position {d.position}"
        console.print(f"[bold red]DAMAGED[/]: {d.kind.value}{where}: {safe_text(d.detail)}")
    elif report.ok:
        console.print("[bold green]OK[/]: the ledger is intact and matches its signed checkpoints.")
    else:
        console.print("[yellow]INCOMPLETE[/]: no damage found, but not every check could run.")
    raise typer.Exit(code)


@app.command()
def prove(
    position: Annotated[int, typer.Argument(min=1, help="Position of the event to prove.")],
    store: StoreOpt = None,
    key: KeyOpt = None,
    verifier_key: VerifierOpt = None,
    output: ProofOutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write an inclusion proof of one event against the newest signed checkpoint.

    Exits 2 when no checkpoint covers the position yet (run `tracebound checkpoint`), 1 when
    the proof does not reach the signed root (damage).
    """
    with handled(as_json):
        bundle, text = prove_into(store, key, verifier_key, output, lambda led: led.prove(position))
    if as_json or output is None:
        write_stdout(text)
    else:
        console.print(
            f"Inclusion proof of position {position} in a tree of {bundle.tree_size} "
            f"written to [bold]{safe_text(output)}[/]. "
            "Check it with `tracebound verify-proof`."
        )


@app.command("verify-proof")
def verify_proof(
    file: Annotated[Path, typer.Argument(help="Proof file written by `tracebound prove`.")],
    key: OfflineKeyOpt = None,
    verifier_key: OfflineVerifierOpt = None,
    origin: OriginOpt = None,
    show: Annotated[
        bool,
        typer.Option(
            "--show",
            help="Then show the proven record (position, stream, version, type, time, hash "
            "and what it is about; with --json, `record`, as `log --json` gives it). Only "
            "a proof that holds is shown.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check an inclusion proof offline, with only the verifier key (no ledger needed).

    Exits 0 when the proof holds, 1 when it does not (anything that is not a valid proof
    signed by the key, malformed JSON or a checkpoint of another --origin included), 2 when
    the file or key cannot be read.
    """
    with handled(as_json):
        verifier = try_verifier(verifier_key, key)
        if verifier is None:
            raise ConfigError("verify-proof needs --verifier-key (the ledger's public key)")
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read proof {file}: {exc.strerror or exc}") from exc
        try:
            bundle = InclusionBundle.from_json(data)
        except ProofError as exc:
            raise ProofError(f"{file}: {exc}") from exc
        cp = verify_bundle(bundle, verifier, origin=origin)
        # Decoded only once the proof held: nothing unproven is shown.
        row = record_row(bundle.body, bundle.hash, bundle.position) if show else None
    if as_json:
        out: dict[str, Any] = {
            "ok": True,
            "position": bundle.position,
            "stream_id": bundle.stream_id,
            "hash": bundle.hash.hex(),
            "tree_size": cp.size,
            "origin": cp.origin,
            "root": cp.root.hex(),
        }
        if row is not None:
            out["record"] = row
        emit_json(out)
        return
    console.print(
        "[bold green]OK[/]: "
        + safe_text(
            f"position {bundle.position} (stream {bundle.stream_id}) is in {cp.origin} "
            f"(signed tree of {cp.size} events)."
        )
    )
    if row is not None:
        console.print(events_table([row], "the proven record", detail=True))


@app.command()
def demo(
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where to write the demo. Default: a temp dir.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Record a small pipeline run, sign and verify it, then tamper a copy and catch it."""
    from tracebound.cli.demo import run_demo  # noqa: PLC0415 - keeps startup fast

    with handled(as_json):
        result = run_demo(workdir, console=None if as_json else console)
    if as_json:
        emit_json(result)
    if not result["ok"]:
        raise typer.Exit(EXIT_DAMAGED)


def _buffered_stdout() -> None:
    """Give stdout a buffer when PYTHONUNBUFFERED (or ``-u``) left it without one.

    Unbuffered, stdout's text wrapper writes straight to the file and drops what a write
    cut short did not take: a pipe whose reader leaves mid-write (`| head -c 10`) cut the
    output with exit 0, as if all of it had been written. A buffered writer writes the rest
    or raises BrokenPipeError (exit 141). Every command flushes what it prints, so output
    still appears as it is printed (`tail --follow`).
    """
    stdout = sys.stdout
    if not isinstance(getattr(stdout, "buffer", None), io.RawIOBase):
        return
    stdout.flush()
    raw = io.FileIO(stdout.fileno(), "w", closefd=False)  # the original stays usable
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stdout.encoding,
        errors=stdout.errors,
        line_buffering=bool(stdout.line_buffering),
        write_through=True,
    )


def _printable_stdout() -> None:
    """Show what stdout's encoding cannot hold as an escape (``caf\\xe9``).

    Where the locale is not UTF-8, stdout is ASCII or Latin-1, and recorded text (a
    stream id with an accent, CJK, an emoji) ended the command in a UnicodeEncodeError with
    exit 1, "damaged", after `checkpoint` had signed and stored its checkpoint. Shown the
    way control characters already are; --json output is ASCII and is not touched.
    (Python's handler in the C locale, surrogateescape, fails on those characters too; a
    handler that does not fail, from PYTHONIOENCODING, is left as the user set it.)
    """
    failing = {"strict", "surrogateescape"}
    if sys.stdout.errors in failing and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


def main() -> None:
    """Console-script entry point."""
    # A closed stdout or stderr (a cron job's `>&-`) leaves Python's sys.stdout None: every
    # print would end in an AttributeError traceback. Written to /dev/null instead, as a
    # shell's `>/dev/null`, the command still does its work and exits with its own code.
    # (A closed stdin stays None: `append` says there is no input.)
    if sys.stdout is None:
        sys.stdout = Path(os.devnull).open("w", encoding="utf-8")  # noqa: SIM115 - process-long
    if sys.stderr is None:
        sys.stderr = Path(os.devnull).open("w", encoding="utf-8")  # noqa: SIM115 - process-long
    _printable_stdout()
    _buffered_stdout()
    stop_on_sigterm()
    # psycopg logs what it ignores while cleaning up after an error it raises ("error
    # ignored terminating <psycopg.Pipeline [BAD] at 0x…>"); unconfigured, logging prints
    # that on stderr beside the command's own message for the same error.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    try:
        app()
    except OSError as exc:  # rich's console writes outside handled()
        stdout_broken(exc)
        raise
    finally:
        # What is still buffered is written now, while a reader that left can be told
        # from damage (exit 141, not the interpreter's "Exception ignored" at exit).
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            reader_gone()
        except OSError as exc:
            stdout_failed(exc)
