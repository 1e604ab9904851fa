"""`tracebound verify` says precisely what its signatures cover and what it could not check.

Without a verifier key the stored checkpoints cannot be checked, but they are there: the
events they cover are "signed, signature not checked", not "not yet signed". Only the
events after the newest stored checkpoint are not signed at all. `uncovered` keeps its
meaning (events no *checked* signature covers); `coverage` and `stored_checkpoint_size`
say the rest (README, "what `verify` reports").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI, _lines
from tracebound.ledger import MERKLE_NOT_COMPARED


@pytest.fixture
def signed_then_more(tmp_path: Path) -> CLI:
    """5 events covered by a signed checkpoint (held by the witness too), then 2 more."""
    cli = CLI(tmp_path)
    cli.json("init")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(5))
    assert cli.json("checkpoint")["size"] == 5
    cli.json("append", stdin=_lines(2, start=5))
    return cli


def _row(stdout: str, label: str) -> str:
    return next(line for line in stdout.splitlines() if label in line)


def test_without_a_key_checkpointed_events_are_signed_but_unchecked(
    signed_then_more: CLI, tmp_path: Path
) -> None:
    cli = signed_then_more
    cli.env["HOME"] = str(tmp_path / "auditor")  # another machine: no key, no witness
    out = cli.json("verify", code=3)
    assert out["damage"] is None and out["size"] == 7
    assert out["checks"]["signature"] == "no verifier key given"
    assert out["checkpoint_size"] is None  # no checkpoint was *checked*
    assert out["uncovered"] == 7  # unchanged: no checked signature covers any event
    assert out["stored_checkpoint_size"] == 5
    assert out["coverage"] == {
        "signature_checked": 0,
        "signature_unchecked": 5,
        "after_last_checkpoint": 2,
        "roots_compared": 0,
    }
    # the JSON says what the table says: a root computed, compared with nothing signed
    assert out["checks"]["merkle"] == MERKLE_NOT_COMPARED
    human = cli.run("verify")
    assert human.returncode == 3, human.stderr
    signed = _row(human.stdout, "signed up to")
    assert "5" in signed and "signature not checked" in signed
    assert "2" in _row(human.stdout, "not yet signed")
    assert "not compared" in _row(human.stdout, "merkle")
    assert "--verifier-key" in human.stdout


def test_with_the_key_the_checked_signatures_cover_the_checkpointed_events(
    signed_then_more: CLI,
) -> None:
    out = signed_then_more.json("verify", code=0)
    assert (out["uncovered"], out["checkpoint_size"], out["stored_checkpoint_size"]) == (2, 5, 5)
    assert out["coverage"] == {
        "signature_checked": 5,
        "signature_unchecked": 0,
        "after_last_checkpoint": 2,
        "roots_compared": 2,  # the stored checkpoint's and the witness's
    }
    human = signed_then_more.run("verify")
    assert human.returncode == 0, human.stderr
    assert "signature not checked" not in human.stdout
    assert "not compared" not in _row(human.stdout, "merkle")
    assert "2" in _row(human.stdout, "not yet signed")


def test_an_auditor_with_only_the_public_key_checks_the_signatures(
    signed_then_more: CLI, tmp_path: Path
) -> None:
    cli = signed_then_more
    pub = cli.json("keys", "show")["verifier_key"]
    cli.env["HOME"] = str(tmp_path / "auditor")  # the key text, but no witness
    out = cli.json("verify", "--verifier-key", pub, code=3)
    assert out["checks"]["signature"] == "ok" and out["uncovered"] == 2
    assert out["coverage"] == {
        "signature_checked": 5,
        "signature_unchecked": 0,
        "after_last_checkpoint": 2,
        "roots_compared": 1,
    }


def test_with_no_checkpoint_nothing_is_signed_and_no_root_is_compared(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(3))
    out = cli.json("verify", code=3)
    assert out["stored_checkpoint_size"] is None
    assert out["coverage"] == {
        "signature_checked": 0,
        "signature_unchecked": 0,
        "after_last_checkpoint": 3,
        "roots_compared": 0,
    }
    human = cli.run("verify")
    assert "not compared" in _row(human.stdout, "merkle")
    assert "3" in _row(human.stdout, "not yet signed")


def test_a_damaged_ledger_has_no_coverage(signed_then_more: CLI) -> None:
    import sqlite3

    with sqlite3.connect(signed_then_more.cwd / ".tracebound" / "ledger.db") as conn:
        conn.execute("DELETE FROM events WHERE position = 3")
    out = signed_then_more.json("verify", code=1)
    assert out["damage"]["kind"] == "gap" and out["damage"]["position"] == 3
    assert out["coverage"] is None and out["stored_checkpoint_size"] == 5
    # What was checked before the damage is said, not zeroed: the signatures were checked,
    # and the chain held up to the damage.
    assert out["checkpoint_size"] == 5 and out["checks"]["signature"] == "ok"
    human = signed_then_more.run("verify")
    assert human.returncode == 1
    assert "2 checked before the damage" in _row(human.stdout, "events")
    assert _row(human.stdout, "signed up to").split()[-2] == "5"
