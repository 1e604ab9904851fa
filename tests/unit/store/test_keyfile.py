"""Key files: where they go, who may read them, and what is refused."""

from __future__ import annotations

import contextlib
import hashlib
import re
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.errors import SigningKeyError
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.store.keyfile import (
    KEY_DIR_ENV,
    default_key_dir,
    default_key_path,
    file_stem,
    generate_keypair,
    load_signer,
    load_verifier,
)

SEED = bytes(range(32))


@pytest.fixture(autouse=True)
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(KEY_DIR_ENV, raising=False)
    return home


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_default_location_under_home(fake_home: Path) -> None:
    assert default_key_dir() == fake_home / ".config" / "tracebound" / "keys"
    gen = generate_keypair("example.com/log", seed=SEED)
    assert gen.private_path == default_key_path("example.com/log")
    assert gen.private_path.parent == default_key_dir()
    assert gen.private_path.name.endswith(".key")
    assert "/" not in gen.private_path.name
    assert _mode(gen.private_path) == 0o600
    assert _mode(gen.private_path.parent) == 0o700
    assert _mode(fake_home / ".config" / "tracebound") == 0o700  # created by us: private too
    assert gen.public_path.read_text() == gen.verifier.format() + "\n"
    assert not [p for p in gen.private_path.parent.iterdir() if p.name.endswith(".tmp")]
    signer = load_signer(gen.private_path)
    assert signer.verifier == gen.verifier == NoteSigner("example.com/log", SEED).verifier
    assert load_verifier(gen.public_path) == gen.verifier
    assert load_verifier(str(gen.public_path)) == gen.verifier
    assert load_verifier(gen.verifier.format()) == gen.verifier


def test_env_var_and_explicit_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_DIR_ENV, str(tmp_path / "envkeys"))
    gen = generate_keypair("log", seed=SEED)
    assert gen.private_path == tmp_path / "envkeys" / "log.key"
    explicit = tmp_path / "explicit" / "mine.key"
    gen2 = generate_keypair("log", path=explicit, seed=SEED)
    assert gen2.private_path == explicit
    assert gen2.public_path == tmp_path / "explicit" / "mine.pub"
    assert load_signer(explicit).name == "log"


def test_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "k" / "log.key"
    first = generate_keypair("log", path=path, seed=SEED)
    with pytest.raises(SigningKeyError, match="already exists"):
        generate_keypair("log", path=path, seed=bytes(32))
    assert load_signer(path).verifier == first.verifier  # untouched
    second = generate_keypair("log", path=path, seed=bytes(32), force=True)
    assert second.verifier != first.verifier
    assert load_signer(path).verifier == second.verifier
    assert load_verifier(second.public_path) == second.verifier


def test_a_pub_whose_key_is_gone_is_not_replaced_unless_forced(tmp_path: Path) -> None:
    """The .pub of a lost key is what still verifies its checkpoints: a new pair written
    over it silently made every one of them read as forged."""
    path = tmp_path / "k" / "log.key"
    first = generate_keypair("log", path=path, seed=SEED)
    path.unlink()
    with pytest.raises(SigningKeyError, match="is missing") as info:
        generate_keypair("log", path=path, seed=bytes(32))
    assert first.verifier.format() in str(info.value)
    assert not path.exists()
    assert load_verifier(first.public_path) == first.verifier
    forced = generate_keypair("log", path=path, seed=bytes(32), force=True)
    assert forced.replaced == first.verifier
    assert load_verifier(forced.public_path) == forced.verifier != first.verifier


def test_refuses_key_inside_store(tmp_path: Path) -> None:
    store = tmp_path / "project" / ".tracebound"
    store.mkdir(parents=True)
    with pytest.raises(SigningKeyError, match="inside the store"):
        generate_keypair("log", path=store / "keys" / "log.key", store_dir=store, seed=SEED)
    assert not (store / "keys").exists()
    # Through a symlink that points into the store.
    link = tmp_path / "innocent"
    link.symlink_to(store, target_is_directory=True)
    with pytest.raises(SigningKeyError, match="inside the store"):
        generate_keypair("log", path=link / "log.key", store_dir=store, seed=SEED)
    # And through a symlinked store_dir.
    store_link = tmp_path / "store-link"
    store_link.symlink_to(store, target_is_directory=True)
    with pytest.raises(SigningKeyError):
        generate_keypair("log", path=store / "log.key", store_dir=store_link, seed=SEED)
    # Loading enforces it too.
    outside = generate_keypair("log", path=tmp_path / "ok" / "log.key", seed=SEED)
    assert load_signer(outside.private_path, store_dir=store).name == "log"
    (store / "log.key").write_bytes(outside.private_path.read_bytes())
    (store / "log.key").chmod(0o600)
    with pytest.raises(SigningKeyError, match="inside the store"):
        load_signer(store / "log.key", store_dir=store)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o700, 0o777])
def test_load_refuses_group_or_other_access(tmp_path: Path, mode: int) -> None:
    gen = generate_keypair("log", path=tmp_path / "log.key", seed=SEED)
    gen.private_path.chmod(mode)
    if mode & 0o077:
        with pytest.raises(SigningKeyError, match=re.escape(f"chmod 600 {gen.private_path}")):
            load_signer(gen.private_path)
    else:
        assert load_signer(gen.private_path).name == "log"


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(SigningKeyError, match="no signing key"):
        load_signer(tmp_path / "missing.key")
    with pytest.raises(SigningKeyError, match="regular file"):
        load_signer(tmp_path)
    bad = tmp_path / "bad.key"
    bad.write_text("PRIVATE+KEY+garbage\n")
    bad.chmod(0o600)
    with pytest.raises(SigningKeyError):
        load_signer(bad)
    binary = tmp_path / "bin.key"
    binary.write_bytes(b"\xff\xfe")
    binary.chmod(0o600)
    with pytest.raises(SigningKeyError, match="UTF-8"):
        load_signer(binary)
    big = tmp_path / "big.key"
    big.write_bytes(b"A" * 10_000)
    big.chmod(0o600)
    with pytest.raises(SigningKeyError, match="too large"):
        load_signer(big)
    with pytest.raises(SigningKeyError):
        load_verifier("not a key and not a file")
    with pytest.raises(SigningKeyError):
        load_verifier(tmp_path / "missing.pub")
    garbled = tmp_path / "garbled.pub"
    garbled.write_text("name+00000000+AAAA\n")
    with pytest.raises(SigningKeyError):
        load_verifier(garbled)


def test_invalid_names_and_paths(tmp_path: Path) -> None:
    for name in ["", "a b", "a+b"]:
        with pytest.raises(SigningKeyError):
            generate_keypair(name, path=tmp_path / "x.key", seed=SEED)
    with pytest.raises(SigningKeyError, match=r"\.pub"):
        generate_keypair("log", path=tmp_path / "x.pub", seed=SEED)
    with pytest.raises(SigningKeyError):
        generate_keypair("log", path=tmp_path / "x.key", seed=b"short")


def test_generated_keys_are_random_by_default(tmp_path: Path) -> None:
    a = generate_keypair("log", path=tmp_path / "a.key")
    b = generate_keypair("log", path=tmp_path / "b.key")
    assert a.verifier != b.verifier
    assert isinstance(load_verifier(a.public_path), NoteVerifier)


def test_file_stem() -> None:
    assert file_stem("plain-name_1.0") == "plain-name_1.0"
    # The witness file a user looks for (README, "Where things live"): unsafe characters
    # as "_", then the first 8 hex digits of the name's SHA-256.
    digest = hashlib.sha256(b"example.com/log").hexdigest()[:8]
    assert file_stem("example.com/log") == f"example.com_log-{digest}"
    assert file_stem("a/b") != file_stem("a_b")
    assert file_stem("..") not in {"..", ".", ""}
    assert "/" not in file_stem("../../etc/passwd")


def test_file_stem_of_a_long_name_is_a_usable_file_name(tmp_path: Path) -> None:
    # A run id, workflow id or origin of any length names an evidence, anchor or witness
    # file; past 255 bytes writing it failed with "File name too long".
    long, longer = "x" * 300, "x" * 301
    assert file_stem("y" * 227) == "y" * 227  # names that fitted keep their file
    assert len(file_stem(long)) == 227 and file_stem(long) != file_stem(longer)
    for name in (long, "é" * 300, "r" * 100_000):
        (tmp_path / f".{file_stem(name)}.jsonl.0123456789abcdef.tmp").write_text("ok")


def test_a_folder_given_as_the_key_path_is_named_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(SigningKeyError, match="is a folder") as info:
        generate_keypair("log", path=tmp_path, seed=SEED)
    assert "log.key" in str(info.value)  # says what to give instead
    with pytest.raises(SigningKeyError, match="is a folder"):
        generate_keypair("log", path=tmp_path, seed=SEED, force=True)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_verifier_key_is_named_empty(text: str) -> None:
    with pytest.raises(SigningKeyError, match="is empty"):
        load_verifier(text)


def test_a_key_text_too_long_for_a_file_name_is_named_as_a_bad_key() -> None:
    # Not a key, then tried as a path: the OS refuses a name this long (ENAMETOOLONG). A
    # mistyped key of 300 characters is a malformed key, not an OSError traceback.
    good = NoteSigner("log", SEED).verifier.format()
    with pytest.raises(SigningKeyError, match="not valid base64"):
        load_verifier(good[:-1] + "x" * 300)
    with pytest.raises(SigningKeyError, match="no verifier key file"):
        load_verifier("x" * 5000)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_an_edited_key_text_is_a_key_or_a_signing_key_error(data: st.DataObject) -> None:
    signer = NoteSigner("log", SEED)
    for good, parse in (
        (signer.format_private(), NoteSigner.parse_private),
        (signer.verifier.format(), NoteVerifier.parse),
        (signer.verifier.format(), load_verifier),
    ):
        i = data.draw(st.integers(0, len(good)))
        j = data.draw(st.integers(i, len(good)))
        splice = data.draw(
            st.text(max_size=10) | st.sampled_from(["x" * 5000, "\x00", "+", "\ud800", "/" * 300])
        )
        with contextlib.suppress(SigningKeyError):
            parse(good[:i] + splice + good[j:])
