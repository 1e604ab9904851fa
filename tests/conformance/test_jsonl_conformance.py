"""The conformance suite, unchanged, on the JSONL backend (real files, flock, fsync)."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from tests.conformance.suite import LedgerStoreSuite, note
from tracebound.canonical import canonical_bytes
from tracebound.errors import ConcurrencyConflict, ConfigError, StoreBusy, StoreNotFound
from tracebound.ids import StreamId
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import NO_STREAM, AppendRequest, LedgerStore
from tracebound.store.sqlite import SQLiteStore


class TestJsonlStore(LedgerStoreSuite):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[LedgerStore]:
        s = JsonlStore(tmp_path / "store")
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[], LedgerStore]:
        return functools.partial(JsonlStore, tmp_path / "store")

    @pytest.fixture
    def impatient(self, tmp_path: Path) -> Callable[[], LedgerStore]:
        return functools.partial(JsonlStore, tmp_path / "store", lock_timeout=self.IMPATIENT)

    @pytest.fixture
    def hold_write_lock(self, tmp_path: Path) -> Callable[[], AbstractContextManager[None]]:
        return functools.partial(flock_held_by_another_process, tmp_path / "store" / "lock")


_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # a writer that stopped or hung: holds the lock until the test lets go
"""


@contextmanager
def flock_held_by_another_process(lock: Path) -> Iterator[None]:
    """A real second process holding a JSONL store's writer ``flock`` until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def test_jsonl_store_satisfies_the_port(tmp_path: Path) -> None:
    with JsonlStore(tmp_path / "store") as store:
        assert isinstance(store, LedgerStore)


# -- beyond the suite: what is particular to JSONL --------------------------------------


def _batches() -> list[list[AppendRequest]]:
    return [
        [AppendRequest(StreamId("a"), [note(1), note(2)], NO_STREAM)],
        [AppendRequest(StreamId("b"), [note(3, workflow=None)])],
        [
            AppendRequest(StreamId("a"), [note(4, "ü \u2028 \x01")], 2),
            AppendRequest(StreamId('c\n"d'), [note(5)]),
        ],
    ]


def test_record_bytes_are_byte_identical_to_sqlite(tmp_path: Path) -> None:
    with JsonlStore(tmp_path / "j") as j, SQLiteStore(tmp_path / "s") as s:
        for batch in _batches():
            assert j.append_batch(batch) == s.append_batch(batch)
        assert list(j.read_raw()) == list(s.read_raw())
        assert list(j.read_log()) == list(s.read_log())


def test_layout_lines_and_modes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JsonlStore(root) as store:
        for batch in _batches():
            store.append_batch(batch)
        store.save_checkpoint(5, "note\n")
        raws = list(store.read_raw())
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for name in ("log.jsonl", "checkpoints.jsonl", "meta.json", "lock"):
        assert stat.S_IMODE((root / name).stat().st_mode) == 0o600, name
    lines = (root / "log.jsonl").read_bytes().splitlines(keepends=True)
    frames = [[1, 2], [1, 2], [3, 3], [4, 5], [4, 5]]
    for line, raw, frame in zip(lines, raws, frames, strict=True):
        data = json.loads(line)
        assert list(data) == ["batch", "hash", "record"]
        assert data["batch"] == frame
        assert bytes.fromhex(data["hash"]) == raw.hash
        # The hashed bytes are in the line verbatim, and the line is itself canonical JSON.
        assert line == b'{"batch":%s,"hash":"%s","record":%s}\n' % (
            canonical_bytes(frame),
            raw.hash.hex().encode(),
            raw.body,
        )
        assert line[:-1] == canonical_bytes(data)
    assert json.loads((root / "meta.json").read_text()) == {"format": "tracebound-jsonl/1"}


def test_reads_seek_from_sparse_index_marks(tmp_path: Path) -> None:
    with JsonlStore(tmp_path / "store") as store:
        for i in range(1, 901):
            store.append("a" if i % 3 else "b", [note(i)])
        assert len(store._offsets) == 4  # one mark per 256 lines, not one per event
        assert [e.position for e in store.read_log(start=512, stop=514)] == [512, 513, 514]
        assert [r.position for r in store.read_raw(start=900)] == [900]
        got = [(e.stream_version, e.position) for e in store.read_stream("a", from_version=300)]
        assert got[:2] == [(300, 449), (301, 451)]
        assert got[-1] == (600, 899)
        versions = [
            e.stream_version for e in store.read_stream("a", from_version=257, to_version=259)
        ]
        assert versions == [257, 258, 259]
        assert [e.stream_version for e in store.read_stream("b")] == list(range(1, 301))
    with JsonlStore(tmp_path / "store") as again:  # the same index, rebuilt by scanning
        assert again.size() == 900
        head = again.stream_head("a")
        assert head is not None and head.version == 600


def test_appends_by_another_handle_are_seen_and_checked(tmp_path: Path) -> None:
    with JsonlStore(tmp_path / "store") as one, JsonlStore(tmp_path / "store") as two:
        assert two.size() == 0
        one.append("s", [note(1)])
        assert two.size() == 1
        with pytest.raises(ConcurrencyConflict):
            two.append("s", [note(2)], expected_version=NO_STREAM)
        (rec,) = two.append("s", [note(2)], expected_version=1)
        assert (rec.position, rec.stream_version) == (2, 2)
        head = one.stream_head("s")
        assert head is not None and (head.version, head.head) == (2, rec.hash)


def test_a_replaced_log_file_is_followed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with JsonlStore(root) as store:
        store.append("s", [note(1)])
        older = (root / "log.jsonl").read_bytes()
        store.append("s", [note(2)])
        assert store.size() == 2
        replacement = root / "log.jsonl.new"
        replacement.write_bytes(older)
        replacement.replace(root / "log.jsonl")  # a new inode, one event shorter
        assert store.size() == 1
        (rec,) = store.append("s", [note(3)])
        assert rec.position == 2
    assert (root / "log.jsonl").read_bytes().count(b"\n") == 2


def test_open_without_create_and_on_a_file(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound):
        JsonlStore(tmp_path / "missing", create=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError):
        JsonlStore(tmp_path / "file")


def test_a_reader_of_a_store_a_hung_writer_holds_gives_up_and_says_why(tmp_path: Path) -> None:
    """Reads index the log under a shared flock (a batch being written is not a torn tail);
    with a writer stopped or hung holding the lock, `verify`, `log` and `inspect` waited
    forever, saying nothing. They wait ``lock_timeout`` and raise StoreBusy, naming the
    lock file and how to find who holds it; nothing is lost once it is let go."""
    root = tmp_path / "store"
    with JsonlStore(root, lock_timeout=0.2) as store:
        store.append("s", [note(1)])
        with flock_held_by_another_process(root / "lock"):
            with pytest.raises(StoreBusy) as opening:
                JsonlStore(root, lock_timeout=0.2)  # opening indexes the log
            with pytest.raises(StoreBusy):
                list(store.read_log())  # an open handle looks for what others appended
        assert [e.event_id for e in store.read_log()] == [note(1).event_id]
    busy = opening.value
    assert (busy.store, busy.waited) == (str(root / "lock"), 0.2)
    assert f"fuser -v {root / 'lock'}" in str(busy)


_WAITER = """
import sys
from tests.conformance.suite import note
from tracebound.store.jsonl import JsonlStore
store = JsonlStore(sys.argv[1])
print("open", flush=True)
sys.stdin.readline()
store.append("waiter", [note(2)])
"""


def _queue_held_by_another_process(folder: Path) -> bool:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases it, if this process got it
    return False


def test_a_writer_that_lets_go_does_not_take_the_lock_back_before_one_waiting(
    tmp_path: Path,
) -> None:
    """Waiters polled the flock with pauses up to 10 ms, and a writer that let go took it
    straight back: under busy writers one process waited seconds (minutes were possible)
    while the others took turns. A waiter now queues on the folder's flock, and a writer
    coming back waits behind it: the waiter's append lands first, every time."""
    root = tmp_path / "store"
    with JsonlStore(root) as store:
        store.append("s", [note(1)])
        waiter = subprocess.Popen(
            [sys.executable, "-c", _WAITER, str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert waiter.stdin is not None and waiter.stdout is not None
        try:
            assert waiter.stdout.readline() == "open\n"
            with store._mutex, store._exclusive():  # a writer mid-append
                waiter.stdin.write("go\n")
                waiter.stdin.flush()
                deadline = time.monotonic() + 30
                while not _queue_held_by_another_process(root):  # the waiter queued
                    assert time.monotonic() < deadline, "the waiter never queued"
                    time.sleep(0.01)
            store.append("s", [note(3)])  # at once, as a writer in a loop does
        finally:
            waiter.stdin.close()
            assert waiter.wait(timeout=60) == 0
        assert [e.stream_id for e in store.read_log()] == ["s", "waiter", "s"]
