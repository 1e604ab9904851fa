"""C2SP signed notes and tlog checkpoints: interop, strict parsing, tampering, fuzzing."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracebound.errors import CheckpointError, SignatureInvalid, TraceboundError
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.merkle import EMPTY_ROOT, leaf_hash
from tracebound.integrity.note import (
    MAX_NOTE_BYTES,
    MAX_SIGNATURES,
    MAX_TREE_SIZE,
    Checkpoint,
    NoteSignature,
    SignedNote,
    format_checkpoint_body,
    open_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
)

# golang.org/x/mod/sumdb/note example_test.go (BSD-3-Clause): a note signed by Go's code.
GO_VERIFIER = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_SIGNER = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT + "\n"
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqd"
    "ngotpRZb6KE6RyyBwJnAM=\n"
)

LOG = NoteSigner("example.com/log", bytes(range(32)))
OTHER = NoteSigner("example.com/other", bytes(range(1, 33)))
ROOT = leaf_hash(b"root")
CP = Checkpoint(origin="example.com/log", size=42, root=ROOT)


def test_go_signed_note_opens_and_we_sign_identically() -> None:
    note = SignedNote.open(GO_NOTE, NoteVerifier.parse(GO_VERIFIER))
    assert note.text == GO_TEXT
    assert note.signatures[0].key_hash == 0xC74F20A3
    ours = SignedNote.sign(GO_TEXT, NoteSigner.parse_private(GO_SIGNER))
    assert ours.encode() == GO_NOTE  # byte-identical to Go's output
    assert SignedNote.open(GO_NOTE.encode("utf-8"), NoteVerifier.parse(GO_VERIFIER)) == note


def test_checkpoint_round_trip() -> None:
    body = format_checkpoint_body(CP)
    assert body == f"example.com/log\n42\n{base64.b64encode(ROOT).decode()}\n"
    assert parse_checkpoint(body) == CP
    note = sign_checkpoint(CP, LOG)
    assert note.startswith(body + "\n\u2014 example.com/log ")
    assert open_checkpoint(note, LOG.verifier) == CP
    assert open_checkpoint(note, LOG.verifier, origin="example.com/log") == CP
    with pytest.raises(CheckpointError, match="origin"):
        open_checkpoint(note, LOG.verifier, origin="example.com/elsewhere")


def test_extensions_and_empty_tree() -> None:
    cp = Checkpoint(origin="o", size=0, root=EMPTY_ROOT, extensions=("ext one", "two"))
    note = sign_checkpoint(cp, LOG)
    assert open_checkpoint(note, LOG.verifier) == cp
    with pytest.raises(CheckpointError, match="size 0"):
        Checkpoint(origin="o", size=0, root=ROOT)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"origin": ""},
        {"origin": "two\nlines"},
        {"origin": "ctl\x01"},
        {"size": -1},
        {"size": 2**64},
        {"size": True},
        {"root": b"short"},
        {"extensions": ("",)},
        {"extensions": ("a\nb",)},
    ],
)
def test_checkpoint_invariants(kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {"origin": "o", "size": 1, "root": ROOT, **kwargs}
    with pytest.raises(CheckpointError):
        Checkpoint(**fields)  # type: ignore[arg-type]


R64 = base64.b64encode(ROOT).decode()


@pytest.mark.parametrize(
    "body",
    [
        f"o\n1\n{R64}",  # no final newline
        "o\n1\n",  # no root line
        f"\n1\n{R64}\n",  # empty origin
        f"o\n01\n{R64}\n",  # leading zero
        f"o\n+1\n{R64}\n",
        f"o\n 1\n{R64}\n",
        f"o\n1_0\n{R64}\n",
        f"o\n\u0661\n{R64}\n",  # ARABIC-INDIC DIGIT ONE: int() would take it
        f"o\n-1\n{R64}\n",
        f"o\n{2**64}\n{R64}\n",
        f"o\nx\n{R64}\n",
        f"o\n1\n{base64.b64encode(ROOT[:31]).decode()}\n",  # root not 32 bytes
        f"o\n1\n{R64.rstrip('=')}\n",  # missing padding
        f"o\n1\n{R64[:-2]}B=\n",  # non-canonical trailing bits
        f"o\n1\n{R64}\n\n",  # empty extension line
        f"o\n1\n{R64} \n",
        f"o\r\n1\n{R64}\n",
    ],
)
def test_malformed_checkpoint_bodies(body: str) -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint(body)
    # Even correctly signed, a malformed body never becomes a Checkpoint.
    if body.endswith("\n") and "\r" not in body:
        with pytest.raises(CheckpointError):
            open_checkpoint(SignedNote.sign(body, LOG).encode(), LOG.verifier)


def test_tampered_body_and_signature_are_rejected() -> None:
    note = sign_checkpoint(CP, LOG)
    tampered_size = note.replace("\n42\n", "\n43\n", 1)
    with pytest.raises(SignatureInvalid):
        open_checkpoint(tampered_size, LOG.verifier)
    other_root = base64.b64encode(leaf_hash(b"other")).decode()
    with pytest.raises(SignatureInvalid):
        open_checkpoint(note.replace(R64, other_root, 1), LOG.verifier)
    # Flip one byte of the Ed25519 signature (keeping the key ID).
    body, _, sig_line = note.rpartition("\n\n")
    name, b64 = sig_line.rstrip("\n").rsplit(" ", 1)
    blob = bytearray(base64.b64decode(b64))
    blob[10] ^= 0x40
    forged = f"{body}\n\n{name} {base64.b64encode(bytes(blob)).decode()}\n"
    with pytest.raises(SignatureInvalid):
        open_checkpoint(forged, LOG.verifier)
    # A signature truncated to the key ID plus one byte is malformed-but-parseable: rejected.
    short = f"{body}\n\n{name} {base64.b64encode(bytes(blob[:5])).decode()}\n"
    with pytest.raises(SignatureInvalid):
        open_checkpoint(short, LOG.verifier)


def test_signature_rules() -> None:
    note = sign_checkpoint(CP, LOG)
    # Signed only by an unknown key.
    with pytest.raises(SignatureInvalid, match="not signed"):
        open_checkpoint(note, OTHER.verifier)
    # Missing one of two expected keys.
    with pytest.raises(SignatureInvalid, match=r"example\.com/other"):
        open_checkpoint(note, [LOG.verifier, OTHER.verifier])
    # Both signed: accepted; extra unknown signatures are ignored.
    both = sign_checkpoint(CP, [LOG, OTHER])
    assert open_checkpoint(both, [LOG.verifier, OTHER.verifier]) == CP
    assert open_checkpoint(both, LOG.verifier) == CP
    # A known key that shares its name with an unknown one: the unknown line is ignored.
    impostor = NoteSigner("example.com/log", bytes(32))
    mixed = SignedNote.sign(format_checkpoint_body(CP), [impostor, LOG]).encode()
    assert open_checkpoint(mixed, LOG.verifier) == CP
    # Same name and key ID but a bad signature: the whole note is rejected.
    parsed = SignedNote.parse(note)
    bad = NoteSignature(LOG.name, LOG.key_hash, bytes(64))
    with pytest.raises(SignatureInvalid):
        SignedNote(parsed.text, (*parsed.signatures, bad)).verify(LOG.verifier)
    with pytest.raises(CheckpointError, match="no verifier"):
        open_checkpoint(note, [])


def test_blank_lines_inside_the_text_and_the_last_separator() -> None:
    text = "para one\n\npara two\n"
    note = SignedNote.sign(text, LOG).encode()
    assert SignedNote.open(note, LOG.verifier).text == text


GOOD = sign_checkpoint(CP, LOG)
SIG_LINE = GOOD.rpartition("\n\n")[2]


@pytest.mark.parametrize(
    "note",
    [
        "",
        "\n",
        GOOD.rstrip("\n"),  # must end with a newline
        GOOD.replace("\n\n", "\n", 1),  # no blank line before the signatures
        GOOD + "\n",  # empty signature line
        GOOD.replace("\u2014 ", "-- ", 1),  # not an em dash
        GOOD.replace("\u2014 ", "\u2014", 1),
        GOOD.replace("\u2014 example.com/log ", "\u2014 example.com/log  ", 1),
        GOOD.replace("\u2014 example.com/log ", "\u2014 ", 1),
        GOOD.replace("\u2014 example.com/log ", "\u2014 a+b ", 1),
        GOOD.replace("\n\u2014", "\n\u2014 \t", 1),
        GOOD[:-3] + "!!\n",  # invalid base64
        GOOD.replace("example.com/log\n42", "example.com/log\x0742", 1),  # control char
        GOOD.replace("\n", "\r\n"),
        GOOD + SIG_LINE * MAX_SIGNATURES,  # too many signatures
        GOOD.replace("\n\n", "\n\n\u2014 k AAAA\n", 1),  # 4-byte signature: too short
    ],
)
def test_malformed_notes_are_rejected(note: str) -> None:
    with pytest.raises(CheckpointError):
        SignedNote.parse(note)
    with pytest.raises(CheckpointError):
        open_checkpoint(note, LOG.verifier)


def test_non_utf8_and_surrogates() -> None:
    with pytest.raises(CheckpointError, match="UTF-8"):
        open_checkpoint(GOOD.encode() + b"\xff", LOG.verifier)
    with pytest.raises(CheckpointError):
        open_checkpoint(GOOD.replace("example", "ex\ud800ample", 1), LOG.verifier)


def test_the_edges_of_the_surrogate_range_and_of_the_tree_size() -> None:
    for c in ("\ud800", "\udfff"):
        with pytest.raises(CheckpointError):
            SignedNote.sign(f"a{c}b\n", LOG)
    assert SignedNote.sign("a\ue000b\n", LOG).text == "a\ue000b\n"  # the first one after
    assert Checkpoint(origin="o", size=MAX_TREE_SIZE, root=ROOT).size == MAX_TREE_SIZE
    with pytest.raises(CheckpointError):
        Checkpoint(origin="o", size=MAX_TREE_SIZE + 1, root=ROOT)


def test_a_note_of_exactly_the_size_limit_is_accepted() -> None:
    signature = SignedNote.sign("x\n", LOG).encode()[2:]  # "\n— name sig\n", fixed length
    text = "x" * (MAX_NOTE_BYTES - len(signature.encode()) - 1) + "\n"
    note = SignedNote.sign(text, LOG).encode()
    assert len(note.encode()) == MAX_NOTE_BYTES
    assert SignedNote.open(note, LOG.verifier).text == text
    assert SignedNote.open(note.encode(), LOG.verifier).text == text
    with pytest.raises(CheckpointError):
        SignedNote.sign("x" + text, LOG)
    with pytest.raises(CheckpointError):
        SignedNote.parse("x" + note)


def test_sign_rejects_bad_text() -> None:
    for text in ["", "no newline", "ctl\x1b\n", "\ud800\n"]:
        with pytest.raises(CheckpointError):
            SignedNote.sign(text, LOG)
    with pytest.raises(CheckpointError):
        SignedNote.sign("x\n", [])


@given(st.binary(max_size=400))
def test_fuzz_bytes_only_typed_errors(data: bytes) -> None:
    try:
        open_checkpoint(data, LOG.verifier)
    except CheckpointError:
        return
    except TraceboundError as exc:  # pragma: no cover - the wrong class would be a bug
        pytest.fail(f"unexpected {type(exc).__name__}")
    pytest.fail("random bytes verified as a signed checkpoint")  # pragma: no cover


@given(st.text(alphabet=st.sampled_from("\u2014 \nab+=/AQ0\x01\ud800é+"), max_size=200))
def test_fuzz_structured_text_only_typed_errors(text: str) -> None:
    with contextlib.suppress(CheckpointError):
        SignedNote.parse(text)
    with contextlib.suppress(CheckpointError):
        parse_checkpoint(text)
    with pytest.raises(CheckpointError):
        open_checkpoint(text, LOG.verifier)


@given(digits=st.integers(21, 6000), lead=st.sampled_from("123456789"))
def test_a_size_of_any_length_is_a_checkpoint_error_not_a_value_error(
    digits: int, lead: str
) -> None:
    # Past 4300 digits Python's int() raises ValueError (CVE-2020-10735); a note is read
    # before its signature is trusted, so its size must be refused by the parser itself.
    root = base64.b64encode(bytes(32)).decode()
    with pytest.raises(CheckpointError, match="size"):
        parse_checkpoint(f"o\n{lead}{'0' * (digits - 1)}\n{root}\n")


@given(st.data())
def test_fuzz_mutated_good_note_never_verifies_differently(data: st.DataObject) -> None:
    # Any single-character change to a signed checkpoint either still opens to the same
    # checkpoint (impossible here except via a no-op) or raises a typed error.
    i = data.draw(st.integers(0, len(GOOD) - 1))
    c = data.draw(st.characters())
    mutated = GOOD[:i] + c + GOOD[i + 1 :]
    try:
        got = open_checkpoint(mutated, LOG.verifier)
    except CheckpointError:
        return
    assert mutated == GOOD
    assert got == CP


@given(
    origin=st.text(min_size=1, max_size=40).filter(
        lambda s: (
            "\n" not in s and all(ord(c) >= 0x20 and not 0xD800 <= ord(c) <= 0xDFFF for c in s)
        )
    ),
    size=st.integers(1, 2**64 - 1),
    root=st.binary(min_size=32, max_size=32),
    extensions=st.lists(st.text(alphabet="abc xyz+-=", min_size=1, max_size=10), max_size=3),
)
def test_checkpoint_round_trip_property(
    origin: str, size: int, root: bytes, extensions: list[str]
) -> None:
    cp = Checkpoint(origin=origin, size=size, root=root, extensions=tuple(extensions))
    assert parse_checkpoint(format_checkpoint_body(cp)) == cp
    assert open_checkpoint(sign_checkpoint(cp, [LOG, OTHER]), OTHER.verifier) == cp
