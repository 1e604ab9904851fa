"""Writes that fail for want of room: the error says why, and nothing acknowledged is lost.

Each child (``tests/file_limit_harness.py``) writes under a file-size limit, so its writes
past it fail with ``EFBIG`` as on a full disk. Afterwards, without the limit, the store must
verify, hold every acknowledged event, and take the next write.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

import pytest

from tests.file_limit_harness import run_limited
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.projections.sqlite_views import SQLiteViews
from tracebound.store.jsonl import JsonlStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.system import RandomIds, SystemClock

_ROOM = 64 * 1024  # past SQLite's 32 KiB -shm file, so the open itself succeeds


def _ledger(store: SQLiteStore | JsonlStore) -> Ledger:
    return Ledger(
        store, clock=SystemClock(), ids=RandomIds(), signer=NoteSigner("o", bytes(32)), origin="o"
    )


def _cost() -> CostIncurred:
    return CostIncurred(tier="direct", amount_usd=Decimal("0.01"), source=CostSource("openai"))


def test_a_failed_sqlite_node_write_says_why_not_that_its_rollback_failed(tmp_path: Path) -> None:
    # SQLite rolls a transaction back itself after an I/O error; a second ROLLBACK then
    # failed ("no transaction is active") and its error replaced the cause.
    with _ledger(SQLiteStore(tmp_path / "store")) as ledger:
        ledger.record("s", [_cost()] * 3, workflow_id="wf")
    result = run_limited(
        f"""
        from tracebound.errors import StorageError
        from tracebound.store.sqlite import SQLiteStore
        store = SQLiteStore({str(tmp_path / "store")!r})
        limit_files({_ROOM})
        try:
            store.add_merkle_nodes(0, 0, [bytes(32)] * 20000)
        except StorageError as exc:
            report(error=str(exc))
        """
    )
    assert "disk I/O error" in result["error"]
    assert "rollback" not in result["error"]
    with _ledger(SQLiteStore(tmp_path / "store")) as ledger:
        assert ledger.verify().damage is None
        assert ledger.store.size() == 3
        ledger.checkpoint()  # the next write works


def test_a_failed_views_write_says_why_not_that_its_rollback_failed(tmp_path: Path) -> None:
    SQLiteViews(tmp_path / "views").close()
    result = run_limited(
        f"""
        from tracebound.errors import StorageError
        from tracebound.projections.sqlite_views import SQLiteViews
        views = SQLiteViews({str(tmp_path / "views")!r})
        rows = [
            {{"workflow_id": "wf", "source": "ci", "seq": i, "timestamp": "2025-01-01T00:00:00Z",
             "event_type": "x" * 100, "detail": None}}
            for i in range(5000)
        ]
        limit_files({_ROOM})
        try:
            views.import_engine_history(rows)
        except StorageError as exc:
            report(error=str(exc))
        """
    )
    assert "disk I/O error" in result["error"]
    assert "rollback" not in result["error"]
    assert f"may not write past {_ROOM} bytes in a file (ulimit -f)" in result["error"]


def test_a_jsonl_checkpoint_the_disk_refuses_leaves_no_torn_line(tmp_path: Path) -> None:
    # The failed write's bytes stayed, so the store then read as damaged (torn-tail) though
    # the caller had been told the checkpoint failed.
    with _ledger(JsonlStore(tmp_path / "store")) as ledger:
        ledger.record("s", [_cost()] * 3, workflow_id="wf")
        ledger.checkpoint()
        ledger.record("s", [_cost()], workflow_id="wf")
    room = (tmp_path / "store" / "checkpoints.jsonl").stat().st_size + 20
    result = run_limited(
        f"""
        from tracebound.errors import StorageError
        from tracebound.store.jsonl import JsonlStore
        store = JsonlStore({str(tmp_path / "store")!r})
        limit_files({room})
        try:
            store.save_checkpoint(4, "a note that does not fit in twenty bytes")
        except StorageError as exc:
            report(error=str(exc))
        """
    )
    assert "File too large" in result["error"]
    with _ledger(JsonlStore(tmp_path / "store")) as ledger:
        assert ledger.verify().damage is None
        assert ledger.checkpoint().size == 4


def test_jsonl_merkle_nodes_the_disk_refuses_leave_no_part_of_a_node(tmp_path: Path) -> None:
    # A part of a node left behind made every later checkpoint fail with a ProofError.
    with JsonlStore(tmp_path / "store") as store:
        store.add_merkle_nodes(1, 0, [bytes(32)] * 2)
    result = run_limited(
        f"""
        from tracebound.errors import StorageError
        from tracebound.store.jsonl import JsonlStore
        store = JsonlStore({str(tmp_path / "store")!r})
        limit_files(100)
        try:
            store.add_merkle_nodes(1, 2, [bytes(32)] * 5)
        except StorageError as exc:
            report(error=str(exc))
        """
    )
    assert "File too large" in result["error"]
    with JsonlStore(tmp_path / "store") as store:
        assert store.merkle_node_count(1) == 2


def test_an_append_past_the_file_size_limit_says_so_and_loses_nothing(tmp_path: Path) -> None:
    # SQLite says only "disk I/O error" for EFBIG (and for a disk quota): the error now says
    # what this process can see of why: here, the file size limit it runs under.
    with _ledger(SQLiteStore(tmp_path / "store")) as ledger:
        ledger.record("s", [_cost()], workflow_id="wf")
    result = run_limited(
        f"""
        from tests.integration.test_write_failures import _cost, _ledger
        from tracebound.errors import StorageError
        from tracebound.store.sqlite import SQLiteStore
        ledger = _ledger(SQLiteStore({str(tmp_path / "store")!r}))
        event = _cost().model_copy(update={{"source": "x" * 2000}})
        limit_files({_ROOM})
        acknowledged = 1
        try:
            while True:
                ledger.record("s", [event], workflow_id="wf")
                acknowledged += 1
        except StorageError as exc:
            report(error=str(exc), acknowledged=acknowledged)
        """
    )
    assert result["error"].startswith("sqlite append failed: ")
    assert f"may not write past {_ROOM} bytes in a file (ulimit -f)" in result["error"]
    assert str(tmp_path / "store" / "ledger.db") in result["error"]
    with _ledger(SQLiteStore(tmp_path / "store")) as ledger:
        assert ledger.verify().damage is None
        assert ledger.store.size() == result["acknowledged"] > 1
        ledger.record("s", [_cost()], workflow_id="wf")  # the next append works


def test_a_read_only_file_beside_the_ledger_is_named(tmp_path: Path) -> None:
    # "attempt to write a readonly database" named no file: a -shm file an earlier run left
    # read-only kept every writing command failing after the ledger file's own mode was
    # put right (reading commands work: opening a complete ledger writes nothing).
    home = Path(tempfile.mkdtemp())  # not under tmp_path: the child's user must reach it
    try:
        SQLiteStore(home / "store").close()
        shm = home / "store" / "ledger.db-shm"
        shm.write_bytes(bytes(32768))  # as SQLite leaves it (an empty one, it repairs)
        shm.chmod(0o444)
        child = subprocess.run(
            [*_as_nobody(home), sys.executable, "-c", _OPEN_AND_SAY, str(home / "store")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert child.stdout.strip().endswith(f"; {shm} is read-only for this user"), child
    finally:
        shutil.rmtree(home)


def _as_nobody(home: Path) -> list[str]:
    """The command prefix that runs a child as nobody, owner of ``home``, when the tests run
    as root (root writes read-only files); none otherwise. setpriv, not ``subprocess``'s
    ``user=``: the interpreter may live where only root can reach it (/root/.pyenv), and
    setpriv keeps root's reach until the exec."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to be a user files refuse")
    nobody = pwd.getpwnam("nobody")
    for path in (home, *home.rglob("*")):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]


_OPEN_AND_SAY = """
import sys
from tracebound.errors import StorageError
from tracebound.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1], create=False)  # opening a ledger writes nothing
assert store.size() == 0  # and reading works through a read-only -shm
try:
    store.append("s", [])  # a write: BEGIN IMMEDIATE
except StorageError as exc:
    print(exc)
"""
