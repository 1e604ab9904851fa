"""`tracebound export anchors`: the critic-training dataset, one provable row per anchor.

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
from typing import Annotated

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
from tracebound.errors import ConfigError
from tracebound.pipeline.retry.anchors import (
    AnchorWriter,
    anchor_dataset,
    require_parquet,
    write_dataset,
)

__all__ = ["export_app"]

export_app = typer.Typer(
    help="Export datasets from the ledger (critic-training anchors).", no_args_is_help=True
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
