"""Unified diffs: write them for recipes, read and dry-run them for retrieved and LLM patches.

The tier never changes the repository; it proposes a patch and the verifying side applies it
in a sandbox. But a patch that does not apply is not a plan, so retrieved and model-written
patches are dry-run here first. The applier is as strict as the verifying side's: every
context and removed line must match at the line its hunk names (no offset, no fuzz), and
every path must stay inside the repository without going through a symlink, because a
model-written ``../../etc/passwd`` is an attack, not a typo.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tracebound.errors import ContractError

__all__ = [
    "FilePatch",
    "Hunk",
    "PatchRejected",
    "apply_patch",
    "extract_patch",
    "make_unified_diff",
    "parse_patch",
]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FENCED_DIFF = re.compile(r"```[ \t]*(?:diff|patch|udiff)[ \t]*\n(.*?)^```", re.DOTALL | re.M)
_NO_NEWLINE = "\\ No newline at end of file"
_MAX_PATCH_BYTES = 256 * 1024


class PatchRejected(ContractError):
    """A patch is malformed, leaves the repository, or does not apply to it."""


@dataclass
class Hunk:
    """One ``@@`` hunk: the old lines it expects and the new lines it writes."""

    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    old_eof_newline: bool = True
    new_eof_newline: bool = True


@dataclass
class FilePatch:
    """The hunks for one file; ``None`` on a side means the file is created or deleted."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None  # parse_patch refuses /dev/null on both sides
        return path


def make_unified_diff(changes: Iterable[tuple[str, str, str]]) -> str:
    """A git-style unified diff (``--- a/p`` / ``+++ b/p``) of ``(path, old, new)`` triples.

    Files whose content did not change are left out; a missing final newline is written
    with the ``\\ No newline at end of file`` marker so that the diff round-trips.
    """
    out: list[str] = []
    for path, old, new in changes:
        if old == new:
            continue
        lines = difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
        out.extend(line if line.endswith("\n") else f"{line}\n{_NO_NEWLINE}\n" for line in lines)
    return "".join(out)


def extract_patch(text: str) -> str | None:
    """The diff in a model's answer: the first ```diff block, or the whole answer if it is a
    bare diff; ``None`` when there is none."""
    m = _FENCED_DIFF.search(text)
    if m is not None:
        body = m.group(1)
        return body if "--- " in body and "+++ " in body else None
    stripped = text.lstrip("\n")
    if stripped.startswith(("--- ", "diff --git ")):
        return stripped if stripped.endswith("\n") else stripped + "\n"
    return None


def _strip_side(raw: str, prefix: str) -> str | None:
    name = raw.split("\t", 1)[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(prefix):
        name = name[len(prefix) :]
    return _safe_relative(name)


def _safe_relative(name: str) -> str:
    if not name or "\\" in name or "\x00" in name:
        raise PatchRejected(f"unusable path in patch: {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or any(part in {"..", ""} for part in p.parts) or p.parts[0] == ".git":
        raise PatchRejected(f"patch path leaves the repository: {name!r}")
    return p.as_posix()


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified diff into file patches.

    Raises:
        PatchRejected: the text is not a well-formed unified diff of relative paths.
    """
    if len(text.encode("utf-8", "surrogatepass")) > _MAX_PATCH_BYTES:
        raise PatchRejected(f"patch is larger than {_MAX_PATCH_BYTES} bytes")
    lines = text.splitlines()
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("--- "):
            i += 1  # "diff --git", "index", mode lines and prose between files
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchRejected(f"line {i + 1}: '---' without a following '+++'")
        current = FilePatch(_strip_side(line[4:], "a/"), _strip_side(lines[i + 1][4:], "b/"))
        if current.old_path is None and current.new_path is None:
            raise PatchRejected(f"line {i + 1}: both sides are /dev/null")
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            i = _parse_hunk(lines, i, current)
        if not current.hunks:
            raise PatchRejected(f"no hunks for {current.path}")
        files.append(current)
    if not files:
        raise PatchRejected("no file headers ('--- a/…' / '+++ b/…') in patch")
    return files


def _parse_hunk(lines: list[str], i: int, target: FilePatch) -> int:
    m = _HUNK.match(lines[i])
    if m is None:
        raise PatchRejected(f"line {i + 1}: malformed hunk header {lines[i]!r}")
    old_left = int(m[2]) if m[2] is not None else 1
    new_left = int(m[4]) if m[4] is not None else 1
    hunk = Hunk(old_start=int(m[1]))
    i += 1
    last: str | None = None
    while old_left > 0 or new_left > 0 or (i < len(lines) and lines[i] == _NO_NEWLINE):
        if i >= len(lines):
            raise PatchRejected("hunk ends early: the line counts in its header are too big")
        line = lines[i]
        tag, body = (line[:1], line[1:]) if line else (" ", "")  # stripped blank context
        if tag == "\\":
            if last in {" ", "-"}:
                hunk.old_eof_newline = False
            if last in {" ", "+"}:
                hunk.new_eof_newline = False
        elif tag == " " and old_left > 0 and new_left > 0:
            hunk.old.append(body)
            hunk.new.append(body)
            old_left, new_left = old_left - 1, new_left - 1
        elif tag == "-" and old_left > 0:
            hunk.old.append(body)
            old_left -= 1
        elif tag == "+" and new_left > 0:
            hunk.new.append(body)
            new_left -= 1
        else:
            raise PatchRejected(f"line {i + 1}: unexpected {line!r} in hunk")
        last = tag
        i += 1
    target.hunks.append(hunk)
    return i


def _read(repo: Path, rel: str) -> str:
    root = repo.resolve()
    current = root
    for part in PurePosixPath(rel).parts:
        current = current / part
        if current.is_symlink():
            raise PatchRejected(f"{rel} goes through a symlink; patches never follow links")
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise PatchRejected(f"{rel} resolves outside the repository")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PatchRejected(f"{rel} does not exist in the repository") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchRejected(f"{rel} cannot be read as UTF-8 text: {exc}") from exc


def _find(lines: list[str], want: list[str], at: int) -> int:
    """Check that ``want`` occurs in ``lines`` exactly at ``at``: no offset, no fuzz.

    The verifying side applies patches just as strictly, so "applies here" means the same
    on both sides of the retry loop.
    """
    if lines[at : at + len(want)] != want:
        raise PatchRejected(f"a hunk's context does not match the file at line {at + 1}")
    return at


def _apply_file(old_text: str | None, fp: FilePatch) -> str | None:
    lines = [] if old_text is None else old_text.splitlines()
    eof_newline = old_text is None or old_text.endswith("\n") or old_text == ""
    offset = 0
    cursor = 0
    for hunk in fp.hunks:
        # A hunk names its line in the *old* file; earlier hunks have shifted it by `offset`.
        start = hunk.old_start - 1 if hunk.old else hunk.old_start
        at = max(start, 0) + offset
        if at > len(lines):
            raise PatchRejected(f"{fp.path}: a hunk starts past the end of the file")
        if hunk.old:
            _find(lines, hunk.old, at)
        if at < cursor:
            raise PatchRejected(f"{fp.path}: hunks overlap or are out of order")
        if hunk.old and at + len(hunk.old) == len(lines) and hunk.old_eof_newline != eof_newline:
            raise PatchRejected(f"{fp.path}: the end-of-file newline does not match")
        lines[at : at + len(hunk.old)] = hunk.new
        if at + len(hunk.new) == len(lines):
            eof_newline = hunk.new_eof_newline
        offset += len(hunk.new) - len(hunk.old)
        cursor = at + len(hunk.new)
    if fp.new_path is None:
        if lines:
            raise PatchRejected(f"{fp.path}: a deletion must remove every line")
        return None
    return "\n".join(lines) + ("\n" if eof_newline and lines else "")


def apply_patch(repo: Path, patch: str) -> Mapping[str, str | None]:
    """Dry-run ``patch`` against ``repo``: the new content of every file it touches.

    ``None`` marks a deleted file. Nothing is written.

    Raises:
        PatchRejected: the patch is malformed, leaves the repository, or does not apply.
    """
    result: dict[str, str | None] = {}
    for fp in parse_patch(patch):
        if fp.path in result:
            raise PatchRejected(f"{fp.path} appears twice in the patch")
        old = None if fp.old_path is None else _read(repo, fp.old_path)
        if fp.old_path is None and (repo / fp.path).exists():
            raise PatchRejected(f"{fp.path} is created by the patch but already exists")
        result[fp.path] = _apply_file(old, fp)
    return result
