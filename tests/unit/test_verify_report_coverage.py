"""`Ledger.verify` without a verifier key: what the stored checkpoints cover, and a log
shorter than the store's own checkpoint, both in the Python report (the CLI prints it)."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.errors import DamageKind
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.store.sqlite import DB_FILENAME

SIGNER = NoteSigner("kit", bytes(32))
ORIGIN = "test.example/verify-coverage"


def _ledger(root: Path, *, signer: NoteSigner | None) -> Ledger:
    return Ledger(
        SQLiteStore(root), clock=FixedClock(), ids=SequentialIds(namespace=3),
        signer=signer, origin=ORIGIN,
    )  # fmt: skip


def _signed_then_more(root: Path) -> None:
    with _ledger(root, signer=SIGNER) as ledger:
        for i in range(7):
            ledger.record(f"run-{i % 2}", [CostIncurred(tier="direct",
                          amount_usd=Decimal(i), source=CostSource("x"))])  # fmt: skip
            if i == 4:
                ledger.checkpoint()


def test_without_a_key_the_report_says_what_the_stored_checkpoint_covers(tmp_path: Path) -> None:
    _signed_then_more(tmp_path / "s")
    with _ledger(tmp_path / "s", signer=None) as ledger:
        report = ledger.verify(require_signed=False)
    assert report.damage is None and not report.ok  # the signature could not be checked
    assert (report.checkpoint_size, report.stored_checkpoint_size, report.uncovered) == (
        None, 5, 7,
    )  # fmt: skip
    assert report.coverage() == {
        "signature_checked": 0,
        "signature_unchecked": 5,
        "after_last_checkpoint": 2,
        "roots_compared": 0,
    }
    doc = report.as_dict()
    assert doc["stored_checkpoint_size"] == 5 and doc["coverage"] == report.coverage()


def test_with_the_key_the_checked_checkpoint_covers_its_events(tmp_path: Path) -> None:
    _signed_then_more(tmp_path / "s")
    with _ledger(tmp_path / "s", signer=SIGNER) as ledger:
        report = ledger.verify(require_signed=False)
    assert report.damage is None
    assert report.coverage() == {
        "signature_checked": 5,
        "signature_unchecked": 0,
        "after_last_checkpoint": 2,
        "roots_compared": 1,
    }


def test_without_a_key_a_log_shorter_than_its_stored_checkpoint_is_truncation(
    tmp_path: Path,
) -> None:
    """Without the key the checkpoint is unchecked, but a log shorter than what the
    store's own checkpoint says is damage either way (cut off, or a planted checkpoint):
    reported as truncation at the first missing position, as replay reports it."""
    _signed_then_more(tmp_path / "s")
    with sqlite3.connect(tmp_path / "s" / DB_FILENAME) as db:
        db.execute("DELETE FROM events WHERE position > 3")
    db.close()
    with _ledger(tmp_path / "s", signer=None) as ledger:
        report = ledger.verify(require_signed=False)
    assert report.damage is not None
    assert (report.damage.kind, report.damage.position) == (DamageKind.TRUNCATION, 4)
    assert "signature not checked" in str(report.damage)
    assert report.coverage() is None and report.as_dict()["damage"]["kind"] == "truncation"
