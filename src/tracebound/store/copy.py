"""Move a ledger from one backend to another, byte for byte: ``tracebound copy SRC DST``.

A ledger's evidence is its bytes: each record's hashed body, its chain link, and the signed
checkpoints over the Merkle tree of those hashes. A copy made by appending the events again
would get new positions, hashes and roots, and every signature would stop vouching for it.
So the copy moves *records*, through :meth:`~tracebound.store.port.ImportStore.import_raw`,
and the destination ends holding exactly the bytes the source holds (``read_raw`` of both
is equal), plus the same signed notes and the same origin.

How it checks as it goes:

* The source is read and verified in aligned chunks with the same code as ``verify``
  (:class:`~tracebound.integrity.verify.ChunkVerifier` per chunk, a
  :class:`~tracebound.integrity.verify.LogAssembler` stitching them). Nothing of a chunk is
  written before it has verified; at the first damaged position the copy writes the records
  before it and stops with that damage, so nothing past it reaches the destination.
* At every checkpoint size the verified Merkle root must equal the signed one, before the
  records beyond it are written. With a verifier key the signatures are checked first; without
  one the roots are still compared, and the report says the signatures were not checked.
* Each imported chunk is read back from the destination and compared with what was sent, so
  the roots just checked are the destination's roots too. A signed note is copied as soon as
  the records it covers are in, so an interrupted copy is a signed, verifiable prefix.

Resuming: the run starts again from position 1 of the source (the Merkle tree and the stream
heads need the whole prefix), compares every record the destination already holds with the
source's, and imports only from the destination's size on. A destination that differs
anywhere (another log, a record changed, an extra checkpoint) raises :class:`CopyDiverged`
before anything is written to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from tracebound.errors import (
    CheckpointError,
    ConfigError,
    DamageKind,
    IntegrityError,
    LedgerDamaged,
)
from tracebound.events.record import RawRecord
from tracebound.ids import Sha256Digest
from tracebound.integrity.keys import NoteVerifier
from tracebound.integrity.nodes import StoredTree
from tracebound.integrity.note import Checkpoint, SignedNote, parse_checkpoint
from tracebound.integrity.rotation import open_checkpoints
from tracebound.integrity.verify import (
    PAGE,
    ChunkVerifier,
    LogAssembler,
    check_against_checkpoints,
)
from tracebound.store.blobs import BlobStore
from tracebound.store.nodes import LogNodes, store_nodes
from tracebound.store.port import ImportStore, LedgerStore, MerkleNodeStore
from tracebound.store.rotations import read_rotations

__all__ = [
    "CHUNK",
    "ORIGIN_KEY",
    "BlobListing",
    "CopyDiverged",
    "CopyReport",
    "copy_blobs",
    "copy_ledger",
]

CHUNK: Final = 4 * PAGE
"""Records verified and imported per step: one destination transaction each. A multiple of
verify's page (a power of two), so every chunk starts on an aligned Merkle subtree."""

ORIGIN_KEY: Final = "origin"

Progress = Callable[[int, int], None]


class CopyDiverged(IntegrityError):
    """The destination holds something the source does not: it is not a copy of this log.

    ``position`` is the first position where the two differ, or None when what differs is
    not a record (the origin, a checkpoint).
    """

    def __init__(self, position: int | None, detail: str) -> None:
        self.position = position
        self.detail = detail
        where = "" if position is None else f" at position {position}"
        super().__init__(f"the destination diverges from the source{where}: {detail}")

    def __reduce__(self) -> tuple[type[CopyDiverged], tuple[int | None, str]]:
        return (type(self), (self.position, self.detail))


@dataclass
class CopyReport:
    """What one copy run did. ``signatures`` is ``ok``, ``no checkpoint`` or why not."""

    source: str
    destination: str
    origin: str | None = None
    size: int = 0
    resumed_from: int = 0
    imported: int = 0
    root: str = ""
    checkpoints: list[int] = field(default_factory=list)
    checkpoints_copied: int = 0
    signatures: str = "no checkpoint"

    @property
    def complete(self) -> bool:
        """Whether every check could run (signatures included)."""
        return self.signatures in {"ok", "no checkpoint"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "origin": self.origin,
            "size": self.size,
            "resumed_from": self.resumed_from,
            "imported": self.imported,
            "root": self.root,
            "checkpoints": self.checkpoints,
            "checkpoints_copied": self.checkpoints_copied,
            "signatures": self.signatures,
        }


def _open_notes(
    source: LedgerStore,
    notes: Sequence[tuple[int, str]],
    verifier: NoteVerifier | None,
    origin: str | None,
) -> list[Checkpoint]:
    """The source's checkpoints, signature-checked when a key is given: with the key of
    the source's key history that signs at each size (ADR 0017), ``verifier`` being any
    of them. The copy then compares every root with the log it reads, which is what makes
    the rotation events that history comes from trustworthy.

    Without a key the note bodies are still parsed, so the roots can be compared; they are
    then claims, not proofs, and the report says so.
    """
    if verifier is not None:
        hint = (
            " against the verifier key given (if the source was signed with another key, "
            "pass that one)"
        )
        try:
            checked, _ = open_checkpoints(
                notes, verifier, read_rotations(source), origin=origin, hint=hint
            )
        except LedgerDamaged as damage:
            raise LedgerDamaged(
                damage.kind, damage.position, f"the source's {damage.detail.removeprefix('the ')}"
            ) from damage
        return checked
    out: list[Checkpoint] = []
    for size, note in notes:
        try:
            cp = parse_checkpoint(SignedNote.parse(note).text)
        except CheckpointError as exc:
            raise LedgerDamaged(
                DamageKind.FORGED_SIGNATURE,
                size,
                f"the source's checkpoint for size {size} does not verify: {exc}",
            ) from exc
        if cp.size != size or (origin is not None and cp.origin != origin):
            raise LedgerDamaged(
                DamageKind.FORGED_SIGNATURE,
                size,
                f"the source's checkpoint stored for size {size} is for {cp.origin!r} "
                f"size {cp.size}",
            )
        out.append(cp)
    return out


class _Copier:
    """One run of :func:`copy_ledger`: the verified prefix so far and the destination's state."""

    def __init__(
        self,
        source: LedgerStore,
        destination: LedgerStore,
        importer: ImportStore,
        checkpoints: list[Checkpoint],
        report: CopyReport,
    ) -> None:
        self.source = source
        self.destination = destination
        self.importer = importer
        self.checkpoints = checkpoints
        self.sizes = sorted({c.size for c in checkpoints})
        self.assembler = LogAssembler(root_sizes=self.sizes)
        self.report = report
        self.existing = report.resumed_from  # records the destination held at the start
        self.level = 0  # positions 1..level are in the destination, verified and compared

    def step(self, start: int, stop: int) -> None:
        """Verify source positions ``start..stop``, then bring the destination level.

        On damage, the records before the damaged position are still written (they verified,
        and a later run would copy them anyway), then the damage is raised.
        """
        records: list[RawRecord] = []
        folded = self.assembler.size
        try:
            # Inside the try: a store that meets damage while reading (a JSONL torn tail)
            # raises it from read_raw, after the records before it.
            records.extend(self.source.read_raw(start=start, stop=stop))
            self._accept(start, records, stop)
        except LedgerDamaged as damage:
            bad = damage.position
            good = records[: bad - start] if bad is not None and bad > start else []
            if good and self.assembler.size == folded:  # the damaged chunk was not folded in
                self._accept(start, good, start + len(good) - 1)
            if good:
                self._write(good)
            raise
        self._write(records)

    def _accept(self, start: int, records: Sequence[RawRecord], stop: int) -> None:
        """Verify a chunk, fold it into the log, and check every signed root it reaches.

        Raises the chunk's first damage (or a broken link to an earlier chunk) without
        folding anything in; a signed root that differs, or a source that ends before
        ``stop``, is raised after folding.
        """
        end = start + len(records) - 1
        snapshots = [s for s in self.sizes if start <= s <= end]
        self.assembler.add(ChunkVerifier(start, snapshot_sizes=snapshots).feed_all(records))
        if snapshots:
            reached = [c for c in self.checkpoints if c.size <= self.assembler.size]
            check_against_checkpoints(self.assembler.result(), reached, None)
        if end < stop:
            raise LedgerDamaged(
                DamageKind.TRUNCATION,
                end + 1,
                f"the source ends at position {end}, before its size {stop}",
            )

    def _write(self, records: Sequence[RawRecord]) -> None:
        """Compare what the destination already holds; import the rest and read it back."""
        held = [r for r in records if r.position <= self.existing]
        new = [r for r in records if r.position > self.existing]
        if held:
            self._compare(held, "holds a different record here")
        if new:
            self.importer.import_raw(new)
            self.report.imported += len(new)
            self._compare(new, "did not keep the bytes it was given")
        self.level = records[-1].position

    def _compare(self, records: Sequence[RawRecord], what: str) -> None:
        first, last = records[0].position, records[-1].position
        try:
            stored = list(self.destination.read_raw(start=first, stop=last))
        except LedgerDamaged as exc:  # the destination's own damage, not the source's
            raise CopyDiverged(
                exc.position,
                f"the destination is damaged ({exc}); a torn tail left by an interrupted "
                "copy into JSONL is cut by `tracebound repair --yes`, then copy again",
            ) from exc
        for want, got in zip(records, stored, strict=False):
            if tuple(want) != tuple(got):
                raise CopyDiverged(want.position, f"the destination {what}")
        if len(stored) != len(records):
            raise CopyDiverged(first + len(stored), f"the destination {what} (missing)")


def copy_ledger(
    source: LedgerStore,
    destination: LedgerStore,
    *,
    verifier: NoteVerifier | None = None,
    chunk: int = CHUNK,
    progress: Progress | None = None,
) -> CopyReport:
    """Copy ``source`` into ``destination`` (empty, or a partial copy of it), verifying.

    Safe to run again after an interruption: it continues where the destination ends, and
    a run on a complete copy only re-checks it.

    Raises:
        ConfigError: the destination cannot import records, or ``chunk`` is not a positive
            multiple of verify's page size.
        LedgerDamaged: the source is damaged (its first bad position), or a checkpoint's
            signature or root does not match; nothing past that position was written.
        CopyDiverged: the destination holds something the source does not; it is untouched.
        ConcurrencyError: someone appended to the destination during the copy.
    """
    if not isinstance(destination, ImportStore):
        raise ConfigError(f"{destination.url} cannot import records verbatim")
    if chunk < 1 or chunk % PAGE:
        raise ConfigError(f"chunk must be a positive multiple of {PAGE}, not {chunk}")
    report = CopyReport(source=source.url, destination=destination.url)
    origin = source.get_meta(ORIGIN_KEY)
    report.origin = origin
    held_origin = destination.get_meta(ORIGIN_KEY)
    if held_origin is not None and held_origin != origin:
        hint = ""
        if destination.size() == 0 and not destination.checkpoints():
            # The usual way here: `tracebound init` on the destination first, which gives it
            # an origin of its own. The copy creates the destination itself.
            hint = (
                "; it is an empty ledger (made by `tracebound init`?): copy into a store "
                "that does not exist yet, it is created with the source's origin"
            )
        raise CopyDiverged(None, f"its origin is {held_origin!r}, the source's {origin!r}{hint}")

    notes = source.checkpoints()
    checkpoints = _open_notes(source, notes, verifier, origin)
    if notes:
        report.signatures = "ok" if verifier is not None else "not checked: no verifier key"
    source_notes = dict(notes)
    held_notes = destination.checkpoints()
    for size, note in held_notes:
        if source_notes.get(size) != note:
            raise CopyDiverged(None, f"it holds a checkpoint for size {size} the source lacks")

    size = source.size()
    report.resumed_from = destination.size()
    if report.resumed_from > size:
        raise CopyDiverged(
            size + 1, f"it holds {report.resumed_from} events, the source only {size}"
        )
    if origin is not None and held_origin is None:
        destination.set_meta(ORIGIN_KEY, origin)

    copier = _Copier(source, destination, destination, checkpoints, report)
    held = dict(held_notes)

    def save_notes() -> None:
        """Each signed note once the records it covers are in, verified: a partial copy is
        then itself a signed prefix that ``verify`` accepts."""
        for cp_size, note in notes:
            if cp_size <= copier.level and cp_size not in held:
                destination.save_checkpoint(cp_size, note)
                held[cp_size] = note
                report.checkpoints_copied += 1

    try:
        for start in range(1, size + 1, chunk):
            stop = min(start + chunk - 1, size)
            copier.step(start, stop)
            save_notes()
            if progress is not None:
                progress(stop, size)
        log = copier.assembler.result()
        check_against_checkpoints(log, checkpoints, None)  # also: none beyond the log
    finally:
        save_notes()
    report.size, report.root = log.size, log.root.hex()
    report.checkpoints = [s for s, _ in notes]
    _store_nodes(destination, log.size, log.root)
    return report


def _store_nodes(destination: LedgerStore, size: int, root: bytes) -> None:
    """Give the copy its stored Merkle nodes (ADR 0011), as a checkpoint would.

    Without them every `prove` on the copy reads the whole log, and the first checkpoint
    hashes it, until a checkpoint stores them. They are derived data: built from the hashes
    just compared with the source's, and kept only if they give the verified root.
    """
    if not isinstance(destination, MerkleNodeStore) or not size:
        return
    store_nodes(destination, size)
    if StoredTree(LogNodes(destination)).subtree_root(0, size) != root:
        destination.drop_merkle_nodes()  # never wrong nodes; a checkpoint rebuilds them


class BlobListing(BlobStore, Protocol):
    """A blob store that can say what it holds: the source of :func:`copy_blobs`."""

    def digests(self) -> list[Sha256Digest]:
        """Every blob it holds, by name."""
        ...


def copy_blobs(source: BlobListing, destination: BlobStore) -> tuple[int, int]:
    """Copy every blob ``source`` holds that ``destination`` lacks; ``(copied, present)``.

    The events name their artifacts by digest only; the bytes live in the ledger's blob
    store (a SQLite ledger's own file, a JSONL ledger's ``blobs`` folder), which a copy of
    the records alone leaves behind. Run after :func:`copy_ledger`: a blob is put before
    the entry that names it, so every blob the copied events name is listed by then. Each
    blob is checked against its name as it is read (a damaged one raises
    :class:`~tracebound.errors.IntegrityError`) and read back once written. Safe to run
    again: blobs already there are counted, not written.
    """
    copied = present = 0
    for digest in source.digests():
        if destination.exists(digest):
            present += 1
            continue
        destination.put(source.get(digest))
        destination.get(digest)  # read back, checked against its name
        copied += 1
    return copied, present
