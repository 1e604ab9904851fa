"""Durable, owner-only file writes: the few file-system steps every file the package writes
outside a database needs (key files, the witness, retry logs, attempt anchors, blobs).

A new name in a directory is durable only once the directory itself is fsynced, and a file
that may hold secrets or audit records is created owner-only from the start, never briefly
world-readable. Each writer used to carry its own copy of these steps.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import secrets
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "append_durably",
    "create_private_file",
    "fsync_dir",
    "make_private_dir",
    "why_unwritable",
    "write_file_atomic",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def fsync_dir(directory: Path) -> None:
    """Make the names in ``directory`` (a create, rename or link) durable.

    Windows cannot open a directory to sync it (NTFS journals names itself): a no-op there.
    Elsewhere a failure is raised, not ignored: the caller's write is not durable.
    """
    if os.name == "nt":
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private_dir(directory: Path) -> None:
    """Create ``directory`` (and missing parents) as 0700; existing directories are left as is."""
    missing: list[Path] = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    for created in reversed(missing):
        try:
            created.mkdir(mode=0o700)
        except FileExistsError:
            continue
        created.chmod(0o700)  # mkdir's mode is masked by the umask


def write_file_atomic(path: Path, data: bytes, *, mode: int, overwrite: bool) -> None:
    """Write ``data`` to ``path`` atomically and durably, with permission ``mode``.

    The data goes to a temporary file in the same directory, created with ``mode`` from the
    start (never briefly world-readable), fsynced, then moved into place; the directory is
    fsynced after the move. Without ``overwrite`` the move is a hard link, which fails if the
    target exists, so two concurrent writers cannot clobber each other.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        OSError: the write failed; the target is unchanged and no temporary file remains.
    """
    directory = path.parent
    tmp = directory / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed or the platform widened it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            tmp.replace(path)
        else:
            try:
                os.link(tmp, path)
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                # No hard links on this file system: check, then rename (a small race window).
                if path.exists():
                    raise FileExistsError(errno.EEXIST, "file exists", str(path)) from exc
                tmp.replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fsync_dir(directory)


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (created 0600 in a 0700 directory) and fsync it.

    The file is opened with ``O_APPEND`` (concurrent appenders do not overwrite each other)
    and ``O_NOFOLLOW`` (a symlink planted at ``path`` is refused, not written through). When
    this call creates the file, the directory is fsynced too, so the new name survives a
    crash along with its first record.
    """
    created = not path.exists()
    make_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask may have narrowed or the platform widened it
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def why_unwritable(path: Path, suffixes: Sequence[str] = ()) -> str | None:
    """What this process can see of why writing ``path`` (or ``path`` + a suffix: SQLite's
    ``-wal`` and ``-shm``) failed, naming the file or folder at fault; or None.

    SQLite says "disk I/O error" for a write past the file size limit and "attempt to write
    a readonly database" for any file it could not write, naming neither; the operator needs
    to know which file, and what to change.
    """
    for file in (path, *(path.with_name(path.name + s) for s in suffixes)):
        if file.exists() and not os.access(file, os.W_OK):
            return f"{file} is read-only for this user"
    if not os.access(path.parent, os.W_OK):
        return f"the folder {path.parent} is read-only for this user"
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return f"{path}: this process may not write past {soft} bytes in a file (ulimit -f)"
    with contextlib.suppress(OSError):
        if os.statvfs(path.parent).f_bavail == 0:
            return f"the file system holding {path.parent} is full"
    return None


def create_private_file(path: Path) -> None:
    """Create an empty database file owner-only (0600), before SQLite opens it.

    SQLite would create it 0644 (less the umask), world-readable in any directory that is
    not tracebound's own 0700 one; its -wal and -shm files copy the database file's mode.
    """
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600
        )
    except FileExistsError:  # another process is creating it: it sets the mode
        return
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
