"""An operator whose signing key is lost or replaced: what each command says and does.

Each test failed before the fix it pins: `keys init` silently made a new pair over the old
`.pub` (every checkpoint then read as forged), `checkpoint` pointed at that same `keys init`,
and a checkpoint signed by another key read as one that was not signed at all.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_cli import CLI, _lines, ready_cli


def _keys(cli: CLI) -> Path:
    return Path(cli.env["HOME"]) / ".config" / "tracebound" / "keys"


def _lost_key(tmp_path: Path) -> tuple[CLI, str]:
    """A ledger with a signed checkpoint whose private key was then deleted; its verifier."""
    cli = ready_cli(tmp_path, 3, checkpoint=True)
    verifier = cli.json("keys", "show")["verifier_key"]
    (_keys(cli) / "tracebound.key").unlink()
    return cli, verifier


def test_keys_init_refuses_to_replace_the_public_key_of_a_lost_key(tmp_path: Path) -> None:
    cli, verifier = _lost_key(tmp_path)
    pub = _keys(cli) / "tracebound.pub"
    out = cli.json("keys", "init", code=2)
    message = out["error"]["message"]
    assert str(pub) in message and verifier.split("+")[1] in message
    assert "--force" in message
    assert pub.read_text().strip() == verifier  # kept: the old checkpoints still verify
    assert not (_keys(cli) / "tracebound.key").exists()
    assert cli.json("verify")["ok"] is True
    # Forced, the new pair is made (the operator said so) and the old key is named.
    forced = cli.json("keys", "init", "--force")
    assert forced["verifier_key"] != verifier
    assert forced["replaced_verifier_key"] == verifier


def test_checkpoint_without_the_key_says_the_old_checkpoints_still_verify(
    tmp_path: Path,
) -> None:
    cli, verifier = _lost_key(tmp_path)
    cli.json("append", stdin=_lines(1, start=3))
    out = cli.json("checkpoint", code=2)
    message = out["error"]["message"]
    assert out["error"]["kind"] == "SigningKeyError"
    assert "run `tracebound keys init` first" not in message  # that would orphan them
    assert verifier.split("+")[1] in message and "still verif" in message
    assert "README" in message
    assert cli.json("verify")["ok"] is True
    assert cli.json("prove", "2")["position"] == 2


def test_a_checkpoint_signed_by_another_key_names_both_keys(tmp_path: Path) -> None:
    cli, old = _lost_key(tmp_path)
    new = cli.json("keys", "init", "--force")["verifier_key"]
    report = cli.json("verify", code=1)
    assert report["damage"]["kind"] == "forged-signature"
    detail = report["damage"]["detail"]
    # The note's own key ID says which key signed it: another one, not a bad signature.
    assert f"signed by key 'tracebound' ({old.split('+')[1]})" in detail
    assert new.split("+")[1] in detail
    assert "--verifier-key" in detail
    # With the old key's .pub the ledger is whole.
    old_pub = tmp_path / "old.pub"
    old_pub.write_text(old + "\n")
    assert cli.json("verify", "--verifier-key", str(old_pub))["ok"] is True


def test_a_new_ledger_with_its_own_key_leaves_the_old_one_verifiable(tmp_path: Path) -> None:
    """README's planned replacement: a new key file for a new ledger, the old one kept."""
    cli = ready_cli(tmp_path, 3, checkpoint=True)
    old = cli.json("keys", "show")["verifier_key"]
    new_key = str(_keys(cli) / "ledger-2.key")
    new = cli.json("keys", "init", "--key", new_key)["verifier_key"]
    assert new != old
    cli.json("init", "--store", "./ledger-2")
    cli.env["TRACEBOUND_KEY"] = new_key
    cli.json("append", "--store", "./ledger-2", stdin=_lines(2))
    cli.json("checkpoint", "--store", "./ledger-2")
    assert cli.json("verify", "--store", "./ledger-2")["ok"] is True
    del cli.env["TRACEBOUND_KEY"]
    assert cli.json("verify")["ok"] is True
    assert cli.json("keys", "show")["verifier_key"] == old
