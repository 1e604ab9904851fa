"""The GateRunner: verify one attempt's patch with real tools, in a sandbox, on the record.

For each attempt the planning side proposes (a ``PlanOutcome`` carrying a unified diff),
:meth:`GateRunner.verify`:

1. refuses to start if the run's :class:`~tracebound.pipeline.retry.ledger.RetryLedger`
   does not verify (no gate process is started on a broken audit chain);
2. copies the target into a :class:`~tracebound.pipeline.retry.sandbox.Sandbox` and applies
   the patch there, strictly (a patch that does not apply is a ``patch_rejected`` signal);
3. runs each gate as a real subprocess (tests, a linter, the secret scan) under the
   sandbox's limits and, where the OS allows, without a network;
4. turns each tool's output into structured :class:`FailingSignal` s (parsers), stores
   the raw output only redacted and only as evidence for humans, and emits
   ``TrustGatePassed`` / ``TrustGateFailed`` per gate to the ledger stream
   ``gates/<workflow_id>`` (the attempt id is the events' ``correlation_id``);
5. returns a :class:`TrustOutcome` (the planning side attaches it to the attempt's anchor).

The attempt enters the RetryLedger afterwards, by :meth:`GateRunner.record_attempt`: the
planning side calls the hook *before* it records the attempt's anchor and writes
``chain_head.bin``, and the attempts line must bind to that head.

Confidence says how far the verdict can be trusted, not whether it passed: ``high`` when
every gate ran to its own conclusion without a network; ``medium`` when network isolation
was unavailable (a pass could have depended on the network); ``low`` when a gate timed out,
crashed or hit a resource limit (the tool never reached a verdict of its own).

The loop passes :meth:`GateRunner.anchor_hook` to ``FallbackTier.run`` as its ``verify``
hook, then calls :meth:`GateRunner.record_attempt` with the returned plan, and
:meth:`GateRunner.request_retry` or :meth:`GateRunner.refuse` to record what it decided.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final, Literal, Protocol
from uuid import UUID

from blake3 import blake3

from tracebound.errors import ConfigError, LedgerAttemptOutOfOrder, ValidationFailed
from tracebound.events.catalog import (
    AttemptRefused,
    RetryRequested,
    SignalKind,
    TrustGateFailed,
    TrustGatePassed,
)
from tracebound.events.envelope import Payload, RecordedEvent
from tracebound.ids import AttemptId, ChainHead, GateId, SandboxRunId, Sha256Digest
from tracebound.ledger import Ledger
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.retry._patch import AppliedPatch, PatchError, apply_patch
from tracebound.pipeline.retry.ledger import (
    ATTEMPTS_FILE,
    AttemptRecord,
    RetryLedger,
    TrustSummary,
    planning_head,
    signal_key,
)
from tracebound.pipeline.retry.models import FailingSignal, TrustConfidence, TrustOutcome
from tracebound.pipeline.retry.parsers import (
    GateOutput,
    GateParse,
    Metric,
    Parser,
    parse_exit_code,
    parse_pytest_junit,
    parse_ruff_json,
    parse_secret_scan,
    signal,
)
from tracebound.pipeline.retry.sandbox import (
    NetworkIsolation,
    ProcessResult,
    Sandbox,
    SandboxLimits,
    probe_network_isolation,
)
from tracebound.store.blobs import BlobStore

__all__ = [
    "PATCH_GATE",
    "AnchorHook",
    "CommandGate",
    "GateReport",
    "GateResult",
    "GateRunner",
    "PlanLike",
    "gate_stream",
    "pytest_gate",
    "ruff_gate",
    "secret_scan_gate",
]

PATCH_GATE: Final = "patch"
_MAX_EVENT_SIGNALS: Final = 50
_FULL_SCORE: Final = 10_000
_UNTRUSTED_KINDS: Final = frozenset({"timeout", "crash", "resource_limit"})
RefusalCause = Literal["retry_limit", "budget_exceeded", "policy", "not_retryable"]


class PlanLike(Protocol):
    """The fields of the planning side's ``PlanOutcome`` that the gates read."""

    @property
    def tag(self) -> str: ...

    @property
    def attempt_id(self) -> UUID: ...

    @property
    def attempt_index(self) -> int: ...

    @property
    def workflow_id(self) -> str: ...

    @property
    def patch(self) -> str | None: ...

    @property
    def patch_blake3(self) -> str | None: ...

    @property
    def refusal_reason(self) -> str | None: ...

    @property
    def trust(self) -> TrustOutcome | None: ...


AnchorHook = Callable[[PlanLike], TrustOutcome]
"""What Phase 4 calls to have an attempt verified (``AnchorHook`` in the fallback API)."""


def gate_stream(workflow_id: str) -> str:
    """The ledger stream the gate events of one workflow go to."""
    return f"gates/{workflow_id}"


@dataclass(frozen=True, slots=True)
class CommandGate:
    """A gate: a command run in the sandbox copy, and the parser that reads its output.

    ``argv`` may hold these placeholders (whole or inside an argument):

    * ``{out}``: a private directory for files the tool writes (not in the copy);
    * ``{junitxml}``: ``{out}/<name>.junit.xml``, read by :func:`parse_pytest_junit`;
    * ``{changes}``: a JSON file naming the files the patch changed and the lines it added.

    ``timeout_s`` overrides the runner's default limit for this gate.
    """

    name: str
    argv: tuple[str, ...]
    parse: Parser = parse_exit_code
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name == PATCH_GATE or "/" in self.name:
            raise ConfigError(f"invalid gate name {self.name!r} (non-empty, no '/', not 'patch')")
        if not self.argv:
            raise ConfigError(f"gate {self.name!r}: empty command")


def pytest_gate(
    name: str = "tests",
    *,
    python: str | None = None,
    args: Sequence[str] = (),
    timeout_s: float | None = None,
) -> CommandGate:
    """The project's tests, with pytest's JUnit report parsed into test ids and messages."""
    return CommandGate(
        name,
        (
            python or sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "-o",
            "junit_family=xunit1",
            "--junitxml={junitxml}",
            *args,
        ),
        parse_pytest_junit,
        timeout_s,
    )


def ruff_gate(
    name: str = "lint",
    *,
    ruff: str | None = None,
    select: Sequence[str] = ("E9", "F"),
    timeout_s: float | None = None,
) -> CommandGate:
    """A linter that works offline: ``ruff check`` with JSON output (rule code + location).

    Raises:
        ConfigError: no ruff executable was found (pass ``ruff=``).
    """
    exe = (
        ruff or shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    )
    if exe is None:
        raise ConfigError("ruff_gate: no `ruff` executable found; install ruff or pass ruff=PATH")
    argv = (exe, "check", "--no-cache", "--output-format=json", "--select", ",".join(select), ".")
    return CommandGate(name, argv, parse_ruff_json, timeout_s)


def secret_scan_gate(
    name: str = "secrets",
    *,
    python: str | None = None,
    ignore_detectors: Sequence[str] | None = None,
    timeout_s: float | None = None,
) -> CommandGate:
    """The redactor's detectors over the lines the patch added (never printing a secret).

    ``python`` must be able to import tracebound; ``-I`` keeps the project's own files off
    ``sys.path`` so that it cannot shadow the scanner.
    """
    argv = [python or sys.executable, "-I", "-m", "tracebound.pipeline.retry._secret_scan"]
    argv.append("{changes}")
    if ignore_detectors is not None:
        argv.append(",".join(ignore_detectors))
    return CommandGate(name, tuple(argv), parse_secret_scan, timeout_s)


@dataclass(frozen=True, slots=True)
class GateResult:
    """One gate's verdict on one attempt."""

    gate: str
    passed: bool
    score: int
    signals: tuple[FailingSignal, ...]
    metrics: Mapping[str, Metric]
    evidence: str | None  # blob pointer of the redacted log, for humans


@dataclass(frozen=True, slots=True)
class GateReport:
    """Everything one :meth:`GateRunner.run` found, beyond the outcome the loop needs."""

    outcome: TrustOutcome
    results: tuple[GateResult, ...]
    isolation: NetworkIsolation
    events: tuple[RecordedEvent, ...] = field(default=())
    started_at: datetime | None = None

    @property
    def evidence_paths(self) -> tuple[str, ...]:
        """Pointers to the redacted logs (``AttemptSummary.evidence_paths``)."""
        return tuple(r.evidence for r in self.results if r.evidence is not None)


def _patch_digest(patch: str) -> str:
    return blake3(patch.encode("utf-8")).hexdigest()


def _sha256_of(pointer: str) -> Sha256Digest:
    return Sha256Digest(pointer.removeprefix("blob://"))


class GateRunner:
    """Runs the gates for each attempt and records what they found.

    Args:
        gates: In the order they run. Every gate runs even after one failed, so the next
            attempt learns about every problem at once.
        ledger: Where gate events go (stream ``gates/<workflow_id>``); its clock and id
            source time the attempts and name the sandbox runs.
        redactor: Scrubs gate output before it is stored and signal text before it is used.
        evidence: Blob store for the redacted gate logs.
        runs_root: ``<store>/remediation``; when set, each workflow's RetryLedger lives in
            ``runs_root/<workflow_id>`` and must verify before any gate starts.
        limits: Default time, memory and file-size limits per gate process.
        isolation: How to cut gates off the network; probed once when omitted.
        require_isolation: Refuse to run without network isolation instead of lowering
            confidence.
        sandbox_dir: Where sandboxes are created (default: the system temp directory).
    """

    def __init__(
        self,
        gates: Sequence[CommandGate],
        *,
        ledger: Ledger,
        redactor: Redactor,
        evidence: BlobStore,
        runs_root: Path | None = None,
        limits: SandboxLimits | None = None,
        isolation: NetworkIsolation | None = None,
        require_isolation: bool = False,
        sandbox_dir: Path | None = None,
    ) -> None:
        names = [g.name for g in gates]
        if not gates:
            raise ConfigError("a GateRunner needs at least one gate (an empty gate passes all)")
        if len(set(names)) != len(names):
            raise ConfigError(f"gate names must be unique: {names}")
        self.gates = tuple(gates)
        self.ledger = ledger
        self.redactor = redactor
        self.evidence = evidence
        self.runs_root = runs_root
        self.limits = limits or SandboxLimits()
        self.isolation = isolation or probe_network_isolation()
        if require_isolation and not self.isolation.available:
            raise ConfigError(f"network isolation is required but {self.isolation.detail}")
        self.sandbox_dir = sandbox_dir
        self._reports: dict[str, GateReport] = {}

    # -- the retry ledger ---------------------------------------------------------------

    def retry_ledger(self, workflow_id: str) -> RetryLedger | None:
        """Open and verify the workflow's RetryLedger, vouched for by the ledger.

        The planning side's stream ``attempts/<workflow_id>`` is the authority on its chain
        head (:func:`~tracebound.pipeline.retry.ledger.planning_head`); chain_head.bin must
        agree with it. None without ``runs_root``, and for a run that has neither an anchor
        in the ledger nor an attempts log yet (its first attempt is being verified).

        Raises:
            AuditChainCorrupted: the run directory does not verify.
        """
        if self.runs_root is None:
            return None
        run_dir = self.runs_root / workflow_id
        head = planning_head(self.ledger.store, workflow_id)
        if head is None and not (run_dir / ATTEMPTS_FILE).exists():
            return None
        retry = RetryLedger(run_dir, prev_chain_head=head)
        retry.ensure_usable()
        return retry

    # -- verifying ----------------------------------------------------------------------

    def anchor_hook(self, target: Path) -> AnchorHook:
        """Bind the target repository: the result is Phase 4's ``AnchorHook``."""

        def hook(plan: PlanLike) -> TrustOutcome:
            return self.verify(plan, target=target)

        return hook

    def verify(
        self, plan: PlanLike, *, target: Path, workflow_id: str | None = None
    ) -> TrustOutcome:
        """Verify one attempt and return its :class:`TrustOutcome` (see :meth:`run`)."""
        return self.run(plan, target=target, workflow_id=workflow_id).outcome

    def run(self, plan: PlanLike, *, target: Path, workflow_id: str | None = None) -> GateReport:
        """Verify one attempt; the full report, with evidence pointers and events.

        Raises:
            AuditChainCorrupted: the run's RetryLedger does not verify; nothing ran.
            LedgerAttemptOutOfOrder: the plan's attempt index is not the next one the
                attempts log expects (recorded already, or one skipped); nothing ran.
            ValidationFailed: the plan is a refusal, or names another workflow.
            ConfigError: the target is not a directory.
        """
        wf = workflow_id if workflow_id is not None else plan.workflow_id
        if wf != plan.workflow_id:
            raise ValidationFailed(
                "workflow_id", f"{wf!r} but the plan is for {plan.workflow_id!r}"
            )
        if plan.tag == "Refused":
            raise ValidationFailed("plan", "a refused plan has nothing to verify; call refuse()")
        if not Path(target).is_dir():
            raise ConfigError(f"the target {target} is not a directory")
        retry = self.retry_ledger(wf)  # before anything runs: a broken chain runs nothing
        if retry is not None and plan.attempt_index != retry.next_index:
            # record_attempt would refuse it afterwards; refuse before running its code.
            raise LedgerAttemptOutOfOrder(
                f"attempt index {plan.attempt_index} is out of order: {retry.next_index} is "
                f"next in {retry.path}; no gate ran"
            )
        started_at = self.ledger.clock.now()
        sandbox_run_id = f"sbx-{self.ledger.ids.new_id()}"
        events: list[RecordedEvent] = []
        results: list[GateResult] = []
        with Sandbox(
            Path(target),
            isolation=self.isolation,
            limits=self.limits,
            base_dir=self.sandbox_dir,
            path_dirs=(str(Path(sys.executable).parent),),
        ) as box:
            applied, patch_result = self._apply(plan, box)
            results.append(patch_result)
            events.append(self._emit(plan, wf, patch_result))
            if applied is not None:
                changes = box.out / "changes.json"
                changes.write_text(_changes_json(applied), encoding="utf-8")
                for gate in self.gates:
                    result = self._run_gate(gate, box, changes)
                    results.append(result)
                    events.append(self._emit(plan, wf, result))
        outcome = self._outcome(results, sandbox_run_id)
        report = GateReport(outcome, tuple(results), self.isolation, tuple(events), started_at)
        self._reports[sandbox_run_id] = report
        return report

    def report(self, sandbox_run_id: str) -> GateReport | None:
        """The report of a run this runner made (for evidence paths), if it made it."""
        return self._reports.get(sandbox_run_id)

    def _apply(self, plan: PlanLike, box: Sandbox) -> tuple[AppliedPatch | None, GateResult]:
        reject: FailingSignal | None = None
        applied: AppliedPatch | None = None
        if plan.patch is None:
            reject = signal(PATCH_GATE, "patch_rejected", "patch", "the plan carries no patch")
        elif plan.patch_blake3 is not None and _patch_digest(plan.patch) != plan.patch_blake3:
            reject = signal(
                PATCH_GATE,
                "patch_rejected",
                "patch",
                "the patch bytes do not hash to the plan's patch_blake3",
            )
        else:
            try:
                applied = apply_patch(box.work, plan.patch)
            except PatchError as exc:
                hunk = None if exc.hunk is None else f"hunk {exc.hunk}"
                reject = signal(PATCH_GATE, "patch_rejected", exc.path or "patch", exc.reason, hunk)
        if reject is not None:
            reject = self._scrub(reject)
            log = f"patch rejected: {reject.subject}: {reject.message}\n".encode()
            pointer = self.evidence.put(log).pointer
            return None, GateResult(
                PATCH_GATE, passed=False, score=0, signals=(reject,), metrics={}, evidence=pointer
            )
        assert applied is not None
        metrics: dict[str, Metric] = {
            "files_changed": len(applied.files),
            "lines_added": sum(len(f.added_lines) for f in applied.files),
        }
        return applied, GateResult(
            PATCH_GATE, passed=True, score=_FULL_SCORE, signals=(), metrics=metrics, evidence=None
        )

    def _run_gate(self, gate: CommandGate, box: Sandbox, changes: Path) -> GateResult:
        files = {"junitxml": box.out / f"{gate.name}.junit.xml", "changes": changes}
        values = {"{out}": str(box.out), **{f"{{{k}}}": str(v) for k, v in files.items()}}
        argv = tuple(_expand(arg, values) for arg in gate.argv)
        result = box.run(argv, name=gate.name, timeout_s=gate.timeout_s)
        if result.timed_out:
            seconds = gate.timeout_s or self.limits.timeout_s
            parsed = GateParse(
                signals=(signal(gate.name, "timeout", gate.name, f"no result after {seconds:g}s"),)
            )
        else:
            parsed = gate.parse(GateOutput(gate.name, result, box.work, files))
        signals = tuple(self._scrub(s) for s in parsed.signals)
        limit = None if result.exit_code == 0 else _limit_hit(gate.name, result)
        if limit is not None:  # whatever the tool reported, the sandbox cut it short
            signals = (limit, *signals)
        elif result.exit_code != 0 and not signals:
            signals = (_unexplained(gate.name, result),)
        passed = result.exit_code == 0 and not signals
        score = parsed.score if parsed.score is not None else (_FULL_SCORE if passed else 0)
        if passed:
            score = _FULL_SCORE
        metrics: dict[str, Metric] = {
            **parsed.metrics,
            "exit_code": -1 if result.exit_code is None else result.exit_code,
            "duration_ms": result.duration_ms,
            "network_isolated": self.isolation.available,
        }
        pointer = self.evidence.put(self._log(gate.name, result)).pointer
        return GateResult(
            gate.name,
            passed=passed,
            score=score,
            signals=signals,
            metrics=metrics,
            evidence=pointer,
        )

    def _scrub(self, s: FailingSignal) -> FailingSignal:
        """Redact a signal's text fields: tool output is untrusted and may echo secrets."""

        def clean(text: str) -> str:
            return self.redactor.redact_text(text).value

        return signal(
            s.gate,
            s.kind,
            clean(s.subject),
            clean(s.message),
            None if s.location is None else clean(s.location),
        )

    def _scrubbed(self, outcome: TrustOutcome) -> TrustOutcome:
        """A verdict with its signals redacted. This runner's own are already; a verdict
        from another hook (``FallbackTier`` takes any) is recorded through here too."""
        signals = tuple(self._scrub(s) for s in outcome.failing_signals)
        return outcome.model_copy(update={"failing_signals": signals})

    def _log(self, gate: str, result: ProcessResult) -> bytes:
        header = (
            f"gate: {gate}\nargv: {json.dumps(list(result.argv))}\n"
            f"exit_code: {result.exit_code}\ntimed_out: {result.timed_out}\n"
            f"duration_ms: {result.duration_ms}\n"
            f"network_isolation: {self.isolation.method}\n"
        )
        body = (
            f"{header}--- stdout (tail) ---\n{result.stdout.decode('utf-8', 'replace')}\n"
            f"--- stderr (tail) ---\n{result.stderr.decode('utf-8', 'replace')}\n"
        )
        return self.redactor.redact_text(body).value.encode("utf-8")

    def _outcome(self, results: Sequence[GateResult], sandbox_run_id: str) -> TrustOutcome:
        signals = tuple(s for r in results for s in r.signals)
        passed = all(r.passed for r in results) and len(results) > 1
        if not passed and not signals:  # only the patch gate ran and it passed: impossible
            signals = (signal(PATCH_GATE, "crash", "gates", "no gate ran"),)
        confidence: TrustConfidence
        if any(s.kind in _UNTRUSTED_KINDS for s in signals):
            confidence = "low"
        elif not self.isolation.available:
            confidence = "medium"
        else:
            confidence = "high"
        score = sum(r.score for r in results) // len(results)
        return TrustOutcome(
            passed=passed,
            confidence=confidence,
            score=score,
            failing_signals=signals,
            sandbox_run_id=sandbox_run_id,
        )

    # -- events -------------------------------------------------------------------------

    def _record(self, plan: PlanLike, workflow_id: str, payload: Payload) -> RecordedEvent:
        (event,) = self.ledger.record(
            gate_stream(workflow_id),
            [payload],
            workflow_id=workflow_id,
            correlation_id=str(plan.attempt_id),
        )
        return event

    def _emit(self, plan: PlanLike, workflow_id: str, result: GateResult) -> RecordedEvent:
        if result.passed:
            return self._record(
                plan,
                workflow_id,
                TrustGatePassed(
                    gate=GateId(result.gate),
                    signals={SignalKind(k): v for k, v in result.metrics.items()},
                    score=result.score,
                ),
            )
        return self._record(
            plan,
            workflow_id,
            TrustGateFailed(
                gate=GateId(result.gate),
                failing_signals=_keys(result.signals),
                score=result.score,
                retry_count=plan.attempt_index,
            ),
        )

    def request_retry(
        self, plan: PlanLike, outcome: TrustOutcome, summary_pointer: str
    ) -> RecordedEvent:
        """Record that the loop will retry after this failed attempt (``RetryRequested``).

        ``summary_pointer`` is the blob digest (``sha256:…`` or ``blob://sha256:…``) of the
        sanitised ``AttemptSummary`` handed to the next attempt.

        Raises:
            ValidationFailed: the outcome passed (there is nothing to retry).
        """
        if outcome.passed:
            raise ValidationFailed("outcome", "a passing attempt is not retried")
        return self._record(
            plan,
            plan.workflow_id,
            RetryRequested(
                attempt_id=AttemptId(plan.attempt_id),
                attempt_index=plan.attempt_index,
                gate=GateId(outcome.failing_signals[0].gate),
                sandbox_run_id=SandboxRunId(outcome.sandbox_run_id),
                failing_signals=_keys(self._scrubbed(outcome).failing_signals),
                summary_pointer=_sha256_of(summary_pointer),
            ),
        )

    def refuse(self, plan: PlanLike, *, cause: RefusalCause, reason: str) -> RecordedEvent:
        """Record that no further attempt will be made (``AttemptRefused``).

        After the last allowed attempt (``cause="retry_limit"``) or a planning-side
        refusal; the attempt itself goes into the attempts log by :meth:`record_attempt`.
        """
        return self._record(
            plan,
            plan.workflow_id,
            AttemptRefused(
                attempt_id=AttemptId(plan.attempt_id),
                attempt_index=plan.attempt_index,
                cause=cause,
                reason=self.redactor.redact_text(reason).value,  # free text, the caller's
            ),
        )

    # -- the attempts log -----------------------------------------------------------------

    def record_attempt(self, plan: PlanLike) -> ChainHead:
        """Append a finished attempt to the run's RetryLedger; returns its chain hash.

        Call it once per attempt, after ``FallbackTier.run`` returned the plan (refusals
        too): only then has the planning side recorded the attempt's anchor and written
        ``chain_head.bin``, which the new line binds to. The verdict is ``plan.trust``
        (what the anchor recorded), with the isolation of the sandbox run that produced it.

        Raises:
            ConfigError: the runner has no ``runs_root``.
            AuditChainCorrupted: the run directory does not verify against the ledger.
            LedgerAttemptOutOfOrder: the attempt is recorded already, or out of order.
        """
        retry = self.retry_ledger(plan.workflow_id)
        if retry is None:
            raise ConfigError(
                "record_attempt needs runs_root, and the planning side's anchor for the attempt"
            )
        trust: TrustSummary | None = None
        report: GateReport | None = None
        if plan.trust is not None:
            report = self._reports.get(plan.trust.sandbox_run_id)
            isolated = self.isolation.available if report is None else report.isolation.available
            trust = TrustSummary.from_outcome(self._scrubbed(plan.trust), network_isolated=isolated)
        now = self.ledger.clock.now()
        started_at = report.started_at if report is not None and report.started_at else now
        return retry.record(
            _attempt_record(
                plan,
                retry,
                trust=trust,
                started_at=started_at,
                recorded_at=now,
            )
        )


def _attempt_record(
    plan: PlanLike,
    retry: RetryLedger,
    *,
    trust: TrustSummary | None,
    started_at: datetime,
    recorded_at: datetime,
) -> AttemptRecord:
    # model_validate, not the constructor: the plan's tag is a plain str in PlanLike and
    # the model is what checks it against the four outcomes.
    return AttemptRecord.model_validate(
        {
            "workflow_id": plan.workflow_id,
            "attempt_index": plan.attempt_index,
            "attempt_id": plan.attempt_id,
            "plan_tag": plan.tag,
            "patch_blake3": plan.patch_blake3,
            "refusal_reason": plan.refusal_reason,
            "planning_chain_head": retry.planning_head,
            "trust": trust,
            "started_at": started_at,
            "recorded_at": recorded_at,
        }
    )


def _expand(arg: str, values: Mapping[str, str]) -> str:
    for token, value in values.items():
        arg = arg.replace(token, value)
    return arg


def _keys(signals: Sequence[FailingSignal]) -> tuple[SignalKind, ...]:
    keys = dict.fromkeys(SignalKind(signal_key(s.kind, s.subject)) for s in signals)
    return tuple(keys)[:_MAX_EVENT_SIGNALS]


def _limit_hit(gate: str, result: ProcessResult) -> FailingSignal | None:
    """A resource-limit signal when the process ran into one of the sandbox's limits."""
    stderr = result.stderr[-4096:]
    name = result.signal_name
    if b"MemoryError" in stderr:
        return signal(gate, "resource_limit", gate, "hit the sandbox's memory limit")
    if b"File too large" in stderr or name in {"SIGXFSZ", "SIGXCPU"}:
        return signal(gate, "resource_limit", gate, "hit the sandbox's file size limit")
    if name == "SIGKILL":
        return signal(gate, "resource_limit", gate, "killed (SIGKILL), likely a limit")
    return None


def _unexplained(gate: str, result: ProcessResult) -> FailingSignal:
    """A non-zero exit the parser found no reason for: the tool crashed."""
    name = result.signal_name
    if name is not None:
        return signal(gate, "crash", gate, f"killed by {name}")
    return signal(gate, "crash", gate, f"exit {result.exit_code} without a parsable report")


def _changes_json(applied: AppliedPatch) -> str:
    return json.dumps(
        {
            "files": [
                {
                    "path": f.path,
                    "created": f.created,
                    "deleted": f.deleted,
                    "added_lines": list(f.added_lines),
                }
                for f in applied.files
            ]
        },
        sort_keys=True,
    )
