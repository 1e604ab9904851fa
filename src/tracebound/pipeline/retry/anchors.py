"""AttemptAnchor files (ADR-04-0017) and the critic-training dataset exported from them.

**Projection.** :class:`AnchorWriter` keeps one JSON line per anchor in
``<root>/fallback/anchors/<YYYY-MM-DD>/<workflow_id>.jsonl`` (UTC date of the anchor's
``timestamp_utc``; files 0600, folders 0700, fsync per write, append only). The ledger's
``attempt_anchor_recorded`` events are the source of truth; the files are a projection a
trainer can read without a ledger, so writing is idempotent (an anchor already there is
skipped) and a *different* anchor for a known attempt is refused rather than appended.

**One adapter.** Every read goes through one ``TypeAdapter``: :data:`ANCHOR_ADAPTER` by
default, which reads ``schema_version`` 1; when version 2 exists, the discriminated
``AnyAttemptAnchor`` union of :mod:`tracebound.events.anchor` reads both side by side, and
a writer or reader built with that adapter needs no other change.

**Dataset.** :func:`anchor_dataset` turns each anchor event into an
:class:`AnchorDatasetRow`: the anchor, the event's ledger position and hash (the link back),
and an inclusion proof against the newest signed checkpoint, so a consumer can check
offline, with only the verifier key, that a training example is in the signed log.
:func:`write_dataset` writes JSON lines or Parquet (optional ``pyarrow``), and
:func:`read_dataset` reads either back through :data:`DATASET_ROW_ADAPTER`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Annotated, Any, Final, Literal, Self, TypeAlias
from uuid import UUID

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from tracebound.canonical import canonical_bytes
from tracebound.errors import (
    ConfigError,
    IntegrityError,
    ProofError,
    ValidationFailed,
)
from tracebound.events.anchor import (
    ANCHOR_ADAPTER,
    BLAKE3_HEX_PATTERN,
    AnyAttemptAnchor,
    AttemptAnchor,
    AttemptAnchorBase,
)
from tracebound.events.catalog import AttemptAnchorRecorded
from tracebound.events.envelope import RecordedEvent
from tracebound.events.record import decode_known
from tracebound.integrity.note import open_checkpoint
from tracebound.integrity.strict_json import loads_canonical_record, loads_strict
from tracebound.ledger import InclusionBundle, Ledger
from tracebound.store.files import append_durably
from tracebound.store.keyfile import file_stem
from tracebound.store.port import RecordFilter, read_matching

__all__ = [
    "ANCHORS_DIR",
    "DATASET_ROW_ADAPTER",
    "AnchorDatasetRow",
    "AnchorWriter",
    "DatasetFormat",
    "anchor_dataset",
    "anchor_events",
    "read_anchor_file",
    "read_dataset",
    "require_parquet",
    "write_dataset",
]

ANCHORS_DIR: Final = Path("fallback") / "anchors"
DatasetFormat: TypeAlias = Literal["jsonl", "parquet"]
_ANCHOR_EVENT: Final = "attempt_anchor_recorded"


def read_anchor_file(path: Path, adapter: TypeAdapter[Any] = ANCHOR_ADAPTER) -> list[Any]:
    """Every anchor in one anchors file, each validated by ``adapter``.

    Raises:
        ValidationFailed: a line is not a valid anchor (``field`` is ``<path>:<line>``).
    """
    out: list[Any] = []
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.endswith(b"\n"):
                raise ValidationFailed(f"{path}:{number}", "incomplete line (a torn write)")
            try:
                out.append(adapter.validate_json(line))
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"]) or "anchor"
                raise ValidationFailed(f"{path}:{number}", f"{where}: {err['msg']}") from exc
    return out


class AnchorWriter:
    """Projects anchors to ``<root>/fallback/anchors/{utc-date}/{workflow_id}.jsonl``.

    Args:
        root: The store directory (``.tracebound``), or any directory for tests.
        adapter: The one adapter anchors are read with; pass the ``AnyAttemptAnchor``
            union's adapter once a second schema version exists.
    """

    def __init__(self, root: Path, *, adapter: TypeAdapter[Any] = ANCHOR_ADAPTER) -> None:
        self.root = Path(root)
        self.adapter = adapter

    @property
    def directory(self) -> Path:
        return self.root / ANCHORS_DIR

    def path_for(self, anchor: AttemptAnchorBase) -> Path:
        """Where an anchor goes: its UTC date and its workflow (made file-name safe)."""
        date = anchor.timestamp_utc.date().isoformat()
        return self.directory / date / f"{file_stem(anchor.workflow_id)}.jsonl"

    def write(self, anchor: AttemptAnchorBase) -> bool:
        """Append ``anchor``; False when the identical anchor is already there.

        Raises:
            ValidationFailed: another anchor with this attempt_id is already in the file
                (the projection is append-only; an anchor is never replaced).
        """
        path = self.path_for(anchor)
        if path.exists():
            for existing in read_anchor_file(path, self.adapter):
                if existing.attempt_id != anchor.attempt_id:
                    continue
                if existing == anchor:
                    return False
                raise ValidationFailed(
                    "attempt_id",
                    f"{path} already holds a different anchor for attempt {anchor.attempt_id}",
                )
        append_durably(path, canonical_bytes(anchor.model_dump(mode="json")) + b"\n")
        return True

    def files(self) -> list[Path]:
        """Every anchors file, by date then workflow."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("*/*.jsonl"))

    def read(self, *, workflow_id: str | None = None) -> Iterator[Any]:
        """Every anchor in the projection (optionally one workflow's), via the adapter."""
        stem = None if workflow_id is None else f"{file_stem(workflow_id)}.jsonl"
        for path in self.files():
            if stem is None or path.name == stem:
                yield from read_anchor_file(path, self.adapter)

    def sync(self, ledger: Ledger) -> int:
        """Project every ``attempt_anchor_recorded`` event of the ledger; returns how many
        anchors were new. Safe to repeat."""
        return sum(self.write(anchor) for _event, anchor in anchor_events(ledger))


def anchor_events(ledger: Ledger) -> Iterator[tuple[RecordedEvent, AttemptAnchor]]:
    """The ledger's anchor events with their anchors, in log order."""
    # Only anchor records are read: the store skips the rest of a big log by its type
    # column (decode_known would skip them by the same column, one by one in Python).
    anchors = read_matching(ledger.store, RecordFilter(kinds=frozenset({_ANCHOR_EVENT})))
    for event in decode_known(anchors, kinds={_ANCHOR_EVENT}):
        if event.event_type == _ANCHOR_EVENT:
            payload = event.payload
            assert isinstance(payload, AttemptAnchorRecorded)
            yield event, payload.anchor


# --- the dataset ---------------------------------------------------------------------------


def _json_text(value: Any) -> Any:
    # Parquet keeps nested values as JSON text; JSON lines keep them as objects.
    # Strict: a ValueError becomes the row's validation error; Python's json would raise
    # RecursionError on deep nesting, which pydantic lets through.
    return loads_strict(value) if isinstance(value, str) else value


class AnchorDatasetRow(BaseModel):
    """One critic-training example: an anchor, where it sits in the ledger, and the proof.

    ``schema_version``, ``workflow_id``, ``attempt_id`` and ``attempt_index`` repeat the
    anchor's for filtering without parsing it, and are checked against it on load.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int
    workflow_id: str
    attempt_id: UUID
    attempt_index: int
    ledger_position: Annotated[int, Field(ge=1)]
    ledger_stream_id: str
    ledger_event_hash: Annotated[str, Field(pattern=BLAKE3_HEX_PATTERN)]
    anchor: Annotated[AnyAttemptAnchor, BeforeValidator(_json_text)]
    inclusion_proof: Annotated[dict[str, Any] | None, BeforeValidator(_json_text)] = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        a = self.anchor
        if (self.schema_version, self.workflow_id, self.attempt_id, self.attempt_index) != (
            a.schema_version,
            a.workflow_id,
            a.attempt_id,
            a.attempt_index,
        ):
            raise ValueError("the row's key columns disagree with its anchor")
        if self.inclusion_proof is not None:
            try:
                bundle = InclusionBundle.from_dict(self.inclusion_proof)
            except ProofError as exc:
                raise ValueError(str(exc)) from exc
            if (
                bundle.position != self.ledger_position
                or bundle.hash.hex() != self.ledger_event_hash
                or bundle.stream_id != self.ledger_stream_id
            ):
                raise ValueError("the inclusion proof is for another ledger event")
            # The proof covers the record it carries, not this row's copy of the anchor: an
            # edited anchor beside an untouched proof would verify and train a critic on it.
            if _proven_anchor(bundle) != a:
                raise ValueError("the anchor is not the one the proven record holds")
        return self


def _proven_anchor(bundle: InclusionBundle) -> AttemptAnchorBase | None:
    """The anchor in the record a proof carries, or None when it holds none (not an
    ``attempt_anchor_recorded`` record, or not one the ledger wrote). Whether the record is
    in the signed log is the proof's check (``verify_bundle``), not this one."""
    try:
        record = loads_canonical_record(bundle.body)
    except ValueError:
        return None
    payload = record.get("payload")
    if not isinstance(payload, dict) or payload.get("kind") != "attempt_anchor_recorded":
        return None
    try:
        anchor: AttemptAnchorBase = ANCHOR_ADAPTER.validate_python(payload.get("anchor"))
    except ValidationError:
        return None
    return anchor


DATASET_ROW_ADAPTER: TypeAdapter[AnchorDatasetRow] = TypeAdapter(AnchorDatasetRow)
"""The one adapter the dataset is read back with, from JSON lines or Parquet."""


def _covered(ledger: Ledger) -> int:
    note = ledger.store.latest_checkpoint()
    verifier = None if note is None else ledger.active_verifier()
    if note is None or verifier is None:
        return 0
    return open_checkpoint(note, verifier).size


def _sign_or_refuse(ledger: Ledger, last: int) -> None:
    """Sign the checkpoint the proofs need, or say why it cannot be done."""
    if ledger.signer is not None:
        ledger.checkpoint()
        return
    if ledger.verifier is None and ledger.store.latest_checkpoint() is not None:
        # A checkpoint is there; only the key to read it is missing. Saying "none covers"
        # would send the user off to sign one more, which needs the key they lack anyway.
        raise ConfigError(
            "the store's newest checkpoint cannot be read without its verifier key; "
            "pass --verifier-key (or --key), or export without proofs (--no-proofs)"
        )
    raise ConfigError(
        f"no signed checkpoint covers position {last} (the last anchor) "
        "and no signing key is configured; run `tracebound checkpoint`, or export "
        "without proofs (--no-proofs)"
    )


def anchor_dataset(
    ledger: Ledger, *, prove: bool = True, projection: AnchorWriter | None = None
) -> list[AnchorDatasetRow]:
    """One row per anchor event, with its ledger position and (``prove``) inclusion proof.

    Proofs are against the newest signed checkpoint; when it does not cover the last
    anchor and the ledger has a signer, a checkpoint is signed first. With ``projection``,
    the anchors files must agree with the ledger: each file anchor is the ledger's anchor
    for that attempt, so a trainer reading the files reads what the signed log holds.

    Raises:
        ConfigError: proofs were asked for, no checkpoint covers the anchors and there is
            no signing key to make one (not damage: there is nothing to prove against yet).
        IntegrityError: the projection disagrees with the ledger.
    """
    events = list(anchor_events(ledger))
    last = events[-1][0].position if events else 0
    if prove and events and _covered(ledger) < last:
        _sign_or_refuse(ledger, last)
    rows: list[AnchorDatasetRow] = []
    by_attempt: dict[UUID, AttemptAnchorBase] = {}
    for event, anchor in events:
        by_attempt[anchor.attempt_id] = anchor
        proof = ledger.prove(event.position).as_dict() if prove else None
        rows.append(
            AnchorDatasetRow(
                schema_version=anchor.schema_version,
                workflow_id=anchor.workflow_id,
                attempt_id=anchor.attempt_id,
                attempt_index=anchor.attempt_index,
                ledger_position=event.position,
                ledger_stream_id=event.stream_id,
                ledger_event_hash=event.hash.hex(),
                anchor=anchor,
                inclusion_proof=proof,
            )
        )
    if projection is not None:
        for anchor in projection.read():
            if by_attempt.get(anchor.attempt_id) != anchor:
                raise IntegrityError(
                    f"the anchors file entry for attempt {anchor.attempt_id} "
                    f"({projection.path_for(anchor)}) is not what the ledger recorded"
                )
    return rows


_PARQUET_COLUMNS: Final = (
    ("schema_version", "int64"),
    ("workflow_id", "string"),
    ("attempt_id", "string"),
    ("attempt_index", "int64"),
    ("ledger_position", "int64"),
    ("ledger_stream_id", "string"),
    ("ledger_event_hash", "string"),
    ("anchor", "string"),
    ("inclusion_proof", "string"),
)


def require_parquet() -> None:
    """Check that Parquet can be written, before any work is done for it.

    Raises:
        ConfigError: pyarrow (the ``parquet`` extra) is not installed.
    """
    _pyarrow()


def _pyarrow() -> tuple[Any, Any]:
    try:
        # pyarrow ships no type information; it is an optional extra, imported on use.
        import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415
        import pyarrow.parquet as pq  # type: ignore[import-untyped,unused-ignore]  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError(
            "Parquet export needs pyarrow: pip install 'tracebound[parquet]' "
            "(or export --format jsonl)"
        ) from exc
    return pa, pq


def _flat(row: AnchorDatasetRow) -> dict[str, Any]:
    data = row.model_dump(mode="json")
    data["anchor"] = canonical_bytes(data["anchor"]).decode("utf-8")
    proof = data["inclusion_proof"]
    data["inclusion_proof"] = None if proof is None else json.dumps(proof, sort_keys=True)
    return data


def write_dataset(rows: Sequence[AnchorDatasetRow], fmt: DatasetFormat, out: IO[bytes]) -> None:
    """Write the rows as JSON lines (one row object per line) or a Parquet file.

    Raises:
        ConfigError: Parquet was asked for and pyarrow is not installed.
    """
    if fmt == "jsonl":
        for row in rows:
            out.write(canonical_bytes(row.model_dump(mode="json")) + b"\n")
        return
    pa, pq = _pyarrow()
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in _PARQUET_COLUMNS])
    table = pa.Table.from_pylist([_flat(r) for r in rows], schema=schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    out.write(buffer.getvalue())


def _dataset_rows(path: Path, fmt: DatasetFormat) -> list[Any]:
    if fmt == "parquet":
        _pa, pq = _pyarrow()
        try:
            rows: list[Any] = pq.read_table(path).to_pylist()
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise ValidationFailed(str(path), f"not a Parquet dataset: {exc}") from exc
        return rows
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ValidationFailed(str(path), f"cannot be read: {exc.strerror or exc}") from exc
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        try:
            rows.append(loads_strict(line))
        except ValueError as exc:
            raise ValidationFailed(f"{path}: line {number}", str(exc)) from exc
    return rows


def read_dataset(path: Path, fmt: DatasetFormat) -> list[AnchorDatasetRow]:
    """Read an exported dataset back, every row through :data:`DATASET_ROW_ADAPTER`.

    Raises:
        ValidationFailed: a row is not a valid dataset row.
        ConfigError: Parquet and no pyarrow.
    """
    raw = _dataset_rows(path, fmt)
    rows: list[AnchorDatasetRow] = []
    for number, item in enumerate(raw, start=1):
        try:
            rows.append(DATASET_ROW_ADAPTER.validate_python(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "row"
            raise ValidationFailed(f"{path}: row {number}: {where}", err["msg"]) from exc
    return rows
