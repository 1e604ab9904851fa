"""Declaring a pipeline of role steps: ``Pipeline``, ``StepContext`` and the decorators.

A pipeline is an ordered list of steps, each played by one role (Planner, Executor,
Critic, Reviewer, Router). A step is a plain function (sync or async) that receives a
:class:`StepContext` and returns its TPC artifact (a mapping or a
:class:`~tracebound.contract.TPCArtifact`). It feels like writing a LangGraph node or a
Pydantic AI tool: inputs come in through the context, the artifact goes out as the return
value, and everything else (validation, redaction, hashing, the ledger, the gate) is the
runner's job::

    pipe = Pipeline("fix-dependency", pipeline_type="remediation", critical=True)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]: ...

    @pipe.executor(apply=write_patch)      # `apply` runs only once any gate is lifted
    def execute(ctx: StepContext) -> dict[str, object]: ...

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]: ...

Each step's parent is the step before it unless ``after=`` names another earlier step;
parent links are what blame follows and what the ARL records as ``parent_step_id``.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, get_args

from tracebound.contract import HandoffEnvelope, TPCArtifact
from tracebound.errors import ConfigError
from tracebound.ids import RunId, StepId
from tracebound.pipeline.critic import Finding

if TYPE_CHECKING:
    from tracebound.pipeline.metrics import RunMetrics

__all__ = [
    "ApplyFn",
    "Pipeline",
    "RoleName",
    "StepContext",
    "StepFn",
    "StepSpec",
]

RoleName: TypeAlias = Literal["Planner", "Executor", "Critic", "Reviewer", "Router"]
StepResult: TypeAlias = Mapping[str, Any] | TPCArtifact
StepFn: TypeAlias = Callable[["StepContext"], StepResult | Awaitable[StepResult]]
ApplyFn: TypeAlias = Callable[["StepContext", TPCArtifact], object]
_Step = TypeVar("_Step", bound=StepFn)
"""A step function as its author typed it: the decorators hand it back unchanged, so the
team's own tests can call ``plan(ctx)`` and index the dict it is declared to return."""
_PREVIOUS = "__previous__"


@dataclass(frozen=True)
class StepSpec:
    """One declared step."""

    name: str
    role: RoleName
    fn: StepFn
    after: str | None
    apply: ApplyFn | None = None
    scopes: tuple[str, ...] = ()


@dataclass
class StepContext:
    """What a step sees: its inputs, its parent's artifact and envelope, and a few tools.

    Attributes:
        run_id / step_id / name / role: who is running.
        inputs: the run's inputs (after redaction: a step never sees a secret the ledger
            would not store).
        parent / parent_name: the parent step's validated artifact and name (None first).
        handoff: the envelope the parent handed over (assumptions, constraints, required
            validations, minimal diff), already validated.
        artifacts: every earlier step's latest accepted artifact, by step name.
        scopes: what this step may do now; read-only until a gate is lifted.
        attempt: 0 for the first try, n for the n-th repair.
        repair_notes: why the previous try was rejected (findings), on a repair.
        findings: for a Critic, what the runtime's constraint checks already found.
        workspace: the directory the pipeline works in, if any.
    """

    run_id: RunId
    step_id: StepId
    name: str
    role: RoleName
    inputs: Mapping[str, Any]
    parent: TPCArtifact | None
    parent_name: str | None
    handoff: HandoffEnvelope | None
    artifacts: Mapping[str, TPCArtifact]
    scopes: tuple[str, ...]
    attempt: int = 0
    repair_notes: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    workspace: Path | None = None
    reported: list[Finding] = field(default_factory=list)
    route: tuple[str, Sequence[str], str] | None = None
    metrics_source: Callable[[], RunMetrics] | None = None

    def report(
        self,
        reason: str,
        *,
        step: str | None = None,
        origin: str | None = None,
        unresolved: bool = False,
        harmful: bool = True,
    ) -> None:
        """(Critic) Report a failure in ``step``'s output (default: the parent step).

        The failure is blamed on ``origin`` (default: the failed step itself), which must be
        the failed step or one of its ancestors: blame follows parent links. Pass
        ``unresolved=True`` when the cause cannot be told; the failure then counts towards
        ``unresolved_origin`` and is not repaired. ``harmful`` marks outputs that break a
        constraint or introduce a regression (they count towards ``harm_rate``).
        Reports are read once the step returns; one the runner cannot use (a step the
        pipeline does not have, a reason that is not text) is this step's own error.
        """
        target = step or self.parent_name
        if target is None:
            raise ConfigError("report() needs a step: this step has no parent")
        self.reported.append(
            Finding(target, reason, harmful, None if unresolved else origin or target)
        )

    def choose(self, chosen: str, alternatives: Sequence[str], reason: str) -> str:
        """(Router) Record which alternative was chosen and why; returns ``chosen``.

        Checked here, in the step, so that a choice the ledger cannot hold fails the step
        (recorded and blamed like any step error) rather than the run once it returned.
        """
        _check_choice(chosen, alternatives, reason)
        if chosen not in alternatives:
            raise ConfigError(f"{chosen!r} is not one of the alternatives {list(alternatives)}")
        self.route = (chosen, tuple(alternatives), reason)
        return chosen

    def metrics(self) -> RunMetrics:
        """(Router) Blame, repair, harm, cost and latency metrics computed from the ledger."""
        if self.metrics_source is None:
            raise ConfigError("metrics are not available to this step")
        return self.metrics_source()


def split_ref(ref: object) -> tuple[str, str]:
    """A pipeline reference, ``"package.module:attribute"``, as (module, attribute): the
    form ``Pipeline(ref=...)`` records and ``resume`` imports.

    Raises:
        ConfigError: ``ref`` is not of that form.
    """
    module, sep, attr = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not (module and sep and attr):
        raise ConfigError(
            f"a pipeline's ref is 'module:attribute' (where resume imports it), not {ref!r}"
        )
    return module, attr


def _check_declaration(
    name: object, pipeline_type: object, critical: object, ref: object, max_repairs: object
) -> None:
    """What every run of the pipeline records (``run_started``), checked when it is declared,
    not when a run fails to record it. Typed as objects: called with user values."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"a pipeline's name is non-empty text, not {name!r}")
    if not isinstance(pipeline_type, str) or not pipeline_type.strip():
        raise ConfigError(f"pipeline_type is non-empty text, not {pipeline_type!r}")
    if not isinstance(critical, bool):
        raise ConfigError(f"critical is True or False, not {critical!r}")
    if ref is not None:
        split_ref(ref)
    if isinstance(max_repairs, bool) or not isinstance(max_repairs, int):
        raise ConfigError(f"max_repairs is an int, not {max_repairs!r}")
    if max_repairs < 0:
        raise ConfigError("max_repairs cannot be negative")


def _check_step(role: object, apply: object, scopes: object) -> None:
    """What the runner relies on for every execution of a step, checked when it is declared
    (a bad apply hook would otherwise fail only once a human had approved the step)."""
    if role not in get_args(RoleName):
        raise ConfigError(f"role {role!r} is not one of {list(get_args(RoleName))}")
    if apply is not None and not callable(apply):
        raise ConfigError(f"apply is a function (ctx, artifact), not {apply!r}")
    if (
        isinstance(scopes, str | bytes)
        or not isinstance(scopes, Sequence)
        or not all(isinstance(s, str) and s for s in scopes)
    ):
        raise ConfigError(f"scopes are a list of names, not {scopes!r}")


def _check_choice(chosen: object, alternatives: object, reason: object) -> None:
    """Typed as objects: :meth:`StepContext.choose` is called by user code."""
    if not isinstance(chosen, str):
        raise ConfigError(f"chosen must be text, not {type(chosen).__name__}")
    if isinstance(alternatives, str | bytes) or not isinstance(alternatives, Sequence):
        raise ConfigError(
            f"alternatives must be a list of names, not {type(alternatives).__name__}"
        )
    for item in alternatives:
        if not isinstance(item, str):
            raise ConfigError(f"alternatives must be names (text), not {type(item).__name__}")
    if not isinstance(reason, str):
        raise ConfigError(f"choose() needs a reason in words, not {type(reason).__name__}")


class Pipeline:
    """An ordered set of role steps, declared with decorators.

    Args:
        name: the pipeline's name (metrics group by it).
        pipeline_type: the kind of pipeline (metrics group by it too), e.g. "remediation".
        critical: SLO guardrails apply: any harm or unresolved failure raises an alert.
        ref: ``"module:attribute"`` where this object can be imported, so that
            ``tracebound resume`` and ``tracebound replay --rerun`` can find it again.
        max_repairs: how many times a failed step (or the step blamed for it) is re-run.
    """

    def __init__(
        self,
        name: str,
        *,
        pipeline_type: str = "default",
        critical: bool = False,
        ref: str | None = None,
        max_repairs: int = 1,
    ) -> None:
        _check_declaration(name, pipeline_type, critical, ref, max_repairs)
        self.name = name
        self.pipeline_type = pipeline_type
        self.critical = critical
        self.ref = ref
        self.max_repairs = max_repairs
        self._steps: list[StepSpec] = []

    @property
    def steps(self) -> tuple[StepSpec, ...]:
        return tuple(self._steps)

    def index(self, name: str) -> int:
        for i, spec in enumerate(self._steps):
            if spec.name == name:
                return i
        raise ConfigError(f"pipeline {self.name!r} has no step {name!r}")

    def step(
        self,
        role: RoleName,
        *,
        name: str | None = None,
        after: str | None = _PREVIOUS,
        apply: ApplyFn | None = None,
        scopes: Sequence[str] = (),
    ) -> Callable[[_Step], _Step]:
        """Declare a step played by ``role``; its parent is the previous step by default."""

        _check_step(role, apply, scopes)

        def decorate(fn: _Step) -> _Step:
            if not callable(fn):
                raise ConfigError(f"a step is a function of its StepContext, not {fn!r}")
            step_name = name or getattr(fn, "__name__", None)
            if not step_name or "~" in step_name:
                raise ConfigError(f"invalid step name {step_name!r}")
            if not re.fullmatch(r"\S+", step_name):
                # It is the ARL's step_id, which has no whitespace (docs/contracts.md).
                raise ConfigError(f"invalid step name {step_name!r}: a step id has no whitespace")
            if any(s.name == step_name for s in self._steps):
                raise ConfigError(f"step {step_name!r} is declared twice")
            parent: str | None
            if after == _PREVIOUS:
                parent = self._steps[-1].name if self._steps else None
            else:
                parent = after
                if parent is not None and all(s.name != parent for s in self._steps):
                    raise ConfigError(
                        f"step {step_name!r} comes after {parent!r}, which is not declared "
                        "before it"
                    )
            self._steps.append(StepSpec(step_name, role, fn, parent, apply, tuple(scopes)))
            return fn

        return decorate

    def planner(self, **kw: Any) -> Callable[[_Step], _Step]:
        return self.step("Planner", **kw)

    def executor(self, **kw: Any) -> Callable[[_Step], _Step]:
        return self.step("Executor", **kw)

    def critic(self, **kw: Any) -> Callable[[_Step], _Step]:
        return self.step("Critic", **kw)

    def reviewer(self, **kw: Any) -> Callable[[_Step], _Step]:
        return self.step("Reviewer", **kw)

    def router(self, **kw: Any) -> Callable[[_Step], _Step]:
        return self.step("Router", **kw)
