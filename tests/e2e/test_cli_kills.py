"""Commands that write files, killed (SIGKILL) at the worst moment, and the next command.

Each test runs a real `tracebound` process that kills itself at one chosen call
(tests/kill_at.py), then checks what a later command makes of what it left: the old file
whole or the new one, never half of either, and a next run that succeeds or says exactly
what to do.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tests.e2e.test_cli import CLI, _lines, ready_cli
from tests.kill_at import kill_at
from tracebound.store.keyfile import load_signer

KILLED = -signal.SIGKILL


def test_prove_killed_before_its_output_is_renamed_keeps_the_previous_proof(
    tmp_path: Path,
) -> None:
    cli = ready_cli(tmp_path, 6, checkpoint=True)
    assert cli.run("prove", "2", "-o", "p.json").returncode == 0
    before = (cli.cwd / "p.json").read_bytes()
    proc = kill_at(cli, "os:replace:1", "prove", "5", "-o", "p.json")
    # Before: written in place (truncate, then write), so there was no rename to kill at,
    # and a kill during the write left a truncated proof under the name of a good one.
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    assert (cli.cwd / "p.json").read_bytes() == before
    assert cli.json("verify-proof", "p.json")["position"] == 2
    assert cli.run("prove", "5", "-o", "p.json").returncode == 0
    assert cli.json("verify-proof", "p.json")["position"] == 5


def _keys(cli: CLI) -> Path:
    return Path(cli.env["HOME"]) / ".config" / "tracebound" / "keys"


def _held(key: Path) -> str:
    """The verifier key of the signing key in ``key``."""
    return load_signer(key).verifier.format()


def test_keys_init_killed_before_the_pub_is_completed_by_the_next_keys_init(
    tmp_path: Path,
) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    # The private key is written (write_file_atomic's first call), the .pub not yet.
    proc = kill_at(cli, "tracebound.store.files:write_file_atomic:2", "keys", "init")
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    key = _keys(cli) / "tracebound.key"
    pub = _keys(cli) / "tracebound.pub"
    secret = key.read_bytes()
    assert not pub.exists()
    # Before: refused ("a signing key already exists ... --force"), pointing at the one
    # option that throws the key away; the .pub was never written.
    out = cli.json("keys", "init")
    assert out["completed"] is True
    assert key.read_bytes() == secret
    assert pub.read_text().strip() == out["verifier_key"]
    assert cli.json("keys", "show")["verifier_key"] == out["verifier_key"]
    again = cli.json("keys", "init", code=2)  # now whole: refused as any existing key
    assert "already exists" in again["error"]["message"]
    cli.json("append", stdin=_lines(3))
    cli.json("checkpoint")
    assert cli.json("verify")["ok"] is True


def test_keys_init_force_killed_between_key_and_pub_is_not_read_as_a_forgery(
    tmp_path: Path,
) -> None:
    cli = ready_cli(tmp_path, 3, checkpoint=True)
    old_pub = (_keys(cli) / "tracebound.pub").read_bytes()
    proc = kill_at(cli, "tracebound.store.files:write_file_atomic:2", "keys", "init", "--force")
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    assert (_keys(cli) / "tracebound.pub").read_bytes() == old_pub  # the old key's
    # Before: `keys show` printed the old key as this one's (an auditor given it calls
    # every checkpoint the new key signs forged). Now it says what is wrong.
    error = cli.json("keys", "show", code=2)["error"]
    assert error["kind"] == "SigningKeyError", error
    assert "is not the public key of the signing key" in error["message"]
    assert "tracebound keys init" in error["message"]
    out = cli.json("keys", "init")  # no --force needed: the key stays, its .pub follows
    assert out["completed"] is True
    assert (_keys(cli) / "tracebound.pub").read_bytes() != old_pub
    assert cli.json("keys", "show")["verifier_key"] == out["verifier_key"]


def test_a_rebuild_killed_half_way_is_finished_by_the_next_report_and_no_update_says_so(
    tmp_path: Path,
) -> None:
    cli = ready_cli(tmp_path, 40)
    whole = cli.json("report", "cost")
    views = "tracebound.projections.sqlite_views:SQLiteViews.commit:2:after"
    proc = kill_at(cli, views, "project", "rebuild", "--batch", "10")
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    positions = {p["position"] for p in cli.json("project", "status")["projections"]}
    assert positions == {20}  # two batches of ten committed, rows and positions together
    stale = cli.run("report", "cost", "--no-update", "--json")
    assert stale.returncode == 0, stale.stderr
    assert json.loads(stale.stdout)["rows"][0]["events"] == 20
    # Before: nothing said these were the numbers of half the log.
    assert "the views are behind the log" in stale.stderr
    assert "position 20 of 40" in stale.stderr
    assert cli.json("report", "cost") == whole  # a report catches up first
    current = cli.run("report", "cost", "--no-update", "--json")
    assert json.loads(current.stdout) == whole
    assert "behind" not in current.stderr


def test_keys_rotate_killed_between_moving_the_new_key_and_its_pub_is_finished_by_running_it_again(
    tmp_path: Path,
) -> None:
    """The rotation is signed; `keys rotate` dies with one of the new pair's two files
    moved into place. Before: the new key sat beside the old key's .pub and the next
    `keys rotate` refused ("... .next.pub holds the public key ... its signing key is
    missing ... run `tracebound keys init --force`": advice that throws the signing key
    away), so the key files could never be put right, nor the key rotated again."""
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    keys = _keys(cli)
    old = cli.json("keys", "show")["verifier_key"]
    # Path.replace: the .next.pub written, the witness's note, then the first of the two
    # moves that put the new pair in place.
    proc = kill_at(cli, "pathlib:Path.replace:3:after", "keys", "rotate", "--by", "alice")
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    (rotation,) = cli.json("verify")["key_rotations"]
    new = rotation["new_key"]
    assert rotation["old_key"] == old != new
    moved = {_held(keys / "tracebound.key"), (keys / "tracebound.pub").read_text().strip()}
    assert moved == {old, new}  # one file of the pair moved, the other not
    out = cli.json("keys", "rotate", "--by", "alice")
    assert out["resumed"] is True
    assert (out["old_verifier_key"], out["new_verifier_key"]) == (old, new)
    assert _held(keys / "tracebound.key") == new
    assert (keys / "tracebound.pub").read_text().strip() == new
    assert not list(keys.glob("tracebound.next.*"))
    cli.json("append", stdin=_lines(2, start=4))
    assert cli.json("checkpoint")["size"] == 7
    assert cli.json("verify")["ok"] is True


def test_checkpoint_after_a_rotation_killed_before_its_key_files_moved_says_to_finish_it(
    tmp_path: Path,
) -> None:
    """The hand-over is signed, the new key still `tracebound.next.key`. `checkpoint`
    with the old key is refused (it is retired); before, the refusal only said to sign
    with the new key (--key), a key the operator has no file of by that name."""
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    target = "tracebound.store.keyfile:install_rotated_key:1"
    proc = kill_at(cli, target, "keys", "rotate", "--by", "alice")
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    refused = cli.json("checkpoint", code=2)["error"]["message"]
    assert "retired" in refused
    assert "tracebound.next.key" in refused and "`tracebound keys rotate`" in refused
    out = cli.json("keys", "rotate", "--by", "alice")
    assert out["resumed"] is True
    assert cli.json("checkpoint")["size"] == 5
    assert cli.json("verify")["ok"] is True


def test_keys_show_after_a_rotation_killed_between_its_pub_and_its_key_says_to_finish_it(
    tmp_path: Path,
) -> None:
    """`keys rotate` died after writing the new .pub, before moving the new key in place.
    Before, `keys show` (and every command reading the .pub) blamed an interrupted `keys
    init` and advised running it, which writes the .pub back from the retired key."""
    cli = ready_cli(tmp_path, 4, checkpoint=True)
    keys = _keys(cli)
    proc = kill_at(cli, "pathlib:Path.replace:3:after", "keys", "rotate", "--by", "alice")
    assert proc.returncode == KILLED, (proc.stdout, proc.stderr)
    assert (keys / "tracebound.next.key").exists()
    refused = cli.json("keys", "show", code=2)["error"]["message"]
    assert "keys init" not in refused
    assert "tracebound.next.key" in refused and "`tracebound keys rotate`" in refused
    cli.json("keys", "rotate", "--by", "alice")
    assert cli.json("keys", "show")["verifier_key"] == _held(keys / "tracebound.key")
