"""Crashes: a real writer killed with SIGKILL, and torn writes made of a real batch's bytes.

The SIGKILL trials (``tests/crash_harness.py``) run a few times here and hundreds of times
in ``bench/soak_crash.py``. A kill lands inside ``write`` only now and then, so the torn-tail
path is also tested deterministically: the bytes of a real batch, appended to a copy of the
store, are written to the original only in part, exactly as a crash mid-write leaves them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.crash_harness import BACKENDS, KILL_MODES, run_trial
from tests.integration.conftest import cost
from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.events.envelope import Event
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store._chaining import Prepared, PreparedRequest
from tracebound.store.jsonl import JsonlStore
from tracebound.store.sqlite import SQLiteStore

TRIALS = 8


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(TRIALS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_loses_no_acknowledged_event(backend: str, trial: int, tmp_path: Path) -> None:
    result = run_trial(backend, tmp_path, seed=7919 * trial, kill=KILL_MODES[trial % 2])
    assert result.ok, result.as_dict()
    assert result.acked > 0  # the writer was killed after it had acknowledged something
    assert result.lost == []
    assert result.present >= result.acked
    if backend == "sqlite":
        assert result.torn is None


# -- torn writes, built deterministically ---------------------------------------------------


def _event(n: int) -> Event:
    return Event.create(
        cost(n),
        event_id=UUID(int=n),
        timestamp=datetime(2026, 4, 1, tzinfo=UTC),
        workflow_id="wf",
    )


def _url(path: Path) -> str:
    return f"jsonl:///{path.resolve()}"


def _verify(path: Path) -> Any:
    with Ledger(JsonlStore(path, create=False), clock=FixedClock(), ids=SequentialIds()) as led:
        return led.verify(workers=1, require_signed=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracebound", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _next_write(store_dir: Path, scratch: Path, batches: list[list[int]]) -> bytes:
    """The bytes one write would append: the batches, appended to a copy of the store."""
    shutil.copytree(store_dir, scratch)
    before = (scratch / "log.jsonl").stat().st_size
    with JsonlStore(scratch) as copy:
        prepared = [
            [PreparedRequest(f"s{i % 2}", None, [Prepared(_event(n)) for n in ns])]
            for i, ns in enumerate(batches)
        ]
        copy._append_prepared(prepared)  # one write for all of them, as group commit does
    return (scratch / "log.jsonl").read_bytes()[before:]


def _torn_store(
    tmp_path: Path, keep: int, batches: list[list[int]] | None = None
) -> tuple[Path, bytes, int]:
    """A store of 5 events plus the first ``keep`` bytes of a 3-event batch's write."""
    store_dir = tmp_path / "store"
    with JsonlStore(store_dir) as store:
        for n in range(1, 6):
            store.append(f"s{n % 2}", [_event(n)])
    offset = (store_dir / "log.jsonl").stat().st_size
    write = _next_write(store_dir, tmp_path / "scratch", batches or [[6, 7, 8]])
    fd = os.open(store_dir / "log.jsonl", os.O_WRONLY | os.O_APPEND)
    os.write(fd, write[:keep])
    os.close(fd)
    return store_dir, write, offset


def _line_ends(write: bytes) -> list[int]:
    return [i + 1 for i, b in enumerate(write) if b == 0x0A]


@pytest.mark.parametrize(
    "where", ["inside-first-line", "one-whole-line", "two-lines-and-a-bit", "all-but-newline"]
)
def test_torn_tail_is_reported_by_reads_appends_and_verify(tmp_path: Path, where: str) -> None:
    probe, _, _ = _torn_store(tmp_path / "probe", 0)
    ends = _line_ends(_next_write(probe, tmp_path / "probe2", [[6, 7, 8]]))
    keep = {
        "inside-first-line": 40,
        "one-whole-line": ends[0],
        "two-lines-and-a-bit": ends[1] + 17,
        "all-but-newline": ends[2] - 1,
    }[where]
    store_dir, _, offset = _torn_store(tmp_path, keep)
    log_size = (store_dir / "log.jsonl").stat().st_size

    with JsonlStore(store_dir, create=False) as store:  # opening a torn store works...
        (tail,) = store.torn_tails()
        assert (tail.file, tail.offset, tail.length, tail.position) == (
            "log.jsonl",
            offset,
            keep,
            6,
        )
        assert store.size() == 6  # five events, and the torn sixth
        assert [e.position for e in store.read_log(stop=5)] == [1, 2, 3, 4, 5]
        for read in (
            lambda: list(store.read_log()),
            lambda: list(store.read_raw(start=3)),
            lambda: list(store.read_stream("s0")),
            lambda: store.stream_head("s1"),
            lambda: store.append("s0", [_event(99)]),
        ):
            with pytest.raises(LedgerDamaged) as info:  # ...but every read and append says so
                read()
            assert (info.value.kind, info.value.position) == (DamageKind.TORN_TAIL, 6)
            assert f"at byte offset {offset} " in str(info.value)
    assert (store_dir / "log.jsonl").stat().st_size == log_size  # the append wrote nothing

    report = _verify(store_dir)
    assert report.damage is not None
    assert (report.damage.kind, report.damage.position) == (DamageKind.TORN_TAIL, 6)
    assert f"{keep} byte(s) of an unfinished write at byte offset {offset} " in report.damage.detail


def test_parallel_verify_reports_the_torn_tail_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracebound.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "CHUNK", 2)  # the torn position is a chunk of its own
    store_dir, _, offset = _torn_store(tmp_path, 300)
    with Ledger(
        JsonlStore(store_dir, create=False), clock=FixedClock(), ids=SequentialIds()
    ) as led:
        serial = led.verify(workers=1, require_signed=False).damage
        parallel = led.verify(workers=2, require_signed=False).damage
    assert serial is not None and parallel is not None
    assert (parallel.kind, parallel.position, parallel.detail) == (
        serial.kind,
        serial.position,
        serial.detail,
    )
    assert (serial.kind, serial.position) == (DamageKind.TORN_TAIL, 6)
    assert f"byte offset {offset} " in serial.detail


def test_repair_shows_first_then_cuts_keeps_and_records(tmp_path: Path) -> None:
    store_dir, write, offset = _torn_store(tmp_path, 1000)
    torn = write[:1000]
    before = (store_dir / "log.jsonl").read_bytes()

    look = _cli("repair", "--store", _url(store_dir), "--json")
    assert look.returncode == 1, look.stdout + look.stderr
    shown = json.loads(look.stdout)
    assert shown["ok"] is False
    assert [(t["offset"], t["length"], t["position"]) for t in shown["torn"]] == [(offset, 1000, 6)]
    assert (store_dir / "log.jsonl").read_bytes() == before  # looking cuts nothing

    cut = _cli("repair", "--store", _url(store_dir), "--yes", "--json")
    assert cut.returncode == 0, cut.stdout + cut.stderr
    (done,) = json.loads(cut.stdout)["repaired"]
    kept = store_dir / f"log.jsonl.torn-{offset}"
    assert done["kept"] == kept.name
    assert kept.read_bytes() == torn
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert (store_dir / "log.jsonl").read_bytes() == before[:offset]
    (note,) = [json.loads(line) for line in (store_dir / "repairs.jsonl").read_text().splitlines()]
    assert note["sha256"] == hashlib.sha256(torn).hexdigest()
    assert (note["offset"], note["length"], note["position"], note["file"]) == (
        offset,
        1000,
        6,
        "log.jsonl",
    )

    assert _verify(store_dir).damage is None
    with JsonlStore(store_dir, create=False) as store:
        assert [r["sha256"] for r in store.repairs()] == [note["sha256"]]
        assert store.read_stream("s0") is not None
        (rec,) = store.append("s0", [_event(6)])
        assert rec.position == 6  # the log goes on where the intact part ended
        assert {e.event_id.int for e in store.read_log()} == {1, 2, 3, 4, 5, 6}
    again = _cli("repair", "--store", _url(store_dir))
    assert again.returncode == 0
    assert "nothing to repair" in again.stdout


def test_repair_takes_its_time_from_the_injected_clock(tmp_path: Path) -> None:
    store_dir, _, offset = _torn_store(tmp_path, 123)
    with JsonlStore(store_dir, create=False) as store:
        (done,) = store.repair(now=datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC))
        assert done.at == "2030-01-02T03:04:05.000000Z"
        assert (done.offset, done.length) == (offset, 123)
        assert store.torn_tails() == []
        assert store.size() == 5


def test_a_crash_inside_a_group_write_tears_only_the_unfinished_batch(tmp_path: Path) -> None:
    probe, _, _ = _torn_store(tmp_path / "probe", 0)
    write = _next_write(probe, tmp_path / "probe2", [[6, 7], [8, 9, 10]])
    ends = _line_ends(write)
    store_dir, _, offset = _torn_store(tmp_path, ends[3], [[6, 7], [8, 9, 10]])
    with JsonlStore(store_dir, create=False) as store:
        (tail,) = store.torn_tails()
        # The first batch (6, 7) was written whole and stays; of the second, two of three
        # lines made it, and all of it is the torn tail.
        assert (tail.offset, tail.length, tail.position) == (offset + ends[1], ends[3] - ends[1], 8)
        assert "batch 8..10 has 2 of its 3 lines" in tail.reason
        store.repair(now=FixedClock().now())
        assert [e.event_id.int for e in store.read_log()] == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize("kind", ["not-a-ledger-line", "framed-but-not-json"])
def test_last_line_that_is_not_json_is_a_torn_tail(tmp_path: Path, kind: str) -> None:
    store_dir, _, _ = _torn_store(tmp_path, 0)
    log = store_dir / "log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    start = len(b"".join(lines[:4]))
    last = {
        "not-a-ledger-line": b'{"batch":[5,5],"hash":"ab\x00\x00\n',
        "framed-but-not-json": lines[4].replace(b'"correlation_id":null', b'"correlation_id":nul'),
    }[kind]
    log.write_bytes(b"".join(lines[:4]) + last)
    report = _verify(store_dir)
    assert report.damage is not None
    assert (report.damage.kind, report.damage.position) == (DamageKind.TORN_TAIL, 5)
    assert f"byte offset {start} " in report.damage.detail
    if kind == "framed-but-not-json":
        assert "its last line, 5, is not valid JSON" in report.damage.detail
        # The same line in the middle is no crash artifact: verify judges it there.
        log.write_bytes(b"".join(lines[:4]) + last + lines[4])
        report = _verify(store_dir)
        assert report.damage is not None
        assert (report.damage.kind, report.damage.position) == (DamageKind.MALFORMED, 5)


def test_torn_line_in_the_middle_is_malformed_and_not_repaired(tmp_path: Path) -> None:
    store_dir, _, _ = _torn_store(tmp_path, 0)
    log = store_dir / "log.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:70] + b"\n"
    log.write_bytes(b"".join(lines))
    report = _verify(store_dir)
    assert report.damage is not None
    assert (report.damage.kind, report.damage.position) == (DamageKind.MALFORMED, 3)
    out = _cli("repair", "--store", _url(store_dir), "--yes")
    assert out.returncode == 0 and "nothing to repair" in out.stdout
    assert log.read_bytes() == b"".join(lines)


def test_torn_checkpoint_line_is_reported_and_repaired(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with JsonlStore(store_dir) as store:
        store.append("s", [_event(1)])
        store.save_checkpoint(1, "note-1\n")
    cps = store_dir / "checkpoints.jsonl"
    intact = cps.read_bytes()
    with cps.open("ab") as f:
        f.write(b'{"note":"note-2\\n","si')
    with JsonlStore(store_dir, create=False) as store:
        for call in (
            store.checkpoints,
            store.latest_checkpoint,
            lambda: store.save_checkpoint(1, "x"),
        ):
            with pytest.raises(LedgerDamaged) as info:
                call()
            assert info.value.kind is DamageKind.TORN_TAIL
            said = f"ends with 22 byte(s) of an unfinished write at byte offset {len(intact)} "
            assert f"checkpoints.jsonl {said}" in str(info.value)
        (done,) = store.repair(now=FixedClock().now())
        assert (done.file, done.offset, done.position) == ("checkpoints.jsonl", len(intact), None)
        assert store.checkpoints() == [(1, "note-1\n")]
    assert cps.read_bytes() == intact


def test_sqlite_has_nothing_to_repair(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "db").close()
    out = _cli("repair", "--store", f"sqlite:///{(tmp_path / 'db').resolve()}", "--yes", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] is True and result["repaired"] == []
    assert "nothing to repair" in result["message"]
