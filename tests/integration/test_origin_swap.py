"""The store names its own origin, and the origin names the witness: an attacker who holds
the store can point `verify` at another witness (security review).

`tracebound verify` and `checkpoint` take the origin from the store (its ``origin`` meta
row, else its newest checkpoint's first line) and, without ``--witness``, read the witness
at ``<witness dir>/<origin>.note``. Both of those are in the attacker's hands, so the witness,
the one check the store's holder cannot reach, is chosen by the store's holder:

* rename the origin, drop the checkpoints, rewrite the log: `verify` finds no witness for
  the new name and exits 3 ("no damage found, not everything checked") instead of naming
  the rewrite; the operator's next scheduled `tracebound checkpoint` signs the forged log
  and starts a new witness for it, and from then on `verify` exits 0;
* put another ledger's store (signed by the same key, as the default key is shared by
  every ledger of the user) in this one's place: `verify` exits 0 at once.

The fix: the store's place (its identity) is bound to its origin beside the witness files
(``<witness dir>/stores/<blake3 of identity>.json``), written at `init` and at the first
`checkpoint`; a store that names another origin than its binding is checked against the
bound origin's witness and reported as damage, and `checkpoint` refuses to sign it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from pathlib import Path

from tests.conformance.tamper_suite import forge_chain
from tests.e2e.test_cli import CLI, _lines


def _rewrite_and_rename(db: Path, origin: str) -> None:
    """The attacker: change event 1's amount and re-hash everything, drop the checkpoints
    and the stored nodes, and give the store another origin. Plain SQL on the file."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            rows = conn.execute(
                "SELECT position, stream_id, prev_hash, body FROM events ORDER BY position"
            ).fetchall()
            forged = forge_chain([(p, s, bytes(pr), bytes(b)) for p, s, pr, b in rows], 1)
            conn.executemany(
                "UPDATE events SET prev_hash = ?, hash = ?, body = ? WHERE position = ?",
                [(prev, digest, body, pos) for pos, prev, digest, body in forged],
            )
            conn.execute("DELETE FROM checkpoints")
            conn.execute("DELETE FROM merkle_nodes")
            assert (
                conn.execute("UPDATE meta SET value = ? WHERE key = 'origin'", (origin,)).rowcount
                == 1
            )
    finally:
        conn.close()


def test_a_store_cannot_shed_its_witness_by_renaming_its_origin(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/ledger-a")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(6))
    assert cli.json("checkpoint")["size"] == 6
    assert cli.json("verify")["ok"] is True

    _rewrite_and_rename(cli.cwd / ".tracebound" / "ledger.db", "example.test/ledger-b")

    # The witness of ledger-a holds a signed root of 6 events that this log no longer has.
    damage = cli.json("verify", code=1)["damage"]
    assert (damage["kind"], damage["position"]) == ("fork", 1), damage
    # ... and the operator's scheduled checkpoint must not sign the forgery.
    cli.json("checkpoint", code=1)
    assert cli.json("verify", code=1)["damage"]["kind"] == "fork"


def test_another_ledgers_store_put_in_its_place_is_not_accepted(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("keys", "init")  # one key signs both ledgers: the default, per user
    stores = {}
    for name, n in (("a", 8), ("b", 3)):
        db = tmp_path / f"store-{name}" / "ledger.db"
        stores[name] = ("--store", f"sqlite:///{db}")
        cli.json("init", *stores[name], "--origin", f"example.test/ledger-{name}")
        cli.json("append", *stores[name], stdin=_lines(n))
        cli.json("checkpoint", *stores[name])
        assert cli.json("verify", *stores[name])["ok"] is True

    # The attacker holds ledger a's directory: they put ledger b's files there.
    shutil.rmtree(tmp_path / "store-a")
    shutil.copytree(tmp_path / "store-b", tmp_path / "store-a")

    # Ledger a's witness holds 8 events; the store at a's place has 3.
    damage = cli.json("verify", *stores["a"], code=1)["damage"]
    assert (damage["kind"], damage["position"]) == ("rollback", 4), damage


def _binding_files(cli: CLI) -> list[Path]:
    return sorted((cli.cwd.parent / "home").glob(".local/state/tracebound/witness/stores/*.json"))


def test_a_clean_ledger_is_bound_at_init_and_verifies(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/clean")
    [binding] = _binding_files(cli)
    assert stat.S_IMODE(binding.stat().st_mode) == 0o600
    db = (cli.cwd / ".tracebound" / "ledger.db").resolve()
    assert json.loads(binding.read_text()) == {
        "store": f"sqlite://{db}",
        "origin": "example.test/clean",
    }
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(4))
    assert cli.json("checkpoint")["size"] == 4
    report = cli.json("verify")
    assert report["ok"] is True and report["checks"]["witness"] == "ok"
    assert _binding_files(cli) == [binding]


def test_an_existing_ledger_is_bound_on_first_use(tmp_path: Path) -> None:
    """A ledger checkpointed before bindings existed: its next command binds it."""
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/old")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(5))
    cli.json("checkpoint")
    [binding] = _binding_files(cli)
    binding.unlink()  # as it was before this version

    assert cli.json("verify")["ok"] is True  # the witness of its origin exists: bound now
    assert json.loads(binding.read_text())["origin"] == "example.test/old"
    _rewrite_and_rename(cli.cwd / ".tracebound" / "ledger.db", "example.test/other")
    damage = cli.json("verify", code=1)["damage"]
    assert (damage["kind"], damage["position"]) == ("fork", 1), damage
    assert "example.test/other" in damage["detail"] and str(binding) in damage["detail"]


def test_a_store_renamed_before_its_first_checkpoint_is_still_damage(tmp_path: Path) -> None:
    """Bound at init: no checkpoint or witness to compare with, the rename alone is damage."""
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/a")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(3))
    conn = sqlite3.connect(cli.cwd / ".tracebound" / "ledger.db")
    with conn:
        conn.execute("UPDATE meta SET value = 'example.test/b' WHERE key = 'origin'")
    conn.close()
    damage = cli.json("verify", code=1)["damage"]
    assert (damage["kind"], damage["position"]) == ("fork", None), damage
    assert "'example.test/b'" in damage["detail"] and "'example.test/a'" in damage["detail"]
    error = cli.json("checkpoint", code=1)["error"]
    assert "example.test/b" in error["message"]
    proc = cli.run("verify")
    assert proc.returncode == 1 and "DAMAGED: fork:" in proc.stdout, proc.stdout


def test_an_explicit_witness_of_another_log_is_damage_not_a_fresh_start(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("keys", "init")
    witness = tmp_path / "outside" / "a.note"
    stores = {}
    for name, n in (("a", 6), ("b", 6)):
        stores[name] = ("--store", f"sqlite:///{tmp_path / f'store-{name}' / 'ledger.db'}")
        cli.json("init", *stores[name], "--origin", f"example.test/{name}")
        cli.json("append", *stores[name], stdin=_lines(n))
    cli.json("checkpoint", *stores["a"], "--witness", str(witness))
    assert cli.json("verify", *stores["a"], "--witness", str(witness))["ok"] is True
    before = witness.read_bytes()

    damage = cli.json("verify", *stores["b"], "--witness", str(witness), code=1)["damage"]
    assert damage["kind"] == "fork", damage
    assert "example.test/a" in damage["detail"] and str(witness) in damage["detail"]
    cli.json("checkpoint", *stores["b"], "--witness", str(witness), code=1)
    assert witness.read_bytes() == before


def test_a_copied_store_is_bound_at_its_new_place_and_verifies(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/moved")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(7))
    cli.json("checkpoint")
    target = f"sqlite:///{tmp_path / 'elsewhere' / 'ledger.db'}"
    cli.json("copy", "sqlite:///.tracebound/ledger.db", target)
    assert cli.json("verify", "--store", target)["ok"] is True
    assert len(_binding_files(cli)) == 2  # the new place, trusted on first use
    cli.json("append", "--store", target, stdin=_lines(2, start=7))
    assert cli.json("checkpoint", "--store", target)["size"] == 9
    assert cli.json("verify", "--store", target)["ok"] is True


def test_a_new_ledger_in_a_bound_place_needs_its_binding_deleted(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/first")
    [binding] = _binding_files(cli)
    shutil.rmtree(cli.cwd / ".tracebound")
    error = cli.json("init", "--origin", "example.test/second", code=2)["error"]
    assert str(binding) in error["message"] and "example.test/first" in error["message"]
    binding.unlink()  # the operator re-binds this place on purpose
    assert cli.json("init", "--origin", "example.test/second")["origin"] == "example.test/second"
    assert json.loads(binding.read_text())["origin"] == "example.test/second"


def test_the_run_commands_refuse_a_renamed_store_too(tmp_path: Path) -> None:
    """`runs`, `approve`, `resume` and `replay` open the ledger through the pipeline's
    config, not the ledger commands' helper: they check the binding the same way, and
    refuse (exit 1, fork) instead of replaying against the witness the store chose."""
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/ledger-a")
    cli.json("keys", "init")
    cli.json("append", stdin=_lines(3))
    cli.json("checkpoint")
    assert cli.json("runs")["ok"] is True
    _rewrite_and_rename(cli.cwd / ".tracebound" / "ledger.db", "example.test/ledger-b")
    out = cli.json("runs", code=1)
    assert out["ok"] is False and "example.test/ledger-a" in json.dumps(out), out


def test_a_binding_file_nested_past_pythons_stack_is_exit_2_naming_it(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init", "--origin", "example.test/clean")
    [binding] = _binding_files(cli)
    binding.write_bytes(b"[" * 100_000)  # valid JSON's start; json.loads raises RecursionError
    error = cli.json("verify", code=2)["error"]
    assert str(binding) in error["message"] and "nested too deeply" in error["message"]
