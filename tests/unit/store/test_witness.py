"""FileWitness: holds the newest checkpoint outside the store and refuses to go back."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tracebound.errors import (
    CheckpointError,
    ConfigError,
    ProofError,
    SignatureInvalid,
    StorageError,
)
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.merkle import (
    EMPTY_ROOT,
    consistency_proof_from_leaves,
    leaf_hash,
    root_of,
)
from tracebound.integrity.note import Checkpoint, sign_checkpoint
from tracebound.store.witness import (
    WITNESS_DIR_ENV,
    FileWitness,
    Witness,
    default_witness_dir,
    default_witness_path,
)

ORIGIN = "example.com/log"
LOG = NoteSigner(ORIGIN, bytes(range(32)))
INTRUDER = NoteSigner(ORIGIN, bytes(32))
LEAVES = [leaf_hash(i.to_bytes(4, "big")) for i in range(64)]
FORKED = [*LEAVES[:10], *(leaf_hash(b"evil" + bytes([i])) for i in range(54))]


@pytest.fixture(autouse=True)
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(WITNESS_DIR_ENV, raising=False)
    return home


def note(size: int, leaves: list[bytes] = LEAVES, signer: NoteSigner = LOG) -> str:
    cp = Checkpoint(origin=signer.name, size=size, root=root_of(leaves[:size]))
    return sign_checkpoint(cp, signer)


def proof(size1: int, size2: int, leaves: list[bytes] = LEAVES) -> list[bytes]:
    return consistency_proof_from_leaves(leaves, size1, size2)


@pytest.fixture
def witness(tmp_path: Path) -> FileWitness:
    return FileWitness(tmp_path / "w" / "log.note", origin=ORIGIN)


def test_protocol_and_default_path(fake_home: Path) -> None:
    w = FileWitness.for_origin(ORIGIN)
    assert isinstance(w, Witness)
    assert default_witness_dir() == fake_home / ".local" / "state" / "tracebound" / "witness"
    assert w.path == default_witness_path(ORIGIN)
    assert w.path.parent == default_witness_dir()
    assert w.path.suffix == ".note"
    assert w.latest(LOG.verifier) is None
    w.update(note(3), LOG.verifier, [])
    assert stat.S_IMODE(w.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(w.path.parent.stat().st_mode) == 0o700


def test_env_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WITNESS_DIR_ENV, str(tmp_path / "wd"))
    assert FileWitness.for_origin(ORIGIN).path.parent == tmp_path / "wd"


def test_growth_is_accepted(witness: FileWitness) -> None:
    assert witness.update(note(5), LOG.verifier, []).size == 5  # first: trust on first use
    held = witness.update(note(17), LOG.verifier, proof(5, 17))
    assert held.size == 17
    assert witness.latest(LOG.verifier) == held
    assert witness.path.read_text() == note(17)  # the exact signed bytes are kept
    assert witness.update(note(17), LOG.verifier, []).size == 17  # same again: fine
    assert witness.update(note(64), LOG.verifier, proof(17, 64)).size == 64


def test_growth_from_the_empty_tree(witness: FileWitness) -> None:
    witness.update(note(0), LOG.verifier, [])
    assert witness.latest(LOG.verifier) == Checkpoint(origin=ORIGIN, size=0, root=EMPTY_ROOT)
    with pytest.raises(ProofError):
        witness.update(note(4), LOG.verifier, [bytes(32)])
    assert witness.update(note(4), LOG.verifier, []).size == 4


def _refused(witness: FileWitness, exc: type[Exception], *args: object) -> None:
    before = witness.path.read_bytes()
    with pytest.raises(exc):
        witness.update(*args)  # type: ignore[arg-type]
    assert witness.path.read_bytes() == before  # the held checkpoint is kept


def test_rollback_is_refused(witness: FileWitness) -> None:
    witness.update(note(20), LOG.verifier, [])
    _refused(witness, CheckpointError, note(19), LOG.verifier, [])
    _refused(witness, CheckpointError, note(1), LOG.verifier, [])


def test_fork_is_refused(witness: FileWitness) -> None:
    witness.update(note(20), LOG.verifier, [])
    _refused(witness, CheckpointError, note(20, FORKED), LOG.verifier, [])


def test_inconsistent_growth_is_refused(witness: FileWitness) -> None:
    witness.update(note(20), LOG.verifier, [])
    # A genuinely signed bigger tree that rewrote history after position 10.
    _refused(witness, ProofError, note(30, FORKED), LOG.verifier, proof(20, 30, FORKED))
    _refused(witness, ProofError, note(30), LOG.verifier, [])  # missing proof
    _refused(witness, ProofError, note(30), LOG.verifier, proof(19, 30))  # wrong proof
    _refused(witness, ProofError, note(20), LOG.verifier, [bytes(32)])  # junk, same size


def test_wrong_origin_is_refused(tmp_path: Path, witness: FileWitness) -> None:
    witness.update(note(5), LOG.verifier, [])
    other = NoteSigner("example.com/other", bytes(range(32)))
    _refused(witness, CheckpointError, note(6, signer=other), other.verifier, proof(5, 6))
    # Without a fixed origin, the held checkpoint's origin still has to match.
    loose = FileWitness(witness.path)
    _refused(loose, CheckpointError, note(6, signer=other), other.verifier, proof(5, 6))


def test_bad_signature_is_refused(witness: FileWitness) -> None:
    witness.update(note(5), LOG.verifier, [])
    _refused(witness, SignatureInvalid, note(6, signer=INTRUDER), LOG.verifier, proof(5, 6))
    forged = note(6).replace("\n6\n", "\n7\n", 1)
    _refused(witness, SignatureInvalid, forged, LOG.verifier, proof(5, 7))
    _refused(witness, CheckpointError, "garbage", LOG.verifier, [])


def test_tampered_witness_file_is_detected(witness: FileWitness) -> None:
    witness.update(note(20), LOG.verifier, [])
    witness.path.write_text(witness.path.read_text().replace("\n20\n", "\n2\n", 1))
    with pytest.raises(SignatureInvalid, match="witness file"):
        witness.latest(LOG.verifier)
    # It will not be overwritten by an update either: an operator has to look at it.
    with pytest.raises(SignatureInvalid):
        witness.update(note(30), LOG.verifier, proof(20, 30))
    witness.path.write_bytes(b"\xff\x00garbage")
    with pytest.raises(CheckpointError):
        witness.latest(LOG.verifier)
    witness.path.write_text(note(3, signer=INTRUDER))
    with pytest.raises(SignatureInvalid):
        witness.latest(LOG.verifier)


def test_witness_must_be_outside_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    with pytest.raises(ConfigError):
        FileWitness(store / "w.note", store_dir=store)
    link = tmp_path / "alias"
    link.symlink_to(store, target_is_directory=True)
    with pytest.raises(ConfigError):
        FileWitness(link / "w.note", store_dir=store)
    with pytest.raises(ConfigError):
        FileWitness.for_origin(ORIGIN, directory=store / "witness", store_dir=store)
    assert FileWitness(tmp_path / "w.note", store_dir=store).latest(LOG.verifier) is None


def test_unreadable_witness_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "dir.note").mkdir()
    with pytest.raises(StorageError):
        FileWitness(tmp_path / "dir.note").latest(LOG.verifier)


def test_refusals_name_rollback_and_fork(witness: FileWitness) -> None:
    """Shorter than the held checkpoint: rollback. Same size with another root, or longer
    without a consistency proof from the held one: fork (or a wrong proof), never a bare
    proof failure that leaves the operator to guess."""
    witness.update(note(20), LOG.verifier, [])
    with pytest.raises(CheckpointError, match=r"^rollback: .* 19 .* 20"):
        witness.update(note(19, FORKED), LOG.verifier, [])
    with pytest.raises(CheckpointError, match=r"^fork: .* 20 "):
        witness.update(note(20, FORKED), LOG.verifier, [])
    with pytest.raises(ProofError, match=r"^fork: .* 30 .* 20"):
        witness.update(note(30, FORKED), LOG.verifier, proof(20, 30, FORKED))
    with pytest.raises(ProofError, match=r"^fork: .* 30 .* 20"):
        witness.update(note(30), LOG.verifier, [])
    held = witness.latest(LOG.verifier)
    assert held is not None and (held.size, held.root) == (20, root_of(LEAVES[:20]))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_witness_file_says_it_is_the_witness_and_what_to_do(
    tmp_path: Path, damage: str
) -> None:
    witness = FileWitness(tmp_path / "w.note", origin=ORIGIN)
    witness.update(note(10), LOG.verifier, [])
    text = witness.path.read_bytes()
    witness.path.write_bytes(
        {"truncate": text[:20], "garbage": b"\xff\x00garbage", "empty": b""}[damage]
    )
    with pytest.raises(CheckpointError) as info:
        witness.latest(LOG.verifier)
    message = str(info.value)
    # Before: only the parse error, and `checkpoint` exited 1 as if the ledger were damaged.
    assert str(witness.path) in message
    assert "The witness file itself is damaged, not the ledger" in message
    assert "restore it from a backup" in message
