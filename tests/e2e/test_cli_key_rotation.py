"""`tracebound keys rotate` (ADR 0017), as an operator and an auditor run it: real
subprocesses, a real SQLite ledger, the default key files and witness."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.e2e.test_cli import CLI, _lines, ready_cli
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.note import Checkpoint, sign_checkpoint
from tracebound.store.keyfile import load_signer


def _keys(cli: CLI) -> Path:
    return Path(cli.env["HOME"]) / ".config" / "tracebound" / "keys"


def _db(cli: CLI) -> Path:
    return cli.cwd / ".tracebound" / "ledger.db"


def _pub(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.pub"
    path.write_text(text + "\n")
    return str(path)


def _rotated(tmp_path: Path) -> tuple[CLI, str, str, dict[str, Any]]:
    """4 events signed by K1; rotated to K2 (event 5); 2 more events signed by K2."""
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    old = cli.json("keys", "show")["verifier_key"]
    out = cli.json("keys", "rotate", "--by", "alice", "--reason", "yearly rotation")
    new = cli.json("keys", "show")["verifier_key"]
    cli.json("append", stdin=_lines(2, start=4))
    cli.json("checkpoint")
    return cli, old, new, out


def test_rotate_hands_over_and_every_key_of_the_history_verifies(tmp_path: Path) -> None:
    cli, old, new, out = _rotated(tmp_path)
    assert new != old
    assert (out["old_key"], out["new_key"]) == (old, new)
    assert (out["position"], out["rotated_by"], out["reason"]) == (5, "alice", "yearly rotation")
    assert out["handover_checkpoint"]["size"] == 5 and out["resumed"] is False
    keys = _keys(cli)
    archived = Path(out["archived_key"])
    assert archived.parent == keys and archived.name.startswith("tracebound.retired-")
    assert load_signer(archived).verifier.format() == old  # kept, not overwritten
    assert Path(out["archived_public"]).read_text().strip() == old
    assert load_signer(keys / "tracebound.key").verifier.format() == new
    assert not (keys / "tracebound.next.key").exists()
    # The hand-over note carries two signature lines, the others one.
    with sqlite3.connect(_db(cli)) as conn:
        notes = dict(conn.execute("SELECT size, note FROM checkpoints").fetchall())
    assert sorted(notes) == [4, 5, 7]
    assert [notes[s].count("\n\u2014 ") for s in (4, 5, 7)] == [1, 2, 1]
    for key in (None, _pub(tmp_path, "old", old), _pub(tmp_path, "new", new)):
        args = ("verify",) if key is None else ("verify", "--verifier-key", key)
        report = cli.json(*args)
        assert report["ok"] is True, report
        assert report["checkpoint_size"] == 7 and report["witness_size"] == 7
        (rotation,) = report["key_rotations"]
        assert (rotation["old_key"], rotation["new_key"]) == (old, new)
        assert rotation["rotated_by"] == "alice"
    text = cli.run("verify")
    assert text.returncode == 0 and "key rotated" in text.stdout and "alice" in text.stdout
    # Proofs are signed by the newest key; the old one refuses, naming both and rotation.
    proof = tmp_path / "p.json"
    cli.json("prove", "2", "-o", str(proof))
    cli.json("verify-proof", str(proof), "--verifier-key", new)
    refused = cli.json("verify-proof", str(proof), "--verifier-key", old, code=1)
    message = refused["error"]["message"]
    assert old.split("+")[1] in message and new.split("+")[1] in message
    assert "keys rotate" in message


def test_two_rotations(tmp_path: Path) -> None:
    cli, k1, k2, _ = _rotated(tmp_path)
    second = cli.json("keys", "rotate", "--by", "bob", "--reason", "suspected leak")
    k3 = cli.json("keys", "show")["verifier_key"]
    assert second["old_key"] == k2 and second["new_key"] == k3 and second["position"] == 8
    cli.json("append", stdin=_lines(1, start=6))
    cli.json("checkpoint")
    for key in (k1, k2, k3):
        report = cli.json("verify", "--verifier-key", key)
        assert report["ok"] is True, report
        assert [r["rotated_by"] for r in report["key_rotations"]] == ["alice", "bob"]
    assert len(list(_keys(cli).glob("tracebound.retired-*.key"))) == 2


def test_a_checkpoint_the_retired_key_signs_after_the_rotation_is_forged(
    tmp_path: Path,
) -> None:
    cli, old, _new, out = _rotated(tmp_path)
    retired = load_signer(Path(out["archived_key"]))
    # Whoever kept (or stole) the old key signs a checkpoint of the log of 7 events.
    root = bytes.fromhex(cli.json("verify")["root"])
    origin = cli.json("verify")["origin"]
    note = sign_checkpoint(Checkpoint(origin, 7, root), retired)
    with sqlite3.connect(_db(cli)) as conn:
        conn.execute("UPDATE checkpoints SET note = ? WHERE size = 7", (note,))
    for key in (old, None):
        args = ("verify",) if key is None else ("verify", "--verifier-key", key)
        report = cli.json(*args, code=1)
        assert report["damage"]["kind"] == "retired-key"
        assert report["damage"]["position"] == 7
        assert "retired by the rotation at position 5" in report["damage"]["detail"]
    # The retired key cannot sign a checkpoint either.
    refused = cli.json("checkpoint", "--key", out["archived_key"], code=2)
    assert refused["error"]["kind"] == "KeyRotationRefused"
    assert "retired" in refused["error"]["message"]


def test_tampering_with_the_rotation_event_is_found(tmp_path: Path) -> None:
    cli, _old, _new, _ = _rotated(tmp_path)
    with sqlite3.connect(_db(cli)) as conn:
        (body,) = conn.execute("SELECT body FROM events WHERE position = 5").fetchone()
        forged = bytes(body).replace(b"alice", b"mallo")
        conn.execute("UPDATE events SET body = ? WHERE position = 5", (forged,))
    report = cli.json("verify", code=1)
    assert report["damage"]["kind"] == "tamper" and report["damage"]["position"] == 5


def test_a_forged_rotation_appended_by_hand_is_refused(tmp_path: Path) -> None:
    cli = ready_cli(tmp_path, 1, checkpoint=True)
    stranger = NoteSigner("tracebound", bytes(32)).verifier.format()
    payload = {
        "kind": "signing_key_rotated",
        "old_key": cli.json("keys", "show")["verifier_key"],
        "new_key": stranger,
        "rotated_by": "mallory",
    }
    line = json.dumps({"stream_id": "s", "payload": payload}) + "\n"
    out = cli.json("append", stdin=line, code=2)
    assert "keys rotate" in out["error"]["message"]


def test_the_witness_catches_a_rollback_across_the_rotation(tmp_path: Path) -> None:
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    snapshot = _db(cli).read_bytes()  # before the rotation, signed by the old key
    cli.json("keys", "rotate", "--by", "alice")
    cli.json("append", stdin=_lines(2, start=4))
    cli.json("checkpoint")
    _db(cli).write_bytes(snapshot)
    report = cli.json("verify", code=1)  # with the new key, as configured now
    assert report["damage"]["kind"] == "rollback", report
    assert report["damage"]["position"] == 5


def test_rotate_refuses_a_damaged_ledger_and_a_foreign_key(tmp_path: Path) -> None:
    cli = ready_cli(tmp_path, 3, checkpoint=True)
    stranger = tmp_path / "other.key"
    cli.json("keys", "init", "--key", str(stranger), "--name", "tracebound")
    refused = cli.json("keys", "rotate", "--by", "alice", "--key", str(stranger), code=2)
    assert refused["error"]["kind"] == "KeyRotationRefused"
    assert "newest checkpoint" in refused["error"]["message"]
    assert not (tmp_path / "other.next.key").exists()  # a refused rotation leaves no key
    with sqlite3.connect(_db(cli)) as conn:
        (body,) = conn.execute("SELECT body FROM events WHERE position = 2").fetchone()
        conn.execute(
            "UPDATE events SET body = ? WHERE position = 2",
            (bytes(body).replace(b"0.0001", b"0.0009"),),
        )
    damaged = cli.json("keys", "rotate", "--by", "alice", code=1)
    assert damaged["error"]["damage"]["position"] == 2
    with sqlite3.connect(_db(cli)) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (3,)
    assert (_keys(cli) / "tracebound.key").exists()
    assert not (_keys(cli) / "tracebound.next.key").exists()


def test_a_rotation_the_witness_missed_is_handed_to_it_by_the_next_checkpoint(
    tmp_path: Path,
) -> None:
    """Interrupted after the hand-over was saved, before the witness took it: the witness
    holds the old key's note. The next checkpoint gives it the stored hand-over (both keys
    signed it) first, then its own note, instead of calling the witness unreadable."""
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    witness = Path(cli.env["HOME"]) / ".local" / "state" / "tracebound" / "witness"
    (held,) = witness.glob("*.note")
    before = held.read_bytes()
    cli.json("keys", "rotate", "--by", "alice")
    held.write_bytes(before)  # the witness never took the hand-over
    cli.json("append", stdin=_lines(2, start=4))
    run = cli.json("checkpoint")
    assert run["size"] == 7
    # The witness's note is the outgoing key's, as the history says it should be: read so,
    # not called "damaged, move it aside" (advice that drops the rollback guard) while the
    # whole log was verified again.
    assert run["verified"]["incremental"] is True, run["verified"]
    assert run["verified"]["full_reason"] is None
    report = cli.json("verify")
    assert report["ok"] is True, report
    assert report["witness_size"] == 7
    assert held.read_bytes() != before


def test_verify_names_a_rotation_nobody_finished(tmp_path: Path) -> None:
    """A rotation event after the newest checkpoint (interrupted, or appended by someone
    who can write the store): verify shows it in both modes, and checkpoint waits."""
    from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
    from tracebound.events.catalog import SigningKeyRotated
    from tracebound.integrity.rotation import KEY_STREAM

    cli = ready_cli(tmp_path, 3, checkpoint=True)
    old = cli.json("keys", "show")["verifier_key"]
    other = NoteSigner("tracebound", bytes([9]) * 32).verifier.format()
    with Ledger(SQLiteStore(_db(cli)), clock=FixedClock(), ids=SequentialIds()) as led:
        payload = SigningKeyRotated(old_key=old, new_key=other, rotated_by="mallory")
        led.store.append(KEY_STREAM, [led.event(payload)], expected_version=0)
    report = cli.json("verify")
    assert report["pending_key_rotation"]["new_key"] == other
    assert report["pending_key_rotation"]["position"] == 4
    text = cli.run("verify")
    assert "key rotation" in text.stdout and "mallory" in text.stdout
    assert "unfinished at position 4" in " ".join(text.stdout.split())
    refused = cli.json("checkpoint", code=2)
    assert "unfinished" in refused["error"]["message"]


def test_what_rotate_and_checkpoint_say_follows_what_they_did(tmp_path: Path) -> None:
    """A `.next.key` left by a run killed before the event was written starts a fresh
    rotation: `keys rotate` said "(an interrupted rotation was finished)" all the same.
    And `checkpoint` with nothing new after it said it "signed its size again", while it
    keeps the hand-over as both keys signed it."""
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    keys = _keys(cli)
    stray = NoteSigner("tracebound", b"\x07" * 32)
    (keys / "tracebound.next.key").write_text(stray.format_private() + "\n")
    (keys / "tracebound.next.key").chmod(0o600)
    (keys / "tracebound.next.pub").write_text(stray.verifier.format() + "\n")
    text = " ".join(cli.run("keys", "rotate", "--by", "alice").stdout.split())
    assert "Rotated the signing key at position 5" in text
    assert "interrupted rotation was finished" not in text
    text = " ".join(cli.run("checkpoint").stdout.split())
    assert "it stays the newest (kept as signed, with every signature it carries)" in text
    assert "signed its size again" not in text


def test_a_witness_that_missed_two_rotations_is_handed_both(tmp_path: Path) -> None:
    """A host with a witness of its own (docs/postgresql.md, "Several hosts") that signed
    nothing while the key went K1 -> K2 -> K3 elsewhere, then got K3. Before, its
    `checkpoint` exited 1 calling its witness file damaged ("move it aside"), while
    `verify` said the ledger was intact: only the newest rotation's hand-over was handed
    on. Now each hand-over is, in order, each read with the key the witness holds."""
    cli = ready_cli(tmp_path, 3, checkpoint=True)
    witness = Path(cli.env["HOME"]) / ".local" / "state" / "tracebound" / "witness"
    (held,) = witness.glob("*.note")
    before = held.read_bytes()
    cli.json("keys", "rotate", "--by", "alice")
    cli.json("append", stdin=_lines(1, start=3))
    cli.json("checkpoint")
    cli.json("keys", "rotate", "--by", "bob")
    held.write_bytes(before)  # this witness has seen neither rotation
    cli.json("append", stdin=_lines(2, start=4))
    run = cli.json("checkpoint")
    assert run["size"] == 8 and run["verified"]["incremental"] is True, run
    report = cli.json("verify")
    assert report["ok"] is True, report
    assert report["witness_size"] == 8 and len(report["key_rotations"]) == 2
