"""What the Critic checks: a step's output against the constraints it was handed.

Constraints are the handoff envelope's free-text entries. These forms are understood:

==========================  ===========================================================
``time<=60s``, ``<=500ms``  the step's measured latency is within the bound
``paths:src/**,tests/**``   every path the step touches matches one of the globs
``no-write:<glob>``         no touched path matches the glob
``no-write-to-prod``        no touched path has a ``prod`` or ``production`` folder
``no-exec``                 the step proposes no ``exec:`` action
``max-diff-lines:N``        the step's diffs change at most N lines
``tests-must-pass``         every validation the step ran passed
==========================  ===========================================================

Anything else is free text for people and models; it is reported as *unchecked* (in the
Critic's validations as pending), never silently treated as satisfied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tracebound.contract import TPCArtifact
from tracebound.pipeline.policy import glob_match, request_from_artifact

__all__ = ["ConstraintCheck", "Finding", "check_constraints"]

_TIME: Final = re.compile(r"^time\s*<=\s*(\d+)\s*(ms|s)$")


@dataclass(frozen=True)
class Finding:
    """A failure the Critic found in a step's output.

    ``origin`` names the step that caused it (the failed step or an ancestor), or is None
    when nobody can tell: such a failure is unresolved and counts towards
    ``unresolved_origin``.
    """

    step: str
    reason: str
    harmful: bool = True
    origin: str | None = None


@dataclass(frozen=True)
class ConstraintCheck:
    checked: tuple[str, ...]
    unchecked: tuple[str, ...]
    violations: tuple[str, ...]


def _changed_lines(diffs: Iterable[str]) -> int:
    return sum(
        1
        for diff in diffs
        for line in diff.splitlines()
        if line[:1] in {"+", "-"} and not line.startswith(("+++", "---"))
    )


def check_constraints(
    artifact: TPCArtifact,
    constraints: Sequence[str],
    *,
    role: str,
    latency_ms: int,
    validations_failed: Sequence[str] = (),
) -> ConstraintCheck:
    """Check one step's artifact against the constraints it was handed."""
    request = request_from_artifact(role, artifact)
    checked: list[str] = []
    unchecked: list[str] = []
    violations: list[str] = []
    for raw in constraints:
        c = raw.strip()
        verdict = _check_one(
            c,
            paths=request.paths,
            commands=request.commands,
            artifact=artifact,
            latency_ms=latency_ms,
            failed=validations_failed,
        )
        if verdict is None:
            unchecked.append(c)
            continue
        checked.append(c)
        if verdict:
            violations.append(f"{c}: {verdict}")
    return ConstraintCheck(tuple(checked), tuple(unchecked), tuple(violations))


def _check_one(  # noqa: PLR0911 - one return per constraint form reads best
    c: str,
    *,
    paths: Sequence[str],
    commands: Sequence[str],
    artifact: TPCArtifact,
    latency_ms: int,
    failed: Sequence[str],
) -> str | None:
    """None: not a form we understand; "": satisfied; otherwise the violation."""
    if m := _TIME.match(c):
        limit = int(m.group(1)) * (1000 if m.group(2) == "s" else 1)
        return "" if latency_ms <= limit else f"took {latency_ms} ms"
    if c.startswith("paths:"):
        globs = [g.strip() for g in c[6:].split(",") if g.strip()]
        outside = [p for p in paths if not any(glob_match(g, p) for g in globs)]
        return f"touched {', '.join(outside)} outside the allowed paths" if outside else ""
    if c.startswith("no-write:"):
        hit = [p for p in paths if glob_match(c[9:].strip(), p)]
        return f"wrote {', '.join(hit)}" if hit else ""
    if c == "no-write-to-prod":
        hit = [p for p in paths if {"prod", "production"} & set(p.split("/")[:-1])]
        return f"wrote {', '.join(hit)}" if hit else ""
    if c == "no-exec":
        return f"proposed to execute {', '.join(commands)}" if commands else ""
    if c.startswith("max-diff-lines:") and c[15:].strip().isdigit():
        n = _changed_lines(artifact.diffs)
        return f"changed {n} lines" if n > int(c[15:]) else ""
    if c == "tests-must-pass":
        return f"failed {', '.join(failed)}" if failed else ""
    return None
