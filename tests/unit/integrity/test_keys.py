"""Ed25519 note keys: key IDs, text forms, and interoperability with Go's sumdb/note."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracebound.errors import SigningKeyError, TraceboundError
from tracebound.integrity.keys import (
    NoteSigner,
    NoteVerifier,
    compute_key_hash,
    is_valid_key_name,
)

# Published example keys of golang.org/x/mod/sumdb/note (example_test.go, BSD-3-Clause).
GO_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VERIFIER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"

SEED = bytes(range(32))


def test_go_example_keys_parse_and_match() -> None:
    signer = NoteSigner.parse_private(GO_SIGNER)
    verifier = NoteVerifier.parse(GO_VERIFIER)
    assert signer.name == verifier.name == "PeterNeumann"
    assert signer.key_hash == verifier.key_hash == 0xC74F20A3
    assert signer.verifier == verifier
    assert verifier.format() == GO_VERIFIER
    assert signer.format_private() == GO_SIGNER


def test_key_hash_is_the_c2sp_key_id() -> None:
    pub = NoteSigner("example.com/log", SEED).verifier.public_key
    digest = hashlib.sha256(b"example.com/log\n\x01" + pub).digest()
    assert compute_key_hash("example.com/log", pub) == int.from_bytes(digest[:4], "big")


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("example.com/log", True),
        ("caf\u00e9", True),
        ("", False),
        ("a+b", False),
        ("a b", False),
        ("a\tb", False),
        ("a\u00a0b", False),  # NO-BREAK SPACE is a Unicode space
        ("a\u2003b", False),  # EM SPACE
        ("a\x00b", False),
        ("a\nb", False),
        ("a\ud800", False),  # lone surrogate: not UTF-8
    ],
)
def test_key_name_rules(name: str, ok: bool) -> None:
    assert is_valid_key_name(name) is ok
    if ok:
        assert NoteSigner(name, SEED).name == name
    else:
        with pytest.raises(SigningKeyError):
            NoteSigner(name, SEED)


def test_sign_and_verify() -> None:
    signer = NoteSigner("k", SEED)
    sig = signer.sign(b"message")
    assert len(sig) == 64
    assert signer.sign(b"message") == sig  # Ed25519 is deterministic
    assert signer.verifier.verify(b"message", sig)
    assert not signer.verifier.verify(b"messagE", sig)
    assert not signer.verifier.verify(b"message", sig[:-1])
    assert not signer.verifier.verify(b"message", bytes(64))
    assert not NoteSigner("k", bytes(32)).verifier.verify(b"message", sig)


def test_verifier_round_trip_and_equality() -> None:
    v = NoteSigner("example.com/log", SEED).verifier
    again = NoteVerifier.parse(v.format() + "\n")  # a .pub file's trailing newline is fine
    assert again == v
    assert hash(again) == hash(v)
    assert len({v, again}) == 1
    assert str(v) == v.format()
    assert NoteVerifier("other", v.public_key) != v


def _with_hash(text: str, new_hash: str) -> str:
    name, _, key = text.split("+")
    return f"{name}+{new_hash}+{key}"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "PeterNeumann",
        "PeterNeumann+c74f20a3",
        GO_VERIFIER + "+extra",
        _with_hash(GO_VERIFIER, "c74f20a4"),  # hash does not match the key
        _with_hash(GO_VERIFIER, "C74F20A3"),  # not lowercase
        _with_hash(GO_VERIFIER, "c74f20a"),
        GO_VERIFIER.replace("ARpc", "Apc"),  # not valid base64 length
        GO_VERIFIER.replace("+ARpc", "+AhpC"),  # wrong algorithm byte
        "PeterNeumann+c74f20a3+" + base64.b64encode(b"\x01" + bytes(31)).decode(),
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        GO_VERIFIER[:-1] + "X",  # non-canonical trailing bits or another key: rejected
    ],
)
def test_malformed_verifier_keys_are_rejected(text: str) -> None:
    with pytest.raises(SigningKeyError):
        NoteVerifier.parse(text)


@pytest.mark.parametrize(
    "text",
    [
        GO_VERIFIER,  # a public key is not a private key
        GO_SIGNER.replace("c74f20a3", "00000000"),
        GO_SIGNER + "+x",
        "PRIVATE+KEY+PeterNeumann+c74f20a3+" + base64.b64encode(b"\x01" + bytes(31)).decode(),
    ],
)
def test_malformed_signer_keys_are_rejected_without_leaking(text: str) -> None:
    with pytest.raises(SigningKeyError) as info:
        NoteSigner.parse_private(text)
    assert "AYEKFALV" not in str(info.value)


def test_signer_repr_hides_the_seed() -> None:
    signer = NoteSigner.parse_private(GO_SIGNER)
    assert "AYEKFALV" not in repr(signer)
    assert SEED.hex() not in repr(NoteSigner("k", SEED))


def test_seed_and_key_sizes() -> None:
    with pytest.raises(SigningKeyError):
        NoteSigner("k", bytes(31))
    with pytest.raises(SigningKeyError):
        NoteVerifier("k", bytes(33))
    with pytest.raises(SigningKeyError):
        compute_key_hash("k", bytes(31))


@given(st.text(max_size=120))
def test_verifier_parser_fuzz_only_raises_typed_errors(text: str) -> None:
    try:
        v = NoteVerifier.parse(text)
    except SigningKeyError:
        return
    except TraceboundError as exc:  # pragma: no cover - the wrong class would be a bug
        pytest.fail(f"unexpected {type(exc).__name__}")
    assert NoteVerifier.parse(v.format()) == v


@given(name=st.text(min_size=1, max_size=30), seed=st.binary(min_size=32, max_size=32))
def test_key_text_round_trips(name: str, seed: bytes) -> None:
    if not is_valid_key_name(name):
        return
    signer = NoteSigner(name, seed)
    assert NoteSigner.parse_private(signer.format_private()).verifier == signer.verifier
    assert NoteVerifier.parse(signer.verifier.format()) == signer.verifier
