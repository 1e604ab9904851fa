"""The gate sandbox's strict unified-diff applier: exact or nothing, never outside the copy.

The parser and the hunk-application core live in :mod:`tracebound.pipeline._patch` and are
the very ones the planning side dry-runs patches with, so the tier and the gate can never
disagree about whether a patch applies. This module adds what only the gate needs: writing
the result to disk (all or nothing: nothing is written unless every file applies) and, for
each changed file, the post-image line numbers the patch added, so that the secret scan can
tell a secret the attempt introduced from one that was already there.

See :mod:`tracebound.pipeline._patch` for what is refused (offsets, fuzz, renames, binary
patches, ``.git`` paths, symlinks, absolute or ``..`` paths, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracebound.pipeline._patch import PatchRejected, parse_patch, plan_patch, write_planned

__all__ = ["AppliedPatch", "ChangedFile", "PatchError", "apply_patch", "parse_patch"]

PatchError = PatchRejected
"""The patch cannot be applied exactly; ``reason``, ``path`` and ``hunk`` say where.

The same class as the planning side's ``PatchRejected`` (one applier, one error). The gate
runner turns it into a ``patch_rejected`` signal.
"""


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


def apply_patch(root: Path, text: str) -> AppliedPatch:
    """Apply ``text`` to the tree at ``root`` exactly, or change nothing.

    Raises:
        PatchError: the patch is malformed or does not apply to the letter.
    """
    planned = plan_patch(root, text)
    write_planned(planned)
    return AppliedPatch(
        tuple(ChangedFile(p.path, p.created, p.deleted, p.added_lines) for p in planned)
    )
