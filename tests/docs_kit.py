"""The fenced code blocks of README.md and docs/*.md, and their docs-test markers.

tests/e2e/test_docs_examples.py runs the blocks (its docstring has the conventions); a test
that runs blocks itself, because they need what that harness does not have (a PostgreSQL
server), takes the ones whose skip marker says it covers them: ``covered_by(__file__)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]  # not docs/adr/

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
MARKER = re.compile(r"^<!-- docs-test: (?P<kind>[a-z-]+)(?: \((?P<reason>.*)\))? -->$")
COVERED = re.compile(r"covered by (?P<path>tests/[\w/.-]+\.py)(?:::(?P<name>\w+))?")


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository
    index: int  # among the document's fences, from 0
    line: int  # of the opening fence, from 1
    lang: str
    options: str  # the info string after the language
    body: str
    skip: str | None  # the reason of the skip marker that applies (the block's or the document's)

    @property
    def first_line(self) -> str:
        return next((s.strip() for s in self.body.splitlines() if s.strip()), "")

    @property
    def file(self) -> str | None:
        """``file=NAME`` in the info string: the block is saved as NAME, not run."""
        found = re.search(r"\bfile=(\S+)", self.options)
        return found.group(1) if found else None

    @property
    def id(self) -> str:
        return f"{self.doc}#{self.index} {self.lang}: {self.first_line[:40]}"

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass(frozen=True)
class Marker:
    doc: str
    line: int
    text: str
    kind: str | None  # None when the comment does not parse
    reason: str | None
    before_fence: bool  # on the line right before an opening fence


def parse(path: Path) -> tuple[list[Block], list[Marker]]:
    """A Markdown file's fenced blocks, and every ``<!-- docs-test ... -->`` in it."""
    doc = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    fences: list[tuple[int, str, str]] = []  # line of the opening fence, info, body
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        closing = re.compile(rf" *{re.escape(fence[0])}{{{len(fence)},}} *")
        end = i + 1
        while end < len(lines) and not closing.fullmatch(lines[end]):
            end += 1
        body = "".join(_dedent(line, indent) for line in lines[i + 1 : end])
        fences.append((i + 1, opening["info"], body))
        i = end + 1
    openings = {line for line, _, _ in fences}
    markers = []
    for number, text in enumerate(lines, start=1):
        if "<!--" in text and "docs-test" in text:
            found = MARKER.match(text.strip())
            kind, reason = (found["kind"], found["reason"]) if found else (None, None)
            markers.append(Marker(doc, number, text.strip(), kind, reason, number + 1 in openings))
    whole = next((m.reason for m in markers if m.kind == "skip-document"), None)
    before = {m.line + 1: m.reason for m in markers if m.kind == "skip" and m.before_fence}
    blocks = []
    for index, (line, info, body) in enumerate(fences):
        lang, _, options = info.partition(" ")
        skip = whole if whole is not None else before.get(line)
        blocks.append(Block(doc, index, line, lang, options.strip(), body, skip))
    return blocks, markers


def _dedent(line: str, indent: int) -> str:
    """A body line without its fence's indentation (a fence inside a list item)."""
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(spaces, indent) :] + "\n"


def covered_by(test_file: str | Path) -> list[Block]:
    """The blocks whose skip marker says ``covered by`` this test file."""
    wanted = Path(test_file).resolve().relative_to(ROOT).as_posix()
    return [
        block
        for path in DOCUMENTS
        for block in parse(path)[0]
        if any(m["path"] == wanted for m in COVERED.finditer(block.skip or ""))
    ]
