"""The one strict unified-diff parser and applier, shared by both sides of the retry loop.

The planning side (``pipeline.fallback.patch``) dry-runs retrieved and model-written patches
in memory; the verifying side (``pipeline.retry._patch``) applies a plan's patch on disk in
the gate sandbox. Both go through :func:`parse_patch` and :func:`plan_patch` here, so
"applies" means the same thing on both sides: a patch the tier accepts is a patch the gate
accepts, and a patch the gate would refuse is never proposed.

Why not ``git apply`` or ``patch(1)``: both accept offsets and fuzz (a hunk may land a few
lines away from where it says), and both know many more formats than a planner needs to
produce. A patch the gate verifies must be the patch a reviewer will read, applied exactly
where it says. So this applier accepts one format, ``--- a/<path>`` / ``+++ b/<path>`` with
``@@ -l,s +l,s @@`` hunks, and refuses everything it cannot apply to the letter:

* a hunk whose context or removed lines differ from the file (line endings included), whose
  line counts are wrong, or whose header names the wrong line on either side;
* overlapping or out-of-order hunks, a file patched twice, binary patches, renames, copies;
* a path that is absolute, holds ``.``/``..``/empty components, points into ``.git``, or
  passes through a symlink (even one that stays inside: patches never follow links);
* creating a file that exists, or changing or deleting one that does not (or that is not a
  regular UTF-8 file); a patch that needs a file and a directory at the same path.

Nothing is written unless every file applies (all or nothing); :func:`plan_patch` itself
never writes. Lines are split on ``\\n`` only, as git does, so a ``\\r``, form feed or other
Unicode line separator is part of its line, never a line break.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from tracebound.errors import ContractError

__all__ = [
    "MAX_PATCH_BYTES",
    "NO_NEWLINE",
    "FilePatch",
    "Hunk",
    "PatchLine",
    "PatchRejected",
    "PlannedFile",
    "parse_patch",
    "plan_patch",
    "split_lines",
    "write_planned",
]

MAX_PATCH_BYTES: Final = 256 * 1024
NO_NEWLINE: Final = "\\ No newline at end of file"
_HUNK: Final = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_LINE: Final = re.compile(r"[^\n]*\n|[^\n]+")
_DEV_NULL: Final = "/dev/null"
_REFUSED_HEADERS: Final = (
    "rename from",
    "rename to",
    "copy from",
    "copy to",
    "GIT binary patch",
    "Binary files",
)


class PatchRejected(ContractError):
    """A patch is malformed, leaves the repository, or does not apply to it exactly.

    ``reason`` is what is wrong; ``path`` and ``hunk`` (1-based) say where, when known.
    """

    def __init__(self, reason: str, *, path: str | None = None, hunk: int | None = None) -> None:
        self.reason = reason
        self.path = path
        self.hunk = hunk
        where = "" if path is None else f"{path}: "
        at = "" if hunk is None else f"hunk {hunk}: "
        super().__init__(f"{where}{at}{reason}")


def split_lines(text: str) -> list[str]:
    """``text`` split after every ``\\n`` (kept); a last line without one is kept as is."""
    return _LINE.findall(text)


@dataclass(frozen=True, slots=True)
class PatchLine:
    """One hunk line: ``op`` is ``" "``, ``"-"`` or ``"+"``; ``text`` keeps its line ending,
    unless a ``\\ No newline at end of file`` marker follows it."""

    op: str
    text: str


@dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@`` hunk, with the line numbers and counts its header names."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[PatchLine, ...]


@dataclass(frozen=True, slots=True)
class FilePatch:
    """The hunks for one file; ``None`` on a side means the file is created or deleted."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None  # parse_patch refuses /dev/null on both sides
        return path


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """What applying a patch would do to one file: its new content (``None``: deleted)
    and the 1-based post-image lines the patch added."""

    path: str
    target: Path
    content: str | None
    created: bool
    deleted: bool
    added_lines: tuple[int, ...]


# -- parsing ----------------------------------------------------------------------------


def _strip_prefix(raw: str, prefix: str, what: str) -> str | None:
    name = raw.split("\t", 1)[0].rstrip("\r\n")
    if name == _DEV_NULL:
        return None
    if not name.startswith(prefix):
        raise PatchRejected(f"{what} path {name!r} must start with {prefix!r}")
    path = name[len(prefix) :]
    _check_relative(path)
    return path


def _check_relative(path: str) -> None:
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise PatchRejected(
            f"path {path!r} is not a relative POSIX path (it leaves the repository)"
        )
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise PatchRejected(f"path {path!r} holds an empty, '.' or '..' component")
    if any(part.casefold() == ".git" for part in parts):
        raise PatchRejected(f"path {path!r} points into .git")


def _parse_hunk(lines: list[str], i: int, number: int, path: str) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    if m is None:
        raise PatchRejected(f"malformed hunk header {lines[i].rstrip()!r}", path=path, hunk=number)
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_count = 1 if m.group(2) is None else int(m.group(2))
    new_count = 1 if m.group(4) is None else int(m.group(4))
    body: list[PatchLine] = []
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
                raise PatchRejected(
                    f"unexpected line {line.rstrip()!r} inside a hunk", path=path, hunk=number
                )
        body.append(PatchLine(op, line[1:]))
        old_seen += op in (" ", "-")
        new_seen += op in (" ", "+")
        i += 1
        if i < len(lines) and lines[i].rstrip("\r\n") == NO_NEWLINE:
            last = body[-1]
            body[-1] = PatchLine(last.op, last.text.removesuffix("\n"))
            i += 1
    if old_seen != old_count or new_seen != new_count:
        raise PatchRejected(
            f"hunk says -{old_count} +{new_count} lines but holds -{old_seen} +{new_seen}",
            path=path,
            hunk=number,
        )
    return Hunk(old_start, old_count, new_start, new_count, tuple(body)), i


def _parse_headers(lines: list[str], i: int) -> tuple[str | None, str | None, str]:
    """The ``---``/``+++`` pair at ``lines[i]``: old path, new path, and the path patched."""
    if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
        raise PatchRejected(f"line {i + 1}: a '---' header must be followed by a '+++' header")
    old = _strip_prefix(lines[i][4:], "a/", "old")
    new = _strip_prefix(lines[i + 1][4:], "b/", "new")
    if old is None and new is None:
        raise PatchRejected(f"line {i + 1}: both sides of a file patch are /dev/null")
    if old is not None and new is not None and old != new:
        raise PatchRejected(f"renames are not supported ({old!r} -> {new!r})")
    path = new if new is not None else old
    assert path is not None
    return old, new, path


def _refuse_file_and_directory(paths: set[str]) -> None:
    """A patch that needs ``x`` as a file and ``x/y`` inside it cannot be applied whole."""
    for path in paths:
        parent = PurePosixPath(path).parent
        while parent.parts:
            if parent.as_posix() in paths:
                raise PatchRejected("the patch needs both a file and a directory here", path=path)
            parent = parent.parent


def parse_patch(text: str) -> tuple[FilePatch, ...]:
    """Parse a unified diff into per-file patches, refusing anything not strictly unified.

    Raises:
        PatchRejected: the text is not a patch this applier accepts.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PATCH_BYTES:
        raise PatchRejected(f"patch is larger than {MAX_PATCH_BYTES} bytes")
    lines = split_lines(text)
    files: list[FilePatch] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(_REFUSED_HEADERS):
            raise PatchRejected(f"unsupported patch content: {line.rstrip()!r}")
        if not line.startswith("--- "):
            i += 1  # `diff --git`, `index`, mode lines and commentary carry nothing we need
            continue
        old, new, path = _parse_headers(lines, i)
        if path in seen:
            raise PatchRejected("the file is patched twice (it appears twice)", path=path)
        seen.add(path)
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            hunk, i = _parse_hunk(lines, i, len(hunks) + 1, path)
            hunks.append(hunk)
        if not hunks:
            raise PatchRejected("a file patch without hunks", path=path)
        if i < len(lines) and lines[i][:1] in ("+", "-", " ") and not lines[i].startswith("--- "):
            # A line the hunk's counts leave out would be silently dropped: refuse instead.
            raise PatchRejected(
                f"line {i + 1}: the last hunk holds more lines than its header says",
                path=path,
                hunk=len(hunks),
            )
        files.append(FilePatch(old, new, tuple(hunks)))
    if not files:
        raise PatchRejected("no file patches found (expected '--- a/…' / '+++ b/…' headers)")
    _refuse_file_and_directory(seen)
    return tuple(files)


# -- applying ---------------------------------------------------------------------------


def _safe_target(root: Path, rel: str) -> Path:
    """``root / rel``, refusing any component that is a symlink (it could lead outside)
    or any parent that exists and is not a directory."""
    current = root
    parts = PurePosixPath(rel).parts
    for index, part in enumerate(parts):
        current = current / part
        if current.is_symlink():
            raise PatchRejected("the path passes through a symlink", path=rel)
        if index < len(parts) - 1 and current.exists() and not current.is_dir():
            raise PatchRejected(f"{part!r} is not a directory", path=rel)
    return current


def _read_lines(path: Path, rel: str) -> list[str]:
    if path.is_dir():
        raise PatchRejected("the path is a directory", path=rel)
    if not path.is_file():
        raise PatchRejected("the path is not a regular file", path=rel)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PatchRejected(f"the file cannot be read: {exc.strerror or exc}", path=rel) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchRejected("the file is not UTF-8 text", path=rel) from exc
    return split_lines(text)


def _apply_hunk(
    original: list[str],
    hunk: Hunk,
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
        raise PatchRejected("hunks overlap or are out of order", path=rel, hunk=number)
    if start > len(original):
        raise PatchRejected("the hunk starts past the end of the file", path=rel, hunk=number)
    out.extend(original[cursor:start])
    expected_new_start = hunk.new_start - 1 if hunk.new_count else hunk.new_start
    if len(out) != expected_new_start:
        raise PatchRejected(
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
                raise PatchRejected(
                    f"line {position + 1} does not match the hunk's context: "
                    f"expected {line.text!r}, found {have!r}",
                    path=rel,
                    hunk=number,
                )
            position += 1
        if line.op != "-":
            out.append(line.text)
            if line.op == "+":
                added.append(len(out))
    return position


def _plan_file(root: Path, fp: FilePatch) -> PlannedFile:
    rel = fp.path
    target = _safe_target(root, rel)
    exists = target.exists()
    if fp.old_path is None:
        if exists:
            raise PatchRejected("the patch creates a file that already exists", path=rel)
        original: list[str] = []
    else:
        if not exists:
            raise PatchRejected("the file to change does not exist", path=rel)
        original = _read_lines(target, rel)
    out: list[str] = []
    added: list[int] = []
    cursor = 0  # 0-based index of the next original line not yet copied
    for number, hunk in enumerate(fp.hunks, start=1):
        cursor = _apply_hunk(original, hunk, cursor, out=out, added=added, rel=rel, number=number)
    out.extend(original[cursor:])
    for index, text in enumerate(out[:-1]):
        if not text.endswith("\n"):
            raise PatchRejected(
                f"line {index + 1} would lose its line ending ('No newline' misplaced)", path=rel
            )
    deleted = fp.new_path is None
    if deleted and out:
        raise PatchRejected("a deletion must remove every line of the file", path=rel)
    return PlannedFile(
        path=rel,
        target=target,
        content=None if deleted else "".join(out),
        created=fp.old_path is None,
        deleted=deleted,
        added_lines=tuple(added),
    )


def plan_patch(root: Path, text: str) -> tuple[PlannedFile, ...]:
    """What applying ``text`` to the tree at ``root`` would do, file by file, in patch order.

    Reads the tree, writes nothing.

    Raises:
        PatchRejected: the patch is malformed, leaves the tree, or does not apply exactly.
    """
    return tuple(_plan_file(root, fp) for fp in parse_patch(text))


def write_planned(planned: tuple[PlannedFile, ...]) -> None:
    """Write what :func:`plan_patch` planned (call it only with a whole, successful plan)."""
    for p in planned:
        if p.content is None:
            p.target.unlink()
            continue
        p.target.parent.mkdir(parents=True, exist_ok=True)
        # newline="" keeps the patch's own line endings (a CRLF file stays CRLF).
        with p.target.open("w", encoding="utf-8", newline="") as fh:
            fh.write(p.content)
