"""Rebuild a recorded run from the ledger and the blob store, checking everything on the way.

The ledger holds one stream per run (``run/<run_id>``) with digests, not payloads; the blob
store holds the payloads by digest. :func:`replay_run` puts the two together again and
trusts neither:

* every record of the run is read back as stored bytes and re-hashed, and each must link
  to the one before it (BLAKE3 chain, from genesis, stream versions 1, 2, 3...): a damaged
  stream raises :class:`~tracebound.errors.LedgerDamaged`, because nothing built on it
  could be trusted;
* the log's positions must be contiguous, 1 to its last: a deleted event anywhere (the
  run's own or another stream's) is a GAP at the first missing position. This is what
  finds a deleted *tail* of the run that was not next to what is left of it (a gated run's
  approval and resume, after other runs' events): the rest of the run chains from genesis
  and would read as a run that stopped there. A store that counts its positions in its
  index (:class:`~tracebound.store.port.LogExtentStore`: SQLite, PostgreSQL) answers with
  one statement, ``COUNT``, ``MIN`` and ``MAX`` of the positions, and no hash is read while
  they agree; only when they do not is the log searched for the first missing position.
  Any other store (JSONL) has the chain hashes read and counted from the position before
  the run's first record to the log's end (a gap before the run is then ``verify``'s).
  Damage is named as ``verify`` names it: the first bad position the checks reach, and
  the same kind (the records between the run and a gap after it are checked with
  ``verify``'s own code, on that failure path only);
* the log must be at least as long as its newest checkpoint and its witness's: events cut
  off the *end* of the log leave no gap, and only the signed length tells that log from
  one that ended there (TRUNCATION or ROLLBACK). With neither, replay cannot know, and the
  report says so (``covered``: the length a signature vouches for);
* what is left to ``tracebound verify``: records of other runs edited, moved or replaced
  (a deleted event whose position was filled with a forged one, re-chained: only the
  Merkle root shows it), and the signatures of the checkpoints;
* every blob a record names (the inputs, each step's artifact, each validation's output)
  is fetched and its SHA-256 compared with the digest the record holds;
* every accepted artifact is validated against the TPC contract again (the schema may
  have been tightened since; an artifact that no longer passes is reported).

Blob problems are *reported*, not raised: a blob may have been erased on purpose (the chain
still verifies without it), and an auditor wants the whole list, not the first one.

A run that was taken over (``tracebound resume RUN --take-over``) holds two sets of steps
under the same step ids: the dead claimant's, recorded between its claim and the
take-over, and the take-over's. Replay shows what *happened*, so it lists and checks both
(the abandoned records are in the chain and their blobs were stored like any other), and
marks each abandoned step and blame with the take-over that abandoned it
(:mod:`tracebound.events.takeover`, the rule every reader applies). What summarises what
the run *did* (``lineage``, ``blame``, ``status``) is built from the records that count.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from tracebound.contract import TPCArtifact, validate_tpc
from tracebound.errors import (
    ConfigError,
    DamageKind,
    IntegrityError,
    LedgerDamaged,
    StorageError,
    TraceboundError,
    ValidationFailed,
)
from tracebound.events.catalog import (
    ApprovalRecorded,
    BlameAssigned,
    RunFinished,
    RunStarted,
    StepRecorded,
    ValidationRecorded,
)
from tracebound.events.envelope import RecordedEvent, format_timestamp
from tracebound.events.record import RawRecord, decode_record
from tracebound.events.takeover import TakeOver, TakeOvers
from tracebound.integrity.chain import GENESIS, chain_hash
from tracebound.integrity.verify import (
    ChunkVerifier,
    check_length,
    diagnose_mismatch,
    link_damage,
)
from tracebound.ledger import Ledger
from tracebound.pipeline.runner import no_such_run, run_stream
from tracebound.store.blobs import BlobStore
from tracebound.store.nodes import LogNodes
from tracebound.store.port import LedgerStore, MerkleNodeStore, position_runs

__all__ = [
    "AbandonedBy",
    "BlobCheck",
    "ChecksumFailure",
    "ReplayReport",
    "ReplayedBlame",
    "ReplayedStep",
    "check_not_truncated",
    "read_run_records",
    "replay_run",
]

BlobCheck = Literal["ok", "missing", "mismatch", "contract"]


@dataclass(frozen=True)
class ChecksumFailure:
    """One blob that does not back its record: which step, what blob, and what is wrong.

    ``kind`` is ``missing`` (erased or never stored), ``mismatch`` (the bytes do not hash
    to the digest) or ``contract`` (the bytes are there but are not a valid artifact).
    """

    step_id: str | None
    what: Literal["inputs", "artifact", "validation-output"]
    kind: Literal["missing", "mismatch", "contract"]
    digest: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "what": self.what,
            "kind": self.kind,
            "digest": self.digest,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class AbandonedBy:
    """The take-over that abandoned a record: the position of its ``run_resumed`` and the
    human it names (:mod:`tracebound.events.takeover`)."""

    position: int
    taken_over_by: str | None

    @classmethod
    def of(cls, take_over: TakeOver | None) -> AbandonedBy | None:
        return None if take_over is None else cls(take_over.position, take_over.taken_over_by)

    def as_dict(self) -> dict[str, Any]:
        return {"position": self.position, "taken_over_by": self.taken_over_by}


def _abandoned_dict(by: AbandonedBy | None) -> dict[str, Any] | None:
    return None if by is None else by.as_dict()


@dataclass(frozen=True)
class ReplayedStep:
    """One ARL entry, rebuilt: the record's fields and the artifact its digest names.

    ``abandoned_by`` is the take-over that abandoned this record (None: the step counts as
    the run's); an abandoned step is checked like any other, since it happened.
    """

    position: int
    step_id: str
    role: str
    status: str
    parent_step_id: str | None
    error_origin: str | None
    artifact_hash: str
    blob: BlobCheck
    artifact: TPCArtifact | None = None
    error: str | None = None  # a failed step's recorded error text (redacted)
    abandoned_by: AbandonedBy | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "step_id": self.step_id,
            "role": self.role,
            "status": self.status,
            "parent_step_id": self.parent_step_id,
            "error_origin": self.error_origin,
            "artifact_hash": self.artifact_hash,
            "blob": self.blob,
            "summary": None if self.artifact is None else self.artifact.outputs.summary,
            "error": self.error,
            "abandoned_by": _abandoned_dict(self.abandoned_by),
        }


@dataclass(frozen=True)
class ReplayedBlame:
    """One ``blame_assigned`` record: the failed step, its origin (None: unresolved), and
    the take-over that abandoned it (None: it counts).

    The roles, the step that found the failure and the reason are the record's own: the
    answer to "who caused it" without a second read of the log.
    """

    position: int
    failed: str
    origin: str | None
    abandoned_by: AbandonedBy | None = None
    failed_role: str = ""
    origin_role: str | None = None
    detected_by: str = ""
    reason: str = ""
    harmful: bool = False

    @classmethod
    def of(cls, position: int, p: BlameAssigned, gone: AbandonedBy | None) -> ReplayedBlame:
        return cls(
            position, p.failed_step_id, p.origin_step_id, gone, failed_role=p.failed_role,
            origin_role=p.origin_role, detected_by=p.detected_by, reason=p.reason,
            harmful=p.harmful,
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "failed": self.failed,
            "failed_role": self.failed_role,
            "detected_by": self.detected_by,
            "origin": self.origin,
            "origin_role": self.origin_role,
            "reason": self.reason,
            "harmful": self.harmful,
            "abandoned_by": _abandoned_dict(self.abandoned_by),
        }


@dataclass
class ReplayReport:
    """A run rebuilt from ``run_id`` and its artifact hashes."""

    run_id: str
    pipeline: str
    pipeline_type: str
    pipeline_ref: str | None
    critical: bool
    inputs_digest: str
    inputs: dict[str, Any] | None
    status: str  # the newest counted RunFinished's status; "running" when there is none
    events: int
    head: bytes  # the run stream's chain head after its last record
    # Every step and blame record, in stream order, each marked with the take-over that
    # abandoned it, if one did: what happened.
    steps: list[ReplayedStep] = field(default_factory=list)
    blames: list[ReplayedBlame] = field(default_factory=list)
    # What the run did, from the records that count only: a step id's latest counted
    # record's parent (so a repair only a dead claimant made is not in it).
    lineage: dict[str, str | None] = field(default_factory=dict)  # step -> parent
    approvals: list[ApprovalRecorded] = field(default_factory=list)
    # The log position of each of ``approvals``, in the same order (what `prove` takes).
    approval_positions: list[int] = field(default_factory=list)
    take_overs: list[TakeOver] = field(default_factory=list)  # in stream order
    failures: list[ChecksumFailure] = field(default_factory=list)
    # The log positions found contiguous: 1 to the log's last when the store counts its
    # positions; else from the position before the run's first record to the log's last.
    positions: tuple[int, int] = (0, 0)
    size: int = 0  # the log's last position
    # The log length a checkpoint (stored) or the witness vouches for: events cut off the
    # end beyond it would not show (0: nothing signed covers the log).
    covered: int = 0

    @property
    def blame(self) -> list[tuple[str, str | None]]:
        """``(failed, origin)`` of each blame that counts (not abandoned by a take-over)."""
        return [(b.failed, b.origin) for b in self.blames if b.abandoned_by is None]

    @property
    def ok(self) -> bool:
        """Every blob is present, matches its digest, and meets the contract."""
        return not self.failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "pipeline_type": self.pipeline_type,
            "pipeline_ref": self.pipeline_ref,
            "critical": self.critical,
            "status": self.status,
            "events": self.events,
            "head": self.head.hex(),
            "inputs_digest": self.inputs_digest,
            "chain": "ok",
            "positions": {"from": self.positions[0], "to": self.positions[1]},
            "log": {"size": self.size, "covered": self.covered},
            "steps": [s.as_dict() for s in self.steps],
            "lineage": self.lineage,
            # Every blame record, like ``steps`` (the ``blame`` attribute is the summary).
            "blame": [b.as_dict() for b in self.blames],
            "take_overs": [t.as_dict() for t in self.take_overs],
            "approvals": [
                {
                    "position": position,
                    "step_id": a.step_id,
                    "approver": a.approver,
                    "decision": a.decision,
                    "timestamp": format_timestamp(a.timestamp),
                }
                for a, position in zip(self.approvals, self.approval_positions, strict=True)
            ],
            "failures": [f.as_dict() for f in self.failures],
        }


_SPAN_PAGE = 1 << 16  # positions whose hashes are counted per read


def _span(store: LedgerStore, first: int, last: int) -> tuple[int, int]:
    """The positions to find contiguous around a run at ``first .. last``: one more on each
    side, within the log, so that a deleted first or last event of the run shows too."""
    return max(1, first - 1), max(last, min(store.size(), last + 1))


def _stored(store: LedgerStore, start: int, stop: int) -> int:
    """How many positions of ``start .. stop`` the store holds (hashes only, when it can)."""
    if isinstance(store, MerkleNodeStore):
        return len(store.read_hashes(start, stop))
    return sum(1 for _ in store.read_raw(start=start, stop=stop))


def _extent(store: LedgerStore) -> tuple[int, int, int] | None:
    """The store's ``(count, lowest, highest)`` of positions, or None when it cannot count
    them without reading (:class:`~tracebound.store.port.LogExtentStore`).

    Looked up by name, not with ``isinstance``: a wrapper (the group committer) forwards a
    store's extras by ``__getattr__``, which a runtime-checkable Protocol does not see.
    """
    extent = getattr(store, "log_extent", None)
    if extent is None:
        return None
    count, lowest, highest = extent()
    return int(count), int(lowest), int(highest)


def _log_gap(
    store: LedgerStore, start: int, span: tuple[int, int]
) -> tuple[LedgerDamaged | None, tuple[int, int]]:
    """The first missing position replay finds (a GAP, or None), and the positions it found
    contiguous.

    With the store's count: positions ``1 .. highest`` are all there when the count says
    so, and nothing is read; otherwise the log is searched from position 1. Without it: the
    hashes from ``start`` to the log's end are counted page by page, which covers the run's
    span and everything after it (where a deleted tail of the run would be).
    """
    extent = _extent(store)
    if extent is None:
        size = store.size()
        return _gap(store, start, size), (span[0], max(size, span[1]))
    count, lowest, highest = extent
    if count == highest and (count == 0 or lowest == 1):
        return None, (min(1, highest), highest)
    # An event was deleted (or one written below position 1, which no read from 1 sees):
    # find the first missing position, page by page, from the start of the log.
    return _gap(store, 1, highest), (1, highest)


def _outside(damage: LedgerDamaged, span: tuple[int, int]) -> LedgerDamaged:
    """``damage`` at a position outside the run's span, saying so."""
    if damage.position is None or span[0] <= damage.position <= span[1]:
        return damage
    where = "before" if damage.position < span[0] else "after"
    return LedgerDamaged(
        damage.kind,
        damage.position,
        f"{damage.detail} ({where} the run's span {span[0]}..{span[1]}: the log is damaged; "
        "`tracebound verify` checks all of it)",
    )


def _gap(store: LedgerStore, start: int, stop: int) -> LedgerDamaged | None:
    """The first position of ``start .. stop`` missing from the log: a GAP there, the kind
    and position `verify` names.

    Positions are counted page by page (hashes only); only a page that comes up short is
    read record by record, to name the position (:meth:`LogNodes.missing`).
    """
    page = start
    while page <= stop:
        end = min(stop, page + _SPAN_PAGE - 1)
        if _stored(store, page, end) != end - page + 1:
            return LogNodes(store).missing(page, end)
        page = end + 1
    return None


def _record_damage(
    stream: str, version: int, head: bytes, raw: RawRecord
) -> tuple[LedgerDamaged | None, RecordedEvent | None]:
    """What is wrong with ``raw`` as the record after (``version``, ``head``) of ``stream``,
    checked in `verify`'s order (hash, columns, link); else its decoded event."""
    if raw.stream_id != stream:
        return LedgerDamaged(
            DamageKind.TAMPER, raw.position, f"indexed in {stream!r} but stored as another"
        ), None
    if chain_hash(raw.prev_hash, raw.body) != raw.hash:
        why = "the record's bytes do not hash to its hash"
        return diagnose_mismatch(raw, why, hashed=False), None
    try:
        event = decode_record(raw.body, raw.hash)
    except (IntegrityError, ValidationFailed) as exc:
        return LedgerDamaged(
            DamageKind.MALFORMED, raw.position, f"the record cannot be decoded: {exc}"
        ), None
    if (event.stream_id, event.stream_version, event.position) != (
        stream,
        raw.stream_version,
        raw.position,
    ):
        # Moved (REORDER: the bytes say another position) or edited columns (TAMPER).
        return diagnose_mismatch(raw, "the record's bytes disagree with its columns"), None
    return link_damage(stream, version, head, raw), event


def _read_run(
    store: LedgerStore, run_id: str
) -> tuple[list[tuple[RawRecord, RecordedEvent]], tuple[int, int]]:
    """:func:`read_run_records`, and the positions found contiguous (see :func:`_log_gap`)."""
    stream = run_stream(run_id)
    try:
        positions = [e.position for e in store.read_stream(stream)]
    except LedgerDamaged:
        raise
    except (IntegrityError, ValidationFailed) as exc:
        raise _undecodable(store, stream, exc) from exc
    if not positions:
        raise no_such_run(store, run_id)
    raws: list[RawRecord] = []
    for first, last in position_runs(sorted(positions)):
        raws += store.read_raw(start=first, stop=last)
    span = _span(store, min(positions), max(positions))
    # A run whose first record left is not its first version lost its start somewhere
    # before it, outside the span: the log is searched from position 1 for the first
    # damage (only then: that record is damage whatever is found).
    start = 1 if raws and raws[0].stream_version != 1 else span[0]
    gap, contiguous = _log_gap(store, start, span)
    if gap is not None:
        gap = _outside(gap, span)
    out: list[tuple[RawRecord, RecordedEvent]] = []
    version, head = 0, bytes(GENESIS)
    for raw in raws:
        damage, event = _record_damage(stream, version, head, raw)
        if damage is not None:
            # A gap before this record comes first (a deleted event of the run is one: its
            # successor jumps a version, but the missing position is the damage).
            if gap is not None and (gap.position or 0) <= (damage.position or 0):
                damage = gap
            raise _earliest(store, start, damage)
        assert event is not None
        version, head = raw.stream_version, raw.hash
        out.append((raw, event))
    if gap is not None:
        raise _earliest(store, start, gap)
    return out, contiguous


def _earliest(store: LedgerStore, start: int, damage: LedgerDamaged) -> LedgerDamaged:
    """``damage``, or the first damage before it in the run's span, as `verify` finds it.

    Only on this failure path are the span's records before the damage read and checked
    with `verify`'s own code: a run's records moved up by a deleted row are found where the
    first one moved, not where the run's next record happens to be.
    """
    if damage.position is None or damage.position <= start:
        return damage
    found = ChunkVerifier(start).feed_all(store.read_raw(start=start, stop=damage.position - 1))
    earlier = found.damage
    if earlier is not None and earlier.position is not None and earlier.position < damage.position:
        return earlier
    return damage


def read_run_records(store: LedgerStore, run_id: str) -> list[tuple[RawRecord, RecordedEvent]]:
    """The run stream's records as stored bytes, each re-hashed and linked from genesis.

    The stream index only says *where* the records are; what is returned is decoded from
    the bytes that were hashed, so an index that lies cannot change what a caller sees.
    The log's positions must be contiguous too, counted by the store where it can (no
    record outside the run is read), else from the run's span to the log's end.

    Raises:
        ConfigError: there is no such run.
        LedgerDamaged: a record does not hash to its stored hash, does not link to the one
            before it (a stream version skipped: GAP), is not where the index says or where
            its bytes say (REORDER), or no longer decodes; or a position of the log is
            missing (GAP, at the first one). The first bad position is named, as
            ``tracebound verify`` names it.
    """
    return _read_run(store, run_id)[0]


def _undecodable(store: LedgerStore, stream: str, exc: Exception) -> LedgerDamaged:
    """The damage behind a run record that no longer decodes, at its position when found.

    Only on this failure path is the log scanned: the first record of ``stream`` whose
    bytes do not hash to its stored hash is where someone edited it.
    """
    for raw in store.read_raw():
        if raw.stream_id == stream and chain_hash(raw.prev_hash, raw.body) != raw.hash:
            return LedgerDamaged(
                DamageKind.TAMPER,
                raw.position,
                f"the record's bytes do not hash to its hash and no longer decode ({exc})",
            )
    return LedgerDamaged(
        DamageKind.MALFORMED, None, f"a record of {stream!r} cannot be decoded: {exc}"
    )


def check_not_truncated(ledger: Ledger | LedgerStore) -> int:
    """Refuse a store shorter than a checkpoint it holds, or than its witness's checkpoint;
    return the length they vouch for (0 when there is neither).

    A run cut short at the end of the log still chains from genesis, so this is what tells
    it from a run that simply stopped there. It is the length part of ``tracebound verify``
    (which also finds gaps and edits elsewhere in the log), cheap enough for every replay.

    Raises:
        LedgerDamaged: TRUNCATION (a stored checkpoint covers more events than the log
            holds) or ROLLBACK (the witness remembers a longer log than the store has).
    """
    store = ledger.store if isinstance(ledger, Ledger) else ledger
    newest = max((covered for covered, _note in store.checkpoints()), default=0)
    held: int | None = None
    if isinstance(ledger, Ledger) and ledger.witness is not None and ledger.verifier is not None:
        try:
            active = ledger.active_verifier()  # the witness holds the newest key's
            latest = None if active is None else ledger.witness.latest(active)
        except TraceboundError:
            latest = None  # an unreadable witness is `verify`'s to report
        held = latest.size if latest is not None else None
    # The stored checkpoints are not signature-checked here (verify does that).
    check_length(store.size(), newest, held, checkpoint="a stored checkpoint")
    return max(newest, held or 0)


def _fetch(
    blobs: BlobStore,
    digest: str,
    step_id: str | None,
    what: Literal["inputs", "artifact", "validation-output"],
    failures: list[ChecksumFailure],
) -> bytes | None:
    try:
        return blobs.get(digest)
    except IntegrityError as exc:
        failures.append(ChecksumFailure(step_id, what, "mismatch", digest, str(exc)))
    except StorageError as exc:
        failures.append(ChecksumFailure(step_id, what, "missing", digest, str(exc)))
    return None


def _step(
    raw: RawRecord, s: StepRecorded, blobs: BlobStore, failures: list[ChecksumFailure]
) -> ReplayedStep:
    data = _fetch(blobs, s.artifact_hash, s.step_id, "artifact", failures)
    step = ReplayedStep(
        position=raw.position,
        step_id=s.step_id,
        role=s.role,
        status=s.status,
        parent_step_id=s.parent_step_id,
        error_origin=s.error_origin,
        artifact_hash=s.artifact_hash,
        blob="ok",
    )
    if data is None:
        return replace(step, blob=failures[-1].kind)
    try:
        artifact, error = _decode_artifact(data, s)
    except ValidationFailed as exc:
        detail = f"not a valid artifact: {exc}"
        failures.append(ChecksumFailure(s.step_id, "artifact", "contract", s.artifact_hash, detail))
        return replace(step, blob="contract")
    return replace(step, artifact=artifact, error=error)


def _decode_artifact(data: bytes, s: StepRecorded) -> tuple[TPCArtifact | None, str | None]:
    """The artifact a blob holds, checked against the TPC contract and the step's role; a
    failed step's blob is its error record ``{"step": ..., "error": ...}`` instead."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValidationFailed("$", f"not JSON: {exc}") from exc
    if s.status == "error":
        if not isinstance(doc, dict) or doc.get("step") != s.step_id:
            raise ValidationFailed("$", "not the error record of this step")
        return None, str(doc.get("error"))
    artifact = validate_tpc(doc)
    if artifact.role != s.role:
        raise ValidationFailed("role", f"is {artifact.role} but the step is a {s.role}")
    return artifact, None


def _decode_inputs(data: bytes) -> dict[str, Any]:
    try:
        loaded = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValidationFailed("$", f"not JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ValidationFailed("$", "the run's inputs are not an object")
    return loaded


def replay_run(ledger: Ledger | LedgerStore, blobs: BlobStore, run_id: str) -> ReplayReport:
    """Rebuild every step of ``run_id`` from the ledger and the blob store; see the module doc.

    Raises:
        ConfigError: there is no such run, or its stream does not start with RunStarted.
        LedgerDamaged: the run's chain is broken (see :func:`read_run_records`), or the
            store is shorter than its checkpoints or its witness say (see
            :func:`check_not_truncated`).
    """
    store = ledger.store if isinstance(ledger, Ledger) else ledger
    try:
        records, span = _read_run(store, run_id)
    except ConfigError:
        check_not_truncated(ledger)  # a run cut off the end of the log whole is damage
        raise
    # After the run's own checks: damage inside the log comes before its length, as in
    # `verify`, which names the first bad position.
    covered = check_not_truncated(ledger)
    first = records[0][1].payload
    if not isinstance(first, RunStarted):
        raise ConfigError(f"run {run_id!r} does not start with run_started")
    failures: list[ChecksumFailure] = []
    inputs: dict[str, Any] | None = None
    data = _fetch(blobs, first.inputs_digest, None, "inputs", failures)
    if data is not None:
        try:
            inputs = _decode_inputs(data)
        except ValidationFailed as exc:
            failures.append(
                ChecksumFailure(None, "inputs", "contract", first.inputs_digest, str(exc))
            )
    report = ReplayReport(
        run_id=run_id,
        pipeline=first.pipeline,
        pipeline_type=first.pipeline_type,
        pipeline_ref=first.pipeline_ref,
        critical=first.critical,
        inputs_digest=first.inputs_digest,
        inputs=inputs,
        status="running",
        events=len(records),
        head=records[-1][0].hash,
        failures=failures,
        positions=span,
        size=span[1],
        covered=covered,
    )
    _rebuild(report, records, blobs)
    return report


def _rebuild(
    report: ReplayReport, records: list[tuple[RawRecord, RecordedEvent]], blobs: BlobStore
) -> None:
    """Add the run's steps, blames, approvals and status to ``report``, checking each blob
    a record names (into ``report.failures``)."""
    failures = report.failures
    # Which records a take-over abandoned is only known once the take-over is read: find
    # them all first (the same rule as the fold, metrics, `runs` and the runner).
    take_overs = TakeOvers()
    for _raw, event in records:
        take_overs.add(event)
    report.take_overs = list(take_overs.found)
    for raw, event in records:
        p = event.payload
        # Every record is checked, abandoned or not (its blobs were stored, and it is in the
        # chain); only the summaries of what the run did leave the abandoned ones out.
        gone = AbandonedBy.of(take_overs.abandoned.get(raw.position))
        if isinstance(p, StepRecorded):
            report.steps.append(replace(_step(raw, p, blobs, failures), abandoned_by=gone))
            if gone is None:
                report.lineage[p.step_id] = p.parent_step_id
        elif isinstance(p, ValidationRecorded) and p.output_digest is not None:
            _fetch(blobs, p.output_digest, p.step_id, "validation-output", failures)
        elif isinstance(p, BlameAssigned):
            report.blames.append(ReplayedBlame.of(raw.position, p, gone))
        elif isinstance(p, ApprovalRecorded):
            report.approvals.append(p)
            report.approval_positions.append(raw.position)
        elif isinstance(p, RunFinished) and gone is None:
            # The rule never abandons a finish (a final one ends the run's claims, a gated
            # one follows a new gate); were one abandoned, it would not be the run's status.
            report.status = p.status
