"""Durable owner-only file writes shared by the key files, witness, retry logs and anchors."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tracebound.store import files
from tracebound.store.files import append_durably, fsync_dir, make_private_dir, write_file_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_file_atomic(tmp_path: Path) -> None:
    directory = tmp_path / "atomic"
    directory.mkdir()
    target = directory / "f"
    write_file_atomic(target, b"one", mode=0o600, overwrite=False)
    assert target.read_bytes() == b"one"
    assert _mode(target) == 0o600
    with pytest.raises(FileExistsError):
        write_file_atomic(target, b"two", mode=0o600, overwrite=False)
    assert target.read_bytes() == b"one"
    write_file_atomic(target, b"two", mode=0o644, overwrite=True)
    assert target.read_bytes() == b"two"
    assert _mode(target) == 0o644
    assert [p.name for p in directory.iterdir()] == ["f"]  # no temporary file left behind


def test_make_private_dir_creates_missing_parents_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o000)
    try:
        make_private_dir(tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a") == _mode(tmp_path / "a" / "b") == 0o700


def test_append_durably_appends_owner_only_and_syncs_a_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = files.fsync_dir

    def spy(directory: Path) -> None:
        synced.append(directory)
        real(directory)

    monkeypatch.setattr(files, "fsync_dir", spy)
    target = tmp_path / "logs" / "run.jsonl"
    append_durably(target, b"one\n")
    assert synced == [target.parent]  # the new file's name is made durable
    append_durably(target, b"two\n")
    assert synced == [target.parent]  # an existing name needs no directory sync
    assert target.read_bytes() == b"one\ntwo\n"
    assert _mode(target) == 0o600
    assert _mode(target.parent) == 0o700


def test_append_durably_refuses_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "log"
    link.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic links"):  # ELOOP from O_NOFOLLOW
        append_durably(link, b"evil")
    assert victim.read_bytes() == b"keep"


def test_fsync_dir_raises_when_it_cannot_sync(tmp_path: Path) -> None:
    fsync_dir(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")
