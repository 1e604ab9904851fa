"""Unified diffs: write them for recipes, read and dry-run them for retrieved and LLM patches.

The tier never changes the repository; it proposes a patch and the verifying side applies it
in a sandbox. But a patch that does not apply is not a plan, so retrieved and model-written
patches are dry-run here first. The dry run *is* the verifying side's applier
(:mod:`tracebound.pipeline._patch`), stopped before it writes: every context and removed
line must match at the line its hunk names (no offset, no fuzz), and every path must stay
inside the repository without going through a symlink, because a model-written
``../../etc/passwd`` is an attack, not a typo. One parser, one applier: a patch this side
accepts is a patch the gate accepts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from tracebound.pipeline._patch import (
    NO_NEWLINE,
    FilePatch,
    Hunk,
    PatchRejected,
    parse_patch,
    plan_patch,
    split_lines,
)

__all__ = [
    "FilePatch",
    "Hunk",
    "PatchRejected",
    "apply_patch",
    "extract_patch",
    "make_unified_diff",
    "parse_patch",
]

_DIFF_OPENER = re.compile(r"```[ \t]*(?:diff|patch|udiff)[ \t]*\n")
_FENCE_CLOSER = re.compile(r"^```", re.M)


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
            split_lines(old),
            split_lines(new),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
        out.extend(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}\n" for line in lines)
    return "".join(out)


def extract_patch(text: str) -> str | None:
    """The diff in a model's answer: the first ```diff block, or the whole answer if it is a
    bare diff; ``None`` when there is none."""
    # Two linear searches, not one lazy "opener(.*?)closer" pattern: with openers that never
    # close, that one rescanned the rest of the answer from each opener (quadratic in a
    # provider's answer, whose length nothing bounds). The first opener that has a closer
    # after it is always the first opener, so the result is the same.
    opener = _DIFF_OPENER.search(text)
    closer = None if opener is None else _FENCE_CLOSER.search(text, opener.end())
    if opener is not None and closer is not None:
        body = text[opener.end() : closer.start()]
        return body if "--- " in body and "+++ " in body else None
    stripped = text.lstrip("\n")
    if stripped.startswith(("--- ", "diff --git ")):
        return stripped if stripped.endswith("\n") else stripped + "\n"
    return None


def apply_patch(repo: Path, patch: str) -> Mapping[str, str | None]:
    """Dry-run ``patch`` against ``repo``: the new content of every file it touches.

    ``None`` marks a deleted file. Nothing is written. This is the gate's own applier
    (:func:`tracebound.pipeline._patch.plan_patch`) stopped before it writes.

    Raises:
        PatchRejected: the patch is malformed, leaves the repository, or does not apply.
    """
    return {planned.path: planned.content for planned in plan_patch(repo, patch)}
