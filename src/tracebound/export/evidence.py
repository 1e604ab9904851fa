"""Evidence files: one run, self-contained, checkable offline with only the verifier key.

The design record asks that each run emit ``artifacts/agent-runs/{run_id}.json`` plus an
integrity hash. An auditor receiving that file has no access to the ledger, so the file
carries everything a check needs:

* the run's events as the *stored records* (the exact bytes that were hashed, base64, with
  ``prev_hash``, ``hash`` and ``position``), so each BLAKE3 link can be recomputed and the
  run stream's chain followed from genesis;
* the digests of the blobs those records name (inputs, artifacts, validation output) and
  whether each blob was still present when the file was written (blobs may be erased);
* the newest signed checkpoint (a C2SP signed note) and one RFC 6962 inclusion proof per
  event against it, so the records are shown to be in the signed log;
* ``run_head``: where the run ends in that checkpoint's tree, signed (below), or null;
* ``integrity``: SHA-256 over the RFC 8785 form of everything else, which catches
  corruption in transit. It is not a signature: anyone can recompute it. What an attacker
  cannot forge without the key is the checkpoint, and through the proofs every record.

Only what the ledger holds goes in, and the ledger holds only redacted data: no secret a
step saw can reach an evidence file.

Each record must be in the canonical (RFC 8785) form the ledger writes, read strictly: a
record holding a key twice could show a first-wins reader one value and the verifier
another, and whoever holds the store files can write such a row before the owner's next
checkpoint signs it (a checkpoint checks the chain, not the JSON).

What is signed about the run's end: the chain shows that no record was removed from the
middle of the run, and the proofs that each record is in the signed log, but neither says
where a run *ends*: a genuine prefix proves just as well. So, when the writer holds the
signing key, the file carries ``run_head``: a signed note (same key and C2SP note format as
the checkpoint, a distinct first line, :mod:`tracebound.integrity.run_head`) saying that in
the checkpoint's tree (origin, size and root) the run's stream ends at this stream version
and record hash, with this status. The verifier requires the file's records to end exactly
there, so a run cut back (before its ``run_finished`` and called ``running``; to a resumed
run's earlier ``gated`` finish; before the SLO alerts a critical pipeline records after its
``run_finished``) is refused, and so is a head of another run, another origin or another
checkpoint (one copied from an earlier file of the same run).

Still not proven, by design: freshness. An *older* genuine file of a run (written at its
gate, say) carries its own older checkpoint and head and verifies, truly, as the run up to
that tree; ``final`` is False for ``running`` and ``gated`` because the run may have gone on
since. Judge freshness by the checkpoint's size (and a witness, where there is one).

What the run cost: the file (format ``tracebound-evidence/3``) also carries ``costs``, the
run's spend stream ``costs/RUN`` (the ``cost_incurred`` records the remediation loop and
billing imports write), proven the same way: every record from stream version 1 to the last
inside the checkpoint's tree, chain-linked, each with its inclusion proof, and a signed
*stream head* (:mod:`tracebound.integrity.stream_head`) saying where that stream ends in the
tree, version 0 when the tree holds none of it. So the verifier states the whole recorded
spend up to the checkpoint (:class:`Spend`: an exact total and sums by role, source and
tier), and a record edited, dropped, or taken from another run is refused. A signed "no
spend" cannot be replayed onto a later tree (it names its tree), nor onto another run (it
names its stream). Stripping the spend head, or dropping ``costs`` and relabelling the file
``/2``, still verifies (the integrity hash is unkeyed), reported as spend unproven or not
carried; ``require_spend=True`` refuses both. The head says what the signer's own ledger
held; a store edit that hides a record from it is damage ``tracebound verify`` finds.

Files without a head (format ``tracebound-evidence/1``, written before heads existed; a
ledger holding only the verifier key writes ``run_head`` null) still verify, reported with
``run_head`` None: their end is unproven. The integrity hash is unkeyed, so anyone can strip a
head the same way; a verifier that needs the end proven passes ``require_head=True``
(``verify-evidence --require-head``), which refuses them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    Context,
    Decimal,
    Inexact,
    InvalidOperation,
    Overflow,
)
from pathlib import Path
from typing import Any, Final

from tracebound.canonical import canonical_bytes
from tracebound.errors import (
    CanonicalizationError,
    CheckpointError,
    ConfigError,
    DamageKind,
    IntegrityError,
    KeyRotationRefused,
    LedgerDamaged,
    ProofError,
    SigningKeyError,
    StorageError,
    ValidationFailed,
)
from tracebound.events.catalog import (
    FINAL_RUN_STATUSES,
    RunFinished,
    RunStarted,
    StepRecorded,
    ValidationRecorded,
)
from tracebound.events.record import RawRecord
from tracebound.integrity.chain import GENESIS, chain_hash
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.merkle import (
    MAX_PROOF_PATH,
    inclusion_proof,
    leaf_hash,
    verify_inclusion,
)
from tracebound.integrity.nodes import StoredTree
from tracebound.integrity.note import Checkpoint, SignedNote, open_checkpoint, parse_checkpoint
from tracebound.integrity.run_head import RUN_STATUSES, RunHead, open_run_head, sign_run_head
from tracebound.integrity.stream_head import StreamHead, open_stream_head, sign_stream_head
from tracebound.integrity.strict_json import loads_canonical_record, loads_strict
from tracebound.ledger import Ledger
from tracebound.pipeline.runner import no_such_run, run_stream
from tracebound.replay.rebuild import read_run_records
from tracebound.store.blobs import BlobStore
from tracebound.store.files import write_file_atomic
from tracebound.store.keyfile import file_stem
from tracebound.store.port import LedgerStore, position_runs

__all__ = [
    "DEFAULT_EVIDENCE_DIR",
    "FORMAT",
    "FORMAT_V1",
    "FORMAT_V2",
    "EvidenceInvalid",
    "EvidenceReport",
    "EvidenceWriter",
    "ExportedEvidence",
    "Spend",
    "build_evidence",
    "cost_stream",
    "evidence_path",
    "export_evidence",
    "integrity_hash",
    "verify_evidence",
    "write_evidence",
]

FORMAT: Final = "tracebound-evidence/3"
"""What this version writes: version 2 plus ``costs`` (the run's spend stream, proven)."""
FORMAT_V2: Final = "tracebound-evidence/2"
"""Written before the spend stream was carried; still verified, reported with ``spend`` None."""
FORMAT_V1: Final = "tracebound-evidence/1"
"""Written before run heads existed; still verified, and reported with ``run_head`` None."""
# The members each part of an evidence file has: exactly these. The integrity hash is not a
# signature, so anything else in the file ("approved_by": ...) would be vouched for by nobody.
_DOC_MEMBERS_V1: Final = frozenset(
    {"format", "run_id", "stream_id", "pipeline", "pipeline_type", "critical", "status",
     "events", "artifacts", "checkpoint", "tree_size", "proofs", "integrity"}
)  # fmt: skip
_DOC_MEMBERS: Final = {
    FORMAT_V1: _DOC_MEMBERS_V1,
    FORMAT_V2: _DOC_MEMBERS_V1 | {"run_head"},
    FORMAT: _DOC_MEMBERS_V1 | {"run_head", "costs"},
}
_COSTS_MEMBERS: Final = frozenset({"stream_id", "events", "proofs", "head"})
_EVENT_MEMBERS: Final = frozenset(
    {"position", "stream_version", "event_type", "prev_hash", "hash", "body"}
)
_ARTIFACT_MEMBERS: Final = frozenset({"kind", "step_id", "digest", "present"})
_PROOF_MEMBERS: Final = frozenset({"position", "proof"})
DEFAULT_EVIDENCE_DIR: Final = Path("artifacts") / "agent-runs"
_INTEGRITY: Final = {"algorithm": "sha256", "over": "RFC 8785 canonical JSON of every other member"}


class EvidenceInvalid(IntegrityError):
    """An evidence file fails a check; ``part`` names which one.

    ``part`` is one of ``format`` (not an evidence file), ``integrity`` (the integrity hash),
    ``checkpoint`` (signature, or no checkpoint when one is required), ``record`` (a
    record's bytes, hash or fields), ``chain`` (the run stream's links, order or ends),
    ``proof`` (an inclusion proof), ``digests`` (the artifact digests listed) or ``head``
    (the signed run head or spend head: its signature, or the records not ending where it
    says, or none when one is required). The spend stream's records, chain and proofs fail
    as ``record``, ``chain`` and ``proof``, their messages naming a cost record.
    """

    def __init__(self, part: str, detail: str) -> None:
        self.part = part
        self.detail = detail
        super().__init__(f"evidence {part} check failed: {detail}")

    def __reduce__(self) -> tuple[type[EvidenceInvalid], tuple[str, str]]:
        return (type(self), (self.part, self.detail))


@dataclass(frozen=True)
class EvidenceReport:
    """What a verified evidence file says (returned only when every check passed)."""

    run_id: str
    pipeline: str
    status: str
    events: int
    artifacts: int
    signed: bool
    origin: str | None
    tree_size: int | None
    root: str | None
    final: bool = True  # False for running or gated: later records may exist (see above)
    # Where the signed head says the run ends (the file's records end exactly there), or
    # None: no head (an older writer, no signing key, or stripped), so the end is unproven.
    run_head: RunHead | None = None
    # The run's spend stream and its sums (a /3 file), or None: the file does not carry it
    # (an older format), so it says nothing about spend, not even that there was none.
    spend: Spend | None = None
    # The file's records, every check above passed on them (``signed`` says whether a
    # signature vouches for them too), for a caller to list; not in :meth:`as_dict`.
    records: tuple[RawRecord, ...] = field(default=(), repr=False, compare=False)
    cost_records: tuple[RawRecord, ...] = field(default=(), repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "run_id": self.run_id,
            "pipeline": self.pipeline,
            "status": self.status,
            "events": self.events,
            "artifacts": self.artifacts,
            "signed": self.signed,
            "origin": self.origin,
            "tree_size": self.tree_size,
            "root": self.root,
            "final": self.final,
            "run_head": None
            if self.run_head is None
            else {
                "stream_version": self.run_head.stream_version,
                "hash": self.run_head.hash.hex(),
                "status": self.run_head.status,
                "tree_size": self.run_head.tree_size,
            },
            "spend": None if self.spend is None else self.spend.as_dict(),
        }


def integrity_hash(doc: Mapping[str, Any]) -> str:
    """``sha256:`` of the RFC 8785 bytes of ``doc`` without its ``integrity`` member."""
    body = {k: v for k, v in doc.items() if k != "integrity"}
    return "sha256:" + hashlib.sha256(canonical_bytes(body)).hexdigest()


# -- writing ----------------------------------------------------------------------------


def _latest_checkpoint(ledger: Ledger) -> tuple[str, Checkpoint] | None:
    """The newest checkpoint note and what it says."""
    note = ledger.store.latest_checkpoint()
    if note is None:
        return None
    verifier = ledger.active_verifier()  # the key that signs it now (ADR 0017)
    if verifier is not None:
        cp = open_checkpoint(note, verifier)
    else:  # still worth including: the auditor checks the signature with their key
        cp = parse_checkpoint(SignedNote.parse(note).text)
    return note, cp


def cost_stream(run_id: str) -> str:
    """The stream a run's incurred spend is recorded under (``cost_incurred`` records)."""
    return f"costs/{run_id}"


def _head_signer(ledger: Ledger, note: str) -> NoteSigner | None:
    """This ledger's signer, when it signed checkpoint ``note`` (a head by another key would
    not verify beside it); else None."""
    if ledger.signer is None:
        return None
    try:
        open_checkpoint(note, ledger.signer.verifier)
    except CheckpointError:  # signed by a key this process does not hold
        return None
    return ledger.signer


def _heads(
    ledger: Ledger,
    run_id: str,
    *,
    last: RawRecord,
    costs: Sequence[RawRecord],
    status: str,
    note: str,
    cp: Checkpoint,
) -> tuple[str | None, str | None]:
    """The signed run head and spend-stream head of a file carrying checkpoint ``note``."""
    signer = _head_signer(ledger, note)
    if signer is None:
        return None, None
    head = RunHead(cp.origin, run_id, last.stream_version, last.hash, status, cp.size, cp.root)
    # Version 0 with the zero hash: signed "no spend recorded in this tree", not left out.
    version, end = (costs[-1].stream_version, costs[-1].hash) if costs else (0, bytes(GENESIS))
    spent = StreamHead(cp.origin, cost_stream(run_id), version, end, cp.size, cp.root)
    return sign_run_head(head, signer), sign_stream_head(spent, signer)


def _read_costs(store: LedgerStore, stream: str, upto: int | None) -> list[RawRecord]:
    """The spend stream's stored records up to position ``upto`` (all with None), each
    re-hashed and linked from genesis: the head signed over them says they are all.

    Raises:
        LedgerDamaged: a record does not hash to its hash, is not the stream's next version
            or does not link to the one before it.
    """
    try:
        positions = sorted(
            e.position for e in store.read_stream(stream) if upto is None or e.position <= upto
        )
    except LedgerDamaged:  # already says where and what
        raise
    except (IntegrityError, ValidationFailed) as exc:
        raise LedgerDamaged(
            DamageKind.MALFORMED, None, f"a record of {stream!r} cannot be decoded: {exc}"
        ) from exc
    raws: list[RawRecord] = []
    for first, last in position_runs(positions):
        raws += store.read_raw(start=first, stop=last)
    version, head = 0, bytes(GENESIS)
    for raw in raws:
        if chain_hash(raw.prev_hash, raw.body) != raw.hash:
            raise LedgerDamaged(DamageKind.TAMPER, raw.position, "the record's bytes do not "
                                "hash to its hash")  # fmt: skip
        if raw.stream_id != stream or raw.stream_version != version + 1 or raw.prev_hash != head:
            raise LedgerDamaged(
                DamageKind.GAP,
                raw.position,
                f"{stream!r} version {raw.stream_version} does not follow version {version}",
            )
        version, head = raw.stream_version, raw.hash
    return raws


def _artifacts(records: Sequence[tuple[RawRecord, Any]], blobs: BlobStore) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str | None, str]] = set()
    for _, event in records:
        p = event.payload
        entry: tuple[str, str | None, str] | None = None
        if isinstance(p, RunStarted):
            entry = ("inputs", None, p.inputs_digest)
        elif isinstance(p, StepRecorded):
            entry = ("artifact", p.step_id, p.artifact_hash)
        elif isinstance(p, ValidationRecorded) and p.output_digest is not None:
            entry = ("validation-output", p.step_id, p.output_digest)
        if entry is not None and entry not in seen:
            seen.add(entry)
            kind, step, digest = entry
            out.append(
                {"kind": kind, "step_id": step, "digest": digest, "present": blobs.exists(digest)}
            )
    return out


def build_evidence(ledger: Ledger, blobs: BlobStore, run_id: str) -> dict[str, Any]:
    """The evidence document of one run, as JSON-ready data (see the module docstring).

    Proofs are included when the newest checkpoint covers the whole run; otherwise the
    document is unsigned (``checkpoint`` is null) and says so. With proofs, and the signing
    key of that checkpoint on the ledger, ``run_head`` is a signed note saying where the run's
    stream ends in the checkpoint's tree (:mod:`tracebound.integrity.run_head`); else null.

    Raises:
        ConfigError: there is no such run.
        LedgerDamaged: the run's chain is broken, or the log is shorter than its checkpoint.
        ProofError: a proof does not verify against the checkpoint (the log was altered).
    """
    # The checkpoint first, then the records: the log only grows, so every record of the run
    # inside the checkpoint's tree is read, and a signed head's "ends here" is true of it.
    latest = _latest_checkpoint(ledger)
    records = read_run_records(ledger.store, run_id)
    started = records[0][1].payload
    if not isinstance(started, RunStarted):
        raise ConfigError(f"run {run_id!r} does not start with run_started")
    status = "running"
    for _, event in records:
        if isinstance(event.payload, RunFinished):
            status = event.payload.status
    newest = records[-1][0].position
    signed = latest if latest is not None and latest[1].size >= newest else None
    # The spend inside the checkpoint's tree (all of it for an unsigned file): what a signed
    # head can say is the whole of the run's spend there.
    costs = _read_costs(
        ledger.store, cost_stream(run_id), None if signed is None else signed[1].size
    )
    proofs: list[dict[str, Any]] = []
    cost_proofs: list[dict[str, Any]] = []
    head: str | None = None
    cost_head: str | None = None
    if signed is not None:
        cp = signed[1]
        proven = [r for r, _ in records] + costs

        def build(tree: StoredTree) -> list[list[bytes]]:
            # One tree for all the proofs: they share most of their subtrees.
            return [inclusion_proof(r.position - 1, cp.size, tree.subtree_root) for r in proven]

        def check(paths: list[list[bytes]]) -> None:
            for raw, proof in zip(proven, paths, strict=True):
                verify_inclusion(leaf_hash(raw.hash), raw.position - 1, cp.size, proof, cp.root)

        paths = ledger.checked_proof(build, check)
        for raw, proof in zip(proven, paths, strict=True):
            entry = {"position": raw.position, "proof": [h.hex() for h in proof]}
            (proofs if raw.stream_id == run_stream(run_id) else cost_proofs).append(entry)
        head, cost_head = _heads(
            ledger, run_id, last=records[-1][0], costs=costs, status=status, note=signed[0], cp=cp
        )
    doc: dict[str, Any] = {
        "format": FORMAT,
        "run_id": run_id,
        "stream_id": run_stream(run_id),
        "pipeline": started.pipeline,
        "pipeline_type": started.pipeline_type,
        "critical": started.critical,
        "status": status,
        "events": [_entry(raw) for raw, _ in records],
        "artifacts": _artifacts(records, blobs),
        "checkpoint": None if signed is None else signed[0],
        "tree_size": None if signed is None else signed[1].size,
        "proofs": proofs,
        "run_head": head,
        "costs": {
            "stream_id": cost_stream(run_id),
            "events": [_entry(raw) for raw in costs],
            "proofs": cost_proofs,
            "head": cost_head,
        },
    }
    doc["integrity"] = {**_INTEGRITY, "hash": integrity_hash(doc)}
    return doc


def _entry(raw: RawRecord) -> dict[str, Any]:
    """One stored record as an entry of ``events``: its bytes and what the store assigned."""
    return {
        "position": raw.position,
        "stream_version": raw.stream_version,
        "event_type": raw.event_type,
        "prev_hash": raw.prev_hash.hex(),
        "hash": raw.hash.hex(),
        "body": base64.b64encode(raw.body).decode("ascii"),
    }


def evidence_path(directory: Path, run_id: str) -> Path:
    """``<directory>/<run_id>.json`` (an id unsafe as a file name gets a hashed stem)."""
    return directory / f"{file_stem(run_id)}.json"


def write_evidence(ledger: Ledger, blobs: BlobStore, run_id: str, directory: Path) -> Path:
    """Build the run's evidence, check it as an auditor would, and write it atomically.

    Raises:
        StorageError: the file could not be written.
        EvidenceInvalid: what was built does not verify (never handed out).
    """
    doc = build_evidence(ledger, blobs, run_id)
    verifier = ledger.active_verifier()
    if verifier is not None:
        verify_evidence(doc, verifier, require_signed=False)
    path = evidence_path(directory, run_id)
    data = _file_bytes(doc)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_file_atomic(path, data, mode=0o644, overwrite=True)
    except OSError as exc:
        raise StorageError(f"cannot write evidence {path}: {exc}") from exc
    return path


@dataclass(frozen=True)
class ExportedEvidence:
    """An evidence file built on request (``tracebound export evidence``), checked."""

    doc: dict[str, Any]
    report: EvidenceReport  # what verify_evidence says of ``doc``: run, head, spend
    checkpointed: bool  # a checkpoint was signed first, to cover the run and its spend

    def data(self) -> bytes:
        """The file's bytes, as the runner writes them."""
        return _file_bytes(self.doc)


def export_evidence(
    ledger: Ledger, blobs: BlobStore, run_id: str, *, checkpoint: bool = False
) -> ExportedEvidence:
    """The run's evidence against the newest checkpoint, any time after the run: the whole
    run and all of its spend recorded so far, proven, with signed heads, or an error.

    The runner's file is written when a run stops; spend recorded after that (a billing
    import) or a newer checkpoint makes it stale. What this builds is refused, not written
    partly proven, when records of the run or of its spend stream lie after the newest
    checkpoint: with ``checkpoint`` one is signed first, else the caller is told to sign one.

    Raises:
        ConfigError: no such run; or records after the newest checkpoint, ``checkpoint``
            False (or no signing key to sign one).
        SigningKeyError: no signing key, or not the one of the newest checkpoint: the ends
            of the run and of its spend would be unproven.
        LedgerDamaged, ProofError: as :func:`build_evidence`.
    """
    if ledger.store.stream_head(run_stream(run_id)) is None:
        raise no_such_run(ledger.store, run_id)
    doc = build_evidence(ledger, blobs, run_id)
    _refuse_between_finishes(doc)
    after = _uncovered(ledger, doc)
    signed = False
    if checkpoint and any(after):
        ledger.checkpoint()
        signed = True
        doc = build_evidence(ledger, blobs, run_id)
        after = _uncovered(ledger, doc)
    if any(after):
        raise ConfigError(_uncovered_message(run_id, *after))
    if doc["run_head"] is None or ledger.signer is None:
        raise SigningKeyError(
            f"the evidence of run {run_id!r} needs the key that signed the newest checkpoint, "
            "to sign where the run and its spend end (--key; `tracebound keys show` and "
            "`tracebound verify` name the ledger's key)"
        )
    report = verify_evidence(
        doc, ledger.signer.verifier, require_head=True, require_spend=True
    )  # never handed out unchecked
    return ExportedEvidence(doc, report, signed)


def _refuse_between_finishes(doc: Mapping[str, Any]) -> None:
    """Refuse a run that stopped at a gate and has records after that finish (an approval,
    a rejection, a resume's claim) but no later one: the format names a run's status by
    how its stream ends, and has none for "decided, not yet resumed" (the runner writes no
    file then). Its file could only fail its own check, as if the run were cut back.

    Raises:
        ConfigError: the run waits for ``tracebound resume``.
    """
    tail = [e["event_type"] for e in doc["events"] if e["event_type"] != "slo_alert_raised"]
    if doc["status"] != "running" and tail[-1] != "run_finished":
        raise ConfigError(
            f"run {doc['run_id']!r} finished as {doc['status']!r} and then recorded "
            f"{tail[-1]}, but has not been resumed since: an evidence file names a run's "
            "status by how its stream ends, and there is none for this yet; run `tracebound "
            "resume` first (the file of its gate is the one the runner wrote then)"
        )


def _uncovered(ledger: Ledger, doc: Mapping[str, Any]) -> tuple[int, int]:
    """How many records of the run, and of its spend stream, the newest checkpoint does not
    cover (a file built now leaves them unproven, or the spend out)."""
    size = doc["tree_size"]
    if size is None:  # not signed: the newest checkpoint does not reach the run's end
        latest = _latest_checkpoint(ledger)
        size = 0 if latest is None else latest[1].size
    run_after = sum(1 for e in doc["events"] if e["position"] > size)
    head = ledger.store.stream_head(doc["costs"]["stream_id"])
    recorded = 0 if head is None else head.version
    spend_in = sum(1 for e in doc["costs"]["events"] if e["position"] <= size)
    return run_after, recorded - spend_in


def _uncovered_message(run_id: str, run_after: int, spend_after: int) -> str:
    parts = [f"{run_after} record(s) of the run"] if run_after else []
    if spend_after:
        parts.append(f"{spend_after} spend record(s) of {cost_stream(run_id)}")
    return (
        f"{' and '.join(parts)} of {run_id!r} lie after the newest signed checkpoint, so the "
        "evidence would not prove them: run `tracebound checkpoint` first, or pass "
        "--checkpoint to sign one now"
    )


def _file_bytes(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("ascii")


def _run_ended_unsigned(ledger: Ledger, run_id: str, exc: KeyRotationRefused) -> KeyRotationRefused:
    """The refusal of a run's evidence checkpoint (its key rotated away while it ran), saying
    that the run itself ended: run again, it would repeat what it did."""
    ended = "ended"
    for event in ledger.store.read_stream(run_stream(run_id)):
        if isinstance(event.payload, RunFinished):
            ended = f"ended {event.payload.status}"
    return KeyRotationRefused(
        f"run {run_id} {ended}, but its evidence was not written: {exc}. Once "
        f"checkpoints can be signed again: tracebound export evidence {run_id} --checkpoint"
    )


class EvidenceWriter:
    """A Runner's ``evidence`` sink: at the end of each run, sign and write its evidence.

    With a signing key configured on the ledger, a checkpoint is taken first, so the
    evidence carries proofs for every event of the run. The checkpoint verifies the events
    since the previous one (ADR 0011), so its cost follows the run, not the ledger.
    """

    def __init__(self, directory: Path = DEFAULT_EVIDENCE_DIR, *, checkpoint: bool = True) -> None:
        self.directory = directory
        self.checkpoint = checkpoint
        self.written: list[Path] = []

    def __call__(self, ledger: Ledger, blobs: BlobStore, run_id: str) -> Path:
        if self.checkpoint and ledger.signer is not None:
            try:
                ledger.checkpoint()
            except KeyRotationRefused as exc:
                raise _run_ended_unsigned(ledger, run_id, exc) from exc
        path = write_evidence(ledger, blobs, run_id, self.directory)
        self.written.append(path)
        return path


# -- verifying --------------------------------------------------------------------------


def _load(source: Path | str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return dict(source)
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read evidence {source}: {exc.strerror or exc}") from exc
    try:
        doc = loads_strict(data)
    except ValueError as exc:  # not UTF-8, not JSON, or a key twice in one object
        raise EvidenceInvalid("format", str(exc)) from exc
    if not isinstance(doc, dict):
        raise EvidenceInvalid("format", "not a JSON object")
    return doc


def _field(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], part: str) -> Any:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise EvidenceInvalid(part, f"{key!r} is missing or of the wrong type")
    return value


def _members(obj: Any, allowed: frozenset[str], part: str, what: str) -> None:
    """``obj`` is an object with no member outside ``allowed`` (missing ones are reported
    by the checks that read them)."""
    if not isinstance(obj, Mapping):
        raise EvidenceInvalid(part, f"{what} is not a JSON object")
    unknown = sorted(repr(k)[:60] for k in obj.keys() - allowed)
    if unknown:
        raise EvidenceInvalid(
            part,
            f"{what} has unknown member(s) {', '.join(unknown)}: nothing the signed records "
            "do not vouch for may ride along",
        )


def _hex(value: Any, part: str, what: str, size: int = 32) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != size or raw.hex() != value:
        raise EvidenceInvalid(part, f"{what} is not {size} bytes of lower-case hex")
    return raw


@dataclass
class _Record:
    position: int
    version: int
    prev: bytes
    hash: bytes
    body: dict[str, Any]
    raw: bytes  # the record bytes ``body`` was read from

    def stored(self) -> RawRecord:
        """The record as a store returns it (its columns taken from the checked body)."""
        body = self.body
        return RawRecord(
            position=self.position,
            stream_id=body["stream_id"],
            stream_version=self.version,
            event_type=body["event_type"],
            workflow_id=body.get("workflow_id"),
            timestamp=str(body.get("timestamp")),
            schema_version=body.get("schema_version", 1),
            prev_hash=self.prev,
            hash=self.hash,
            body=self.raw,
        )


def _check_record(item: Any, stream: str, label: str = "record") -> _Record:
    """One record: its bytes hash to its hash, and its fields agree with those bytes."""
    _members(item, _EVENT_MEMBERS, "record", f"an entry of {label}s")
    position = _field(item, "position", int, "record")
    where = f"{label} at position {position}"
    version = _field(item, "stream_version", int, "record")
    prev = _hex(item.get("prev_hash"), "record", f"{where}: prev_hash")
    claimed = _hex(item.get("hash"), "record", f"{where}: hash")
    try:
        body_bytes = base64.b64decode(_field(item, "body", str, "record"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EvidenceInvalid("record", f"{where}: body is not base64") from exc
    if chain_hash(prev, body_bytes) != claimed:
        raise EvidenceInvalid("record", f"{where}: the bytes do not hash to its hash")
    try:
        body = loads_canonical_record(body_bytes)
    except ValueError as exc:
        raise EvidenceInvalid("record", f"{where}: the record is {exc}") from exc
    said = (
        body.get("position"),
        body.get("stream_id"),
        body.get("stream_version"),
        body.get("prev_hash"),
        body.get("event_type"),
    )
    if said != (position, stream, version, prev.hex(), item.get("event_type")):
        raise EvidenceInvalid("record", f"{where}: its fields disagree with the hashed record")
    if not isinstance(body.get("payload"), dict):
        raise EvidenceInvalid("record", f"{where}: the record has no payload")
    return _Record(position, version, prev, claimed, body, body_bytes)


def _check_chain(records: list[_Record], doc: Mapping[str, Any], run_id: str) -> str:
    """The run stream from genesis, without gaps, from run_started to run_finished (and the
    SLO alerts a critical pipeline raises right after it)."""
    if not records:
        raise EvidenceInvalid("chain", "the evidence holds no events")
    _check_links(records, "", "an event")
    first = records[0].body["payload"]
    # A critical pipeline's SLO alerts follow its run_finished; nothing else may.
    tail = len(records)
    while tail > 1 and records[tail - 1].body["payload"].get("kind") == "slo_alert_raised":
        tail -= 1
    last = records[tail - 1].body["payload"]
    if first.get("kind") != "run_started" or first.get("run_id") != run_id:
        raise EvidenceInvalid("chain", f"the stream does not open with run {run_id}'s start")
    for name in ("pipeline", "pipeline_type", "critical"):
        said, recorded = doc.get(name), first.get(name)
        if type(said) is not type(recorded) or said != recorded:
            raise EvidenceInvalid(
                "record", f"the {name} named ({said!r:.60}) does not match run_started's"
            )
    return _check_ending(records, last, doc.get("status"))


def _check_ending(records: list[_Record], last: Mapping[str, Any], status: Any) -> str:
    """The status the file names is how its stream ends (``last``: its last record before
    any SLO alerts), or ``running`` for a run that never finished."""
    if not isinstance(status, str) or status not in RUN_STATUSES:
        raise EvidenceInvalid("format", f"unknown run status {status!r:.60}")
    if status == "running":
        # As written: "running" only while the run has never finished (a gated run that
        # was resumed ends with a second run_finished, and says how that one ended).
        if any(r.body["payload"].get("kind") == "run_finished" for r in records):
            raise EvidenceInvalid(
                "chain", "the run is said to be running, but its stream records it finishing"
            )
    elif last.get("kind") != "run_finished":
        raise EvidenceInvalid(
            "chain", f"the stream does not end with the run finishing as {status!r}: truncated"
        )
    elif last.get("status") != status:  # not "truncated": it may be only the status edited
        raise EvidenceInvalid(
            "chain",
            f"the stream ends with the run finishing as {last.get('status')!r:.60}, not as the "
            f"{status!r} the file names: the status was edited, or the run cut back to an "
            "earlier finish",
        )
    return status


def _check_digests(records: list[_Record], listed: Any) -> int:
    """Every blob a record names is listed, and nothing else is."""
    if not isinstance(listed, list):
        raise EvidenceInvalid("digests", "'artifacts' is not a list")
    have: set[tuple[str, str | None, str]] = set()
    for item in listed:
        _members(item, _ARTIFACT_MEMBERS, "digests", "an entry of 'artifacts'")
        kind = _field(item, "kind", str, "digests")
        digest = _field(item, "digest", str, "digests")
        step = item.get("step_id")
        if (
            not isinstance(item.get("present"), bool)
            or "step_id" not in item  # null for the run's inputs, but always said
            or not (step is None or isinstance(step, str))
        ):
            raise EvidenceInvalid("digests", f"malformed entry for {digest}")
        if (kind, step, digest) in have:
            raise EvidenceInvalid("digests", f"the {kind} digest {digest} is listed twice")
        have.add((kind, step, digest))
    need: set[tuple[str, str | None, str]] = set()
    for r in records:
        p = r.body["payload"]
        if p.get("kind") == "run_started":
            need.add(("inputs", None, p.get("inputs_digest")))
        elif p.get("kind") == "step_recorded":
            need.add(("artifact", p.get("step_id"), p.get("artifact_hash")))
        elif p.get("kind") == "validation_recorded" and p.get("output_digest") is not None:
            need.add(("validation-output", p.get("step_id"), p.get("output_digest")))
    missing, extra = need - have, have - need
    if missing:
        kind, step, digest = sorted(missing, key=str)[0]
        raise EvidenceInvalid(
            "digests", f"the {kind} digest {digest} of step {step} is not listed as recorded"
        )
    if extra:
        kind, step, digest = sorted(extra, key=str)[0]
        raise EvidenceInvalid("digests", f"{kind} digest {digest} is listed but never recorded")
    return len(have)


def _check_proofs(
    records: list[_Record], doc: Mapping[str, Any], verifier: NoteVerifier, origin: str | None
) -> Checkpoint:
    note = _field(doc, "checkpoint", str, "checkpoint")
    try:
        cp = open_checkpoint(note, verifier, origin=origin)
    except CheckpointError as exc:  # SignatureInvalid included
        raise EvidenceInvalid("checkpoint", str(exc)) from exc
    tree_size = doc.get("tree_size")
    if type(tree_size) is not int or tree_size != cp.size:  # not True for 1, nor 1.0
        raise EvidenceInvalid("checkpoint", f"tree_size is not the checkpoint's {cp.size}")
    _check_paths(records, doc.get("proofs"), cp, "event")
    return cp


def _check_paths(records: list[_Record], proofs: Any, cp: Checkpoint, label: str) -> None:
    """Exactly one inclusion proof per record, each leading to the checkpoint's root."""
    if not isinstance(proofs, list):
        raise EvidenceInvalid("proof", f"the proofs of each {label} are not a list")
    by_position: dict[int, list[bytes]] = {}
    for item in proofs:
        _members(item, _PROOF_MEMBERS, "proof", "an entry of 'proofs'")
        pos = _field(item, "position", int, "proof")
        path = _field(item, "proof", list, "proof")
        if len(path) > MAX_PROOF_PATH:
            raise EvidenceInvalid("proof", f"the proof of position {pos} is too long")
        by_position[pos] = [_hex(h, "proof", f"proof of position {pos}") for h in path]
    if set(by_position) != {r.position for r in records} or len(proofs) != len(records):
        raise EvidenceInvalid("proof", f"there is not exactly one proof per {label}")
    for r in records:
        try:
            verify_inclusion(
                leaf_hash(r.hash), r.position - 1, cp.size, by_position[r.position], cp.root
            )
        except ProofError as exc:
            raise EvidenceInvalid("proof", f"{label} at position {r.position}: {exc}") from exc


def _check_head(
    note: Any,
    records: list[_Record],
    *,
    run_id: str,
    status: str,
    cp: Checkpoint,
    verifier: NoteVerifier,
) -> RunHead:
    """The signed run head: by the checkpoint's key and origin, for this run, bound to this
    checkpoint, and the file's records end exactly where it says."""
    if not isinstance(note, str):
        raise EvidenceInvalid("head", "'run_head' is not a signed note")
    try:
        head = open_run_head(note, verifier, origin=cp.origin)
    except CheckpointError as exc:  # SignatureInvalid included
        raise EvidenceInvalid("head", f"run head: {exc}") from exc
    if head.run_id != run_id:
        raise EvidenceInvalid("head", f"the run head is for run {head.run_id!r:.80}, not this one")
    if (head.tree_size, head.root) != (cp.size, cp.root):
        raise EvidenceInvalid(
            "head",
            f"the run head is for a tree of {head.tree_size}, not the checkpoint's {cp.size}: "
            "it was signed beside another checkpoint",
        )
    last = records[-1]
    if (head.stream_version, head.hash) != (last.version, last.hash):
        raise EvidenceInvalid(
            "head",
            f"the signed run head says the run's stream ends at version {head.stream_version} "
            f"in a tree of {cp.size}, but the records end at version {last.version}: the run "
            "was cut back or added to",
        )
    if head.status != status:
        raise EvidenceInvalid(
            "head", f"the signed run head says {head.status!r}, the file says {status!r}"
        )
    return head


_AMOUNT: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# Exact sums: as many digits as the amounts need, so no total is ever rounded.
_EXACT: Final = Context(
    prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, InvalidOperation, Overflow]
)


@dataclass(frozen=True)
class SpendShare:
    """The spend of the records with one role, source or tier."""

    key: str | None  # None: the records name no role
    total_usd: Decimal
    records: int


@dataclass(frozen=True)
class Spend:
    """The run's spend stream (``costs/RUN``) as a verified file holds it.

    ``total_usd`` is the exact sum of the ``amount_usd`` of its ``cost_incurred`` records
    (``records`` of them). With ``head`` (a signed stream head the records end at), that is
    the whole recorded spend of the run up to the checkpoint's tree; with ``head`` None,
    only what the file lists (the head was stripped, or the writer held no signing key).
    """

    stream_id: str
    total_usd: Decimal
    records: int
    events: int  # every record of the stream, of any kind
    by_role: tuple[SpendShare, ...]
    by_source: tuple[SpendShare, ...]
    by_tier: tuple[SpendShare, ...]
    head: StreamHead | None

    @property
    def proven(self) -> bool:
        return self.head is not None

    def as_dict(self) -> dict[str, Any]:
        def shares(name: str, items: tuple[SpendShare, ...]) -> list[dict[str, Any]]:
            return [
                {name: i.key, "total_usd": _usd(i.total_usd), "records": i.records} for i in items
            ]

        return {
            "stream_id": self.stream_id,
            "proven": self.proven,
            "total_usd": _usd(self.total_usd),
            "records": self.records,
            "by_role": shares("role", self.by_role),
            "by_source": shares("source", self.by_source),
            "by_tier": shares("tier", self.by_tier),
            "head": None
            if self.head is None
            else {
                "stream_version": self.head.stream_version,
                "hash": self.head.hash.hex(),
                "tree_size": self.head.tree_size,
            },
        }


def _usd(amount: Decimal) -> str:
    """Plain decimal, never an exponent: what the spec says a total is written as."""
    return format(amount, "f")


def _cost_amount(r: _Record) -> tuple[Decimal, str | None, str, str] | None:
    """A cost record's amount, role, source and tier; None for a record of another kind."""
    p = r.body["payload"]
    if p.get("kind") != "cost_incurred":
        return None
    amount, role, source, tier = p.get("amount_usd"), p.get("role"), p.get("source"), p.get("tier")
    if not (isinstance(amount, str) and _AMOUNT.fullmatch(amount)):
        raise EvidenceInvalid(
            "record", f"cost record at position {r.position}: amount_usd is not a plain decimal"
        )
    if not (isinstance(source, str) and isinstance(tier, str)) or not (
        role is None or isinstance(role, str)
    ):
        raise EvidenceInvalid(
            "record", f"cost record at position {r.position}: its role, source or tier is malformed"
        )
    return Decimal(amount), role, source, tier


def _spend(stream: str, records: list[_Record], head: StreamHead | None) -> Spend:
    total, count = Decimal(0), 0
    groups: tuple[dict[str | None, tuple[Decimal, int]], ...] = ({}, {}, {})
    for r in records:
        cost = _cost_amount(r)
        if cost is None:
            continue
        amount, *keys = cost
        total, count = _EXACT.add(total, amount), count + 1
        for group, key in zip(groups, keys, strict=True):
            was, n = group.get(key, (Decimal(0), 0))
            group[key] = (_EXACT.add(was, amount), n + 1)

    def shares(group: dict[str | None, tuple[Decimal, int]]) -> tuple[SpendShare, ...]:
        order = sorted(group, key=lambda k: (k is None, k or ""))
        return tuple(SpendShare(k, *group[k]) for k in order)

    role, source, tier = (shares(g) for g in groups)
    return Spend(stream, total, count, len(records), role, source, tier, head)


def _check_cost_chain(records: list[_Record]) -> None:
    """The spend stream from genesis without gaps (it may have no record at all)."""
    _check_links(records, "cost ", "a spend record")


def _check_links(records: list[_Record], label: str, one: str) -> None:
    """Each record links to the one before it from genesis (versions 1, 2, ... and each
    ``prev_hash`` the previous record's hash), at rising positions. ``label`` starts the
    messages' "record"/"position" ("cost " for the spend stream); ``one`` names a record."""
    head, version, position = bytes(GENESIS), 0, 0
    for r in records:
        if r.version != version + 1 or r.prev != head:
            raise EvidenceInvalid(
                "chain",
                f"{label}record at position {r.position} (version {r.version}) does not follow "
                f"version {version}: {one} was removed, reordered or replaced",
            )
        if r.position <= position:
            raise EvidenceInvalid("chain", f"{label}position {r.position} comes after {position}")
        head, version, position = r.hash, r.version, r.position


def _check_cost_head(
    note: Any, records: list[_Record], *, stream: str, cp: Checkpoint, verifier: NoteVerifier
) -> StreamHead:
    """The signed head of the spend stream: by the checkpoint's key and origin, for this
    run's stream, bound to this checkpoint, and the file's cost records end exactly there."""
    if not isinstance(note, str):
        raise EvidenceInvalid("head", "the spend stream's 'head' is not a signed note")
    try:
        head = open_stream_head(note, verifier, origin=cp.origin)
    except CheckpointError as exc:  # SignatureInvalid included
        raise EvidenceInvalid("head", f"spend head: {exc}") from exc
    if head.stream_id != stream:
        raise EvidenceInvalid(
            "head", f"the spend head is for stream {head.stream_id!r:.80}, not {stream!r:.80}"
        )
    if (head.tree_size, head.root) != (cp.size, cp.root):
        raise EvidenceInvalid(
            "head",
            f"the spend head is for a tree of {head.tree_size}, not the checkpoint's {cp.size}: "
            "it was signed beside another checkpoint",
        )
    last = (records[-1].version, records[-1].hash) if records else (0, bytes(GENESIS))
    if (head.stream_version, head.hash) != last:
        raise EvidenceInvalid(
            "head",
            f"the signed spend head says {stream} ends at version {head.stream_version} in a "
            f"tree of {cp.size}, but the file's cost records end at version {last[0]}: spend "
            "records were dropped or added",
        )
    return head


def _check_costs(
    doc: Mapping[str, Any],
    run_id: str,
    cp: Checkpoint | None,
    verifier: NoteVerifier,
    *,
    require_head: bool,
) -> tuple[Spend, list[_Record]]:
    """A /3 file's spend stream: records, chain, proofs and signed head (checks 10 to 13)."""
    costs = _field(doc, "costs", dict, "format")
    _members(costs, _COSTS_MEMBERS, "format", "'costs'")
    stream = cost_stream(run_id)
    if "head" not in costs:  # as written: a note, or null (a stripped head), never absent
        raise EvidenceInvalid("format", "'costs' has no 'head' (a note, or null)")
    if costs.get("stream_id") != stream:
        raise EvidenceInvalid("format", f"the spend stream_id is not {stream!r}")
    events = _field(costs, "events", list, "format")
    records = [_check_record(item, stream, "cost record") for item in events]
    _check_cost_chain(records)
    if cp is not None:
        _check_paths(records, costs.get("proofs"), cp, "cost record")
    elif costs.get("proofs") != []:
        raise EvidenceInvalid(
            "format", "an unsigned file's spend stream has 'proofs' [] and 'head' null"
        )
    head: StreamHead | None = None
    if costs.get("head") is not None:
        if cp is None:
            raise EvidenceInvalid("head", "a spend head without a checkpoint to bind it to")
        head = _check_cost_head(costs["head"], records, stream=stream, cp=cp, verifier=verifier)
    elif require_head:
        raise EvidenceInvalid(
            "head",
            "the evidence carries no signed spend head, so nothing signed says these are all "
            "the run's spend records (written without the signing key, or stripped)",
        )
    return _spend(stream, records, head), records


def _check_signature(
    records: list[_Record],
    doc: Mapping[str, Any],
    verifier: NoteVerifier,
    origin: str | None,
    *,
    require_signed: bool,
) -> Checkpoint | None:
    """The checkpoint and the proofs of the run's records, or None for an unsigned file."""
    if doc.get("checkpoint") is not None:
        return _check_proofs(records, doc, verifier, origin)
    if require_signed:
        raise EvidenceInvalid("checkpoint", "the evidence carries no signed checkpoint")
    if doc.get("proofs") or doc.get("tree_size") is not None:
        raise EvidenceInvalid("checkpoint", "proofs without a checkpoint")
    if not ("checkpoint" in doc and "tree_size" in doc and doc.get("proofs") == []):
        # As written: all three members, null, null and []. Anything else is not a file
        # this writer made, and an unsigned file is read no less strictly than a signed one.
        raise EvidenceInvalid(
            "format", "an unsigned file has 'checkpoint' and 'tree_size' null and 'proofs' []"
        )
    return None


def _check_run_head(
    doc: Mapping[str, Any],
    records: list[_Record],
    run_id: str,
    status: str,
    *,
    cp: Checkpoint | None,
    verifier: NoteVerifier,
    require_head: bool,
) -> RunHead | None:
    if doc.get("run_head") is not None:
        if cp is None:
            raise EvidenceInvalid("head", "a run head without a checkpoint to bind it to")
        return _check_head(
            doc["run_head"], records, run_id=run_id, status=status, cp=cp, verifier=verifier
        )
    if require_head:
        raise EvidenceInvalid(
            "head",
            "the evidence carries no signed run head, so nothing signed says where the run "
            "ends (written by an older version or without the signing key, or stripped)",
        )
    return None


def verify_evidence(
    source: Path | str | Mapping[str, Any],
    verifier: NoteVerifier,
    *,
    require_signed: bool = True,
    require_head: bool = False,
    require_spend: bool = False,
    origin: str | None = None,
) -> EvidenceReport:
    """Check an evidence file offline: no ledger, no blobs, only the verifier key.

    Checks, in order: the format, the integrity hash, each record's BLAKE3 link and fields,
    the run stream's continuity from genesis to its end, the listed digests, the
    checkpoint's signature and every inclusion proof against it, then the signed run head:
    same key and origin as the checkpoint, this run, bound to this checkpoint's tree, and the
    records end exactly at its stream version and hash, with its status. A file cut back to
    a genuine earlier record is refused by the head.

    A signed file without a run head (written before heads existed, by a ledger with only a
    verifier key, or with the head stripped: the integrity hash is unkeyed, so anyone can
    remove it) still verifies as before, and the report says ``run_head=None``: its end is
    unproven. ``final`` is False for ``running`` and ``gated`` either way: the run may have
    gone on after the tree the file is checked against.

    Args:
        require_signed: refuse evidence without a checkpoint (written before any signing
            key existed). With False, such evidence passes every other check and the
            report says ``signed=False``.
        require_head: refuse evidence without a signed run head, so that where the run ends
            is proven (implies a checkpoint). Without it, a missing head is reported only.
        require_spend: refuse evidence whose spend is not proven: an older format (which
            does not carry the spend stream), or a spend stream without its signed head.
            ``require_head`` refuses the latter too, but accepts an older format.
        origin: When given, the checkpoint must name this log (one key may sign several).

    Raises:
        EvidenceInvalid: a check failed; ``part`` names which.
        ConfigError: the file cannot be read.
    """
    doc = _load(source)
    fmt = doc.get("format")
    if not isinstance(fmt, str) or fmt not in _DOC_MEMBERS:
        raise EvidenceInvalid("format", f"not a tracebound evidence file ({FORMAT})")
    _members(doc, _DOC_MEMBERS[fmt], "format", "the evidence file")
    for member in sorted(_DOC_MEMBERS[fmt] - _DOC_MEMBERS_V1):
        if member not in doc:  # a /1 file has neither; newer ones always say them
            raise EvidenceInvalid("format", f"a {fmt} file has {member!r}")
    integrity = _field(doc, "integrity", dict, "integrity")
    try:
        expected = integrity_hash(doc)
    except CanonicalizationError as exc:
        raise EvidenceInvalid("format", f"cannot be put in canonical form: {exc}") from exc
    if integrity != {**_INTEGRITY, "hash": expected}:
        raise EvidenceInvalid("integrity", "the integrity hash does not match the contents")
    run_id = _field(doc, "run_id", str, "format")
    stream = run_stream(run_id)
    if doc.get("stream_id") != stream:
        raise EvidenceInvalid("format", f"stream_id is not {stream!r}")
    events = _field(doc, "events", list, "format")
    records = [_check_record(item, stream) for item in events]
    status = _check_chain(records, doc, run_id)
    artifacts = _check_digests(records, doc.get("artifacts"))
    cp = _check_signature(records, doc, verifier, origin, require_signed=require_signed)
    head = _check_run_head(
        doc, records, run_id, status, cp=cp, verifier=verifier, require_head=require_head
    )
    spend: Spend | None = None
    costs: list[_Record] = []
    if fmt == FORMAT:
        spend, costs = _check_costs(
            doc, run_id, cp, verifier, require_head=require_head or require_spend
        )
    elif require_spend:
        raise EvidenceInvalid(
            "head",
            f"a {fmt} file does not carry the run's spend stream, so it proves nothing about "
            "what the run cost",
        )
    return EvidenceReport(
        run_id=run_id,
        pipeline=str(doc.get("pipeline")),
        status=status,
        events=len(records),
        artifacts=artifacts,
        signed=cp is not None,
        origin=None if cp is None else cp.origin,
        tree_size=None if cp is None else cp.size,
        root=None if cp is None else cp.root.hex(),
        # "running" and "gated" are where a genuine prefix of a longer run can stop
        final=status in FINAL_RUN_STATUSES,
        run_head=head,
        spend=spend,
        records=tuple(r.stored() for r in records),
        cost_records=tuple(r.stored() for r in costs),
    )
