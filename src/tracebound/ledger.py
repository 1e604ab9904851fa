"""The ledger: a store plus the keys, witness and checks that make it tamper-evident.

:class:`Ledger` is what the CLI and the pipeline use. It turns payloads into events with the
injected clock and id source, appends them, signs checkpoints (C2SP signed notes over the
RFC 6962 root), keeps the witness up to date, verifies the whole log, and produces inclusion
proofs a third party can check offline.

Trust model: whoever holds the store's files may change them at will. They do not hold the
signing key (kept outside the store directory) or the witness (also outside). ``verify``
therefore trusts nothing read from the store: not the hashes, not the indexes, not the
checkpoints until their signatures verify against a key given from outside. The stored
Merkle nodes that make proofs and checkpoints cheap (ADR 0011) are in the attacker's hands
too, so every use checks them against a signed root.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing import get_context
from typing import Any, Final, TypeVar, overload
from uuid import UUID

from pydantic import ValidationError as PydanticValidationError

from tracebound.errors import (
    BundleFieldMismatch,
    CheckpointError,
    ConcurrencyError,
    ConfigError,
    DamageKind,
    KeyRotationRefused,
    LedgerDamaged,
    ProofError,
    SignatureInvalid,
    TraceboundError,
    ValidationFailed,
    short_repr,
)
from tracebound.events.catalog import SigningKeyRotated
from tracebound.events.envelope import Event, Payload, RecordedEvent, format_timestamp
from tracebound.integrity import _kernel
from tracebound.integrity.bundle_fields import (
    check_members,
    field_base64,
    field_hash,
    field_size,
    field_text,
    json_kind,
)
from tracebound.integrity.chain import chain_hash
from tracebound.integrity.consistency import (
    ConsistencyBundle,
    ConsistencyStep,
    verify_consistency_bundle,
)
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.merkle import (
    HASH_SIZE,
    MAX_PROOF_PATH,
    MerkleAccumulator,
    aligned_subtrees,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from tracebound.integrity.nodes import StoredTree
from tracebound.integrity.note import (
    Checkpoint,
    SignedNote,
    open_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
)
from tracebound.integrity.rotation import (
    KEY_STREAM,
    ROTATION_TYPE,
    KeyHistory,
    Rotation,
    open_checkpoints,
    signed_by,
)
from tracebound.integrity.strict_json import loads_canonical_record, loads_strict
from tracebound.integrity.verify import (
    ChunkResult,
    ChunkVerifier,
    LogAssembler,
    VerifiedLog,
    check_against_checkpoints,
)
from tracebound.sources import Clock, IdSource
from tracebound.store.collector import paused_collector
from tracebound.store.nodes import LogNodes, store_nodes
from tracebound.store.port import ANY_VERSION, LedgerStore, MerkleNodeStore, stream_positions
from tracebound.store.rotations import read_rotations
from tracebound.store.url import open_store
from tracebound.store.witness import Witness

__all__ = [
    "CHUNK",
    "CheckpointRun",
    "InclusionBundle",
    "Ledger",
    "RotationRun",
    "VerifyReport",
    "verify_bundle",
]

CHUNK: Final = 1 << 16  # positions per verify chunk: aligned, so chunk roots merge exactly
ORIGIN_KEY: Final = "origin"
MERKLE_NOT_COMPARED: Final = "root computed, not compared: no checked checkpoint or witness"
NO_VERIFIER_KEY: Final = "no verifier key given"  # the status of a check that needs one
_WITNESS_TRIES: Final = 5  # a checkpoint's attempts at a witness that other signers move

Progress = Callable[[int, int], None]


@dataclass
class VerifyReport:
    """What `verify` found. ``ok`` only when every check below passed."""

    size: int = 0
    root: str = ""
    streams: int = 0
    checkpoint_size: int | None = None
    witness_size: int | None = None
    uncovered: int = 0  # events no checked signature covers (chain-checked only)
    checks: dict[str, str] = field(default_factory=dict)
    damage: LedgerDamaged | None = None
    stored_checkpoints: tuple[int, ...] = ()  # sizes the store holds, checked or not
    # The checkpoint origin the store names (its metadata's, else its newest checkpoint's
    # first line): what an auditor passes as `verify-evidence --origin`. None: neither yet.
    origin: str | None = None
    # The key rotations the signed checkpoints cover (ADR 0017), oldest first; the key
    # history is the first one's old key, then each one's new key.
    rotations: tuple[Rotation, ...] = ()
    # A rotation recorded after the newest checkpoint: no hand-over signed it yet, so
    # checkpoints wait until `keys rotate` finishes it with both keys. Not damage (an
    # interrupted rotation looks the same), but the operator must know: someone who can
    # write the store could have appended it, and only its incoming key can finish it.
    pending_rotation: Rotation | None = None

    @property
    def ok(self) -> bool:
        return self.damage is None and all(v == "ok" for v in self.checks.values())

    @property
    def stored_checkpoint_size(self) -> int | None:
        """The newest checkpoint the store holds, whether its signature was checked."""
        return max(self.stored_checkpoints, default=None)

    def coverage(self) -> dict[str, int] | None:
        """How the verified events split between what signatures cover and what not.

        ``signature_checked``: covered by a checkpoint (or the witness's) whose signature
        was checked; ``signature_unchecked``: covered only by a stored checkpoint whose
        signature could not be checked (no verifier key); ``after_last_checkpoint``: after
        the newest stored checkpoint, chain-checked only. They add up to ``size``;
        ``uncovered`` is the last two. ``roots_compared``: signed roots the log's Merkle
        root was compared with. None when the ledger is damaged (the counts would describe
        a log that is not intact).
        """
        if self.damage is not None:
            return None
        checked = self.checks.get("signature") == "ok"
        signed = max(self.checkpoint_size or 0, self.witness_size or 0)
        covered = min(self.size, signed)
        after = max(0, self.size - max(signed, self.stored_checkpoint_size or 0))
        return {
            "signature_checked": covered,
            "signature_unchecked": self.size - covered - after,
            "after_last_checkpoint": after,
            "roots_compared": (len(self.stored_checkpoints) if checked else 0)
            + (self.checks.get("witness") == "ok"),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "size": self.size,
            "root": self.root,
            "streams": self.streams,
            "checkpoint_size": self.checkpoint_size,
            "witness_size": self.witness_size,
            "uncovered": self.uncovered,
            "checks": self.checks,
            "damage": None if self.damage is None else self.damage.as_dict(),
            "stored_checkpoint_size": self.stored_checkpoint_size,
            "key_rotations": [r.as_dict() for r in self.rotations],
            "pending_key_rotation": (
                None if self.pending_rotation is None else self.pending_rotation.as_dict()
            ),
            "coverage": self.coverage(),
            "origin": self.origin,
        }


def stored_origin(store: LedgerStore) -> str | None:
    """The origin a store names: its metadata's, else its newest checkpoint's first line."""
    kept = store.get_meta(ORIGIN_KEY)
    if kept is not None:
        return kept
    newest = store.latest_checkpoint()
    if newest is None:
        return None
    line = newest.split("\n", 1)[0]
    return line or None


_P = TypeVar("_P")


def _key_text(key: NoteVerifier) -> str:
    return f"{key.name!r} ({key.key_hash:08x})"


class _Spans(Sequence[tuple[int, int]]):
    """The chunk spans of positions ``..size``: ``head``, then CHUNK-long spans from
    ``aligned + 1``, computed when asked. Never a list: a row moved to a huge position
    makes ``size`` huge, and verify must reach the gap, not build spans up to it."""

    def __init__(self, head: list[tuple[int, int]], aligned: int, size: int) -> None:
        self._head, self._aligned, self._size = head, aligned, size

    def __len__(self) -> int:
        return len(self._head) + -(-(self._size - self._aligned) // CHUNK)

    @overload
    def __getitem__(self, i: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[int, int]]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i < len(self._head):
            return self._head[i]
        start = self._aligned + 1 + (i - len(self._head)) * CHUNK
        return start, min(start + CHUNK - 1, self._size)


class _VerifyAll(Exception):  # a signal inside checkpoint_run, never raised out of it
    """Why a checkpoint cannot start from the signed prefix and verifies the whole log."""


@dataclass(frozen=True)
class CheckpointRun:
    """A signed checkpoint and what was verified before signing it."""

    checkpoint: Checkpoint
    verified_from: int  # the first position read and verified (1: the whole log)
    incremental: bool  # only the events after the previous signed checkpoint were read
    full_reason: str | None = None  # why the whole log was verified, when it was

    def as_dict(self) -> dict[str, Any]:
        cp = self.checkpoint
        return {
            "origin": cp.origin,
            "size": cp.size,
            "root": cp.root.hex(),
            "verified": {
                "from": self.verified_from,
                "to": cp.size,
                "incremental": self.incremental,
                "full_reason": self.full_reason,
            },
        }


@dataclass(frozen=True)
class RotationRun:
    """A key rotation: the event that records it and the hand-over checkpoint both keys
    signed (ADR 0017)."""

    rotation: Rotation
    handover: CheckpointRun
    resumed: bool  # the event was there already (an interrupted rotation, finished now)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.rotation.as_dict(),
            "resumed": self.resumed,
            "handover_checkpoint": self.handover.as_dict(),
        }


@dataclass(frozen=True)
class InclusionBundle:
    """Everything needed to check offline that one event is in a signed log."""

    position: int
    stream_id: str
    prev_hash: bytes
    hash: bytes
    body: bytes
    tree_size: int
    proof: list[bytes]
    checkpoint: str  # the signed note

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": "tracebound-inclusion/1",
            "position": self.position,
            "stream_id": self.stream_id,
            "prev_hash": self.prev_hash.hex(),
            "hash": self.hash.hex(),
            "record": base64.b64encode(self.body).decode(),
            "tree_size": self.tree_size,
            "proof": [p.hex() for p in self.proof],
            "checkpoint": self.checkpoint,
        }

    @classmethod
    def from_dict(cls, d: Any) -> InclusionBundle:
        """Read a bundle from its JSON form (:meth:`as_dict`), strictly.

        Every member must be present, of its JSON type and in its one spelling (integers
        in range, lower-case hex of 32 bytes, padded base64), and nothing else may be:
        whatever a bundle states beyond what is hashed and signed, a reader could believe.

        Raises:
            ProofError: not a bundle, or a member is missing, unknown or malformed; the
                message names the member.
        """
        if not isinstance(d, dict):
            raise ProofError(
                f"not a tracebound inclusion proof: a JSON {json_kind(d)}, not an object"
            )
        if d.get("format") != BUNDLE_FORMAT:
            raise ProofError(
                f"not a tracebound inclusion proof (format={short_repr(d.get('format'))}, "
                f"expected {BUNDLE_FORMAT!r})"
            )
        check_members(d, _BUNDLE_MEMBERS, _WHAT)
        proof = d["proof"]
        if not isinstance(proof, list) or len(proof) > MAX_PROOF_PATH:
            raise ProofError(
                f"malformed inclusion proof: proof must be a list of at most {MAX_PROOF_PATH} "
                "hashes (the depth of the largest tree)"
            )
        return cls(
            position=field_size(d, "position", _WHAT),
            stream_id=field_text(d, "stream_id", _WHAT),
            prev_hash=field_hash(d["prev_hash"], "prev_hash", _WHAT),
            hash=field_hash(d["hash"], "hash", _WHAT),
            body=field_base64(d["record"], "record", _WHAT),
            tree_size=field_size(d, "tree_size", _WHAT),
            proof=[field_hash(p, f"proof[{i}]", _WHAT) for i, p in enumerate(proof)],
            checkpoint=field_text(d, "checkpoint", _WHAT),
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> InclusionBundle:
        """Parse a bundle file's bytes: strict JSON (:func:`loads_strict`), then
        :meth:`from_dict`.

        Raises:
            ProofError: not UTF-8, not JSON, ambiguous JSON (a key twice), or not a bundle.
        """
        try:
            doc = loads_strict(data)
        except ValueError as exc:
            raise ProofError(f"not an inclusion proof: {exc}") from exc
        return cls.from_dict(doc)


BUNDLE_FORMAT: Final = "tracebound-inclusion/1"
_WHAT: Final = "inclusion proof"
_BUNDLE_MEMBERS: Final = frozenset(
    {"format", "position", "stream_id", "prev_hash", "hash", "record", "tree_size", "proof",
     "checkpoint"}
)  # fmt: skip


def verify_bundle(
    bundle: InclusionBundle, verifier: NoteVerifier, *, origin: str | None = None
) -> Checkpoint:
    """Check an inclusion bundle offline: checkpoint signature, record hash, the fields the
    bundle states against the record, and the Merkle path to the signed root.

    Args:
        origin: When given, the checkpoint must name this log; one key may sign several
            logs (the CLI's default key signs every ledger on the machine).

    Raises:
        SignatureInvalid: the checkpoint is not signed by ``verifier``'s key.
        CheckpointError: the checkpoint is malformed, or is for another origin.
        BundleFieldMismatch: the bundle's position, stream_id or prev_hash is not the
            record's (the bundle was edited); ``field`` names which.
        ProofError: the bundle is malformed, or the record or the path does not match the
            signed root.
    """
    _check_bundle_types(bundle)
    checkpoint = open_checkpoint(bundle.checkpoint, verifier, origin=origin)
    if checkpoint.size != bundle.tree_size:
        raise ProofError(
            f"the proof is for a tree of {bundle.tree_size} events but the checkpoint "
            f"covers {checkpoint.size}"
        )
    if not 1 <= bundle.position <= bundle.tree_size:
        raise ProofError(
            f"position {bundle.position} is outside the signed tree of {bundle.tree_size} events"
        )
    if chain_hash(bundle.prev_hash, bundle.body) != bundle.hash:
        raise ProofError("the record's bytes do not hash to the claimed event hash")
    _check_bundle_fields(bundle)
    verify_inclusion(
        leaf_hash(bundle.hash), bundle.position - 1, bundle.tree_size, bundle.proof, checkpoint.root
    )
    return checkpoint


def _check_bundle_types(bundle: InclusionBundle) -> None:
    """What :meth:`InclusionBundle.from_dict` ensures, for a bundle built in Python."""
    ok = (
        type(bundle.position) is int
        and type(bundle.tree_size) is int
        and isinstance(bundle.stream_id, str)
        and isinstance(bundle.checkpoint, str)
        and isinstance(bundle.body, bytes)
        and all(
            isinstance(h, bytes) and len(h) == HASH_SIZE for h in (bundle.prev_hash, bundle.hash)
        )
        and isinstance(bundle.proof, list)
        and len(bundle.proof) <= MAX_PROOF_PATH
        and all(isinstance(p, bytes) and len(p) == HASH_SIZE for p in bundle.proof)
    )
    if not ok:
        raise ProofError("malformed inclusion bundle: a field has the wrong type or size")


def _check_bundle_fields(bundle: InclusionBundle) -> None:
    """The fields a bundle states beside its record must be the record's own: only the
    record is hashed, so a copy that differs was edited (a proof of one stream's event
    relabelled as another's)."""
    # Read as only the ledger writes it: hashed bytes with a key twice ("stream_id" once for
    # another stream, then for this one) would show a first-wins reader another record.
    try:
        record = loads_canonical_record(bundle.body)
    except ValueError as exc:
        raise ProofError(f"the hashed record is {exc}") from exc
    stated: tuple[tuple[str, object], ...] = (
        ("position", bundle.position),
        ("stream_id", bundle.stream_id),
        ("prev_hash", bundle.prev_hash.hex()),
    )
    for name, value in stated:
        recorded = record.get(name)
        if type(recorded) is not type(value) or recorded != value:
            raise BundleFieldMismatch(name, value, recorded)


_EVENT_FIELDS: Final = (
    "event_id",
    "event_type",
    "workflow_id",
    "timestamp",
    "payload",
    "correlation_id",
    "schema_version",
)
_EVENT_FIELD_SET: Final = frozenset(_EVENT_FIELDS)
_new_object = object.__new__
_set = object.__setattr__
_instance: Callable[..., Any] | None = getattr(_kernel.KERNEL, "instance", None)


def _event_fast_applies() -> bool:
    """Is ``Event`` still the model :func:`_event_fast` was written for?

    The fast path makes the assignments validation would make, for the validators
    ``Event`` has today; a new field, validator, hook or private attribute turns it off.
    """
    decorators = Event.__pydantic_decorators__
    return (
        tuple(Event.model_fields) == _EVENT_FIELDS
        and set(decorators.field_validators) == {"_utc"}
        and set(decorators.model_validators) == {"_resolve_payload", "_type_matches_payload"}
        and not decorators.root_validators
        and not decorators.validators
        and Event.__pydantic_post_init__ is None
        and not Event.__private_attributes__
        and Event.model_config.get("extra") == "forbid"
        and Event.model_config.get("revalidate_instances", "never") == "never"
    )


_EVENT_FAST: Final = _event_fast_applies()

_BULK: Final = 64
"""Records of at least this many events pause the cyclic collector (store/collector.py)."""


def _event_fast(
    payload: object,
    event_id: UUID,
    timestamp: datetime,
    workflow_id: str | None,
    correlation_id: str | None,
) -> Event | None:
    """``Event.create(...)`` without pydantic, for inputs whose validation is a no-op.

    Only exact types qualify: a UUID, an aware ``datetime``, plain ``str`` ids, a payload
    model instance (validated when it was built; a model field keeps such an instance as
    is) whose ``kind`` is a plain str and whose class's ``SCHEMA_VERSION`` is an int.
    Validation would then keep every value as given, except the timestamp, which the
    ``_utc`` validator converts to UTC (as here); ``_type_matches_payload`` holds by
    construction. Anything else returns None and takes the validated path. A test checks
    that both paths build equal events with equal bytes.
    """
    if not isinstance(payload, Payload):
        return None
    kind = payload.kind
    version = type(payload).SCHEMA_VERSION
    if (
        type(event_id) is not UUID
        or type(timestamp) is not datetime
        or timestamp.utcoffset() is None
        or type(kind) is not str
        or type(version) is not int
        or (workflow_id is not None and type(workflow_id) is not str)
        or (correlation_id is not None and type(correlation_id) is not str)
    ):
        return None
    values = {
        "event_id": event_id,
        "event_type": kind,
        "workflow_id": workflow_id,
        # astimezone(UTC) returns a UTC datetime itself: skip the call for those
        "timestamp": timestamp if timestamp.tzinfo is UTC else timestamp.astimezone(UTC),
        "payload": payload,
        "correlation_id": correlation_id,
        "schema_version": version,
    }
    if _instance is not None:  # the kernel's one call for the four assignments below
        built: Event = _instance(Event, values, _EVENT_FIELD_SET)
        return built
    event: Event = _new_object(Event)
    _set(event, "__dict__", values)
    _set(event, "__pydantic_fields_set__", set(_EVENT_FIELD_SET))
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event


def _check_arguments(payloads: object, workflow_id: object, correlation_id: object) -> None:
    """Typed as objects: :meth:`Ledger.record` is called by user code."""
    if isinstance(payloads, Payload | str | bytes) or not isinstance(payloads, Sequence):
        raise ValidationFailed(
            "payloads", f"must be a list of payload models, not {type(payloads).__name__}"
        )
    for name, value in (("workflow_id", workflow_id), ("correlation_id", correlation_id)):
        if value is not None and not isinstance(value, str):
            raise ValidationFailed(name, f"must be text or None, not {type(value).__name__}")


def _event_checked(
    index: int,
    payload: object,
    *,
    event_id: UUID,
    timestamp: datetime,
    workflow_id: str | None,
    correlation_id: str | None,
) -> Event:
    """``Event.create`` for what the fast path left, its errors as :class:`ValidationFailed`
    (a payload that is not a model, an id or a time from a caller's clock or id source)."""
    if not isinstance(payload, Payload):
        raise ValidationFailed(
            f"payloads[{index}]", f"must be a payload model, not {type(payload).__name__}"
        )
    try:
        return Event.create(
            payload,
            event_id=event_id,
            timestamp=timestamp,
            workflow_id=workflow_id,
            correlation_id=correlation_id,
        )
    except PydanticValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "event"
        raise ValidationFailed(f"payloads[{index}].{where}", error["msg"]) from exc


def _refuse_key_stream(stream_id: object, payloads: Sequence[object]) -> None:
    """Key rotations are written by :meth:`Ledger.rotate_key` alone: one appended any other
    way names a key nobody handed the ledger to, and would stop its next checkpoint."""
    if stream_id == KEY_STREAM or any(
        isinstance(p, Payload) and p.kind == ROTATION_TYPE for p in payloads
    ):
        raise ValidationFailed(
            "stream_id" if stream_id == KEY_STREAM else "payloads",
            f"the stream {KEY_STREAM!r} and {ROTATION_TYPE!r} events are the ledger's own: "
            "`tracebound keys rotate` (Ledger.rotate_key) writes them",
        )


_WORKER_STORES: dict[str, LedgerStore] = {}
"""A verify worker's open stores, by URL: a worker checks many chunks, and opening a store
takes SQLite's write lock (schema check), which would make workers queue behind each other."""


def _verify_span(
    store: LedgerStore, start: int, stop: int, snapshot_sizes: Sequence[int]
) -> ChunkResult:
    """Verify positions ``start..stop`` of ``store``, in pages when the store offers them."""
    verifier = ChunkVerifier(start, snapshot_sizes=snapshot_sizes)
    # verify_pages: the SQLite store's reader for verify (C pages when the kernel is built).
    read_pages = getattr(store, "verify_pages", None) or getattr(store, "read_raw_pages", None)
    if read_pages is not None:
        return verifier.feed_pages(read_pages(start=start, stop=stop))
    return verifier.feed_all(store.read_raw(start=start, stop=stop))


def _verify_chunk(url: str, start: int, stop: int, snapshot_sizes: list[int]) -> ChunkResult:
    """Worker-process entry point: verify positions ``start..stop`` of the store at ``url``."""
    store = _WORKER_STORES.get(url)
    if store is None:
        store = _WORKER_STORES[url] = open_store(url)
    return _verify_span(store, start, stop, snapshot_sizes)


class Ledger:
    """A store made tamper-evident by signed checkpoints and an outside witness."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        clock: Clock,
        ids: IdSource,
        signer: NoteSigner | None = None,
        verifier: NoteVerifier | None = None,
        witness: Witness | None = None,
        origin: str | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.ids = ids
        self.signer = signer
        self.verifier = verifier or (signer.verifier if signer else None)
        self.witness = witness
        self._origin = origin
        self._history: KeyHistory | None = None  # the key history the last verify checked

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def origin(self) -> str:
        """The checkpoint origin line: a stable name for this log.

        The one given to the constructor, else the store's, else (a store written before
        origins were kept, or whose metadata was lost) the origin its newest checkpoint
        names. None of these is trusted: every checkpoint is still checked against it.
        """
        if self._origin is None:
            stored = stored_origin(self.store)
            if stored is None:
                raise ConfigError(
                    "this store has no origin and no checkpoint; run `tracebound init`"
                )
            self._origin = stored
        return self._origin

    # -- writing -------------------------------------------------------------------------

    def event(
        self,
        payload: Payload,
        *,
        workflow_id: str | None = None,
        correlation_id: str | None = None,
    ) -> Event:
        """Wrap a payload in an envelope with a fresh id and the current time."""
        return Event.create(
            payload,
            event_id=self.ids.new_id(),
            timestamp=self.clock.now(),
            workflow_id=workflow_id,
            correlation_id=correlation_id,
        )

    def record(
        self,
        stream_id: str,
        payloads: Sequence[Payload],
        *,
        workflow_id: str | None = None,
        correlation_id: str | None = None,
        expected_version: int | None = ANY_VERSION,
    ) -> list[RecordedEvent]:
        """Append payloads to a stream as events; durable when this returns.

        Raises:
            ValidationFailed: an argument the ledger cannot write (a payload that is not a
                payload model, an id that is not text, a bad ``expected_version``); its
                ``field`` names the argument, and nothing is written.
            ConcurrencyConflict: the stream is not at ``expected_version``.
        """
        _check_arguments(payloads, workflow_id, correlation_id)
        _refuse_key_stream(stream_id, payloads)
        if len(payloads) < _BULK:
            return self._record(stream_id, payloads, workflow_id, correlation_id, expected_version)
        with paused_collector():  # store/collector.py: a batch's objects form no cycles
            return self._record(stream_id, payloads, workflow_id, correlation_id, expected_version)

    def _record(
        self,
        stream_id: str,
        payloads: Sequence[Payload],
        workflow_id: str | None,
        correlation_id: str | None,
        expected_version: int | None,
    ) -> list[RecordedEvent]:
        new_id, now = self.ids.new_id, self.clock.now
        events: list[Event] = []
        for i, p in enumerate(payloads):
            event_id, timestamp = new_id(), now()
            fast = (
                _event_fast(p, event_id, timestamp, workflow_id, correlation_id)
                if _EVENT_FAST
                else None
            )
            events.append(
                fast
                if fast is not None
                else _event_checked(
                    i,
                    p,
                    event_id=event_id,
                    timestamp=timestamp,
                    workflow_id=workflow_id,
                    correlation_id=correlation_id,
                )
            )
        return self.store.append(stream_id, events, expected_version=expected_version)

    # -- checkpoints ---------------------------------------------------------------------

    def checkpoint(self, *, progress: Progress | None = None, full: bool = False) -> Checkpoint:
        """Sign the current log head, keep it in the store and hand it to the witness.

        See :meth:`checkpoint_run`, which also says what was verified.

        Raises:
            ConfigError: no signing key was given, or the store names another origin.
            LedgerDamaged: the events to be signed are damaged; nothing is signed.
        """
        return self.checkpoint_run(progress=progress, full=full).checkpoint

    def checkpoint_run(
        self, *, progress: Progress | None = None, full: bool = False
    ) -> CheckpointRun:
        """Verify what is new, sign the log head, keep it, and hand it to the witness.

        A checkpoint never vouches for damage. By default it is *incremental*: the log up
        to the newest signed checkpoint is taken from that signature, through the stored
        Merkle nodes, whose frontier must hash to the signed root; only the events after
        it are read and verified (chain, positions, links into the signed prefix). Each
        stream they continue is linked to its newest event in the signed prefix, whose
        record is checked and proven under the signed root (O(log n) reads). The cost is
        that of the new events, not of the log. Damage inside the signed prefix is still
        found by :meth:`verify`, and not signed over: the new root is built from the
        signed frontier, not from the prefix as it is stored now. One limit (ADR 0011):
        nothing signed says which event is a stream's newest, so an attacker who hides
        it from the store *while the checkpoint runs* can have a fork signed; `verify`
        and ``full=True`` report the fork.

        ``full=True`` (or no checkpoint yet, or a frontier that does not match) verifies
        the whole log first, as :meth:`verify` does, and rebuilds the stored nodes from it.

        Raises:
            ConfigError: no signing key was given, or the store names another origin.
            LedgerDamaged: the events to be signed are damaged; nothing is signed.
            KeyRotationRefused: the key is retired, or a rotation the log holds (recorded
                before or while this ran) is unfinished; nothing is signed.
        """
        if self.signer is None:
            raise ConfigError("checkpoint needs the signing key; run `tracebound keys init`")
        self._check_active(self.signer.verifier)
        return self._sign((self.signer,), progress=progress, full=full)

    def rotate_key(
        self, new_signer: NoteSigner, *, rotated_by: str, reason: str | None = None
    ) -> RotationRun:
        """Hand this ledger over from :attr:`signer` to ``new_signer`` (ADR 0017).

        The whole log is verified first; then a ``signing_key_rotated`` event naming both
        keys is appended to :data:`KEY_STREAM`, and a hand-over checkpoint covering it is
        signed by both keys and given to the witness. From then on only ``new_signer``
        signs (:attr:`signer` is it when this returns). Run again with the same keys after
        an interruption, it finishes the rotation whose event is there already.

        Raises:
            KeyRotationRefused: no signing key, the new key is the current one, the current
                key is not the one that signs this ledger now (or does not match its newest
                checkpoint), another rotation is unfinished, or the witness is unreadable.
            LedgerDamaged: the log is damaged; nothing is written.
            ConcurrencyConflict: another rotation was recorded at the same time.
        """
        old = self.signer
        if old is None:
            raise KeyRotationRefused("rotating needs the current signing key (--key)")
        if new_signer.verifier == old.verifier:
            raise KeyRotationRefused(f"the new key is the current key {_key_text(old.verifier)}")
        rotations = read_rotations(self.store)
        pending = self._pending_rotation(rotations)
        resumed = pending is not None
        if pending is None:
            self._check_rotation_start(old.verifier, rotations)
        elif (pending.old, pending.new) != (old.verifier, new_signer.verifier):
            # A rotation the log's key could not have written is damage to report (verify
            # says which), not an unfinished rotation to ask the operator to finish.
            if (damage := self.verify().damage) is not None:
                raise damage
            raise KeyRotationRefused(
                f"{pending.describe()} from {_key_text(pending.old)} to "
                f"{_key_text(pending.new)} is unfinished; finish it with those keys first"
            )
        report = self.verify()
        if report.damage is not None:
            raise report.damage
        if report.checks.get("witness", "").startswith("unreadable"):
            raise KeyRotationRefused(f"the witness cannot be read: {report.checks['witness']}")
        if pending is None:
            payload = SigningKeyRotated(
                old_key=old.verifier.format(),
                new_key=new_signer.verifier.format(),
                rotated_by=rotated_by,
                reason=reason,
            )
            (recorded,) = self.store.append(
                KEY_STREAM, [self.event(payload)], expected_version=len(rotations)
            )
            pending = Rotation(
                recorded.position,
                old.verifier,
                new_signer.verifier,
                rotated_by,
                reason,
                format_timestamp(recorded.timestamp),
            )
        handover = self._sign((old, new_signer))
        if self.verifier in {None, old.verifier}:
            self.verifier = new_signer.verifier
        self.signer = new_signer
        return RotationRun(pending, handover, resumed)

    def check_signing_key(self) -> None:
        """Refuse now what :meth:`checkpoint` would refuse for the key it holds: a key the
        key history retired, or a rotation unfinished. For work that ends in a checkpoint
        (a pipeline run's evidence), so it is refused before it does anything. Without a
        signing key there is nothing to check.

        Raises:
            KeyRotationRefused: the signing key is retired, or a rotation is unfinished.
        """
        if self.signer is not None:
            self._check_active(self.signer.verifier)

    def _pending_rotation(self, rotations: Sequence[Rotation]) -> Rotation | None:
        """The newest rotation when no checkpoint covers it yet (its hand-over not signed)."""
        signed = max((size for size, _ in self.store.checkpoints()), default=0)
        return rotations[-1] if rotations and rotations[-1].position > signed else None

    def _check_rotation_start(self, key: NoteVerifier, rotations: Sequence[Rotation]) -> None:
        """``key`` must sign this ledger now: the newest rotation's new key, and the key
        of the newest checkpoint."""
        self._check_active(key)
        newest = self.store.latest_checkpoint()
        if newest is not None:
            try:
                open_checkpoint(newest, key, origin=self.origin)
            except CheckpointError as exc:
                raise KeyRotationRefused(
                    f"the signing key {_key_text(key)} does not match this ledger's newest "
                    f"checkpoint ({exc}); rotate with the key that signs it (--key)"
                ) from exc

    def _check_active(self, key: NoteVerifier, *, size: int | None = None) -> None:
        """Refuse to sign with a key the ledger's key history has retired, or while a
        rotation is unfinished (its event is in the log, its hand-over not signed). With
        ``size``, only the rotations a checkpoint of that size covers count.

        Raises:
            KeyRotationRefused: the key is retired, or a rotation is unfinished.
        """
        rotations = [r for r in read_rotations(self.store) if size is None or r.position <= size]
        if not rotations:
            return
        newest = rotations[-1]
        if self._pending_rotation(rotations) is not None:
            raise KeyRotationRefused(
                f"{newest.describe()} from {_key_text(newest.old)} to {_key_text(newest.new)} "
                "is unfinished: its hand-over checkpoint was never signed. Run `tracebound "
                "keys rotate` again with the same keys to finish it (if nobody here started "
                "that rotation, the event is not genuine: run `tracebound verify`)"
            )
        if key != newest.new:
            retired = next((r for r in rotations if r.old == key), None)
            why = (
                f"was retired by {retired.describe()}"
                if retired is not None
                else "is none of this ledger's keys"
            )
            raise KeyRotationRefused(
                f"the signing key {_key_text(key)} {why}; this ledger is signed by "
                f"{_key_text(newest.new)} now (sign with that key: --key)"
            )

    def _sign(
        self,
        signers: tuple[NoteSigner, ...],
        *,
        progress: Progress | None = None,
        full: bool = False,
    ) -> CheckpointRun:
        """Verify what is new and sign the head with ``signers``; the first is the key the
        previous checkpoint and the witness are read with (the outgoing key of a
        hand-over, else the only one)."""
        self._keep_origin()
        base: MerkleAccumulator | None = None
        reason = "asked for"
        if not full:
            try:
                base = self._signed_base()
            except _VerifyAll as why:
                reason = str(why)
        log: VerifiedLog | None = None
        if base is not None:
            try:
                log = self._verify_after(base, progress)
            except _VerifyAll as why:
                base, reason = None, str(why)
        if log is None:
            report = self.verify(progress=progress)
            if report.damage is not None:
                raise report.damage
            size, root, first = report.size, bytes.fromhex(report.root), 1
            self.store_nodes(size, root, rebuild=True)
        else:
            assert base is not None  # a log is verified only after a signed base
            first = base.size + 1
            size, root = log.size, log.root
            self.store_nodes(size, root)
        if len(signers) == 1:
            # Checked again for the log as read: another process's `keys rotate` may have
            # recorded its event since the check before it, and the outgoing key alone
            # signing past that event is what a leaked retired key would do (`retired-key`).
            self._check_active(signers[0].verifier, size=size)
        held = None
        if self.witness is not None:
            self._finish_handover(signers[0].verifier)
            held = self.witness.latest(signers[0].verifier)
        note = self._stored_note(size, root, signers)
        if note is None:
            note = sign_checkpoint(Checkpoint(origin=self.origin, size=size, root=root), signers)
            self.store.save_checkpoint(size, note)
        if self.witness is not None:
            self._hand_to_witness(note, size, root, held, signers[0].verifier)
        return CheckpointRun(
            checkpoint=open_checkpoint(note, [s.verifier for s in signers]),
            verified_from=first,
            incremental=base is not None,
            full_reason=None if base is not None else reason,
        )

    def _stored_note(self, size: int, root: bytes, signers: tuple[NoteSigner, ...]) -> str | None:
        """The newest stored checkpoint, when it already says ``size`` and ``root`` with
        every one of ``signers``: a checkpoint with no new events keeps it rather than sign
        it again. Signed again, a rotation's hand-over would lose the outgoing key's
        signature, the one that vouches for the new key, and the ledger verify as forged."""
        stored = self.store.latest_checkpoint()
        if stored is None:
            return None
        try:
            cp = open_checkpoint(stored, [s.verifier for s in signers], origin=self.origin)
        except CheckpointError:
            return None
        return stored if (cp.size, cp.root) == (size, root) else None

    def _keep_origin(self) -> None:
        """Record the origin in the store the first time it signs, so that the CLI and
        other processes open this ledger under the name its checkpoints carry.

        Raises:
            ConfigError: the store already names another origin.
        """
        kept = self.store.get_meta(ORIGIN_KEY)
        if kept is None:
            self.store.set_meta(ORIGIN_KEY, self.origin)
        elif kept != self.origin:
            raise ConfigError(
                f"this ledger's origin is {kept!r}; refusing to sign checkpoints for "
                f"{self.origin!r} into it"
            )

    def _signed_base(self) -> MerkleAccumulator:
        """The tree of the log up to its newest signed checkpoint, from the stored nodes.

        Raises:
            _VerifyAll: why the whole log must be verified instead.
        """
        notes = self.store.checkpoints()
        if not notes:
            raise _VerifyAll("no checkpoint yet")
        assert self.signer is not None  # checked by the caller
        verifier = self.signer.verifier  # the outgoing key in a hand-over: it signed the last
        try:
            newest = open_checkpoint(notes[-1][1], verifier)
            held = None if self.witness is None else self._witness_held(verifier)
        except TraceboundError as exc:  # the full verify reports it as damage
            raise _VerifyAll(f"the newest checkpoint or the witness does not check: {exc}") from exc
        if newest.size != notes[-1][0] or newest.origin != self.origin:
            raise _VerifyAll("the newest checkpoint is not the one stored at its size")
        if held is not None and held.size > newest.size:
            raise _VerifyAll("the witness holds a newer checkpoint than the store")
        if self.store.size() < newest.size:
            raise _VerifyAll("the log is shorter than its newest checkpoint")
        tree = StoredTree(LogNodes(self.store))
        try:
            base = MerkleAccumulator.from_state(newest.size, tree.peaks(newest.size))
            if base.root() != newest.root:
                raise _VerifyAll("the stored Merkle nodes do not hash to the newest signed root")
            if held is not None and held.size and tree.subtree_root(0, held.size) != held.root:
                raise _VerifyAll("the log does not match the witness's checkpoint")
        except (LedgerDamaged, ProofError) as exc:
            raise _VerifyAll(f"the signed prefix cannot be read: {exc}") from exc
        return base

    def _witness_held(self, key: NoteVerifier) -> Checkpoint | None:
        """What the witness holds, read with ``key``; or, while it holds a note a key the
        history retired signed before that key's hand-over (a witness that missed
        rotations: another host's, or a rotation interrupted before handing on), read
        with that key, as :meth:`_finish_handover` then reads it.

        Raises:
            TraceboundError: the witness cannot be read with ``key``, and is not that.
        """
        assert self.witness is not None
        try:
            return self.witness.latest(key)
        except TraceboundError:
            missed = self._missed_handover(key)
            if missed is None:
                raise
            return missed[1]

    def _missed_handover(self, key: NoteVerifier) -> tuple[int, Checkpoint | None] | None:
        """The index in the key history of the first rotation whose hand-over the witness
        has not taken, and what it holds (read with that rotation's outgoing key); None
        when it took them all, or holds nothing of this history's keys. Only for a history
        that ends in ``key``."""
        assert self.witness is not None
        rotations = read_rotations(self.store)
        if not rotations or rotations[-1].new != key:
            return None
        for index, rotation in enumerate(rotations):
            try:
                held = self.witness.latest(rotation.old)
            except TraceboundError:
                continue  # not this key's note (handed over already, or unreadable)
            if held is None or held.size < rotation.position:
                return index, held
        return None

    def _finish_handover(self, key: NoteVerifier) -> None:
        """Give the witness the stored hand-overs of the rotations it missed, in order (a
        witness of another host, or a rotation interrupted between saving the hand-over
        and handing it on): both keys signed each, so the witness reads it with the key it
        holds, and the next with the incoming one, down to ``key``. Anything else is left
        to the caller's own read of the witness, which reports it."""
        missed = self._missed_handover(key)
        if missed is None:
            return
        first, held = missed
        checkpoints = self.store.checkpoints()
        for rotation in read_rotations(self.store)[first:]:
            stored = next((n for s, n in checkpoints if s >= rotation.position), None)
            if stored is None:
                return
            handover = open_checkpoint(stored, [rotation.old, rotation.new], origin=self.origin)
            self._hand_to_witness(stored, handover.size, handover.root, held, rotation.old)
            held = handover

    def _hand_to_witness(
        self, note: str, size: int, root: bytes, held: Checkpoint | None, verifier: NoteVerifier
    ) -> None:
        """Give the witness the new checkpoint ``note`` of the log of ``size`` and ``root``.

        ``held`` is what the witness held before this checkpoint was verified. Another
        process may sign into the same witness since (two checkpoints at once), and then
        a refusal of the proof from ``held`` says nothing about this log. So a refusal
        counts only while the witness still holds ``held``; otherwise the proof is made
        again from what it holds now, unless that is a longer checkpoint that this one is
        a prefix of, which leaves the witness nothing to learn.

        Raises:
            CheckpointError, ProofError: the witness refuses it (rollback, fork).
            ConcurrencyError: the witness kept moving while this was handed to it.
        """
        assert self.witness is not None
        for _ in range(_WITNESS_TRIES):
            proof = [] if held is None else self._witness_proof(held, size, root)
            try:
                self.witness.update(note, verifier, proof)
            except (CheckpointError, ProofError):
                now = self.witness.latest(verifier)
                if now == held:
                    raise
                if now is not None and now.size > size and self._is_prefix(size, root, now):
                    return
                held = now
            else:
                return
        raise ConcurrencyError(
            f"the witness changed {_WITNESS_TRIES} times while a checkpoint of {size} events "
            "was handed to it (other checkpoints at the same time); run it again"
        )

    def _is_prefix(self, size: int, root: bytes, longer: Checkpoint) -> bool:
        """Whether the log of ``size`` and ``root`` is a prefix of ``longer``'s, as stored."""
        if longer.size > self.store.size():
            return False
        proof = consistency_proof(size, longer.size, self.merkle_tree().subtree_root)
        try:
            verify_consistency(size, longer.size, root, longer.root, proof)
        except ProofError:
            return False
        return True

    def _witness_proof(self, held: Checkpoint, size: int, root: bytes) -> list[bytes]:
        """The consistency proof from the witness's checkpoint to the new root, checked here
        first: from the stored nodes or, should one of those be wrong, from the leaves. One
        that still fails goes to the witness, which refuses it and says why."""
        proof: list[bytes] = []
        if not 0 < held.size < size:
            return proof
        for use_stored in (True, False):
            tree = self.merkle_tree(use_stored=use_stored)
            proof = consistency_proof(held.size, size, tree.subtree_root)
            try:
                verify_consistency(held.size, size, held.root, root, proof)
            except ProofError:
                continue
            return proof
        return proof

    def _verify_after(self, base: MerkleAccumulator, progress: Progress | None) -> VerifiedLog:
        """Verify the events after ``base`` (the signed prefix) and link them to it.

        Raises:
            LedgerDamaged: the new events are damaged, or do not link to the signed prefix.
            _VerifyAll: a stream head in the signed prefix cannot be read, or its stored
                bytes are not the ones signed; the whole log is verified instead, which
                says where and what the damage is.
        """
        signed = base.size
        signed_root = base.root()
        tree = self.merkle_tree()  # shared: the proofs of nearby heads share their nodes

        def head(stream_id: str, version: int) -> tuple[int, bytes] | None:
            # A stream's new events continue its newest event in the signed prefix. Where
            # that is, the store says (it may lie); what it holds, the signed root says:
            # the record must hash to its stored hash and that hash sit at its position
            # under the signed root. Taking the newest signed version of v - 1 and v, not
            # just v - 1, makes a fork (a second version v) fail to link; for v = 1 too: a
            # "new" version 1 of a signed stream is a fork, not a new stream. Versions
            # above v need no read: the signed stream was gap-free, so it also holds a v.
            if version < 1:
                return None  # link_damage reports the version
            try:
                # Undecoded where the store can: the records may be of a type this process
                # has no model for, and their bytes are checked below either way.
                filed = stream_positions(self.store, stream_id, max(version - 1, 1), version)
                found = [(v, p) for v, p in filed if p <= signed]
                if not found:
                    return None
                _, newest = max(found)  # a signed version v, where there is one
                raws = list(self.store.read_raw(start=newest, stop=newest))
                checked = ChunkVerifier(newest).feed_all(raws)
                if checked.damage is not None:
                    raise checked.damage
                if len(raws) != 1 or raws[0].stream_id != stream_id:
                    raise LedgerDamaged(
                        DamageKind.TAMPER, newest, f"not an event of stream {stream_id!r}"
                    )
                raw = raws[0]
                ((leaf, _),) = checked.subtrees
                proof = inclusion_proof(newest - 1, signed, tree.subtree_root)
                verify_inclusion(leaf, newest - 1, signed, proof, signed_root)
            except TraceboundError as exc:
                raise _VerifyAll(
                    f"the head of stream {stream_id!r} in the signed log does not check: {exc}"
                ) from exc
            return int(raw.stream_version), bytes(raw.hash)

        size = self.store.size()
        assembler = LogAssembler(base=base, head=head)
        # Helpers pay off only for many chunks (a helper process takes ~0.3 s to start).
        workers = (os.cpu_count() or 1) if size - signed > 4 * CHUNK else 1
        for chunk in self._chunks(size, [], workers, first=signed + 1):
            assembler.add(chunk)
            if progress is not None:
                progress(assembler.size - signed, size - signed)
        return assembler.result()

    def store_nodes(self, size: int, root: bytes, *, rebuild: bool = False) -> int:
        """Store the Merkle nodes of a verified log of ``size`` events with ``root``.

        The nodes are checked afterwards against ``root`` (O(log n)); nodes that do not
        agree with the verified log are dropped and stored again from it. ``rebuild``
        drops them first. Returns how many nodes were added.

        Raises:
            LedgerDamaged: the log changed while its nodes were being stored.
        """
        if not isinstance(self.store, MerkleNodeStore):
            return 0
        if rebuild:
            self.store.drop_merkle_nodes()
        added = store_nodes(self.store, size)
        if size and StoredTree(LogNodes(self.store)).subtree_root(0, size) != root:
            if rebuild:
                raise LedgerDamaged(
                    DamageKind.TAMPER,
                    None,
                    f"the stored hashes of the log's first {size} events do not give the root "
                    "just verified: part of the signed log was changed (or is changing); "
                    "run `tracebound verify` to find where",
                )
            return self.store_nodes(size, root, rebuild=True)
        return added

    # -- proofs --------------------------------------------------------------------------

    def merkle_tree(self, *, use_stored: bool = True) -> StoredTree:
        """Subtree roots of the stored log, for proofs: from the stored Merkle nodes where
        present, from the leaves elsewhere (everywhere with ``use_stored=False``). Proofs
        made from it must be verified against a signed root before anyone relies on them."""
        return StoredTree(LogNodes(self.store, use_stored=use_stored))

    def consistency_proof(self, size1: int, size2: int) -> list[bytes]:
        return consistency_proof(size1, size2, self.merkle_tree().subtree_root)

    def prove(self, position: int) -> InclusionBundle:
        """An inclusion proof for ``position`` against the newest signed checkpoint.

        Raises:
            ConfigError: no checkpoint covers the position yet (not damage: there is
                nothing to prove against until `checkpoint` signs one).
            CheckpointError: the newest checkpoint does not check.
            LedgerDamaged: the record at ``position`` is missing or damaged.
            ProofError: the proof built does not reach the signed root (damage).
        """
        note = self.store.latest_checkpoint()
        if note is None:
            raise ConfigError("no checkpoint yet; run `tracebound checkpoint` first")
        verifier = self.active_verifier()
        if verifier is None:
            raise ConfigError("proving needs the verifier key to read the checkpoint")
        cp = open_checkpoint(note, verifier)
        if not 1 <= position <= cp.size:
            size = self.store.size()
            hint = (
                "run `tracebound checkpoint` to sign it"
                if cp.size < position <= size
                else f"the log holds positions 1..{size}"
            )
            raise ConfigError(
                f"position {position} is not covered by the newest checkpoint "
                f"(1..{cp.size}); {hint}"
            )
        raws = list(self.store.read_raw(start=position, stop=position))
        if len(raws) != 1:
            raise LogNodes(self.store).missing(position, position)
        # The record as verify checks it: its bytes hash to its hash, and the columns the
        # bundle copies (stream id, previous hash) are the ones those bytes hold.
        damage = ChunkVerifier(position).feed_all(raws).damage
        if damage is not None:
            raise damage
        raw = raws[0]

        def bundle_from(tree: StoredTree) -> InclusionBundle:
            return InclusionBundle(
                position=position,
                stream_id=raw.stream_id,
                prev_hash=raw.prev_hash,
                hash=raw.hash,
                body=raw.body,
                tree_size=cp.size,
                proof=inclusion_proof(position - 1, cp.size, tree.subtree_root),
                checkpoint=note,
            )

        # Never hand out a proof that does not verify.
        return self.checked_proof(bundle_from, lambda b: verify_bundle(b, verifier))

    def prove_consistency(self, held_note: str) -> ConsistencyBundle:
        """A consistency proof from a signed checkpoint someone kept to the newest one.

        The chain runs through the hand-over checkpoint of every key rotation in between, so
        whoever kept ``held_note`` checks it with the key that signed it (ADR 0017). It is
        built from the stored Merkle nodes and checked here before it is handed out.

        Raises:
            ConfigError: no checkpoint or no verifier key yet, or ``held_note`` is of
                another log.
            ProofError: ``held_note`` is not a checkpoint any key of this ledger signed.
            LedgerDamaged: ROLLBACK (the newest checkpoint is older than the one held),
                FORK (this log's first events are not the ones held), or damage to the
                ledger's own checkpoints.
        """
        notes = self.store.checkpoints()
        if not notes or self.verifier is None:
            raise ConfigError(
                "no checkpoint yet; run `tracebound checkpoint` first"
                if not notes
                else "proving needs the verifier key to read the checkpoints"
            )
        signed, history = open_checkpoints(
            notes, self.verifier, read_rotations(self.store), origin=self.origin
        )
        held, held_key = self._open_held(held_note, history)
        newest = signed[-1]
        if held.size > newest.size:
            raise LedgerDamaged(
                DamageKind.ROLLBACK,
                newest.size + 1,
                f"the checkpoint held covers {held.size} events, but this ledger's newest "
                f"checkpoint covers {newest.size} (its log holds {self.store.size()}): the "
                "ledger was rolled back to before the checkpoint held",
            )
        # The newest checkpoint, after the hand-over of each rotation since the one held.
        by_size = dict(notes)
        sizes = {newest.size} | {
            min(s for s in by_size if s >= r.position)
            for r in history.rotations
            if r.position > held.size
        }
        chain = [(held_note, held)] + [(by_size[c.size], c) for c in signed if c.size in sizes]

        def build(tree: StoredTree) -> ConsistencyBundle:
            steps: list[ConsistencyStep] = []
            before: Checkpoint | None = None
            for note, cp in chain:
                proof: tuple[bytes, ...] = ()
                if before is not None and 0 < before.size < cp.size:
                    proof = tuple(consistency_proof(before.size, cp.size, tree.subtree_root))
                steps.append(ConsistencyStep(note, history.active(cp.size), proof))
                before = cp
            return ConsistencyBundle(tuple(steps))

        def check(bundle: ConsistencyBundle) -> None:
            verify_consistency_bundle(bundle, held_key, origin=self.origin, held=held)

        try:
            return self.checked_proof(build, check)
        except ProofError as exc:
            raise self._judge_held(held, newest) or exc from exc

    def _open_held(self, note: str, history: KeyHistory) -> tuple[Checkpoint, NoteVerifier]:
        """The checkpoint someone kept, and the key of this ledger's history that signed it.

        Raises:
            ConfigError: a checkpoint of another log.
            ProofError: not a signed checkpoint, or signed by no key of this ledger (or
                by a key past its retirement).
        """
        try:
            claimed = parse_checkpoint(SignedNote.parse(note).text)
        except CheckpointError as exc:
            raise ProofError(f"the checkpoint held is no signed checkpoint: {exc}") from exc
        if claimed.origin != self.origin:
            raise ConfigError(
                f"the checkpoint held is of log {claimed.origin!r}, and this ledger is "
                f"{self.origin!r}: ask the ledger it came from"
            )
        for key in history.keys:
            try:
                held = open_checkpoint(note, key)
            except SignatureInvalid:
                continue
            active = history.active(held.size)
            retired = history.retired_by(key)
            if key != active and retired is not None and not signed_by(note, active):
                raise ProofError(
                    f"the checkpoint held (size {held.size}) is signed by {_key_text(key)}, "
                    f"retired by {retired.describe()}, and not by {_key_text(active)}: a "
                    "retired key cannot extend the ledger (the checkpoint is forged; treat "
                    "the retired key as leaked)"
                )
            return held, key
        raise ProofError(
            f"the checkpoint held (size {claimed.size}) is signed by none of this ledger's "
            f"keys ({history.describe()}): it is of another ledger of the same name, forged, "
            "or this ledger was rolled back to before the rotation to the key that signed it"
        )

    def _judge_held(self, held: Checkpoint, newest: Checkpoint) -> LedgerDamaged | None:
        """Why no consistency proof joins ``held`` to ``newest``, from the log's leaves:
        the log no longer matches its own newest checkpoint (damage `verify` locates), or
        it does but its first events are not the ones held (a fork). None: neither, so the
        proof's own error says what failed."""
        tree = self.merkle_tree(use_stored=False)
        if tree.subtree_root(0, newest.size) != newest.root:
            return LedgerDamaged(
                DamageKind.TAMPER,
                None,
                f"the log no longer matches its own newest checkpoint (size {newest.size}); "
                "`tracebound verify` names the first damaged position",
            )
        if held.size and tree.subtree_root(0, held.size) != held.root:
            return LedgerDamaged(
                DamageKind.FORK,
                None,
                f"the log's first {held.size} events are not the ones in the checkpoint held "
                f"(another root): the ledger was rewritten somewhere in positions 1.."
                f"{held.size} and signed again since that checkpoint",
            )
        return None

    def active_verifier(self) -> NoteVerifier | None:
        """The key that signs this ledger's checkpoints now, reached from :attr:`verifier`
        (any key of its history) through the hand-overs (ADR 0017); None without a verifier.

        From an older key, each later rotation's hand-over checkpoint must be signed by
        both its keys, and the rotation's record proven under the hand-over's root (from
        the stored Merkle nodes, checked), before its new key is trusted. Costs a stream
        index lookup without rotations, a few proofs with them.

        Raises:
            SignatureInvalid: a hand-over is not signed by both keys.
            ProofError, LedgerDamaged: a rotation's record is not the one signed.
        """
        root = self.verifier
        if root is None:
            return None
        notes = self.store.checkpoints()
        signed = max((size for size, _ in notes), default=0)
        rotations = [r for r in read_rotations(self.store) if r.position <= signed]
        history = KeyHistory(rotations, root)
        if root not in history.keys:
            return root  # a key this log does not know: checks with it say so
        for rotation in rotations[history.keys.index(root) :]:
            note = next(n for s, n in notes if s >= rotation.position)
            handover = open_checkpoint(note, [rotation.old, rotation.new], origin=self.origin)
            self._prove_rotation(rotation, handover)
        return history.keys[-1]

    def _prove_rotation(self, rotation: Rotation, handover: Checkpoint) -> None:
        """The rotation's record is the one at its position under the hand-over's root."""
        position = rotation.position
        raws = list(self.store.read_raw(start=position, stop=position))
        damage = ChunkVerifier(position).feed_all(raws).damage
        if damage is not None or len(raws) != 1:
            raise damage or LogNodes(self.store).missing(position, position)
        leaf = leaf_hash(raws[0].hash)

        def build(tree: StoredTree) -> list[bytes]:
            return inclusion_proof(position - 1, handover.size, tree.subtree_root)

        def check(proof: list[bytes]) -> None:
            verify_inclusion(leaf, position - 1, handover.size, proof, handover.root)

        self.checked_proof(build, check)

    def checked_proof(self, build: Callable[[StoredTree], _P], check: Callable[[_P], object]) -> _P:
        """``build`` proofs from the stored Merkle nodes and ``check`` them against a signed
        root; should that fail, judge the stored nodes against the log itself.

        If the same proofs built from the leaves pass, the stored nodes are what is wrong
        (someone changed them): this says so rather than hand out proofs that cost a read
        of the whole log each. If those fail too, the log is not the one signed.

        Raises:
            ProofError: the stored nodes disagree with the log, or the log with the
                signed root (the error from the leaves says which check failed).
            LedgerDamaged: the log lacks an event the proofs need.
        """
        try:
            proofs = build(self.merkle_tree())
            check(proofs)
        except ProofError:
            check(build(self.merkle_tree(use_stored=False)))
            raise ProofError(
                "the stored Merkle nodes disagree with the log (someone changed them); "
                "`tracebound checkpoint --full` re-verifies the log and stores them again"
            ) from None
        return proofs

    # -- verification --------------------------------------------------------------------

    def _signed_checkpoints(self, report: VerifyReport) -> list[Checkpoint] | None:
        notes = self.store.checkpoints()
        report.stored_checkpoints = tuple(size for size, _note in notes)
        if not notes:
            report.checks["signature"] = "no checkpoint yet"
            return []
        if self.verifier is None:
            report.checks["signature"] = NO_VERIFIER_KEY
            return None
        newest = max(size for size, _note in notes)
        try:
            # inside the try: a store whose damage hides its stream index (a JSONL line that
            # is no record) raises LedgerDamaged here, which verify reports, not raises
            rotations = read_rotations(self.store)
            report.pending_rotation = next(
                (r for r in rotations[::-1] if r.position > newest), None
            )
            out, history = open_checkpoints(
                notes,
                self.verifier,
                rotations,
                origin=self.origin,
                hint=" (for a ledger signed with another key, check it with that key's "
                "public key: `verify --verifier-key`)",
            )
        except LedgerDamaged as damage:
            report.damage = damage
            report.checks["signature"] = "failed"
            return None
        report.rotations = history.rotations
        self._history = history
        report.checks["signature"] = "ok"
        return out

    def _witnessed(self, report: VerifyReport) -> Checkpoint | None:
        if self.witness is None:
            report.checks["witness"] = "no witness configured"
            return None
        if self.verifier is None:
            report.checks["witness"] = NO_VERIFIER_KEY
            return None
        try:
            held = self._witness_latest(self.verifier)
        except TraceboundError as exc:
            report.checks["witness"] = f"unreadable: {exc}"
            return None
        if held is None:
            report.checks["witness"] = "witness holds no checkpoint yet"
            return None
        report.witness_size = held.size
        report.checks["witness"] = "ok"
        return held

    def _behind_witness(self, report: VerifyReport) -> None:
        """A store whose checkpoints the key does not verify, behind a witness it does: a
        store put back to before a key rotation (its checkpoints are the old key's, the
        witness's the new key's). That is a rollback, said as one, not a forgery."""
        damage = report.damage
        if (
            damage is None
            or damage.kind is not DamageKind.FORGED_SIGNATURE
            or self.witness is None
            or self.verifier is None
        ):
            return
        try:
            held = self.witness.latest(self.verifier)
        except TraceboundError:
            return
        size = self.store.size()
        if held is None or held.size <= size:
            return
        report.witness_size = held.size
        report.checks["witness"] = "failed"
        report.damage = LedgerDamaged(
            DamageKind.ROLLBACK,
            size + 1,
            f"the witness holds a checkpoint of {held.size} events signed by "
            f"{_key_text(self.verifier)}, but the store has only {size} and its checkpoints "
            "are not signed by that key: the store was rolled back to an older state (from "
            f"before a key rotation, if that key came by one); {damage}",
        )

    def _witness_latest(self, root: NoteVerifier) -> Checkpoint | None:
        """The witness's checkpoint, checked with the key of the ledger's key history that
        signs at its size: the newest key first (the witness holds the newest checkpoint),
        then the older ones, then ``root`` (a key this log's history does not know)."""
        assert self.witness is not None
        history = self._history
        keys = [*reversed(history.keys), root] if history is not None else [root]
        first: TraceboundError | None = None
        for key in dict.fromkeys(keys):
            try:
                return self.witness.latest(key)
            except SignatureInvalid as exc:
                first = first or exc
        assert first is not None
        raise first

    def _chunks(
        self, size: int, sizes: list[int], workers: int, *, first: int = 1
    ) -> Iterator[ChunkResult]:
        """Chunk results in position order, hashed by ``workers`` workers in all.

        This thread is one of the workers: it hashes chunks itself whenever it is not
        waiting on an in-order result, so ``workers=2`` keeps two cores busy with one helper,
        and no core waits while a helper is still starting. Helpers are threads when the
        store checks pages in C without the GIL (``verify_in_threads``), else processes
        (spawning one takes a few hundred milliseconds). Chunks are claimed in position
        order by whoever is free, so the results held for in-order assembly stay few, and
        memory flat.
        """
        # A chunk's Merkle subtrees are aligned to its own start, so a log verified from
        # the middle (an incremental checkpoint) starts with the aligned pieces up to the
        # next multiple of CHUNK, each its own chunk; from there chunks are CHUNK long.
        aligned = min(-(-(first - 1) // CHUNK) * CHUNK, size)
        spans = _Spans([(a + 1, b) for a, b in aligned_subtrees(first - 1, aligned)], aligned, size)

        def local(start: int, stop: int) -> ChunkResult:
            return _verify_span(self.store, start, stop, [s for s in sizes if start <= s <= stop])

        if workers <= 1 or len(spans) <= 1:
            for start, stop in spans:
                yield local(start, stop)
            return
        helpers = workers - 1
        window = 2 * helpers  # queued per helper: one running, one ready to start
        pool: Executor
        store = self.store
        if getattr(store, "verify_in_threads", False):
            # The store reads and the C kernel checks pages without holding the GIL, so
            # helper threads run in parallel, and start at once (no interpreter to spawn).
            pool = ThreadPoolExecutor(max_workers=helpers, thread_name_prefix="tb-verify")

            def submit(a: int, b: int) -> Future[ChunkResult]:
                return pool.submit(_verify_span, store, a, b, [s for s in sizes if a <= s <= b])

        else:
            # spawn, not fork: a forked child would inherit this process's SQLite handles.
            pool = ProcessPoolExecutor(max_workers=helpers, mp_context=get_context("spawn"))
            # `url` leaves out a PostgreSQL password (it is printed); the workers need it.
            url: str = getattr(store, "worker_url", store.url)

            def submit(a: int, b: int) -> Future[ChunkResult]:
                return pool.submit(_verify_chunk, url, a, b, [s for s in sizes if a <= s <= b])

        try:
            remote: dict[int, Future[ChunkResult]] = {}
            done_here: dict[int, ChunkResult] = {}
            claimed = emitted = 0
            while emitted < len(spans):
                while claimed < len(spans) and sum(not f.done() for f in remote.values()) < window:
                    remote[claimed] = submit(*spans[claimed])
                    claimed += 1
                if emitted in done_here:
                    yield done_here.pop(emitted)
                elif emitted in remote and (remote[emitted].done() or claimed == len(spans)):
                    yield remote.pop(emitted).result()
                else:
                    done_here[claimed] = local(*spans[claimed])
                    claimed += 1
                    continue
                emitted += 1
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def verify(
        self,
        *,
        progress: Progress | None = None,
        workers: int | None = None,
        require_signed: bool = True,
    ) -> VerifyReport:
        """Check chain, positions, indexes, Merkle roots, signatures and the witness.

        Never raises for damage: the report names the first bad position and the kind.
        ``workers`` > 1 hashes chunks in that many threads (the SQLite store with the C
        kernel) or processes (default: CPU count, for logs larger than one chunk).
        """
        report = VerifyReport(origin=self._origin or stored_origin(self.store))
        checkpoints = self._signed_checkpoints(report)
        if report.damage is not None:
            if require_signed:
                self._behind_witness(report)
            return report
        if checkpoints:  # signatures checked: true whatever the chain turns out to hold
            report.checkpoint_size = max(c.size for c in checkpoints)
        witness = self._witnessed(report) if require_signed else None
        sizes = sorted({c.size for c in checkpoints or []} | ({witness.size} if witness else set()))
        size = self.store.size()
        nworkers = workers if workers is not None else (os.cpu_count() or 1)
        assembler = LogAssembler(root_sizes=sizes)
        try:
            for chunk in self._chunks(size, sizes, nworkers):
                assembler.add(chunk)
                if progress is not None:
                    progress(assembler.size, size)
            log: VerifiedLog = assembler.result()
        except LedgerDamaged as damage:
            report.damage = damage
            report.checks["chain"] = "failed"
            return report
        report.checks["chain"] = "ok"
        report.checks["positions"] = "ok"
        report.size, report.root, report.streams = log.size, log.root.hex(), log.streams
        signed = max(report.checkpoint_size or 0, report.witness_size or 0)
        report.uncovered = max(0, log.size - signed)  # a store behind its witness: none
        newest_stored = report.stored_checkpoint_size or 0
        if checkpoints is None and newest_stored > log.size:
            # No key to check the checkpoint with, but a log shorter than the store's own
            # checkpoint says is damage either way: cut off the end, or a planted checkpoint.
            report.damage = LedgerDamaged(
                DamageKind.TRUNCATION,
                log.size + 1,
                f"the store holds a checkpoint of {newest_stored} events (signature not "
                f"checked: no verifier key) but the log has {log.size}: events were cut off "
                "the end, or the checkpoint is not genuine",
            )
            report.checks["merkle"] = "failed"
            return report
        try:
            check_against_checkpoints(log, checkpoints or [], witness)
        except LedgerDamaged as damage:
            report.damage = damage
            report.checks["merkle"] = "failed"
            if witness is not None and damage.kind in {DamageKind.ROLLBACK, DamageKind.FORK}:
                report.checks["witness"] = "failed"  # the log is behind or beside it
            return report
        # "ok" only for a root compared with a signed one (the JSON's checks say what the
        # text says); a root nothing vouches for leaves the report incomplete.
        report.checks["merkle"] = (
            "ok" if checkpoints or witness is not None else MERKLE_NOT_COMPARED
        )
        return report
