"""Deterministic recipes: the first tier, tried before retrieval and the model.

A recipe is plain code that turns an advisory and a repository into a patch, with no model
and no cost. The built-in :class:`PinBumpRecipe` does what a human would do first for a
PyPI advisory: bump the pin to the first version the advisory says is fixed, in
``requirements*.txt``, ``requirements/*.txt``, ``constraints*.txt`` and ``pyproject.toml``
(PEP 621 strings and Poetry tables).

A recipe stands aside (returns ``None``) rather than guess: an unparseable version, a pin
whose other bounds exclude the fix, a hash-pinned requirement (``--hash``: the new release's
hashes cannot be known offline), or no fixed version at all all leave the decision to the
next tier.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tracebound.errors import ValidationFailed
from tracebound.pipeline.fallback.models import AffectedRange, ApplyContext, normalise_name
from tracebound.pipeline.fallback.patch import make_unified_diff
from tracebound.pipeline.fallback.versions import VersionKey, parse_version

__all__ = ["PinBumpRecipe", "Recipe", "RecipeBook", "RecipeProposal", "first_fixed_version"]

_MANIFEST_GLOBS = ("requirements*.txt", "requirements/*.txt", "constraints*.txt", "pyproject.toml")
_MAX_MANIFEST_BYTES = 1 << 20
# name[extras] op version rest   (rest: more specifiers, markers, comments)
_REQ_LINE = re.compile(
    r"^(?P<lead>\s*)(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<extras>\s*\[[^\]]*\])?"
    r"(?P<sp>\s*)(?P<op>===|==|~=|>=)(?P<sp2>\s*)(?P<ver>[^\s,;#\"']+)(?P<rest>[^\n]*)$"
)
_QUOTED = re.compile(r"(?P<q>[\"'])(?P<body>[^\"'\n]*)(?P=q)")
_POETRY = re.compile(
    r"^(?P<lead>\s*)(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<eq>\s*=\s*)(?P<q>[\"'])"
    r"(?P<op>\^|~|==|>=)?(?P<ver>[0-9][^\"'\s,]*)(?P=q)(?P<rest>[^\n]*)$"
)
_OTHER_SPEC = re.compile(r"(<=|<|!=|==|>)\s*([^\s,;#\"']+)")


@dataclass(frozen=True, slots=True)
class RecipeProposal:
    """A recipe's patch and what it does, in words a reviewer and a prompt can use."""

    recipe: str
    description: str
    target_version: str
    patch: str
    files_changed: int


@runtime_checkable
class Recipe(Protocol):
    """A deterministic planner; ``None`` means "not mine to fix"."""

    @property
    def name(self) -> str: ...

    def propose(self, ctx: ApplyContext) -> RecipeProposal | None: ...


def _range_fix(rng: AffectedRange, current: VersionKey) -> tuple[VersionKey, str] | None:
    """Whether ``current`` is in this range, and the first fixed version above it."""
    events: list[tuple[VersionKey, int, str, str]] = []
    for ev in rng.events:
        kind, raw = next((k, v) for k, v in ev.model_dump().items() if v)
        key = parse_version(raw)
        if key is None:
            return None  # an order we cannot compute is not an order we may guess
        events.append((key, 0 if kind == "introduced" else 1, kind, raw))
    events.sort()
    affected = False
    for key, _, kind, _raw in events:
        if key > current:
            break
        if kind == "introduced":
            affected = True
        elif kind == "fixed" or (kind == "last_affected" and key < current):
            affected = False
    if not affected:
        return None
    fixes = [(key, raw) for key, _, kind, raw in events if kind == "fixed" and key > current]
    if not fixes:
        return None
    return fixes[0]


def first_fixed_version(ctx: ApplyContext) -> str | None:
    """The lowest version the advisory marks fixed above ``ctx.current_version``, if the
    current version is affected; ``None`` otherwise or when any needed version is unparseable.
    """
    current = parse_version(ctx.current_version)
    if current is None:
        return None
    best: tuple[VersionKey, str] | None = None
    for affected in ctx.advisory.affected_for(ctx.ecosystem, ctx.package):
        for rng in affected.ranges:
            if rng.type == "GIT":
                continue
            found = _range_fix(rng, current)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
    return None if best is None else best[1]


def _bounds_allow(rest: str, target: VersionKey) -> bool:
    """Whether the other specifiers on a pin (``,<3``, ``!=2.1``) still admit ``target``."""
    for op, raw in _OTHER_SPEC.findall(rest.split(";", 1)[0].split("#", 1)[0]):
        bound = parse_version(raw)
        if bound is None:
            return False
        ok = {
            "<": target < bound,
            "<=": target <= bound,
            "!=": target != bound,
            "==": target == bound,
            ">": target > bound,
        }[op]
        if not ok:
            return False
    return True


class PinBumpRecipe:
    """Bump a PyPI pin to the first fixed version the advisory names."""

    name = "pin-bump-first-fixed"

    def propose(self, ctx: ApplyContext) -> RecipeProposal | None:
        if ctx.ecosystem != "PyPI":
            return None
        target = first_fixed_version(ctx)
        target_key = None if target is None else parse_version(target)
        if target is None or target_key is None:
            return None
        want = normalise_name(ctx.package)
        changes: list[tuple[str, str, str]] = []
        for path in _manifests(ctx.repo_path):
            rel = path.relative_to(ctx.repo_path).as_posix()
            try:
                old = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # an unreadable manifest is not one this recipe can bump
            new = _bump(old, want, target, target_key, pyproject=path.name == "pyproject.toml")
            if new != old:
                changes.append((rel, old, new))
        if not changes:
            return None
        files = ", ".join(rel for rel, _, _ in changes)
        return RecipeProposal(
            recipe=self.name,
            description=f"bump {ctx.package} from {ctx.current_version} to {target} in {files}",
            target_version=target,
            patch=make_unified_diff(changes),
            files_changed=len(changes),
        )


def _manifests(repo: Path) -> list[Path]:
    root = repo.resolve()
    found: set[Path] = set()
    for pattern in _MANIFEST_GLOBS:
        for path in repo.glob(pattern):
            if (
                path.is_file()
                and not path.is_symlink()
                and path.resolve().is_relative_to(root)
                and path.stat().st_size <= _MAX_MANIFEST_BYTES
            ):
                found.add(path)
    return sorted(found)


def _logical_lines(lines: list[str]) -> list[list[str]]:
    """Physical lines grouped as pip reads them: a line ending in a backslash continues."""
    groups: list[list[str]] = []
    continued = False
    for line in lines:
        if continued:
            groups[-1].append(line)
        else:
            groups.append([line])
        continued = line.rstrip("\r\n").endswith("\\")
    return groups


def _bump(text: str, want: str, target: str, target_key: VersionKey, *, pyproject: bool) -> str:
    out: list[str] = []
    for group in _logical_lines(text.splitlines(keepends=True)):
        if not pyproject and any("--hash" in line for line in group):
            # Hash-pinned (pip-compile --generate-hashes): the hashes are the old release's,
            # and new ones cannot be computed offline. A bumped pin with old hashes does not
            # install, so the requirement is left as it is.
            out.extend(group)
            continue
        for line in group:
            body, nl = (line[:-1], "\n") if line.endswith("\n") else (line, "")
            if pyproject:
                body = _QUOTED.sub(lambda m: _bump_quoted(m, want, target, target_key), body)
                body = _bump_poetry(body, want, target, target_key)
            else:
                body = _bump_requirement(body, want, target, target_key)
            out.append(body + nl)
    return "".join(out)


def _bump_requirement(body: str, want: str, target: str, target_key: VersionKey) -> str:
    m = _REQ_LINE.match(body)
    if m is None or normalise_name(m["name"]) != want:
        return body
    current = parse_version(m["ver"])
    if current is None or current >= target_key or not _bounds_allow(m["rest"], target_key):
        return body
    start, end = m.span("ver")
    return body[:start] + target + body[end:]


def _bump_quoted(m: re.Match[str], want: str, target: str, target_key: VersionKey) -> str:
    inner = _bump_requirement(m["body"], want, target, target_key)
    return f"{m['q']}{inner}{m['q']}"


def _bump_poetry(body: str, want: str, target: str, target_key: VersionKey) -> str:
    m = _POETRY.match(body)
    if m is None or normalise_name(m["name"]) != want:
        return body
    current = parse_version(m["ver"])
    if current is None or current >= target_key:
        return body
    start, end = m.span("ver")
    return body[:start] + target + body[end:]


class RecipeBook:
    """The recipes tried, in order; the first proposal wins.

    ``candidates`` returns every recipe's proposal; the tier uses it on the retry path to
    tell the model which deterministic fixes exist (and which were already tried).
    """

    def __init__(self, recipes: Sequence[Recipe] | None = None) -> None:
        self.recipes: tuple[Recipe, ...] = (
            tuple(recipes) if recipes is not None else (PinBumpRecipe(),)
        )

    def propose(self, ctx: ApplyContext) -> RecipeProposal | None:
        """The first recipe's proposal, or ``None`` if no recipe applies.

        Raises:
            ValidationFailed: a recipe returned something other than a well-formed
                :class:`RecipeProposal` (its name and patch end up in the anchor and the
                prompt, so they are checked before either is written).
        """
        for recipe in self.recipes:
            proposal = _checked(recipe, recipe.propose(ctx))
            if proposal is not None:
                return proposal
        return None

    def candidates(self, ctx: ApplyContext) -> list[RecipeProposal]:
        """Every recipe's proposal, in book order (checked as in :meth:`propose`)."""
        return [p for r in self.recipes if (p := _checked(r, r.propose(ctx))) is not None]


def _checked(recipe: Recipe, proposal: object) -> RecipeProposal | None:
    if proposal is None:
        return None
    fields = ("recipe", "description", "target_version", "patch")
    if not isinstance(proposal, RecipeProposal) or not all(
        isinstance(getattr(proposal, f), str) and getattr(proposal, f) for f in fields
    ):
        raise ValidationFailed(
            "recipes",
            f"recipe {getattr(recipe, 'name', type(recipe).__name__)!r} returned "
            f"{type(proposal).__name__}, not a RecipeProposal with non-empty text fields",
        )
    return proposal
