"""Signing-key files: generate, store and load the Ed25519 key that signs checkpoints.

Checkpoints only detect tampering by someone who cannot sign, so the private key must not sit
next to the data it protects (architecture contract 4). This module therefore refuses to write
or read a key inside the store directory, writes keys owner-only (file 0600, new directories
0700) with an atomic, fsynced write, and refuses to load a key that group or others can read.

File formats are those of golang.org/x/mod/sumdb/note (see ``tracebound.integrity.keys``):

* ``<dir>/<name>.key``: ``PRIVATE+KEY+<name>+<hash>+<base64 seed>`` and a newline;
* ``<dir>/<name>.pub``: ``<name>+<hash>+<base64 public key>`` and a newline.

The default directory is ``$TRACEBOUND_KEY_DIR`` or ``~/.config/tracebound/keys``.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tracebound.errors import SigningKeyError
from tracebound.integrity.keys import NoteSigner, NoteVerifier, is_valid_key_name
from tracebound.store.files import fsync_dir, make_private_dir, write_file_atomic

__all__ = [
    "KEY_DIR_ENV",
    "GeneratedKey",
    "RotatedKeyFiles",
    "check_key_pair",
    "default_key_dir",
    "default_key_path",
    "discard_next_key",
    "file_stem",
    "generate_keypair",
    "install_rotated_key",
    "load_signer",
    "load_verifier",
    "missing_signer_error",
    "next_key",
    "next_key_path",
    "public_key_path",
]

KEY_DIR_ENV = "TRACEBOUND_KEY_DIR"
"""Environment variable naming the directory for key files."""

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_KEY_FILE = 4096
_MAX_STEM = 227
"""The longest stem whose temporary file (``.<stem>.jsonl.<16 hex>.tmp``) fits in the 255
bytes of a file name: longer names never had a usable file, so only their stems change."""


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    """Where :func:`generate_keypair` wrote a key, and its public half."""

    private_path: Path
    public_path: Path
    verifier: NoteVerifier
    completed: bool = False
    """The key was there already and only its ``.pub`` was written (see
    :func:`generate_keypair`)."""
    replaced: NoteVerifier | None = None
    """With ``force``: the public key the old ``.pub`` held, which the checkpoints signed
    before now need (``None`` when there was none, or it could not be read)."""


def file_stem(name: str) -> str:
    """Map a key name or log origin to a safe file name stem.

    Names such as ``example.com/log`` hold characters a file name cannot. Unsafe characters
    become ``_``; when anything was replaced, eight hex digits of SHA-256(name) are appended,
    so two names that differ only in unsafe characters still get different files.
    """
    safe = _SAFE.sub("_", name).lstrip(".") or "_"
    if safe != name or len(safe) > _MAX_STEM:
        # Cut to leave room for the hash (the stem is ASCII: one byte a character).
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[: _MAX_STEM - 9]}-{digest}"
    return safe


def default_key_dir() -> Path:
    """Return ``$TRACEBOUND_KEY_DIR`` if set, else ``~/.config/tracebound/keys``."""
    env = os.environ.get(KEY_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".config" / "tracebound" / "keys"


def default_key_path(name: str) -> Path:
    """Return the default private key path for key ``name``."""
    return default_key_dir() / f"{file_stem(name)}.key"


def public_key_path(private_path: Path) -> Path:
    """Return the ``.pub`` path that sits beside a private key file."""
    return private_path.with_suffix(".pub")


def _check_outside_store(path: Path, store_dir: Path | None) -> None:
    """Refuse a key path inside ``store_dir``, following symlinks on both sides."""
    if store_dir is None:
        return
    key = path.expanduser().resolve()
    store = store_dir.expanduser().resolve()
    if key == store or key.is_relative_to(store):
        raise SigningKeyError(
            f"refusing to keep the signing key {path} inside the store directory {store_dir}: "
            "anyone who can change the store could then also re-sign it. Keep it elsewhere "
            f"(the default is {default_key_dir()}, or set {KEY_DIR_ENV})."
        )


def generate_keypair(
    name: str,
    *,
    path: Path | None = None,
    store_dir: Path | None = None,
    force: bool = False,
    seed: bytes | None = None,
) -> GeneratedKey:
    """Create a new Ed25519 signing key and write ``<path>`` (0600) and ``<path>.pub``.

    Args:
        name: The key name written on signature lines; it should match the log's origin.
        path: The private key file. Defaults to :func:`default_key_path`.
        store_dir: The store the key will sign for; the key may not be placed inside it.
        force: Replace an existing key. Without it an existing key is never overwritten,
            because losing a signing key orphans every checkpoint it signed; only its
            ``.pub``, when that is missing or another key's (a run killed between the two
            files), is written again from it (``completed`` in the result).
        seed: 32 bytes of key material, for deterministic tests; drawn from the OS CSPRNG
            when omitted.

    Raises:
        SigningKeyError: bad name or seed, the key already exists, the path is inside the
            store, or the files could not be written.
    """
    if not is_valid_key_name(name):
        raise SigningKeyError(f"invalid key name {name!r}: no spaces, no '+', not empty")
    key_path = (path if path is not None else default_key_path(name)).expanduser()
    _check_outside_store(key_path, store_dir)
    pub_path = public_key_path(key_path)
    if key_path.suffix == ".pub":
        raise SigningKeyError(f"a private key path may not end in .pub: {key_path}")
    if key_path.is_dir():
        raise SigningKeyError(
            f"{key_path} is a folder; give the key file's own path (e.g. {key_path / name}.key)"
        )
    signer = NoteSigner(name, seed if seed is not None else secrets.token_bytes(32))
    if not force and key_path.exists():
        return _complete_pair(key_path, pub_path, store_dir)
    replaced = _held_verifier(pub_path)
    if not force and pub_path.exists():
        _refuse_orphaned_pub(key_path, pub_path, replaced)
    try:
        make_private_dir(key_path.parent)
        write_file_atomic(
            key_path, (signer.format_private() + "\n").encode(), mode=0o600, overwrite=force
        )
        write_file_atomic(
            pub_path, (signer.verifier.format() + "\n").encode(), mode=0o644, overwrite=True
        )
    except FileExistsError as exc:
        raise SigningKeyError(f"a signing key already exists at {key_path}") from exc
    except OSError as exc:
        raise SigningKeyError(f"could not write the signing key {key_path}: {exc}") from exc
    return GeneratedKey(key_path, pub_path, signer.verifier, replaced=replaced)


def _held_verifier(pub_path: Path) -> NoteVerifier | None:
    """The key a ``.pub`` holds, or ``None`` when it is missing or unreadable."""
    try:
        return load_verifier(pub_path) if pub_path.exists() else None
    except SigningKeyError:
        return None


def _refuse_orphaned_pub(key_path: Path, pub_path: Path, held: NoteVerifier | None) -> NoReturn:
    """Refuse to write a new pair over the ``.pub`` of a key that is gone (deleted, lost).

    That ``.pub`` is what still verifies every checkpoint the lost key signed; a new pair
    written over it silently made all of them read as forged.
    """
    which = f"the public key {held.format()}" if held is not None else "a public key"
    raise SigningKeyError(
        f"{pub_path} holds {which}, but its signing key {key_path} is missing: the "
        "checkpoints it signed still verify with that .pub, and a new key would replace it. "
        f"Put the key back if you have a copy; otherwise save {pub_path} elsewhere (auditors "
        "need it for the old checkpoints) and run `tracebound keys init --force` (README: "
        "'Losing, leaking or replacing the signing key')"
    )


def _complete_pair(key_path: Path, pub_path: Path, store_dir: Path | None) -> GeneratedKey:
    """An existing key: write its ``.pub`` when that is missing or another key's, else refuse.

    The key is written before its ``.pub``, so a ``keys init`` killed between the two leaves
    the key alone (or, with ``--force``, beside the old key's ``.pub``); running it again
    finishes the job rather than pointing at ``--force``, which would lose the key.

    Raises:
        SigningKeyError: the key and its ``.pub`` are both there and agree (refusing to
            overwrite), or the key cannot be loaded.
    """
    verifier = load_signer(key_path, store_dir=store_dir).verifier
    try:
        held = load_verifier(pub_path) if pub_path.exists() else None
    except SigningKeyError:
        held = None  # unreadable: written again below
    if held is not None and held.format() == verifier.format():
        raise SigningKeyError(
            f"a signing key already exists at {key_path}; refusing to overwrite it "
            "(replace it only if every checkpoint it signed may become unverifiable: "
            "`tracebound keys init --force`, or force=True in Python)"
        )
    try:
        write_file_atomic(pub_path, (verifier.format() + "\n").encode(), mode=0o644, overwrite=True)
    except OSError as exc:
        raise SigningKeyError(f"could not write the public key {pub_path}: {exc}") from exc
    return GeneratedKey(key_path, pub_path, verifier, completed=True)


def check_key_pair(private_path: Path, public_path: Path, verifier: NoteVerifier) -> None:
    """Refuse a ``.pub`` (read as ``verifier``) that is not the public key of the key beside it.

    ``keys init --force`` killed between its two files leaves the new key beside the old
    key's ``.pub``: checked with it, every checkpoint the new key signs reads as forged. A
    key that is missing or cannot be loaded is not compared (the ``.pub`` is used as is).

    Raises:
        SigningKeyError: both are there and they differ; the message says how to mend it.
    """
    if not private_path.exists():
        return
    try:
        own = load_signer(private_path).verifier
    except SigningKeyError:
        return
    if own.format() != verifier.format():
        _refuse_unmoved_rotation(private_path, public_path, verifier)
        raise SigningKeyError(
            f"{public_path} is not the public key of the signing key {private_path} (it is "
            f"{verifier.format()}, the key's is {own.format()}): a `tracebound keys init` was "
            f"interrupted between the two files. Run `tracebound keys init` to write {public_path} "
            "again from the key, or check with the key the checkpoints were signed with "
            "(--verifier-key)"
        )


def _refuse_unmoved_rotation(private_path: Path, public_path: Path, held: NoteVerifier) -> None:
    """A ``.pub`` that is the public key of ``<stem>.next.key``: `keys rotate` wrote the new
    ``.pub`` and was killed before moving the new key in place. `keys init` (the advice for
    a torn `keys init`) would write the ``.pub`` back from the retired key.

    Raises:
        SigningKeyError: it is that state; the message says to run `keys rotate` again.
    """
    pending = next_key_path(private_path)
    if next_key_is(private_path, held):
        raise SigningKeyError(
            f"{public_path} holds the new key of a `tracebound keys rotate` that was "
            f"interrupted before it moved that key ({pending}) to {private_path}; run "
            "`tracebound keys rotate` again (same --by) to put it in place"
        )


def _read_small(path: Path, what: str) -> str:
    try:
        with path.open("rb") as fh:
            data = fh.read(_MAX_KEY_FILE + 1)
    except OSError as exc:
        raise SigningKeyError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if len(data) > _MAX_KEY_FILE:
        raise SigningKeyError(f"{what} {path} is too large to be a key file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SigningKeyError(f"{what} {path} is not UTF-8 text") from exc


def load_signer(path: Path, *, store_dir: Path | None = None) -> NoteSigner:
    """Load a private key file, refusing it if others could read it or it sits in the store.

    Raises:
        SigningKeyError: the file is missing, not a regular file, owned by another user,
            readable by group or others, inside ``store_dir``, or malformed.
    """
    path = Path(path).expanduser()
    _check_outside_store(path, store_dir)
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise SigningKeyError(
            f"no signing key at {path}; create one with `tracebound keys init`"
        ) from exc
    except OSError as exc:
        raise SigningKeyError(f"cannot read signing key {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SigningKeyError(f"signing key {path} is not a regular file")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise SigningKeyError(f"signing key {path} is owned by another user (uid {st.st_uid})")
    if st.st_mode & 0o077:
        raise SigningKeyError(
            f"signing key {path} is accessible by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); fix it with: chmod 600 {path}"
        )
    return NoteSigner.parse_private(_read_small(path, "signing key"))


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name the OS refuses (too long): no file has it
        return False


def load_verifier(path_or_text: Path | str) -> NoteVerifier:
    """Load a verifier key from a ``.pub`` file or from the key text itself.

    A ``str`` that parses as a verifier key is taken as the key; any other ``str`` is read as
    a path. A ``Path`` is always a path.

    Raises:
        SigningKeyError: the file is missing or unreadable, or the key text is malformed.
    """
    if isinstance(path_or_text, str):
        if not path_or_text.strip():
            raise SigningKeyError(
                "the verifier key is empty (give a .pub file or the text '<name>+<hash>+<key>')"
            )
        try:
            return NoteVerifier.parse(path_or_text)
        except SigningKeyError:
            if "\n" in path_or_text.strip() or "\x00" in path_or_text:
                raise
            path = Path(path_or_text).expanduser()
            if not _exists(path):
                # Text shaped like a key ('name+hash+key') is a key with something wrong in
                # it: say what, rather than that no file has that name.
                if path_or_text.strip().count("+") >= 2:
                    raise
                raise SigningKeyError(
                    f"no verifier key file at {path} (a verifier key is a .pub file or "
                    "the text '<name>+<hash>+<key>')"
                ) from None
    else:
        path = path_or_text.expanduser()
    return NoteVerifier.parse(_read_small(path, "verifier key"))


def missing_signer_error(path: Path) -> SigningKeyError:
    """No signing key at ``path``: a first run, or a key lost beside its ``.pub``.

    `keys init` is the answer to the first only: after a lost key it would make a new one,
    and the checkpoints the lost key signed would then read as forged.
    """
    pub = path.with_suffix(".pub")
    if not pub.exists():
        return SigningKeyError(f"no signing key at {path}; run `tracebound keys init` first")
    try:
        held = f" ({load_verifier(pub).format()})"
    except SigningKeyError:
        held = ""
    return SigningKeyError(
        f"no signing key at {path}, but its public key {pub}{held} is there: the key was "
        "deleted or moved. The checkpoints it signed still verify (`verify`, `prove` and "
        "`verify-proof` work), but no new checkpoint can be signed without it. Put the key "
        "back if you have a copy; if it is lost, see README 'Losing, leaking or replacing "
        "the signing key'"
    )


# -- rotation (ADR 0017) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RotatedKeyFiles:
    """Where :func:`install_rotated_key` put the new key, and where it kept the old one."""

    private_path: Path
    public_path: Path
    archived_private: Path
    archived_public: Path


def next_key_path(path: Path) -> Path:
    """``<stem>.next.key`` beside ``path``: the incoming key of a rotation in progress."""
    return path.with_name(f"{path.stem}.next{path.suffix or '.key'}")


def next_key_is(path: Path, verifier: NoteVerifier) -> bool:
    """Whether ``<stem>.next.key`` beside ``path`` is there and is the key of ``verifier``:
    a `keys rotate` interrupted before it moved that key into place (unreadable: no)."""
    pending = next_key_path(path)
    try:
        return pending.exists() and load_signer(pending).verifier == verifier
    except SigningKeyError:
        return False


def _retired_path(path: Path, verifier: NoteVerifier) -> Path:
    return path.with_name(f"{path.stem}.retired-{verifier.key_hash:08x}{path.suffix or '.key'}")


def next_key(path: Path, name: str, *, store_dir: Path | None) -> tuple[NoteSigner, bool]:
    """The incoming key of a rotation of the key at ``path``, and whether it was there
    already: made (0600, with its ``.pub``) before anything is recorded, so a rotation
    interrupted midway finds the same key again.

    Raises:
        SigningKeyError: it cannot be written or read.
    """
    pending = next_key_path(path)
    if pending.exists():
        return load_signer(pending, store_dir=store_dir), True
    generate_keypair(name, path=pending, store_dir=store_dir)
    return load_signer(pending, store_dir=store_dir), False


def discard_next_key(path: Path) -> None:
    """Remove the incoming key :func:`next_key` made, when the rotation was refused before
    anything named it (a key nobody uses should not lie around)."""
    pending = next_key_path(path)
    for file in (public_key_path(pending), pending):
        file.unlink(missing_ok=True)


def install_rotated_key(path: Path, old: NoteSigner) -> RotatedKeyFiles:
    """Archive the outgoing pair beside ``path`` as ``<stem>.retired-<key id>.key`` and
    ``.pub`` (never over another file), then put the incoming pair in place: its ``.pub``
    first, written from ``<stem>.next.key``, and the key last. Killed between the two, the
    incoming key is still ``<stem>.next.key``, which a run again finds and finishes with;
    moved first, it sat beside the old ``.pub`` with no ``.next.key`` left to finish with.

    Raises:
        SigningKeyError: a file of that archive name holds another key, or a file could
            not be written or moved.
    """
    pending = next_key_path(path)
    new = load_signer(pending)
    archive = _retired_path(path, old.verifier)
    texts = (
        (archive, old.format_private(), 0o600),
        (public_key_path(archive), old.verifier.format(), 0o644),
    )
    try:
        for target, text, mode in texts:
            data = (text + "\n").encode()
            if target.exists():
                if target.read_bytes() != data:
                    raise SigningKeyError(f"{target} exists and holds another key; move it away")
                continue
            write_file_atomic(target, data, mode=mode, overwrite=False)
        pub = (new.verifier.format() + "\n").encode()
        write_file_atomic(public_key_path(path), pub, mode=0o644, overwrite=True)
        public_key_path(pending).unlink(missing_ok=True)
        pending.replace(path)
        fsync_dir(path.parent)  # the rename survives a power cut, not only a crash
    except OSError as exc:
        raise SigningKeyError(f"could not move the rotated key into place: {exc}") from exc
    return RotatedKeyFiles(path, public_key_path(path), archive, public_key_path(archive))
