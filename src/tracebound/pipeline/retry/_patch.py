"""A strict unified-diff applier for the gate sandbox.

Why not ``git apply`` or ``patch(1)``: both accept offsets and fuzz (a hunk may land a few
lines away from where it says), and both know many more formats than a planner needs to
produce. A patch the gate verifies must be the patch a reviewer will read, applied exactly
where it says. So this applier accepts one format, ``--- a/<path>`` / ``+++ b/<path>`` with
``@@ -l,s +l,s @@`` hunks, and refuses everything it cannot apply to the letter:

* a hunk whose context or removed lines differ from the file, or whose line counts are wrong;
* overlapping or out-of-order hunks, a file patched twice, binary patches, renames;
* a path that is absolute, holds ``..``, points into ``.git``, or passes through a symlink;
* creating a file that exists, or changing or deleting one that does not.

Nothing is written unless every file applies (all or nothing). The result names, for each
changed file, the post-image line numbers the patch added, so that the secret scan can tell
a secret the attempt introduced from one that was already there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

__all__ = ["AppliedPatch", "ChangedFile", "PatchError", "apply_patch", "parse_patch"]

_HUNK: Final = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE: Final = "\\ No newline at end of file"
_DEV_NULL: Final = "/dev/null"
_REFUSED_HEADERS: Final = (
    "rename from",
    "rename to",
    "copy from",
    "copy to",
    "GIT binary patch",
    "Binary files",
)


class PatchError(Exception):
    """The patch cannot be applied exactly; ``path`` and ``hunk`` say where (internal).

    Never escapes the package: the gate runner turns it into a ``patch_rejected`` signal.
    """

    def __init__(self, reason: str, *, path: str | None = None, hunk: int | None = None) -> None:
        self.reason = reason
        self.path = path
        self.hunk = hunk
        where = "" if path is None else f"{path}: "
        at = "" if hunk is None else f"hunk {hunk}: "
        super().__init__(f"{where}{at}{reason}")


@dataclass(frozen=True, slots=True)
class _Line:
    op: str  # " ", "-" or "+"
    text: str  # including its line ending, unless the file has none there


@dataclass(frozen=True, slots=True)
class _Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[_Line, ...]


@dataclass(frozen=True, slots=True)
class _FilePatch:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    hunks: tuple[_Hunk, ...]

    @property
    def path(self) -> str:
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None
        return path


@dataclass(frozen=True, slots=True)
class ChangedFile:
    """One file the patch changed, and the 1-based post-image lines it added."""

    path: str
    created: bool
    deleted: bool
    added_lines: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AppliedPatch:
    """What an applied patch changed, in patch order."""

    files: tuple[ChangedFile, ...]


def _strip_prefix(raw: str, prefix: str, what: str) -> str | None:
    name = raw.split("\t", 1)[0].rstrip("\r\n")
    if name == _DEV_NULL:
        return None
    if not name.startswith(prefix):
        raise PatchError(f"{what} path {name!r} must start with {prefix!r}")
    path = name[len(prefix) :]
    _check_relative(path)
    return path


def _check_relative(path: str) -> None:
    pure = PurePosixPath(path)
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise PatchError(f"path {path!r} is not a relative POSIX path")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise PatchError(f"path {path!r} holds an empty, '.' or '..' component")
    if pure.parts[0] == ".git":
        raise PatchError(f"path {path!r} points into .git")


def _parse_hunk(lines: list[str], i: int, number: int, path: str) -> tuple[_Hunk, int]:
    m = _HUNK.match(lines[i])
    if m is None:
        raise PatchError(f"malformed hunk header {lines[i].rstrip()!r}", path=path, hunk=number)
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_count = 1 if m.group(2) is None else int(m.group(2))
    new_count = 1 if m.group(4) is None else int(m.group(4))
    body: list[_Line] = []
    old_seen = new_seen = 0
    i += 1
    while i < len(lines) and (old_seen < old_count or new_seen < new_count):
        line = lines[i]
        op = line[:1]
        if op not in (" ", "-", "+"):
            if line.rstrip("\r\n") == "":
                # Some tools drop the single space of an empty context line.
                op, line = " ", " " + line
            else:
                raise PatchError(
                    f"unexpected line {line.rstrip()!r} inside a hunk", path=path, hunk=number
                )
        body.append(_Line(op, line[1:]))
        old_seen += op in (" ", "-")
        new_seen += op in (" ", "+")
        i += 1
        if i < len(lines) and lines[i].rstrip("\r\n") == _NO_NEWLINE:
            last = body[-1]
            body[-1] = _Line(last.op, last.text.removesuffix("\n").removesuffix("\r"))
            i += 1
    if old_seen != old_count or new_seen != new_count:
        raise PatchError(
            f"hunk says -{old_count} +{new_count} lines but holds -{old_seen} +{new_seen}",
            path=path,
            hunk=number,
        )
    return _Hunk(old_start, old_count, new_start, new_count, tuple(body)), i


def parse_patch(text: str) -> tuple[_FilePatch, ...]:
    """Parse a unified diff into per-file patches, refusing anything not strictly unified.

    Raises:
        PatchError: the text is not a patch this applier accepts.
    """
    lines = text.splitlines(keepends=True)
    files: list[_FilePatch] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(_REFUSED_HEADERS):
            raise PatchError(f"unsupported patch content: {line.rstrip()!r}")
        if not line.startswith("--- "):
            i += 1  # `diff --git`, `index`, mode lines and commentary carry nothing we need
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchError("a '---' header must be followed by a '+++' header")
        old = _strip_prefix(line[4:], "a/", "old")
        new = _strip_prefix(lines[i + 1][4:], "b/", "new")
        if old is None and new is None:
            raise PatchError("both sides of a file patch are /dev/null")
        if old is not None and new is not None and old != new:
            raise PatchError(f"renames are not supported ({old!r} -> {new!r})")
        path = new if new is not None else old
        assert path is not None
        if path in seen:
            raise PatchError("the file is patched twice", path=path)
        seen.add(path)
        i += 2
        hunks: list[_Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            hunk, i = _parse_hunk(lines, i, len(hunks) + 1, path)
            hunks.append(hunk)
        if not hunks:
            raise PatchError("a file patch without hunks", path=path)
        files.append(_FilePatch(old, new, tuple(hunks)))
    if not files:
        raise PatchError("no file patches found (expected '--- a/…' / '+++ b/…' headers)")
    return tuple(files)


def _safe_target(root: Path, rel: str) -> Path:
    """``root / rel``, refusing any component that is a symlink (it could lead outside)."""
    current = root
    for part in PurePosixPath(rel).parts:
        current = current / part
        if current.is_symlink():
            raise PatchError("the path passes through a symlink", path=rel)
    return current


def _read_lines(path: Path, rel: str) -> list[str]:
    try:
        data = path.read_bytes()
    except IsADirectoryError as exc:
        raise PatchError("the path is a directory", path=rel) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchError("the file is not UTF-8 text", path=rel) from exc
    return text.splitlines(keepends=True)


def _apply_hunk(
    original: list[str],
    hunk: _Hunk,
    cursor: int,
    *,
    out: list[str],
    added: list[int],
    rel: str,
    number: int,
) -> int:
    """Copy up to the hunk, check its old side to the letter, write its new side.

    Returns the new cursor (the first original line after the hunk).
    """
    # For an empty old range, old_start names the line *after which* to insert.
    start = hunk.old_start - 1 if hunk.old_count else hunk.old_start
    if start < cursor:
        raise PatchError("hunks overlap or are out of order", path=rel, hunk=number)
    out.extend(original[cursor:start])
    expected_new_start = hunk.new_start - 1 if hunk.new_count else hunk.new_start
    if len(out) != expected_new_start:
        raise PatchError(
            f"the hunk says the new text starts at line {hunk.new_start}, "
            f"but it would start at line {len(out) + 1}",
            path=rel,
            hunk=number,
        )
    position = start
    for line in hunk.lines:
        if line.op in (" ", "-"):
            if position >= len(original) or original[position] != line.text:
                have = original[position] if position < len(original) else "<end of file>"
                raise PatchError(
                    f"line {position + 1} does not match: expected {line.text!r}, found {have!r}",
                    path=rel,
                    hunk=number,
                )
            position += 1
        if line.op != "-":
            out.append(line.text)
            if line.op == "+":
                added.append(len(out))
    return position


def _apply_file(root: Path, fp: _FilePatch) -> tuple[Path, str | None, ChangedFile]:
    rel = fp.path
    target = _safe_target(root, rel)
    exists = target.exists()
    if fp.old_path is None:
        if exists:
            raise PatchError("the patch creates a file that already exists", path=rel)
        original: list[str] = []
    else:
        if not exists:
            raise PatchError("the file to change does not exist", path=rel)
        original = _read_lines(target, rel)
    out: list[str] = []
    added: list[int] = []
    cursor = 0  # 0-based index of the next original line not yet copied
    for number, hunk in enumerate(fp.hunks, start=1):
        cursor = _apply_hunk(original, hunk, cursor, out=out, added=added, rel=rel, number=number)
    out.extend(original[cursor:])
    for index, text in enumerate(out[:-1]):
        if not text.endswith("\n"):
            raise PatchError(
                f"line {index + 1} would lose its line ending ('No newline' misplaced)", path=rel
            )
    deleted = fp.new_path is None
    if deleted and out:
        raise PatchError("a deletion must remove every line of the file", path=rel)
    content = None if deleted else "".join(out)
    change = ChangedFile(
        rel, created=fp.old_path is None, deleted=deleted, added_lines=tuple(added)
    )
    return target, content, change


def apply_patch(root: Path, text: str) -> AppliedPatch:
    """Apply ``text`` to the tree at ``root`` exactly, or change nothing.

    Raises:
        PatchError: the patch is malformed or does not apply to the letter.
    """
    planned = [_apply_file(root, fp) for fp in parse_patch(text)]
    for target, content, _change in planned:
        if content is None:
            target.unlink()
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        # newline="" keeps the patch's own line endings (a CRLF file stays CRLF).
        with target.open("w", encoding="utf-8", newline="") as fh:
            fh.write(content)
    return AppliedPatch(tuple(change for _t, _c, change in planned))
