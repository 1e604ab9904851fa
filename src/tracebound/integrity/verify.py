"""Verification of a stored log: chain, positions, indexes, Merkle root, checkpoints.

The log is checked in *chunks* of consecutive positions. A :class:`ChunkVerifier` checks
everything that can be checked inside its chunk: each record hashes to its stored hash,
the store's columns agree with the hashed bytes, positions are consecutive, and records of
one stream link to each other. It also builds the chunk's Merkle subtrees. The
:class:`LogAssembler` then stitches chunks in order: it links each stream's first record in
a chunk to that stream's last record before it, and merges the Merkle subtrees into the
roots the signed checkpoints claim.

One code path serves a single-threaded verify (one chunk after another) and a parallel
one (chunks hashed in worker processes, assembled here), so both report the same damage.
Nothing here does I/O: callers feed records and checkpoints in.
"""

from __future__ import annotations

from binascii import hexlify
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from itertools import islice
from types import ModuleType
from typing import Any

import orjson
from blake3 import blake3

from tracebound.canonical import canonical_bytes
from tracebound.errors import CanonicalizationError, DamageKind, LedgerDamaged
from tracebound.events.record import RawRecord
from tracebound.integrity import _kernel
from tracebound.integrity.chain import GENESIS
from tracebound.integrity.merkle import MerkleAccumulator, leaf_hash
from tracebound.integrity.note import Checkpoint

__all__ = [
    "PAGE",
    "ChunkResult",
    "ChunkVerifier",
    "LogAssembler",
    "VerifiedLog",
    "check_against_checkpoints",
    "check_length",
    "diagnose_mismatch",
    "link_damage",
    "verify_records",
]


PAGE = 2048
"""Records checked per batch. A power of two, so that in a chunk that starts on an aligned
position each page's Merkle leaves form one perfect subtree; small enough to keep memory flat."""

# The suffix every record must end with (see `events/record.py`), as one format string so
# that checking it costs a single `%` per record.
_SUFFIX = (
    b',"position":%d,"prev_hash":"%s","schema_version":%d,"stream_id":%s,'
    b'"stream_version":%d,"timestamp":"%s","workflow_id":%s}'
)


_TYPE_KEY = b',"event_type":'
"""Where a record's ``event_type`` starts. The first match is the top-level key: before it
come only ``correlation_id`` (null or a string) and ``event_id`` (a string), and a JSON
string cannot hold this text (its quote would be escaped)."""


def event_type_at(canonical_type: bytes) -> bytes:
    """What must follow :data:`_TYPE_KEY`'s first match for a record of that event type:
    the type's canonical JSON, then the payload's key."""
    return _TYPE_KEY + canonical_type + b',"payload":'


_KERNEL: ModuleType | None = _kernel.KERNEL
"""The C verify kernel (ADR 0007) when built and not switched off; None runs pure Python."""

_KERNEL_MAX_POSITION = (1 << 63) - 2  # the kernel counts positions in 64 bits


@dataclass(slots=True)
class _StreamSpan:
    """What a chunk saw of one stream: how it starts (to link back) and how it ends."""

    first_position: int
    first_version: int
    first_prev: bytes
    last_version: int
    last_hash: bytes


@dataclass(slots=True)
class ChunkResult:
    """The outcome of checking positions ``start .. start+size-1``.

    ``damage`` is the first damage inside the chunk, if any; everything else describes the
    records before it. ``subtrees`` are the chunk's Merkle subtrees (root, leaf count) in
    order; ``snapshots`` holds the same at each requested size inside the chunk.
    """

    start: int
    size: int
    streams: dict[str, _StreamSpan]
    subtrees: list[tuple[bytes, int]]
    snapshots: dict[int, list[tuple[bytes, int]]] = field(default_factory=dict)
    damage: LedgerDamaged | None = None


def _subtrees(tree: MerkleAccumulator) -> list[tuple[bytes, int]]:
    """The accumulator's perfect subtrees as (root, leaf count), leftmost first."""
    size, peaks = tree.state()
    sizes = [1 << b for b in range(size.bit_length() - 1, -1, -1) if (size >> b) & 1]
    return list(zip(peaks, sizes, strict=True))


def _extend_leaves(tree: MerkleAccumulator, leaves: bytes, kernel: ModuleType) -> None:
    """Append concatenated 32-byte leaf hashes, hashing each aligned block's root in C.

    The same aligned decomposition as :meth:`MerkleAccumulator.extend`; a page that starts
    on a multiple of its (power-of-two) size is a single block, one C call.
    """
    n = len(leaves) // 32
    pos = 0
    while pos < n:
        size = tree.size
        remaining = n - pos
        k = size & -size if size else 1 << (remaining.bit_length() - 1)
        while k > remaining:
            k >>= 1
        if k == 1:
            tree.append_leaf_hash(leaves[32 * pos : 32 * pos + 32])
        else:
            tree.append_subtree(kernel.perfect_root(leaves, pos, k), k)
        pos += k


def diagnose_mismatch(record: RawRecord, reason: str, *, hashed: bool = True) -> LedgerDamaged:
    """The damage of a record whose bytes do not hash to its stored hash, or disagree with
    its index columns: moved or altered.

    REORDER (at the stored position) when the bytes, which hash to the record's stored hash
    (``hashed``), say another position: the whole record was moved there. MALFORMED when
    the bytes are not JSON. Otherwise TAMPER, with ``reason`` as the detail: bytes that do
    not hash to the stored hash were altered, even where the alteration is the position
    they state (a bit flipped in its digit). ``verify`` and ``replay`` both name such a
    record this way.
    """
    try:
        said = orjson.loads(record.body)
        # JSON but not an object (a body rewritten as [] or 7): altered, says no position
        said_position = said.get("position") if isinstance(said, dict) else None
    except orjson.JSONDecodeError:
        return LedgerDamaged(DamageKind.MALFORMED, record.position, "record is not valid JSON")
    if hashed and isinstance(said_position, int) and said_position != record.position:
        return LedgerDamaged(
            DamageKind.REORDER,
            record.position,
            f"the record stored here was written at position {said_position}",
        )
    return LedgerDamaged(DamageKind.TAMPER, record.position, reason)


class ChunkVerifier:
    """Checks one run of consecutive records; see the module docstring."""

    def __init__(self, start: int, *, snapshot_sizes: Iterable[int] = ()) -> None:
        self.start = start
        self._expected = start
        self._streams: dict[str, _StreamSpan] = {}
        self._sid_json: dict[str, bytes] = {}
        self._wf_json: dict[str, bytes] = {}
        self._type_at: dict[str, bytes] = {}
        self._tree = MerkleAccumulator()
        self._want = sorted(s for s in snapshot_sizes if s >= start)
        self._snapshots: dict[int, list[tuple[bytes, int]]] = {}
        self._damage: LedgerDamaged | None = None

    def feed_all(self, records: Iterable[RawRecord]) -> ChunkResult:
        it = iter(records)
        while page := list(islice(it, PAGE)):
            if not self.feed_page(page):
                break
        return self.result()

    def feed_pages(self, pages: Iterable[Sequence[Sequence[Any]]]) -> ChunkResult:
        """Check pages of rows in :class:`RawRecord` field order (plain tuples will do)."""
        for page in pages:
            if not self.feed_page(page):
                break
        return self.result()

    # One flat loop on purpose: splitting it into helpers is exactly the per-record call
    # overhead this method exists to avoid.
    def feed_page(self, rows: Sequence[Sequence[Any]]) -> bool:  # noqa: PLR0912, PLR0915
        """Check consecutive records; False once damage is found.

        The same checks as :meth:`feed`, in one tight loop: verify spends nearly all its time
        here, and per-record method calls, attribute lookups and single-leaf Merkle merges
        cost more than the hashing. The loop only ever *accepts* a record by exactly the
        conditions :meth:`_check` uses; at the first record it does not accept (damaged, or
        merely unusual, such as a column of an unexpected type) it hands the rest of the page
        to :meth:`feed`, so every damage report comes from one code path.
        """
        if self._damage is not None:
            return False
        kernel = _KERNEL
        if kernel is not None and self._expected <= _KERNEL_MAX_POSITION:
            page = rows if type(rows) is kernel.Page else kernel.page_from_rows(rows)
            if page is not None:
                done = self._accept(kernel, page)
                if done == len(page):
                    return True
                rows = page[done:]  # the rows as the Python reader gives them
        expected = self._expected
        streams = self._streams
        sid_json = self._sid_json
        wf_json = self._wf_json
        type_at = self._type_at
        type_key = _TYPE_KEY
        want = self._want
        snap = want[0] if want else -1
        leaves: list[bytes] = []
        append_leaf = leaves.append
        b3 = blake3
        leaf_prefix = b"\x00"
        suffix = _SUFFIX
        i = 0
        try:
            for i, row in enumerate(rows):  # noqa: B007 - `i` says where a bail-out resumes
                position, sid, version, etype, wf, ts, schema, prev, digest, body = row
                if position != expected:
                    break
                if b3(prev).update(body).digest() != digest:
                    break
                sj = sid_json.get(sid)
                if sj is None:
                    # Only str keys are cached, so a hit means `sid` is a str (1 == 1.0 == True
                    # must not let a differently typed column borrow another's encoding).
                    if type(sid) is not str:
                        break
                    sj = sid_json[sid] = canonical_bytes(sid)
                wj = b"null" if wf is None else wf_json.get(wf)
                if wj is None:
                    if type(wf) is not str:
                        break
                    wj = wf_json[wf] = canonical_bytes(wf)
                if type(ts) is not str or not body.endswith(
                    suffix % (position, hexlify(prev), schema, sj, version, ts.encode(), wj)
                ):
                    break
                tj = type_at.get(etype)
                if tj is None:
                    if type(etype) is not str:
                        break
                    tj = type_at[etype] = event_type_at(canonical_bytes(etype))
                if not body.startswith(tj, body.find(type_key)):
                    break
                span = streams.get(sid)
                if span is None:
                    streams[sid] = _StreamSpan(position, version, prev, version, digest)
                elif version == span.last_version + 1 and prev == span.last_hash:
                    span.last_version = version
                    span.last_hash = digest
                else:
                    break
                append_leaf(sha256(leaf_prefix + digest).digest())
                expected += 1
                if position == snap:
                    self._tree.extend(leaves)
                    leaves.clear()
                    while want and want[0] == position:
                        self._snapshots[want.pop(0)] = _subtrees(self._tree)
                    snap = want[0] if want else -1
            else:
                i = len(rows)
        except (TypeError, ValueError, AttributeError, OverflowError):
            pass  # a column of an unexpected type: the slow path below judges record `i`
        self._tree.extend(leaves)
        self._expected = expected
        for row in rows[i:]:
            if not self.feed(row if isinstance(row, RawRecord) else RawRecord(*row)):
                return False
        return True

    def _accept(self, kernel: ModuleType, page: Sequence[Sequence[Any]]) -> int:
        """Let the C kernel accept a prefix of ``page``; return how many records it took.

        The kernel applies exactly the acceptance conditions of the loop in
        :meth:`feed_page` and stops at the first record that fails any of them, or that is
        merely unusual; it never reports damage. It stops at each requested snapshot size
        too, so the Merkle state can be recorded there.
        """
        n = len(page)
        done = 0
        want = self._want
        while done < n:
            limit = n - done
            if want and 0 <= want[0] - self._expected < limit:
                limit = want[0] - self._expected + 1
            count, leaves = kernel.accept(
                page, done, self._expected, limit, self._streams, _StreamSpan
            )
            _extend_leaves(self._tree, leaves, kernel)
            done += count
            self._expected += count
            while count and want and want[0] == self._expected - 1:
                self._snapshots[want.pop(0)] = _subtrees(self._tree)
            if count < limit:
                break
        return done

    def feed(self, r: RawRecord) -> bool:
        """Check one record; False once damage is found (later records are not checked)."""
        if self._damage is not None:
            return False
        try:
            damage = self._check(r)
        except (
            TypeError,
            ValueError,
            AttributeError,
            OverflowError,
            CanonicalizationError,  # an id column holding a float, a blob, a huge int
        ) as exc:
            # A column of the wrong type or shape: the store was edited by hand.
            position = r.position if isinstance(r.position, int) else self._expected
            damage = LedgerDamaged(DamageKind.MALFORMED, position, f"unreadable record: {exc}")
        if damage is not None:
            self._damage = damage
            return False
        self._tree.append_leaf_hash(leaf_hash(r.hash))
        self._expected += 1
        while self._want and self._want[0] == self._expected - 1:
            self._snapshots[self._want.pop(0)] = _subtrees(self._tree)
        return True

    def _check(self, r: RawRecord) -> LedgerDamaged | None:
        if r.position != self._expected:
            if r.position > self._expected:
                return LedgerDamaged(
                    DamageKind.GAP,
                    self._expected,
                    f"position {self._expected} is missing (next stored is {r.position})",
                )
            return LedgerDamaged(DamageKind.REORDER, r.position, "position is stored twice")
        h = blake3(r.prev_hash)
        h.update(r.body)
        if h.digest() != r.hash:
            return diagnose_mismatch(
                r, "the record's bytes do not hash to its stored hash", hashed=False
            )
        sid = r.stream_id
        sid_json = self._sid_json.get(sid)
        if sid_json is None:
            sid_json = self._sid_json[sid] = canonical_bytes(sid)
        suffix = (
            b',"position":%d,"prev_hash":"%s","schema_version":%d,"stream_id":%s,'
            b'"stream_version":%d,"timestamp":"%s","workflow_id":%s}'
            % (
                r.position,
                r.prev_hash.hex().encode(),
                r.schema_version,
                sid_json,
                r.stream_version,
                r.timestamp.encode(),
                b"null" if r.workflow_id is None else canonical_bytes(r.workflow_id),
            )
        )
        if not r.body.endswith(suffix):
            return diagnose_mismatch(r, "the store's index columns disagree with the hashed record")
        return self._check_type(r) or self._link(sid, r)

    def _check_type(self, r: RawRecord) -> LedgerDamaged | None:
        # The event_type column is not in the suffix (it precedes the payload), but readers
        # use it: the projections' SQLite reader decides by it whether to read the body at
        # all. So it is held to the hashed record too (security review: a cost_incurred
        # relabelled rag_hit verified, and left the cost views).
        type_at = self._type_at.get(r.event_type)
        if type_at is None:
            type_at = self._type_at[r.event_type] = event_type_at(canonical_bytes(r.event_type))
        # find() is -1 without the key: startswith then looks at the last byte, no match.
        if not r.body.startswith(type_at, r.body.find(_TYPE_KEY)):
            return diagnose_mismatch(
                r, "the store's event_type column disagrees with the hashed record"
            )
        return None

    def _link(self, sid: str, r: RawRecord) -> LedgerDamaged | None:
        span = self._streams.get(sid)
        if span is None:
            self._streams[sid] = _StreamSpan(
                r.position, r.stream_version, r.prev_hash, r.stream_version, r.hash
            )
            return None
        damage = link_damage(sid, span.last_version, span.last_hash, r)
        if damage is None:
            span.last_version = r.stream_version
            span.last_hash = r.hash
        return damage

    def result(self) -> ChunkResult:
        return ChunkResult(
            start=self.start,
            size=self._expected - self.start,
            streams=self._streams,
            subtrees=_subtrees(self._tree),
            snapshots=self._snapshots,
            damage=self._damage,
        )


def link_damage(
    stream_id: str, last_version: int, last_hash: bytes, r: RawRecord
) -> LedgerDamaged | None:
    """Does ``r`` continue its stream, whose newest record is (last_version, last_hash)?"""
    if r.stream_version == last_version + 1 and r.prev_hash == last_hash:
        return None
    if r.stream_version > last_version + 1:
        return LedgerDamaged(
            DamageKind.GAP,
            r.position,
            f"stream {stream_id!r} jumps from version {last_version} to {r.stream_version}: "
            "an event was removed",
        )
    if r.stream_version <= last_version:
        return LedgerDamaged(
            DamageKind.REORDER,
            r.position,
            f"stream {stream_id!r} version {r.stream_version} comes after version {last_version}",
        )
    return LedgerDamaged(
        DamageKind.TAMPER,
        r.position,
        f"stream {stream_id!r} version {r.stream_version} does not link to version {last_version}",
    )


@dataclass(frozen=True, slots=True)
class VerifiedLog:
    """A log whose records all check out: its size, Merkle root and roots at asked sizes."""

    size: int
    root: bytes
    streams: int
    roots: dict[int, bytes]


class LogAssembler:
    """Stitches chunk results, in position order, into one verified log."""

    def __init__(
        self,
        *,
        root_sizes: Iterable[int] = (),
        base: MerkleAccumulator | None = None,
        head: Callable[[str, int], tuple[int, bytes] | None] | None = None,
    ) -> None:
        """Args:
        root_sizes: sizes to keep the Merkle root at (in :attr:`VerifiedLog.roots`).
        base: the tree of the log before the first chunk (an incremental checkpoint's
            signed prefix); the first chunk then starts at ``base.size + 1``.
        head: for a stream the chunks have not shown yet, whose first record here has
            version ``v``, ``head(stream_id, v)`` is the stream's newest (version, hash)
            before it, in the prefix, or None for a stream new to the log.
        """
        self._heads: dict[str, tuple[int, bytes]] = {}
        self._tree = MerkleAccumulator() if base is None else base.copy()
        self._head = head
        self._root_sizes = set(root_sizes)
        self._roots: dict[int, bytes] = {}
        if 0 in self._root_sizes:
            self._roots[0] = self._tree.root()

    @property
    def size(self) -> int:
        return self._tree.size

    def add(self, chunk: ChunkResult) -> None:
        """Fold in the next chunk; raise the first damage, in position order."""
        if chunk.start != self._tree.size + 1:
            raise LedgerDamaged(
                DamageKind.GAP, self._tree.size + 1, "chunks were not assembled in order"
            )
        firsts = sorted(chunk.streams.items(), key=lambda kv: kv[1].first_position)
        for sid, span in firsts:
            if chunk.damage is not None and span.first_position >= (chunk.damage.position or 0):
                break
            known = self._heads.get(sid)
            if known is None and self._head is not None:
                known = self._head(sid, span.first_version)
            last_version, last_hash = (0, GENESIS) if known is None else known
            probe = RawRecord(
                span.first_position,
                sid,
                span.first_version,
                "",
                None,
                "",
                0,
                span.first_prev,
                b"",
                b"",
            )
            damage = link_damage(sid, last_version, last_hash, probe)
            if damage is not None:
                raise damage
        if chunk.damage is not None:
            raise chunk.damage
        for size, subtrees in chunk.snapshots.items():
            if size in self._root_sizes:
                probe_tree = self._tree.copy()
                for root, count in subtrees:
                    probe_tree.append_subtree(root, count)
                self._roots[size] = probe_tree.root()
        for root, count in chunk.subtrees:
            self._tree.append_subtree(root, count)
        for sid, span in chunk.streams.items():
            self._heads[sid] = (span.last_version, span.last_hash)

    def result(self) -> VerifiedLog:
        return VerifiedLog(
            size=self._tree.size,
            root=self._tree.root(),
            streams=len(self._heads),
            roots=dict(self._roots),
        )


def verify_records(records: Iterable[RawRecord], *, root_sizes: Iterable[int] = ()) -> VerifiedLog:
    """Verify a whole log from position 1 in this thread (small logs, tests)."""
    sizes = list(root_sizes)
    assembler = LogAssembler(root_sizes=sizes)
    assembler.add(ChunkVerifier(1, snapshot_sizes=sizes).feed_all(records))
    return assembler.result()


def check_length(
    size: int, newest: int, witness_size: int | None, *, checkpoint: str = "a signed checkpoint"
) -> None:
    """The length part of the checks: the log must be as long as its newest checkpoint
    (``newest``, 0 for none) and its witness's.

    Raises:
        LedgerDamaged: TRUNCATION (events cut off the end) or ROLLBACK (the witness
            remembers a longer log), at the first missing position.
    """
    if newest > size:
        raise LedgerDamaged(
            DamageKind.TRUNCATION,
            size + 1,
            f"{checkpoint} covers {newest} events but the log ends at {size}: "
            f"events {size + 1}..{newest} were removed",
        )
    if witness_size is not None and witness_size > size:
        raise LedgerDamaged(
            DamageKind.ROLLBACK,
            size + 1,
            f"the witness holds a checkpoint of {witness_size} events but the store has only "
            f"{size}: the store was rolled back to an older state",
        )


def _resigned(log: VerifiedLog, checkpoints: Sequence[Checkpoint], good: int) -> str:
    """Say so when the forked log carries a signed checkpoint of its own past ``good``.

    Such a checkpoint verified with the ledger's key yet vouches for a log the witness never
    saw: it was signed by someone holding that key, without this witness.
    """
    own = [c.size for c in checkpoints if c.size > good and log.roots.get(c.size) == c.root]
    if not own:
        return ""
    return (
        f"; yet the store's checkpoint of {max(own)} events over the forked log is signed "
        "with the ledger's signing key, by someone who did not update this witness: unless "
        "that was you, treat the signing key as leaked"
    )


def check_against_checkpoints(
    log: VerifiedLog,
    checkpoints: Sequence[Checkpoint],
    witness: Checkpoint | None,
) -> None:
    """Compare a verified log with its signed checkpoints and the witness's newest one.

    Checkpoints must already be signature-checked by the caller (a bad signature is
    reported as FORGED_SIGNATURE there). ``log.roots`` must hold a root for every
    checkpoint size not beyond ``log.size``.

    Against the witness, which the store's holder cannot reach:

    * a log shorter than the witness's checkpoint is a ROLLBACK (at its first missing
      position), whatever it holds: it was put back to an older state;
    * a log as long or longer whose tree at the witness's size has another root is a
      FORK: the witnessed tree is not a prefix of it (no consistency proof joins them),
      whether the store was rolled back and grown again or rewritten in place. It is
      reported after the largest checkpoint that still matches;
    * a log that matches the witness but whose own checkpoints stop before it is a
      ROLLBACK of the store's checkpoints (the events are the witnessed ones).

    Raises:
        LedgerDamaged: ROLLBACK, TRUNCATION, FORK or TAMPER (with the first suspect
            position).
    """
    newest = max((c.size for c in checkpoints), default=0)
    check_length(log.size, newest, witness.size if witness is not None else None)
    matched: list[int] = []
    for cp in sorted([*checkpoints, *([witness] if witness else [])], key=lambda c: c.size):
        # The damage lies after the largest smaller checkpoint that still matches.
        good = max((s for s in matched if s < cp.size), default=0)
        if log.roots.get(cp.size) == cp.root:
            matched.append(cp.size)
            continue
        if cp is witness:
            # The store's own checkpoints agree (or were replaced, or rolled back): only the
            # outside witness still remembers that a different log was signed at this size.
            grown = "" if log.size == cp.size else f" (the log has {log.size})"
            raise LedgerDamaged(
                DamageKind.FORK,
                good + 1,
                f"the witness's checkpoint of {cp.size} events has a different root than the "
                f"log's first {cp.size}{grown}: the log forked from what was signed somewhere "
                f"in positions {good + 1}..{cp.size}{_resigned(log, checkpoints, good)}",
            )
        raise LedgerDamaged(
            DamageKind.TAMPER,
            good + 1,
            f"the log's Merkle root at size {cp.size} differs from the signed checkpoint; "
            f"the log was rewritten somewhere in positions {good + 1}..{cp.size}",
        )
    if witness is not None and witness.size > newest:
        raise LedgerDamaged(
            DamageKind.ROLLBACK,
            newest + 1,
            f"the witness holds a checkpoint of {witness.size} events, newer than any in the "
            f"store (newest {newest}): the store's checkpoints were rolled back",
        )
