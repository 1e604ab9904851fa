"""One SQLiteStore shared by threads, closed by one of them while another reads.

The store is documented as safe to share between threads, and every thread reads through
its own connection, which ``close()`` closes. Closing a connection while another thread is
inside one of its statements frees what that statement is using: a stray MemoryError, or a
segmentation fault.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from tests.conformance.suite import note

from tracebound.errors import StoreClosed
from tracebound.store.sqlite import SQLiteStore

GUARD = 60.0
# How long a statement held open waits for a close() that should not get through; a
# close() that does (the bug) gets through in well under this.
AMPLE = 0.5


def _close_during_a_statement(
    store: SQLiteStore, read: Callable[[SQLiteStore], Any]
) -> dict[str, Any]:
    """Run ``read`` in a thread; inside its first SQLite statement, close the store from a
    second thread. What the read returned or raised, and what the next read raised."""
    out: dict[str, Any] = {}
    closer = threading.Thread(target=store.close)

    def reader() -> None:
        calls = 0

        def inside_a_statement() -> int:
            nonlocal calls
            calls += 1
            if calls == 1:
                closer.start()
                closer.join(AMPLE)  # close() must wait for this statement to end
            return 0

        store._conn().set_progress_handler(inside_a_statement, 1)
        try:
            out["read"] = read(store)
        except BaseException as exc:  # noqa: BLE001 - the test reports what escaped
            out["read"] = exc
        try:
            out["next"] = store.size()
        except BaseException as exc:  # noqa: BLE001
            out["next"] = exc

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join(GUARD)
    closer.join(GUARD)
    assert not thread.is_alive()
    assert not closer.is_alive()
    return out


@pytest.mark.parametrize(
    "read",
    [
        # An iterator's page under way: its events come; the next page is refused.
        lambda s: [e.stream_version for e in islice(s.read_stream("s"), 50)],
        lambda s: [e.position for e in islice(s.read_log(), 50)],
        lambda s: s.stream_head("s").version,
        lambda s: s.get_meta("schema_version") is not None,
    ],
    ids=["read_stream", "read_log", "stream_head", "get_meta"],
)
def test_close_from_another_thread_waits_for_a_read_under_way(
    tmp_path: Path, read: Callable[[SQLiteStore], Any]
) -> None:
    store = SQLiteStore(tmp_path / "store")
    store.append("s", [note(i) for i in range(60)])
    expected = read(store)
    out = _close_during_a_statement(store, read)
    assert out["read"] == expected  # the read under way finished with its rows...
    assert isinstance(out["next"], StoreClosed)  # ...and the next one is refused, typed
    assert store.closed
    assert store._connections == []
