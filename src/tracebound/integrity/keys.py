"""Ed25519 key objects for C2SP signed notes: signers, verifiers and their text forms.

A checkpoint is only as trustworthy as the key that signs it, and the signing key must live
outside the store (architecture contract 4). This module holds the pure half of that: key
objects built from raw bytes and their text encodings. Reading and writing key files, and
generating fresh keys (which needs randomness), live in ``tracebound.store.keyfile``.

Text forms follow golang.org/x/mod/sumdb/note, so keys interoperate with the Go tooling:

* verifier key: ``<name>+<8 hex key hash>+<base64(0x01 || 32-byte public key)>``
* signer key: ``PRIVATE+KEY+<name>+<8 hex key hash>+<base64(0x01 || 32-byte seed)>``

The key hash is the C2SP key ID: the first four bytes, big-endian, of
``SHA-256(name || 0x0A || 0x01 || public key)``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tracebound.errors import SigningKeyError

__all__ = [
    "ED25519_ALGORITHM",
    "ED25519_SIGNATURE_SIZE",
    "NoteSigner",
    "NoteVerifier",
    "compute_key_hash",
    "is_valid_key_name",
]

ED25519_ALGORITHM = 0x01
"""C2SP signed-note signature type byte for Ed25519."""

ED25519_SIGNATURE_SIZE = 64
_KEY_SIZE = 32
_PRIVATE_PREFIX = "PRIVATE+KEY+"
_HEX8 = re.compile(r"[0-9a-f]{8}")


def is_valid_key_name(name: str) -> bool:
    """Return whether ``name`` may name a note key: non-empty, no Unicode space, no ``+``.

    The ``+`` is the field separator of key texts, and a space would split a signature line,
    so both are forbidden by the C2SP signed-note spec. Control characters are refused too,
    because a signed note may not contain them.
    """
    if not name or "+" in name:
        return False
    return not any(c.isspace() or ord(c) < 0x20 or 0xD800 <= ord(c) <= 0xDFFF for c in name)


def compute_key_hash(name: str, public_key: bytes) -> int:
    """Return the C2SP key ID of an Ed25519 key: SHA-256(name||0x0A||0x01||key)[:4] as uint32.

    Raises:
        SigningKeyError: the name is invalid or the key is not 32 bytes.
    """
    if not is_valid_key_name(name):
        raise SigningKeyError(
            f"invalid key name {name!r}: it must be non-empty, without spaces or '+'"
        )
    if len(public_key) != _KEY_SIZE:
        raise SigningKeyError(f"an Ed25519 public key is {_KEY_SIZE} bytes, got {len(public_key)}")
    digest = hashlib.sha256(
        name.encode("utf-8") + b"\n" + bytes([ED25519_ALGORITHM]) + bytes(public_key)
    ).digest()
    return int.from_bytes(digest[:4], "big")


def _decode_key_field(field: str, what: str) -> bytes:
    """Decode ``base64(0x01 || 32 bytes)`` strictly (canonical base64 only)."""
    try:
        raw = base64.b64decode(field.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise SigningKeyError(f"{what}: key material is not valid base64") from exc
    if base64.b64encode(raw).decode("ascii") != field:
        raise SigningKeyError(f"{what}: key material is not canonical base64")
    if len(raw) != 1 + _KEY_SIZE or raw[0] != ED25519_ALGORITHM:
        raise SigningKeyError(f"{what}: expected an Ed25519 key (type 0x01 and 32 bytes)")
    return raw[1:]


def _encode_key_field(raw: bytes) -> str:
    return base64.b64encode(bytes([ED25519_ALGORITHM]) + raw).decode("ascii")


class NoteVerifier:
    """A named Ed25519 public key that checks note signatures.

    Equality and hashing use (name, public key), so a set of verifiers cannot hold the same
    key twice.
    """

    __slots__ = ("_key", "_key_hash", "_name", "_public_bytes")

    def __init__(self, name: str, public_key: bytes) -> None:
        """Build a verifier from a key name and a raw 32-byte Ed25519 public key.

        Raises:
            SigningKeyError: the name is invalid or the key is not a 32-byte Ed25519 key.
        """
        self._key_hash = compute_key_hash(name, public_key)
        try:
            self._key = Ed25519PublicKey.from_public_bytes(bytes(public_key))
        except ValueError as exc:
            raise SigningKeyError(f"not a valid Ed25519 public key: {exc}") from exc
        self._name = name
        self._public_bytes = bytes(public_key)

    @property
    def name(self) -> str:
        """The key name that appears on signature lines."""
        return self._name

    @property
    def key_hash(self) -> int:
        """The C2SP 32-bit key ID."""
        return self._key_hash

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        return self._public_bytes

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Return whether ``signature`` is this key's Ed25519 signature over ``message``."""
        if len(signature) != ED25519_SIGNATURE_SIZE:
            return False
        try:
            self._key.verify(bytes(signature), bytes(message))
        except InvalidSignature:
            return False
        return True

    @classmethod
    def parse(cls, text: str) -> NoteVerifier:
        """Parse ``<name>+<hex key hash>+<base64 key>`` and check the hash matches the key.

        Surrounding whitespace (such as the newline of a ``.pub`` file) is ignored.

        Raises:
            SigningKeyError: the text is malformed or its key hash does not match.
        """
        stripped = text.strip()
        parts = stripped.split("+", 2)
        if len(parts) != 3:
            raise SigningKeyError("a verifier key is '<name>+<8 hex digits>+<base64 key>'")
        name, hash_hex, key_b64 = parts
        if not is_valid_key_name(name):
            raise SigningKeyError(f"invalid key name {name!r} in verifier key")
        if not _HEX8.fullmatch(hash_hex):
            raise SigningKeyError("verifier key hash must be 8 lowercase hex digits")
        verifier = cls(name, _decode_key_field(key_b64, "verifier key"))
        if verifier.key_hash != int(hash_hex, 16):
            raise SigningKeyError(
                f"verifier key {name!r}: key hash {hash_hex} does not match the key "
                f"(expected {verifier.key_hash:08x})"
            )
        return verifier

    def format(self) -> str:
        """Return the verifier key text, without a trailing newline."""
        return f"{self._name}+{self._key_hash:08x}+{_encode_key_field(self._public_bytes)}"

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"NoteVerifier({self.format()!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NoteVerifier):
            return NotImplemented
        return self._name == other._name and self._public_bytes == other._public_bytes

    def __hash__(self) -> int:
        return hash((self._name, self._public_bytes))


class NoteSigner:
    """A named Ed25519 private key that signs notes.

    Built from a caller-provided 32-byte seed: this module never draws randomness, so that key
    generation stays an explicit, injectable I/O step. ``repr`` never shows the seed.
    """

    __slots__ = ("_key", "_seed", "_verifier")

    def __init__(self, name: str, seed: bytes) -> None:
        """Build a signer from a key name and a raw 32-byte Ed25519 seed (RFC 8032 private key).

        Raises:
            SigningKeyError: the name is invalid or the seed is not 32 bytes.
        """
        if len(seed) != _KEY_SIZE:
            raise SigningKeyError(f"an Ed25519 seed is {_KEY_SIZE} bytes, got {len(seed)}")
        self._key = Ed25519PrivateKey.from_private_bytes(bytes(seed))
        self._seed = bytes(seed)
        public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._verifier = NoteVerifier(name, public)

    @property
    def name(self) -> str:
        """The key name written on signature lines."""
        return self._verifier.name

    @property
    def key_hash(self) -> int:
        """The C2SP 32-bit key ID."""
        return self._verifier.key_hash

    @property
    def verifier(self) -> NoteVerifier:
        """The matching public verifier."""
        return self._verifier

    def sign(self, message: bytes) -> bytes:
        """Return the 64-byte Ed25519 signature of ``message`` (deterministic, RFC 8032)."""
        return self._key.sign(bytes(message))

    def format_private(self) -> str:
        """Return ``PRIVATE+KEY+<name>+<hex hash>+<base64 seed>``. Handle as a secret."""
        return f"{_PRIVATE_PREFIX}{self.name}+{self.key_hash:08x}+{_encode_key_field(self._seed)}"

    @classmethod
    def parse_private(cls, text: str) -> NoteSigner:
        """Parse the text of :meth:`format_private` and check that its key hash matches.

        Raises:
            SigningKeyError: the text is malformed or the key hash does not match. The message
                never contains key material.
        """
        stripped = text.strip()
        if not stripped.startswith(_PRIVATE_PREFIX):
            raise SigningKeyError("a signer key starts with 'PRIVATE+KEY+'")
        parts = stripped[len(_PRIVATE_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise SigningKeyError("a signer key is 'PRIVATE+KEY+<name>+<8 hex>+<base64 key>'")
        name, hash_hex, key_b64 = parts
        if not is_valid_key_name(name):
            raise SigningKeyError(f"invalid key name {name!r} in signer key")
        if not _HEX8.fullmatch(hash_hex):
            raise SigningKeyError("signer key hash must be 8 lowercase hex digits")
        signer = cls(name, _decode_key_field(key_b64, "signer key"))
        if not hmac.compare_digest(f"{signer.key_hash:08x}", hash_hex):
            raise SigningKeyError(f"signer key {name!r}: key hash does not match the key")
        return signer

    def __repr__(self) -> str:
        return f"NoteSigner(name={self.name!r}, key_hash={self.key_hash:08x})"
