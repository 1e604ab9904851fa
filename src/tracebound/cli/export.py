"""`tracebound export anchors` and `export evidence`.

`export evidence RUN` writes a run's evidence file on request, long after the run: the
runner's file (written when the run stopped) says nothing of spend recorded since, nor of a
newer checkpoint. See :func:`tracebound.export.evidence.export_evidence`.

`export anchors`: the critic-training dataset, one provable row per anchor.

Each row is an ``AttemptAnchor`` (ADR-04-0017) with a link back to its
``attempt_anchor_recorded`` event (ledger position, stream, hash) and an inclusion proof
against the newest signed checkpoint, so whoever trains on the file can check, offline and
with only the verifier key, that every example is in the signed log. The anchors files
under ``<store>/fallback/anchors`` are checked against the ledger when present.
"""

from __future__ import annotations

import io
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tracebound.cli._common import (
    JsonOpt,
    KeyOpt,
    StoreOpt,
    VerifierOpt,
    console,
    emit_json,
    handled,
    open_ledger,
    refuse_inside_store,
    safe_text,
    store_dir,
    write_output,
)
from tracebound.cli.runs import BlobsOpt
from tracebound.errors import ConfigError
from tracebound.pipeline.retry.anchors import (
    AnchorWriter,
    anchor_dataset,
    require_parquet,
    write_dataset,
)
from tracebound.store.files import write_file_atomic

if TYPE_CHECKING:
    from tracebound.export.evidence import EvidenceReport

__all__ = ["export_app"]

export_app = typer.Typer(
    help="Export from the ledger: a run's evidence file, the critic-training anchors.",
    no_args_is_help=True,
)


class Format(StrEnum):
    jsonl = "jsonl"
    parquet = "parquet"


def _format(value: str) -> str:
    # Checked here, not by typer's enum conversion, which words a bad value as
    # "Value error, 'csv' is not one of ...": a pydantic phrase a user should not see.
    if value not in Format.__members__:
        choices = ", ".join(f"'{f.value}'" for f in Format)
        raise typer.BadParameter(f"{value!r} is not one of {choices}")
    return value


@export_app.command("anchors")
def export_anchors(
    format_name: Annotated[
        str,
        typer.Option(
            "--format", callback=_format, help="jsonl, or parquet (needs pyarrow).", metavar="FMT"
        ),
    ] = Format.jsonl.value,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Write here; JSON lines go to stdout without it (with --json: one document "
            "whose 'dataset' holds the rows).",
        ),
    ] = None,
    no_proofs: Annotated[
        bool,
        typer.Option("--no-proofs", help="Leave out inclusion proofs (no checkpoint needed)."),
    ] = False,
    store: StoreOpt = None,
    key: KeyOpt = None,
    verifier_key: VerifierOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One row per AttemptAnchor: the anchor, its ledger position and an inclusion proof.

    Proofs are against the newest signed checkpoint; one is signed first when it does not
    cover the last anchor and the signing key is available.
    """
    fmt = Format(format_name)
    with handled(as_json):
        if fmt is Format.parquet:
            if out is None:
                raise ConfigError("--format parquet needs --out FILE")
            require_parquet()  # before a checkpoint is signed for an export that cannot happen
        if out is not None:
            if not out.parent.is_dir():
                raise ConfigError(f"--out {out}: there is no folder {out.parent}")
            if out.is_dir():
                raise ConfigError(f"--out {out} is a folder; name the file to write in it")
            refuse_inside_store(out, store, "--out")
        ledger = open_ledger(store, key=key, verifier_key=verifier_key)
        try:
            projection = AnchorWriter(store_dir(store))
            rows = anchor_dataset(
                ledger,
                prove=not no_proofs,
                projection=projection if projection.directory.is_dir() else None,
            )
        finally:
            ledger.close()
        if out is None and as_json:  # one JSON document, as every --json prints
            emit_json(
                {
                    "ok": True,
                    "rows": len(rows),
                    "format": fmt.value,
                    "out": None,
                    "dataset": [r.model_dump(mode="json") for r in rows],
                }
            )
            return
        if out is None:
            write_dataset(rows, "jsonl", sys.stdout.buffer)
            sys.stdout.flush()
            return
        data = io.BytesIO()
        write_dataset(rows, "parquet" if fmt is Format.parquet else "jsonl", data)
        write_output(out, data.getvalue(), "--out")
    if as_json:
        emit_json({"ok": True, "rows": len(rows), "format": fmt.value, "out": str(out)})
    else:
        console.print(f"Exported {len(rows)} anchor(s) as {fmt.value} to [bold]{safe_text(out)}[/]")


@export_app.command("evidence")
def export_evidence_file(
    run: Annotated[str, typer.Argument(help="The run id (`tracebound runs` lists them).")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Write here. Default: ./RUN.evidence.json.", show_default=False
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the file when it exists.")
    ] = False,
    checkpoint: Annotated[
        bool,
        typer.Option(
            "--checkpoint",
            help="Sign a checkpoint first when the newest does not cover the run and its "
            "spend (needs the signing key). Without it, such a run is refused.",
        ),
    ] = False,
    blobs: BlobsOpt = None,
    store: StoreOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a run's evidence file now, against the newest signed checkpoint.

    The file is the one the runner writes when a run stops (format tracebound-evidence/3,
    checked by `verify-evidence`), made today: the whole run and all of its spend recorded
    under costs/RUN so far, proven, with the run's end and the spend's end signed by the
    ledger's key (the newest one after a rotation). Exit 2 for an unknown run, an existing
    file without --force, no signing key, or records of the run or its spend after the
    newest checkpoint (run `tracebound checkpoint` first, or pass --checkpoint).
    """
    from tracebound.export.evidence import export_evidence  # noqa: PLC0415 - lazy, for startup time
    from tracebound.pipeline.config import RunnerConfig  # noqa: PLC0415 - lazy, for startup time
    from tracebound.store.keyfile import file_stem  # noqa: PLC0415 - lazy, for startup time

    with handled(as_json):
        path = out if out is not None else Path(f"{file_stem(run)}.evidence.json")
        _check_target(path, store, force=force)
        ledger = open_ledger(store, key=key, need_signer=True)
        try:
            blob_store = RunnerConfig(store=store, blobs=blobs).blob_store(ledger)
            exported = export_evidence(ledger, blob_store, run, checkpoint=checkpoint)
        finally:
            ledger.close()
        _write_new(path, exported.data(), force=force)
    _say_exported(path, exported.report, checkpointed=exported.checkpointed, as_json=as_json)


def _check_target(path: Path, store: str | None, *, force: bool) -> None:
    """Refuse before any work an output that cannot or must not be written."""
    if path.is_dir():
        raise ConfigError(f"--out {path} is a folder; name the file to write in it")
    if not path.parent.is_dir():
        raise ConfigError(f"--out {path}: there is no folder {path.parent}")
    if path.is_file() and not force:
        raise ConfigError(f"{path} exists; pass --force to replace it, or --out another file")
    refuse_inside_store(path, store, "--out")


def _write_new(path: Path, data: bytes, *, force: bool) -> None:
    """Whole or not at all; an existing file only with ``force`` (one that appeared since
    the check too: the link that puts the file in place fails on it)."""
    if force or (path.exists() and not path.is_file()):  # a pipe or device is written into
        write_output(path, data, "--out")
        return
    try:
        write_file_atomic(path, data, mode=0o644, overwrite=False)
    except FileExistsError as exc:
        raise ConfigError(f"{path} exists; pass --force to replace it") from exc
    except OSError as exc:
        raise ConfigError(f"cannot write --out {path}: {exc.strerror or exc}") from exc


def _say_exported(path: Path, report: EvidenceReport, *, checkpointed: bool, as_json: bool) -> None:
    if as_json:
        emit_json({**report.as_dict(), "out": str(path), "checkpoint_signed": checkpointed})
        return
    final = "" if report.final else " (not final: the run may go on)"
    done = "Signed a checkpoint, then wrote" if checkpointed else "Wrote"
    console.print(f"{done} the evidence of run {safe_text(report.run_id)} to "
                  f"[bold]{safe_text(path)}[/]")  # fmt: skip
    console.print(f"  status:     {report.status}{final}")
    if report.run_head is not None:  # always, from export_evidence
        head = report.run_head
        console.print(f"  run head:   stream version {head.stream_version}, record "
                      f"{head.hash.hex()[:16]}…, {report.events} record(s)")  # fmt: skip
    if report.spend is not None:
        spend = report.spend
        console.print(f"  spend:      {spend.as_dict()['total_usd']} USD in {spend.records} "
                      f"cost record(s) of {safe_text(spend.stream_id)}")  # fmt: skip
    console.print(f"  checkpoint: tree size {report.tree_size} of "
                  f"{safe_text(report.origin or '')}")  # fmt: skip
    console.print(f"Check it: tracebound verify-evidence {safe_text(path)} --require-spend")
