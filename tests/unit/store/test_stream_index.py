"""Where a stream's versions are filed, read without the records' payload models
(``StreamIndex``): a checkpoint links new events to the newest signed event of their
stream, and that event may be of a type the checking process has no model for."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conformance.suite import note

from tracebound.errors import TraceboundError
from tracebound.store.jsonl import LOG_FILE, JsonlStore
from tracebound.store.port import StreamIndex, stream_positions
from tracebound.store.sqlite import SQLiteStore


def _unknown_kind(line: bytes) -> bytes:
    # A record of a type no model here is registered for, as a team's own type reads to
    # the CLI (the hash no longer matches, which a decoded read would also report).
    return line.replace(b'"conformance_note"', b'"ticket_opened"')  # its type and kind


def test_jsonl_files_a_record_of_an_unknown_type_without_decoding_it(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "log", create=True)
    store.append("s", [note(1)])
    store.append("s", [note(2)])
    store.close()
    log = tmp_path / "log" / LOG_FILE
    lines = log.read_bytes().splitlines(keepends=True)
    assert b'"kind":"conformance_note"' in lines[0]
    log.write_bytes(_unknown_kind(lines[0]) + b"".join(lines[1:]))
    store = JsonlStore(tmp_path / "log")
    try:
        assert isinstance(store, StreamIndex)
        assert stream_positions(store, "s", 1, 2) == [(1, 1), (2, 2)]
        with pytest.raises(TraceboundError):
            list(store.read_stream("s"))  # the decoded read cannot
    finally:
        store.close()


def test_sqlite_files_a_record_of_an_unknown_type_without_decoding_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "store")
    store.append("s", [note(1), note(2)])
    conn = store._conn()
    conn.execute("UPDATE events SET body = CAST(REPLACE(CAST(body AS TEXT), "
                 "'\"conformance_note\"', '\"ticket_opened\"') AS BLOB)")  # fmt: skip
    try:
        assert stream_positions(store, "s", 1, 2) == [(1, 1), (2, 2)]
        with pytest.raises(TraceboundError):
            list(store.read_stream("s"))
    finally:
        store.close()
