"""What a new user runs into: the wrong key, a ledger written from Python, mistyped paths.

Each test here stands for a finding of a fresh-user walkthrough: it failed (a false OK, a
raw traceback, a misleading message or exit code) before the fix it pins.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI, ready_cli
from tracebound import Ledger, NoteSigner, RandomIds, SQLiteStore, SystemClock
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.store.keyfile import generate_keypair
from tracebound.store.witness import FileWitness


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    return ready_cli(tmp_path, 4)


def _cost(amount: str) -> CostIncurred:
    return CostIncurred(tier="direct", amount_usd=Decimal(amount), source=CostSource("openai"))


def _other_key(tmp_path: Path) -> Path:
    pub = generate_keypair("other", path=tmp_path / "other" / "other.key").public_path
    assert pub.is_file()
    return pub


class TestVerifierKey:
    def test_verify_checks_the_given_verifier_key_not_the_local_signing_key(
        self, cli: CLI, tmp_path: Path
    ) -> None:
        cli.json("checkpoint")
        assert cli.json("verify")["ok"] is True
        other = _other_key(tmp_path)
        report = cli.json("verify", "--verifier-key", str(other), code=1)
        assert report["ok"] is False
        assert report["damage"]["kind"] == "forged-signature"

    def test_prove_reads_the_checkpoint_with_the_given_key(self, cli: CLI, tmp_path: Path) -> None:
        cli.json("checkpoint")
        out = cli.json("prove", "1", "--verifier-key", str(_other_key(tmp_path)), code=1)
        assert out["error"]["kind"] == "SignatureInvalid"
        assert "pass that one" in out["error"]["message"]

    def test_a_key_text_with_a_wrong_hash_says_so(self, cli: CLI) -> None:
        text = cli.json("keys", "init", "--force")["verifier_key"]
        name, digest, key = text.split("+", 2)
        bad = f"{name}+{int(digest, 16) ^ 1:08x}+{key}"
        out = cli.json("verify", "--verifier-key", bad, code=2)
        assert "does not match the key" in out["error"]["message"]

    def test_a_missing_key_file_is_named(self, cli: CLI) -> None:
        out = cli.json("verify", "--verifier-key", "nope/other.pub", code=2)
        assert out["error"]["message"].startswith("no verifier key file at nope/other.pub")

    def test_keys_init_twice_names_the_cli_flag(self, cli: CLI) -> None:
        out = cli.json("keys", "init", code=2)
        assert "--force" in out["error"]["message"]


class TestOrigin:
    def _python_ledger(self, cli: CLI) -> Path:
        """A ledger made the README's way: Ledger(..., origin=...) and the CLI's key."""
        store = cli.cwd / "py-store"
        key = Path(cli.env["HOME"]) / ".config/tracebound/keys/tracebound.key"
        from tracebound.store.keyfile import load_signer

        signer: NoteSigner = load_signer(key)
        witness = FileWitness(Path(cli.env["HOME"]) / "py-witness.note")
        with Ledger(
            SQLiteStore(store),
            clock=SystemClock(),
            ids=RandomIds(),
            signer=signer,
            witness=witness,
            origin="example.com/py",
        ) as ledger:
            ledger.record("run-1", [_cost("1")])
            ledger.checkpoint()
        return store

    def test_a_ledger_made_in_python_opens_in_the_cli(self, cli: CLI) -> None:
        store = self._python_ledger(cli)
        witness = str(Path(cli.env["HOME"]) / "py-witness.note")
        report = cli.json("verify", "--store", str(store), "--witness", witness)
        assert report["ok"] is True
        assert cli.json("init", "--store", str(store))["origin"] == "example.com/py"

    def test_a_store_that_lost_its_origin_takes_it_from_its_checkpoints(self, cli: CLI) -> None:
        store = self._python_ledger(cli)
        with sqlite3.connect(store / "ledger.db") as db:
            db.execute("DELETE FROM meta WHERE key = 'origin'")
        witness = str(Path(cli.env["HOME"]) / "py-witness.note")
        assert cli.json("verify", "--store", str(store), "--witness", witness)["ok"] is True
        # init adopts the checkpoints' origin instead of minting a random one
        out = cli.json("init", "--store", str(store))
        assert (out["origin"], out["created"]) == ("example.com/py", True)
        assert cli.json("verify", "--store", str(store), "--witness", witness)["ok"] is True

    def test_signing_for_another_origin_is_refused(self, cli: CLI) -> None:
        store = self._python_ledger(cli)
        key = Path(cli.env["HOME"]) / ".config/tracebound/keys/tracebound.key"
        from tracebound.errors import ConfigError
        from tracebound.store.keyfile import load_signer

        ledger = Ledger(
            SQLiteStore(store),
            clock=SystemClock(),
            ids=RandomIds(),
            signer=load_signer(key),
            origin="example.com/elsewhere",
        )
        with ledger:
            ledger.record("run-1", [_cost("2")])
            with pytest.raises(ConfigError, match=r"origin is 'example\.com/py'"):
                ledger.checkpoint()

    def test_a_multi_line_origin_is_refused_at_init(self, tmp_path: Path) -> None:
        c = CLI(tmp_path)
        out = c.json("init", "--origin", "a\nb", code=2)
        assert "single line" in out["error"]["message"]
        assert c.json("init", "--origin", "ok.example/x")["origin"] == "ok.example/x"


class TestFilesNamedOnTheCommandLine:
    def test_append_from_a_missing_file(self, cli: CLI) -> None:
        out = cli.json("append", "nope.jsonl", code=2)
        assert out["error"]["message"] == "No such file or directory: nope.jsonl"

    def test_append_from_a_folder_or_binary_file(self, cli: CLI) -> None:
        (cli.cwd / "dir").mkdir()
        (cli.cwd / "bin").write_bytes(b"\xff\xfe\x00garbage")
        assert "Is a directory" in cli.json("append", "dir", code=2)["error"]["message"]
        assert "not UTF-8" in cli.json("append", "bin", code=2)["error"]["message"]

    def test_prove_before_any_checkpoint_is_not_damage(self, cli: CLI) -> None:
        out = cli.json("prove", "1", code=2)
        assert "run `tracebound checkpoint` first" in out["error"]["message"]

    def test_prove_into_a_missing_folder(self, cli: CLI) -> None:
        cli.json("checkpoint")
        proc = cli.run("prove", "1", "-o", "missing/dir/p.json")
        assert proc.returncode == 2, proc.stderr
        assert "cannot write --output missing/dir/p.json: No such file or directory" in proc.stderr
        assert "Traceback" not in proc.stderr

    def test_an_export_is_never_written_over_the_store(self, cli: CLI) -> None:
        cli.json("checkpoint")
        ledger = cli.cwd / ".tracebound" / "ledger.db"
        before = ledger.read_bytes()
        for args in (
            ("prove", "1", "-o", ".tracebound/ledger.db"),
            ("export", "anchors", "--no-proofs", "--out", ".tracebound/ledger.db"),
            ("prove", "1", "-o", ".tracebound/proof.json"),
        ):
            out = cli.json(*args, code=2)
            # Before: the proof (or dataset) replaced the ledger's file, exit 0, and the
            # next command found a "malformed" ledger.
            assert out["error"]["kind"] == "ConfigError"
            assert "inside the store directory" in out["error"]["message"]
        assert ledger.read_bytes() == before
        assert not (cli.cwd / ".tracebound" / "proof.json").exists()
        assert cli.run("prove", "1", "-o", "proof.json").returncode == 0
        # A store named by its file: that file is guarded, not the folder it is in.
        named = ("--store", ".tracebound/ledger.db")
        out = cli.json("prove", "1", *named, "-o", ".tracebound/ledger.db-wal", code=2)
        assert "is the ledger's own file" in out["error"]["message"]
        assert cli.run("prove", "1", *named, "-o", ".tracebound/p.json").returncode == 0

    def test_verify_proof_of_what_is_not_a_proof(self, cli: CLI) -> None:
        pub = str(Path(cli.env["HOME"]) / ".config/tracebound/keys/tracebound.pub")
        (cli.cwd / "empty.json").write_text("{}")
        (cli.cwd / "broken.json").write_text("{not json")
        for name in ("empty.json", "broken.json"):
            out = cli.json("verify-proof", name, "--verifier-key", pub, code=1)
            assert out["error"]["kind"] == "ProofError"
        out = cli.json("verify-proof", "absent.json", "--verifier-key", pub, code=2)
        assert "cannot read proof" in out["error"]["message"]

    def test_verify_evidence_of_a_file_that_is_not_there_says_so_once(self, cli: CLI) -> None:
        pub = str(Path(cli.env["HOME"]) / ".config/tracebound/keys/tracebound.pub")
        out = cli.json("verify-evidence", "absent.json", "--verifier-key", pub, code=2)
        # Before: "... absent.json: [Errno 2] No such file or directory: 'absent.json'".
        assert out["error"]["message"] == (
            "cannot read evidence absent.json: No such file or directory"
        )

    def test_inspect_attempts_names_the_path_given(self, cli: CLI) -> None:
        out = cli.json("inspect", "run-2", "--attempts", "nope.jsonl", code=2)
        assert out["error"]["message"] == "--attempts: no such file or folder: nope.jsonl"
        (cli.cwd / "other.jsonl").write_text("")
        out = cli.json("inspect", "run-2", "--attempts", "other.jsonl", code=2)
        assert "give a run's attempts.jsonl" in out["error"]["message"]
