"""Stored records as rows and as a table: what `log`, `tail`, `inspect` and
`verify-evidence --show` print, decoded and laid out one way for all of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

import orjson
from rich.table import Table

from tracebound.cli._common import console, safe_text
from tracebound.cli._tables import Give, fit, hoist_date, short_digest, utc_text
from tracebound.errors import DamageKind, IntegrityError, LedgerDamaged, UnknownEventType
from tracebound.events.envelope import RecordedEvent, format_timestamp
from tracebound.events.record import RawRecord, decode_record

__all__ = ["event_row", "events_table", "payload_detail", "raw_row", "record_row"]


def event_row(e: RecordedEvent) -> dict[str, Any]:
    return {
        "position": e.position,
        "stream_id": e.stream_id,
        "stream_version": e.stream_version,
        "event_type": e.event_type,
        "event_id": str(e.event_id),
        "workflow_id": e.workflow_id,
        "correlation_id": e.correlation_id,
        "timestamp": format_timestamp(e.timestamp),
        "hash": e.hash.hex(),
        "payload": e.payload.model_dump(mode="json"),
    }


_STORED_ROW_KEYS = ("position", "stream_id", "stream_version", "event_type", "event_id",
                    "workflow_id", "correlation_id", "payload")  # fmt: skip


def raw_row(raw: RawRecord) -> dict[str, Any]:
    """The row of a stored record, decoded as ``read_log`` decodes it."""
    return record_row(raw.body, raw.hash, raw.position)


def record_row(body: bytes, hash_: bytes, position: int) -> dict[str, Any]:
    """The row of the record ``body`` (hashed ``hash_``) said to be at ``position``.

    A payload whose type this process does not know (one registered only in the Python
    code that wrote it) is shown as it was stored instead of failing the whole listing.
    """
    try:
        event = decode_record(body, hash_)
    except UnknownEventType:
        try:
            record = orjson.loads(body)
            row = {key: record[key] for key in _STORED_ROW_KEYS}
            row["timestamp"] = format_timestamp(datetime.fromisoformat(record["timestamp"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise IntegrityError(f"stored record cannot be decoded: {exc}") from exc
        row["hash"] = bytes(hash_).hex()
    else:
        row = event_row(event)
    if row["position"] != position:
        raise LedgerDamaged(
            DamageKind.REORDER,
            position,
            f"the record stored here says it is position {row['position']}",
        )
    return row


# The payload fields that say what an event was about, in the order a reader wants them:
# which step, who decided, how it ended, what it cost. Any event type shows those it has.
_DETAIL_KEYS: Final = ("pipeline", "inputs_digest", "step_id", "role", "status", "decision",
                       "approver", "failed_step_id", "origin_step_id", "repair_step_id",
                       "succeeded", "name", "passed", "artifact_hash", "output_digest", "tier",
                       "amount_usd", "source", "metric", "value", "reason")  # fmt: skip


def payload_detail(payload: Mapping[str, Any]) -> str:
    """``key=value`` for the payload fields in :data:`_DETAIL_KEYS` that are set."""
    parts = []
    for key in _DETAIL_KEYS:
        value = payload.get(key)
        if value is None or value == "":
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key.endswith(("_hash", "_digest")):
            text = short_digest(text)
        parts.append(f"{key}={text}")
    return " ".join(parts)


def events_table(rows: list[dict[str, Any]], title: str, *, detail: bool = False) -> Table:
    """Events as a table that keeps pos, ver, type and time whole at any terminal width:
    long stream and workflow ids are cut with an ellipsis, the hash is cropped.

    With ``detail`` (one run's records), a last column says what each payload is about
    (:func:`payload_detail`), folded when narrow; and a stream or workflow id that every
    row shares goes to the title instead of a column, to leave it the room.
    """
    stamps = [utc_text(datetime.fromisoformat(r["timestamp"])) for r in rows]
    day, times = hoist_date(stamps)
    shared = {
        key: values.pop()
        for key in ("stream_id", "workflow_id")
        if detail and len(values := {r[key] for r in rows}) == 1
    }
    said = [  # a workflow id that is the run id the title names is not said twice
        f"{key.removesuffix('_id')} {value}"
        for key, value in shared.items()
        if value and value not in title
    ]
    title = safe_text(", ".join([title, *said]))
    table = Table(title=title if day is None else f"{title}, on {day}", show_lines=False)
    cells: dict[str, Callable[[dict[str, Any], str], str]] = {
        "pos": lambda r, _: str(r["position"]),
        "stream": lambda r, _: safe_text(r["stream_id"]),
        "ver": lambda r, _: str(r["stream_version"]),
        "type": lambda r, _: safe_text(r["event_type"]),
        "workflow": lambda r, _: safe_text(r["workflow_id"] or "-"),
        "time (UTC)": lambda _, time_: time_,
        "hash": lambda r, _: r["hash"][:12],
        "detail": lambda r, _: safe_text(payload_detail(_payload(r))),
    }
    dropped = {"stream"} if "stream_id" in shared else set()
    dropped |= {"workflow"} if "workflow_id" in shared else set()
    dropped |= set() if detail else {"detail"}
    columns = [col for col in cells if col not in dropped]
    for col in columns:
        table.add_column(col, justify="right" if col in {"pos", "ver"} else "left")
    for r, time_ in zip(rows, times, strict=True):
        # shown: ids are data, not markup ("run[/x]" would raise)
        table.add_row(*(cells[col](r, time_) for col in columns))
    give: dict[str, Give] = {
        "stream": "ellipsis", "workflow": "ellipsis", "hash": "crop", "detail": "fold"
    }  # fmt: skip
    fit(table, give={c: g for c, g in give.items() if c in columns}, console=console)
    return table


def _payload(row: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = row["payload"]
    return payload if isinstance(payload, Mapping) else {}
