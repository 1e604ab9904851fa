"""The governance gate: which steps wait for a named human, and what each role may do.

A policy is a TOML file::

    version = 1

    [gate]
    sensitive_paths = ["requirements*.txt", "pyproject.toml", ".github/**"]
    write_access = false              # true: every write is gated, not only sensitive ones
    untrusted_code_execution = true   # an `exec:` action is gated

    [scopes]                          # what each role holds before any gate is lifted
    Planner = ["read"]
    Executor = ["read"]
    Critic = ["read"]

    [scopes.after_approval]           # what a role holds once a human approved its gate
    Executor = ["read", "write"]

    allowed = ["read", "write", "exec"]   # every scope a step may ever be granted

A step declares what it wants in its TPC artifact: touched paths come from its ``diffs``
(``+++ b/path`` lines) and from ``write:<path>`` actions; code it wants to run comes from
``exec:<command>`` actions. Policies fail closed (CONVENTIONS #9): a missing, empty,
unreadable or malformed policy raises :class:`PolicyUnusable`; an unknown key is an error,
not ignored; an empty rule set is an error. The only way to gate nothing is to say so, with
:class:`UnsafeAllowAll`.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final, Protocol

from tracebound.contract import TPCArtifact
from tracebound.errors import PolicyUnusable
from tracebound.pipeline._redaction_detectors import MARKER_RE

__all__ = [
    "AllOf",
    "GateReason",
    "Policy",
    "PolicyRule",
    "SensitivePaths",
    "StepRequest",
    "UnsafeAllowAll",
    "UntrustedExecution",
    "WriteAccess",
    "fold_path",
    "glob_match",
    "normalise_path",
    "request_from_artifact",
]

ROLES: Final = ("Planner", "Executor", "Critic", "Reviewer", "Router")
# Every header line of a unified or git diff that names a path: a rename, copy or mode
# change touches a file without any "+++" line. The path runs to a tab (a timestamp follows
# it in non-git diffs) or the line's end; git quotes paths with unusual characters.
_DIFF_PATH: Final = re.compile(
    r"^(?:\+\+\+ |--- |rename from |rename to |copy from |copy to )(?P<path>[^\t\n]+)", re.M
)
_GIT_HEADER: Final = re.compile(
    r'^diff --git (?P<a>"(?:[^"\\]|\\.)*"|\S+) (?P<b>"(?:[^"\\]|\\.)*"|\S+)\s*$', re.M
)
_QUOTED_ESCAPES: Final = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
OUTSIDE_ROOT: Final = "path_outside_root"
REDACTED_PATH: Final = "redacted_path"


def glob_match(pattern: str, path: str) -> bool:
    """gitignore-style matching: ``**`` spans folders, ``*`` does not, ``/`` anchors.

    A pattern without a slash matches the file name at any depth (``*.pem``); a pattern
    ending in ``/`` or ``/**`` matches everything below that folder.
    """
    path = path.lstrip("/")
    pat = pattern.strip()
    if pat.endswith("/"):
        pat += "**"
    anchored = "/" in pat.rstrip("/*") or pat.startswith("/")
    pat = pat.lstrip("/")
    if not anchored:
        return fnmatchcase(path.rsplit("/", 1)[-1], pat) or _glob(pat, path)
    return _glob(pat, path)


def _glob(pat: str, path: str) -> bool:
    regex = []
    i = 0
    while i < len(pat):
        if pat.startswith("**/", i):
            regex.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            regex.append(".*")
            i += 2
        elif pat[i] == "*":
            regex.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            regex.append("[^/]")
            i += 1
        else:
            regex.append(re.escape(pat[i]))
            i += 1
    return re.fullmatch("".join(regex), path) is not None


@dataclass(frozen=True)
class StepRequest:
    """What a step asks to do, as the policy sees it."""

    role: str
    paths: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()


def _unquote(path: str) -> str:
    """A git C-quoted path (``"b/caf\\303\\251 x.txt"``) as text; others unchanged."""
    if len(path) < 2 or not (path.startswith('"') and path.endswith('"')):
        return path
    out = bytearray()
    body, i = path[1:-1], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            octal = re.match(r"[0-7]{1,3}", body[i + 1 :])
            if octal:
                out.append(int(octal.group(0), 8) & 0xFF)
                i += 1 + len(octal.group(0))
                continue
            out += (
                bytes([_QUOTED_ESCAPES[nxt]])
                if nxt in _QUOTED_ESCAPES
                else nxt.encode("utf-8", "surrogatepass")
            )
            i += 2
            continue
        out += ch.encode("utf-8", "surrogatepass")
        i += 1
    return out.decode("utf-8", "replace")


def normalise_path(path: str) -> str:
    """The one spelling of a touched path that policies and CODEOWNERS are matched against.

    ``./.github/x``, ``src/../.github/x``, ``.github\\x`` and ``/.github//x`` all name
    ``.github/x``; matching the raw spelling would let any of them slip past a
    ``.github/**`` rule. A path that climbs above the root keeps its leading ``..``
    (:meth:`Policy.evaluate` gates it whatever the rules say).
    """
    cleaned = path.strip().replace("\\", "/").lstrip("/")
    normal = posixpath.normpath(cleaned) if cleaned else ""
    return "" if normal == "." else normal


def fold_path(text: str) -> str:
    """A path or pattern as a case-insensitive, normalisation-insensitive file system sees
    it: NFC, then case-folded. On macOS and Windows `.GITHUB/x` *is* `.github/x`, and on
    macOS `cafe\u0301` (NFD) *is* `caf\u00e9` (NFC); matching only the spelling given
    would let another spelling of a sensitive or owned path slip past its rule."""
    return unicodedata.normalize("NFC", text).casefold()


def _diff_paths(diff: str) -> list[str]:
    raw: list[str] = []
    for m in _GIT_HEADER.finditer(diff):
        raw += [m.group("a"), m.group("b")]
    raw += [m.group("path").rstrip() for m in _DIFF_PATH.finditer(diff)]
    out = []
    for item in raw:
        path = _unquote(item.strip())
        if path == "/dev/null":
            continue
        if path[:2] in {"a/", "b/"}:
            path = path[2:]
        out.append(normalise_path(path))
    return [p for p in out if p]


def request_from_artifact(
    role: str, artifact: TPCArtifact, scopes: Sequence[str] = ()
) -> StepRequest:
    """Read touched paths and commands out of a TPC artifact (diffs and actions)."""
    paths: list[str] = []
    commands: list[str] = []
    for diff in artifact.diffs:
        paths += _diff_paths(diff)
    for action in artifact.actions:
        kind, _, rest = action.partition(":")
        # In any case: an artifact is often a model's words, and `Write:` or `EXEC:` said
        # the same thing (a spelling the policy did not read was a step it did not gate).
        kind = kind.strip().casefold()
        if kind == "write" and rest.strip():
            paths.append(normalise_path(rest.strip()) or rest.strip())
        elif kind == "exec" and rest.strip():
            commands.append(rest.strip())
    requested = set(scopes)
    if paths:
        requested.add("write")
    if commands:
        requested.add("exec")
    return StepRequest(
        role=role,
        paths=tuple(dict.fromkeys(paths)),
        commands=tuple(dict.fromkeys(commands)),
        scopes=tuple(sorted(requested)),
    )


@dataclass(frozen=True)
class GateReason:
    """Why a step is gated, and which paths it concerns."""

    rule: str
    reason: str
    paths: tuple[str, ...] = ()


class PolicyRule(Protocol):
    """One rule: the reasons it gates a request (empty: it does not)."""

    def gate_reasons(self, request: StepRequest) -> list[GateReason]: ...


@dataclass(frozen=True)
class SensitivePaths:
    patterns: tuple[str, ...]

    def gate_reasons(self, request: StepRequest) -> list[GateReason]:
        # Case- and normalisation-insensitively as well (fold_path): on macOS and Windows
        # `.GITHUB/workflows/x` *is* `.github/workflows/x`. Gating a few more paths is the
        # safe side to err on.
        hits = tuple(
            p
            for p in request.paths
            if any(
                glob_match(g, p) or glob_match(fold_path(g), fold_path(p)) for g in self.patterns
            )
        )
        if not hits:
            return []
        return [GateReason("sensitive_paths", "touches policy-sensitive files", hits)]


@dataclass(frozen=True)
class WriteAccess:
    def gate_reasons(self, request: StepRequest) -> list[GateReason]:
        if "write" not in request.scopes:
            return []
        return [GateReason("write_access", "requests write access", request.paths)]


@dataclass(frozen=True)
class UntrustedExecution:
    def gate_reasons(self, request: StepRequest) -> list[GateReason]:
        if not request.commands:
            return []
        return [GateReason("untrusted_code_execution",
                           f"proposes to execute: {', '.join(request.commands)}")]  # fmt: skip


@dataclass(frozen=True)
class AllOf:
    """Every rule is consulted; any reason gates. Empty is refused: it would gate nothing."""

    rules: tuple[PolicyRule, ...]

    def __post_init__(self) -> None:
        if not self.rules:
            raise PolicyUnusable("a policy with no rules would gate nothing; use UnsafeAllowAll")

    def gate_reasons(self, request: StepRequest) -> list[GateReason]:
        return [r for rule in self.rules for r in rule.gate_reasons(request)]


@dataclass(frozen=True)
class UnsafeAllowAll:
    """Gates nothing. Named so that every use of it stands out in review."""

    def gate_reasons(self, request: StepRequest) -> list[GateReason]:
        return []


@dataclass(frozen=True)
class Policy:
    """A loaded policy: its rules plus the scopes each role holds before and after a gate."""

    rule: PolicyRule
    scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scopes_after_approval: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    allowed_scopes: tuple[str, ...] = ("read",)
    source: str = "<memory>"

    def evaluate(self, request: StepRequest) -> list[GateReason]:
        """Reasons to gate the request; a scope outside ``allowed`` is itself a reason."""
        reasons = list(self.rule.gate_reasons(request))
        climbing = tuple(p for p in request.paths if p == ".." or p.startswith("../"))
        if climbing:  # whatever the rules say: a write outside the root waits for a human
            reasons.append(GateReason(OUTSIDE_ROOT, "touches paths outside the root", climbing))
        if any(MARKER_RE.search(p) for p in request.paths):
            # The runner redacts an artifact before the policy reads it, and a marker can
            # swallow a path around what looked like a secret (a random-looking name reads
            # as base64: `.github/workflows/<it>.yml` becomes `.[REDACTED:...].yml`). No rule
            # and no CODEOWNERS line can tell whose file that is, so it names no path: the
            # gate is the repository's (a default owner decides).
            reasons.append(
                GateReason(
                    REDACTED_PATH, "touches a path that was redacted, so it cannot be judged"
                )
            )
        outside = sorted(set(request.scopes) - set(self.allowed_scopes))
        if outside:
            reasons.append(GateReason("allowed_scopes", f"asks for scopes not allowed: {outside}"))
        return reasons

    def granted(self, role: str, *, approved: bool = False) -> tuple[str, ...]:
        """Least privilege: read-only until a gate is lifted, unless the policy says less."""
        before = self.scopes.get(role, ("read",))
        if not approved:
            return before
        return tuple(dict.fromkeys((*before, *self.scopes_after_approval.get(role, ()))))

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read a policy file. Anything wrong with it raises PolicyUnusable (fail closed)."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8-sig")  # an editor's BOM is not the text
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyUnusable(f"cannot read policy {p}: {exc}") from exc
        if not text.strip():
            raise PolicyUnusable(f"policy {p} is empty; an empty policy would allow everything")
        try:
            data = tomllib.loads(text)
        except ValueError as exc:  # TOMLDecodeError, or int() past its 4300 digits
            raise PolicyUnusable(f"policy {p} is not valid TOML: {exc}") from exc
        except RecursionError:  # arrays or tables nested past Python's stack
            raise PolicyUnusable(f"policy {p} is not valid TOML: nested too deeply") from None
        return cls.from_dict(data, source=str(p))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<memory>") -> Policy:
        _only(data, {"version", "gate", "scopes"}, f"{source}: the policy")
        version = data.get("version")
        if type(version) is not int or version != 1:  # 1.0 and true compare equal to 1
            raise PolicyUnusable(f"{source}: `version = 1` is required")
        rule = _gate_rule(data.get("gate"), source)
        before, after, allowed = _scopes(data.get("scopes", {}), source)
        return cls(
            rule=rule,
            scopes=before,
            scopes_after_approval=after,
            allowed_scopes=allowed,
            source=source,
        )


def _gate_rule(gate: object, source: str) -> PolicyRule:
    if not isinstance(gate, Mapping) or not gate:
        raise PolicyUnusable(f"{source}: a [gate] table with at least one rule is required")
    _only(
        gate, {"sensitive_paths", "write_access", "untrusted_code_execution"}, f"{source}: [gate]"
    )
    rules: list[PolicyRule] = []
    patterns = gate.get("sensitive_paths", [])
    if not _strings(patterns):
        raise PolicyUnusable(f"{source}: gate.sensitive_paths must be a list of globs")
    if patterns:
        rules.append(SensitivePaths(tuple(patterns)))
    switches: tuple[tuple[str, PolicyRule], ...] = (
        ("write_access", WriteAccess()),
        ("untrusted_code_execution", UntrustedExecution()),
    )
    for key, rule in switches:
        value = gate.get(key, False)
        if not isinstance(value, bool):
            raise PolicyUnusable(f"{source}: gate.{key} must be true or false")
        if value:
            rules.append(rule)
    try:
        return AllOf(tuple(rules))
    except PolicyUnusable as exc:
        raise PolicyUnusable(f"{source}: {exc}") from exc


Scopes = dict[str, tuple[str, ...]]


def _scopes(table: object, source: str) -> tuple[Scopes, Scopes, tuple[str, ...]]:
    if not isinstance(table, Mapping):
        raise PolicyUnusable(f"{source}: [scopes] must be a table")
    allowed = table.get("allowed", ["read"])
    after = table.get("after_approval", {})
    if not _strings(allowed) or not isinstance(after, Mapping):
        raise PolicyUnusable(f"{source}: scopes.allowed must be a list; after_approval a table")
    before = {k: v for k, v in table.items() if k not in {"allowed", "after_approval"}}
    for granted_by_role, what in ((before, "[scopes]"), (after, "[scopes.after_approval]")):
        for role, granted in granted_by_role.items():
            if role not in ROLES:
                raise PolicyUnusable(f"{source}: {what} names unknown role {role!r}")
            if not _strings(granted) or set(granted) - set(allowed):
                raise PolicyUnusable(
                    f"{source}: {what}.{role} must list scopes from `allowed` {allowed}"
                )
    return (
        {k: tuple(v) for k, v in before.items()},
        {k: tuple(v) for k, v in after.items()},
        tuple(allowed),
    )


def _only(table: Mapping[str, Any], keys: set[str], where: str) -> None:
    unknown = sorted(set(table) - keys)
    if unknown:
        raise PolicyUnusable(f"{where} has unknown key(s) {unknown}; refusing to guess")


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)
