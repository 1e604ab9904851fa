"""Blobs in a SQLite ledger's own file (ADR 0009): which store the config picks, and the
pipeline, replay, rerun and evidence paths on it, with real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.pipeline_kit import Kit
from tests.unit.replay import replay_pipelines as rp
from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds
from tracebound.errors import ConfigError, StoreNotFound
from tracebound.export.evidence import EvidenceWriter, verify_evidence
from tracebound.pipeline.config import RunnerConfig
from tracebound.pipeline.runner import Runner
from tracebound.replay import replay_run, rerun_run
from tracebound.store.blobs import BlobStore, FileBlobStore
from tracebound.store.jsonl import JsonlStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore

VERIFIER = NoteSigner("kit", bytes(32)).verifier


def _close(store: BlobStore) -> None:
    if isinstance(store, SQLiteBlobStore):
        store.close()


# -- which store the config picks -----------------------------------------------------------


def test_a_sqlite_ledger_keeps_its_blobs_in_its_own_file(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / ".tracebound").close()
    config = RunnerConfig(base=tmp_path)
    assert config.blobs_in_ledger()
    blobs = config.blob_store()
    assert isinstance(blobs, SQLiteBlobStore)
    assert blobs.path == tmp_path / ".tracebound" / "ledger.db"
    assert blobs.fallback is None  # no blob folder from an older version
    _close(blobs)
    SQLiteStore(tmp_path / "elsewhere" / "l.db").close()
    there = RunnerConfig(store="sqlite:///elsewhere/l.db", base=tmp_path).blob_store()
    assert isinstance(there, SQLiteBlobStore)
    assert there.path == tmp_path / "elsewhere" / "l.db"  # relative to base, as the store is
    _close(there)


def test_no_ledger_yet_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound, match="tracebound init"):
        RunnerConfig(base=tmp_path).blob_store()


def test_blob_files_of_an_older_version_stay_readable(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / ".tracebound").close()
    old = FileBlobStore(tmp_path / ".tracebound" / "blobs").put(b"from before ADR 0009")
    blobs = RunnerConfig(base=tmp_path).blob_store()
    assert isinstance(blobs, SQLiteBlobStore)
    assert isinstance(blobs.fallback, FileBlobStore)
    assert blobs.fallback.root == tmp_path / ".tracebound" / "blobs"
    assert blobs.get(old.digest) == b"from before ADR 0009"
    _close(blobs)


def test_files_when_configured_or_when_the_ledger_is_not_sqlite(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / ".tracebound").close()
    configured = RunnerConfig(base=tmp_path, blobs=Path("mine"))
    assert not configured.blobs_in_ledger()
    chosen = configured.blob_store()
    assert isinstance(chosen, FileBlobStore) and chosen.root == tmp_path / "mine"
    jsonl = RunnerConfig(store=f"jsonl:///{tmp_path}/j", base=tmp_path)
    chosen = jsonl.blob_store()
    assert isinstance(chosen, FileBlobStore) and chosen.root == tmp_path / "j" / "blobs"
    remote = RunnerConfig(store="postgresql://db.example/ledger", base=tmp_path)
    with pytest.raises(ConfigError, match="--blobs"):
        remote.blob_store()
    chosen = RunnerConfig(store="postgresql://db.example/l", blobs=tmp_path / "b").blob_store()
    assert isinstance(chosen, FileBlobStore)


def test_the_ledger_in_hand_decides(tmp_path: Path) -> None:
    """A blob is made durable by appends to its own file only: never pair a ledger with the
    blob table of another."""
    config = RunnerConfig(base=tmp_path)  # its default store does not even exist
    kit = Kit(tmp_path / "kit")
    sqlite_ledger = kit.ledger()
    old = FileBlobStore(kit.store_dir / "blobs").put(b"an older blob of this ledger")
    with sqlite_ledger:
        blobs = config.blob_store(sqlite_ledger)
        assert isinstance(blobs, SQLiteBlobStore)
        assert isinstance(sqlite_ledger.store, SQLiteStore)
        assert blobs.path == sqlite_ledger.store.path
        # and the older blob files it reads are the ones beside that ledger, too
        assert blobs.get(old.digest) == b"an older blob of this ledger"
        _close(blobs)
    jsonl_ledger = Ledger(
        JsonlStore(tmp_path / ".tracebound"), clock=FixedClock(), ids=SequentialIds(1)
    )
    with jsonl_ledger:
        blobs = config.blob_store(jsonl_ledger)
        assert isinstance(blobs, FileBlobStore)
        assert blobs.root == tmp_path / ".tracebound" / "blobs"


# -- the pipeline on it ---------------------------------------------------------------------


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    writer = EvidenceWriter(tmp_path / "evidence")
    built = rp.make_runner(tmp_path, evidence=writer)
    assert isinstance(built.ledger.store, SQLiteStore)
    built.blobs = SQLiteBlobStore(built.ledger.store)
    yield built
    _close(built.blobs)
    built.ledger.close()


def test_replay_rerun_and_evidence_work_on_blobs_in_the_ledger(
    runner: Runner, tmp_path: Path
) -> None:
    result = runner.run(rp.repaired, {"ticket": "T-9"})
    assert result.status == "completed"
    assert not (tmp_path / "blobs").exists()  # nothing went to files
    report = replay_run(runner.ledger, runner.blobs, result.run_id)
    assert report.ok, report.failures
    again = rerun_run(
        runner.ledger,
        runner.blobs,
        result.run_id,
        policy=runner.policy,
        redactor=runner.redactor,
        codeowners=runner.codeowners,
    )
    assert again.identical, again.divergence
    assert isinstance(runner.evidence, EvidenceWriter)
    path = runner.evidence.written[-1]
    doc = json.loads(path.read_text())
    assert doc["artifacts"] and all(a["present"] for a in doc["artifacts"])
    assert verify_evidence(path, VERIFIER).signed


def test_replay_names_an_erased_or_altered_blob_in_the_ledger(runner: Runner) -> None:
    result = runner.run(rp.deterministic, {"ticket": "T-10"})
    plan, execute = result.steps[0].artifact_hash, result.steps[1].artifact_hash
    assert plan is not None and execute is not None
    assert runner.blobs.erase(execute)
    assert isinstance(runner.blobs, SQLiteBlobStore)
    with sqlite3.connect(runner.blobs.path) as conn:
        conn.execute("UPDATE blobs SET data = ? WHERE digest = ?", (b"{}", plan))
    report = replay_run(runner.ledger, runner.blobs, result.run_id)
    assert [(f.step_id, f.kind) for f in report.failures] == [
        ("plan", "mismatch"),
        ("execute", "missing"),
    ]
