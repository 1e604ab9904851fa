"""CODEOWNERS: who may approve a gated change to which paths.

GitHub's rules: one pattern and its owners per line, ``#`` comments, gitignore-style
patterns, and the LAST matching line wins. An approver must own every touched path; a
path no line matches has no owner, so nobody can approve it (fail closed).

A reason that names no path (an ``exec:`` action, a scope the policy does not allow) makes
the gate the repository's as a whole (``repository_wide``): its approver must also be a
default owner, one of the last catch-all line's (``*``, ``**`` or ``/**``). Without such a
line nobody can approve it. A gate with both kinds of reason needs both: the approver owns
every path *and* is a default owner, or running an arbitrary command would be the call of
whoever owns one file.

A path is also matched in its folded spelling (NFC, case-folded: ``fold_path``), because
the policy gates it that way: on macOS and Windows ``.GITHUB/x`` is the file ``.github/``'s
owners own. When the two spellings have different owners, the approver must be among both
(fail closed: the exact-spelling owner of ``.GITHUB/x``, often just the catch-all line, must
not lift a gate on what is, on the machine that applies it, ``.github/x``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tracebound.errors import PolicyError, PolicyUnusable
from tracebound.pipeline.policy import fold_path, glob_match

__all__ = ["CodeOwners", "NotAnOwner"]


class NotAnOwner(PolicyError):
    """The named approver does not own every path the gated step touches."""


_CATCH_ALL: Final = frozenset({"*", "**", "/**"})


def _norm(owner: str) -> str:
    return owner.lstrip("@").lower()


@dataclass(frozen=True)
class CodeOwners:
    rules: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def parse(cls, text: str, *, source: str = "CODEOWNERS") -> CodeOwners:
        rules = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            pattern, *owners = line.split()
            if not owners:
                raise PolicyUnusable(f"{source}:{number}: {pattern!r} names no owner")
            rules.append((pattern, tuple(owners)))
        if not rules:
            raise PolicyUnusable(f"{source} names no owners; nobody could approve anything")
        return cls(tuple(rules))

    @classmethod
    def load(cls, path: str | Path) -> CodeOwners:
        p = Path(path)
        try:
            return cls.parse(p.read_text(encoding="utf-8-sig"), source=str(p))
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyUnusable(f"cannot read CODEOWNERS {p}: {exc}") from exc

    def owners_of(self, path: str) -> tuple[str, ...]:
        """The owners of ``path``: the last matching line's, or () if none matches."""
        owners: tuple[str, ...] = ()
        for pattern, names in self.rules:
            if glob_match(pattern, path):
                owners = names
        return owners

    def _folded_owners(self, path: str) -> tuple[str, ...]:
        """The last line matching ``path`` when both are folded (see the module doc)."""
        owners: tuple[str, ...] = ()
        folded = fold_path(path)
        for pattern, names in self.rules:
            if glob_match(fold_path(pattern), folded):
                owners = names
        return owners

    def _must_own(self, path: str) -> list[tuple[str, ...]]:
        """The owner groups an approver of ``path`` must be in: the exact spelling's, and
        the folded spelling's when another line wins there."""
        exact, folded = self.owners_of(path), self._folded_owners(path)
        return [exact] if folded == exact else [exact, folded]

    def default_owners(self) -> tuple[str, ...]:
        """The repository's owners: the last catch-all line's, or () if there is none."""
        owners: tuple[str, ...] = ()
        for pattern, names in self.rules:
            if pattern in _CATCH_ALL:
                owners = names
        return owners

    def owners_for(self, paths: Iterable[str]) -> tuple[str, ...]:
        """Everyone who owns at least one of ``paths``; the default owners for none."""
        wanted = tuple(paths)
        if not wanted:
            return self.default_owners()
        return tuple(dict.fromkeys(o for p in wanted for o in self.owners_of(p)))

    def approvers(self, paths: Iterable[str], *, repository_wide: bool) -> tuple[str, ...]:
        """The names :meth:`check_approver` accepts for this gate: the owners of every path,
        who are default owners too when the gate is repository-wide (or names no path).
        Empty when no one name passes, e.g. the paths' owners own no catch-all line."""
        groups = [g for p in dict.fromkeys(paths) for g in self._must_own(p)]
        if repository_wide or not groups:
            groups.append(self.default_owners())
        first, *rest = groups
        others = [{_norm(o) for o in group} for group in rest]
        return tuple(dict.fromkeys(o for o in first if all(_norm(o) in g for g in others)))

    def check_approver(self, approver: str, paths: Iterable[str], *, repository_wide: bool) -> None:
        """Raise NotAnOwner unless ``approver`` owns every path and, when the gate is
        ``repository_wide`` (some reason names no path), is a default owner as well.

        With no path at all, ``approver`` must be a default owner whatever the flag says:
        "every path of none" would otherwise let anyone approve a gate such as an ``exec:``
        action. The flag is keyword-only and required so that no caller drops it quietly.
        """
        who = _norm(approver)
        wanted = tuple(paths)
        missing = [
            p
            for p in wanted
            if any(who not in {_norm(o) for o in group} for group in self._must_own(p))
        ]
        if missing:
            raise NotAnOwner(
                f"{approver} is not a CODEOWNER of {', '.join(missing)}; owners: "
                + "; ".join(f"{p}: {_describe_owners(self._must_own(p))}" for p in missing)
            )
        if wanted and not repository_wide:
            return
        default = self.default_owners()
        if who not in {_norm(o) for o in default}:
            what = "names no path" if not wanted else "also has a reason that names no path"
            raise NotAnOwner(
                f"{approver} may not approve a gate that {what}: only the default owners "
                f"(a catch-all `*` line) may; default owners: {' '.join(default) or 'nobody'}"
            )


def _describe_owners(groups: list[tuple[str, ...]]) -> str:
    """``@a @b``, or ``@a and also one of @c`` when a folded spelling has other owners."""
    texts = [" ".join(g) or "nobody" for g in groups]
    return " and also one of ".join(texts)
