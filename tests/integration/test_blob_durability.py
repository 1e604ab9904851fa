"""ADR 0009, tested: a step's artifact is never lost while its ARL entry survives.

Two kinds of crash:

* **Process crash** (SIGKILL, a real child running traced steps; ``tests/blob_crash_harness.py``):
  every step the ledger holds has its artifact, readable and matching its digest.
* **Power loss**, modelled on a copy of the files: what survives a power loss is the WAL up
  to its first frame that did not reach the disk, because SQLite's recovery stops at the
  first frame whose cumulative checksum fails. So every prefix of the WAL, cut at every
  frame, and a WAL with a frame damaged in the middle, is a state a power loss can leave;
  in each, every recorded step's artifact must be there. (Which prefix survives depends on
  the fsyncs; the ADR argues that an acknowledged entry's prefix is always on disk.)
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.blob_crash_harness import run_trial
from tests.integration.pipeline_kit import POLICY, tpc
from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.store.blobs import BlobRef, sha256_digest
from tracebound.store.sqlite_blobs import SQLiteBlobStore

SIGKILL_TRIALS = 20  # the SQLite blob store, the default; the file store gets a few more
FILE_TRIALS = 4

_WAL_HEADER = 32
_FRAME_HEADER = 24


# -- process crash --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "trial"),
    [("sqlite", t) for t in range(SIGKILL_TRIALS)] + [("file", t) for t in range(FILE_TRIALS)],
)
def test_sigkill_loses_no_recorded_steps_artifact(kind: str, trial: int, tmp_path: Path) -> None:
    result = run_trial(kind, tmp_path, seed=104_729 * (trial + 1))
    assert result.ok, result.problems
    assert result.acked  # it was killed after acknowledging steps, so the check means something
    assert result.recorded >= len(result.acked)


# -- power loss, modelled on WAL prefixes ---------------------------------------------------


def _pipeline(steps: int) -> Pipeline:
    pipe = Pipeline("durable", pipeline_type="test")
    for i in range(steps):

        def step(ctx: StepContext, i: int = i) -> dict[str, Any]:
            text = f"run {ctx.inputs['run']} step {i} " * (1 + 150 * (i % 3))  # ~20 B..3 KB
            return tpc("Planner", outputs={"summary": text, "artifacts": []})

        pipe.planner(name=f"s{i}")(step)
    return pipe


def _state(directory: Path) -> tuple[list[str], dict[str, bytes]]:
    """The digests the ledger names (run inputs, step artifacts) and the blobs, after recovery."""
    conn = sqlite3.connect(directory / "ledger.db")
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        named: list[str] = []
        if "events" in tables:
            for (body,) in conn.execute("SELECT body FROM events ORDER BY position"):
                payload = orjson.loads(body)["payload"]
                if payload["kind"] == "step_recorded":
                    named.append(payload["artifact_hash"])
                elif payload["kind"] == "run_started":
                    named.append(payload["inputs_digest"])
        blobs = dict(conn.execute("SELECT digest, data FROM blobs")) if "blobs" in tables else {}
    finally:
        conn.close()
    return named, blobs


def _recovered(work: Path, db: bytes, wal: bytes) -> tuple[list[str], dict[str, bytes]]:
    """Open a copy of the database with ``wal`` as its WAL, as after a reboot, and read it."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "ledger.db").write_bytes(db)
    if wal:
        (work / "ledger.db-wal").write_bytes(wal)
    return _state(work)


def _assert_backed(named: list[str], blobs: dict[str, bytes], where: str) -> None:
    for digest in named:
        assert digest in blobs, f"{where}: the ledger names {digest}, which is not stored"
        assert sha256_digest(blobs[digest]) == digest, f"{where}: {digest} altered"


def _run_and_snapshot(tmp_path: Path, between: Callable[[Path], None]) -> tuple[bytes, bytes]:
    """Run traced steps (FULL ledger, blobs in its file), ``between`` two runs; copy the files
    while the connections are still open, as a power loss would find them."""
    store = SQLiteStore(tmp_path / "store", synchronous="FULL")
    ledger = Ledger(store, clock=FixedClock(), ids=SequentialIds(namespace=9), origin="t.ex/d")
    blobs = SQLiteBlobStore(store)
    runner = Runner(
        ledger, blobs=blobs, policy=Policy.from_dict(POLICY), redactor=Redactor(b"k" * 32)
    )
    pipe = _pipeline(5)
    assert runner.run(pipe, {"run": 1}).status == "completed"
    between(store.path)
    assert runner.run(pipe, {"run": 2}).status == "completed"
    db = store.path.read_bytes()
    wal = store.path.with_name("ledger.db-wal").read_bytes()
    blobs.close()
    ledger.close()
    return db, wal


def _no_checkpoint(path: Path) -> None:
    return None


def _full_checkpoint(path: Path) -> None:
    """Another process checkpoints and resets the WAL between two runs."""
    with sqlite3.connect(path) as conn:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0


@pytest.mark.parametrize("between", [_no_checkpoint, _full_checkpoint])
def test_every_wal_prefix_a_power_loss_can_leave_backs_every_entry(
    between: Callable[[Path], None], tmp_path: Path
) -> None:
    db, wal = _run_and_snapshot(tmp_path, between)
    (page_size,) = struct.unpack(">I", wal[8:12])
    frame = _FRAME_HEADER + page_size
    frames = (len(wal) - _WAL_HEADER) // frame
    assert frames > 20
    work = tmp_path / "recovered"
    steps_seen = []
    blob_ahead = False  # some prefix holds a step's blob but not yet its entry
    for k in range(frames + 1):
        named, blobs = _recovered(work, db, wal[: _WAL_HEADER + k * frame] if k else b"")
        _assert_backed(named, blobs, f"WAL cut after {k} of {frames} frames")
        steps_seen.append(len(named))
        blob_ahead |= len(set(blobs) - set(named)) > 0 and k < frames
    assert steps_seen == sorted(steps_seen)  # a longer prefix never loses an entry
    # The whole WAL holds both runs' inputs and steps (2 x (1 + 5)), or the second run's
    # alone when the first was checkpointed into the database file before it.
    assert steps_seen[-1] == 12
    assert steps_seen[-1] > steps_seen[0]
    assert blob_ahead


def test_a_frame_lost_mid_wal_recovers_the_prefix_before_it(tmp_path: Path) -> None:
    """What makes the prefixes above the right model: a damaged frame ends recovery there,
    later (intact) commits included, because each frame's checksum covers all before it."""
    db, wal = _run_and_snapshot(tmp_path, _no_checkpoint)
    (page_size,) = struct.unpack(">I", wal[8:12])
    frame = _FRAME_HEADER + page_size
    frames = (len(wal) - _WAL_HEADER) // frame
    work = tmp_path / "recovered"
    for lost in (frames // 3, frames // 2, 2 * frames // 3):
        start = _WAL_HEADER + lost * frame + _FRAME_HEADER
        damaged = bytearray(wal)
        damaged[start : start + 64] = bytes(64)  # page bytes never written, as after a crash
        if damaged == bytearray(wal):
            damaged[start : start + 64] = b"\xff" * 64
        named, blobs = _recovered(work, db, bytes(damaged))
        _assert_backed(named, blobs, f"frame {lost} lost")
        assert (named, blobs) == _recovered(work, db, wal[: _WAL_HEADER + lost * frame])
        assert len(named) < len(_recovered(work, db, wal)[0])


def test_the_model_catches_a_blob_committed_after_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above is not vacuous: hold each put back until the next append has
    committed (the wrong order), and some WAL prefix holds an entry without its blob."""
    held: list[tuple[SQLiteBlobStore, bytes]] = []
    real_put, real_record = SQLiteBlobStore.put, Ledger.record

    def late_put(self: SQLiteBlobStore, data: bytes) -> BlobRef:
        held.append((self, data))
        return BlobRef(sha256_digest(data), len(data))

    def record_then_put(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        recorded = real_record(self, *args, **kwargs)
        while held:
            store, data = held.pop(0)
            real_put(store, data)
        return recorded

    monkeypatch.setattr(SQLiteBlobStore, "put", late_put)
    monkeypatch.setattr(Ledger, "record", record_then_put)
    with pytest.raises(AssertionError, match="which is not stored"):
        test_every_wal_prefix_a_power_loss_can_leave_backs_every_entry(_no_checkpoint, tmp_path)
