"""The solved-example store: the retrieval tier, BM25 over SQLite FTS5, chained with BLAKE3.

A *solved example* is an advisory's text, the package it was about, and the patch that
fixed it *and passed verification*. The tier searches the store before asking a model: a
retrieved patch that applies as-is is a plan (``RagOnlyApplicable``) at no model cost, and
near misses are shown to the model as evidence.

Why its own chain: ADR-04-0017 records, per attempt, ``retrieved_evidence_chain_head``, the
store's head *at retrieval time*. The store grows as validated plans are harvested
(:meth:`SolvedExampleStore.on_validated`), so only a head taken in the same read as the
search pins what evidence the prompt saw. Each insertion extends
``head = blake3(prev_head || canonical_json(example))``; :meth:`verify` recomputes the chain
and runs when the store is opened. The store then keeps, in memory, the link of every row
it verified, and checks each row a search returns against it (rows another process added
since are verified first), so an example edited while the store is open, even with its
digests and heads recomputed, is refused rather than retrieved.

Everything is local: SQLite's FTS5 and its built-in ``bm25()`` ranking; nothing downloaded.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from blake3 import blake3

from tracebound.canonical import canonical_bytes
from tracebound.errors import AuditChainCorrupted, StorageError, ValidationFailed
from tracebound.ids import ChainHead, RagRecordId
from tracebound.integrity.chain import GENESIS, chain_hash
from tracebound.pipeline.fallback.models import ApplyContext, PlanOutcome, normalise_name
from tracebound.pipeline.redaction import Redactor
from tracebound.store.sqlite import rollback_open

__all__ = ["Retrieval", "SolvedExample", "SolvedExampleStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS examples (
    seq INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL UNIQUE,
    advisory_id TEXT NOT NULL,
    ecosystem TEXT NOT NULL,
    package TEXT NOT NULL,
    advisory_text TEXT NOT NULL,
    patch TEXT NOT NULL,
    patch_blake3 TEXT NOT NULL,
    prev_head BLOB NOT NULL,
    head BLOB NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS examples_fts USING fts5(
    advisory_text, package, content='examples', content_rowid='seq',
    tokenize='porter unicode61'
);
CREATE TRIGGER IF NOT EXISTS examples_ai AFTER INSERT ON examples BEGIN
    INSERT INTO examples_fts(rowid, advisory_text, package)
    VALUES (new.seq, new.advisory_text, new.package);
END;
"""
_TOKEN = re.compile(r"[A-Za-z0-9]{2,}")
_STOP = frozenset(
    {
        "the", "and", "for", "with", "that", "this", "from", "are", "was", "were", "has",
        "have", "had", "not", "but", "into", "can", "may", "its", "which", "when", "than",
        "then", "also", "use", "used", "using", "via", "any", "all", "allows", "allow",
    }
)  # fmt: skip
_MAX_QUERY_TOKENS = 48


@dataclass(frozen=True, slots=True)
class SolvedExample:
    """One stored example and its BM25 score for the query that found it (lower is better,
    as SQLite's ``bm25()`` reports)."""

    record_id: RagRecordId
    advisory_id: str
    ecosystem: str
    package: str
    advisory_text: str
    patch: str
    patch_blake3: str
    score: float


@dataclass(frozen=True, slots=True)
class Retrieval:
    """A search's results and the store's chain head in the same read."""

    examples: tuple[SolvedExample, ...]
    chain_head: ChainHead

    @property
    def record_ids(self) -> tuple[RagRecordId, ...]:
        return tuple(e.record_id for e in self.examples)


def advisory_text(ctx: ApplyContext) -> str:
    """The searchable text of an advisory: id, aliases, summary and details."""
    adv = ctx.advisory
    return "\n".join(p for p in (adv.id, " ".join(adv.aliases), adv.summary, adv.details) if p)


def _entry(
    record_id: str,
    advisory_id: str,
    ecosystem: str,
    package: str,
    *,
    text: str,
    patch_digest: str,
) -> bytes:
    return canonical_bytes(
        {
            "record_id": record_id,
            "advisory_id": advisory_id,
            "ecosystem": ecosystem,
            "package": package,
            "advisory_text_blake3": blake3(text.encode()).hexdigest(),
            "patch_blake3": patch_digest,
        }
    )


_ROWS = (
    "SELECT seq, record_id, advisory_id, ecosystem, package, advisory_text, patch, "
    "patch_blake3, prev_head, head FROM examples"
)


def _row_entry(row: tuple[object, ...]) -> tuple[int, str, str, str, bytes]:
    """``seq``, record id, patch, patch digest and the chained entry of a row of ``_ROWS``.

    Raises:
        AuditChainCorrupted: a column holds the wrong type (the file was edited).
    """
    seq, rid, adv, eco, pkg, text, patch, digest = row[:8]
    texts = (rid, adv, eco, pkg, text, patch, digest)
    if not isinstance(seq, int) or not all(isinstance(v, str) for v in texts):
        raise AuditChainCorrupted(f"solved example #{seq!r} holds a value of the wrong type")
    rid, patch, digest = str(rid), str(patch), str(digest)  # all str, as checked
    entry = _entry(rid, str(adv), str(eco), str(pkg), text=str(text), patch_digest=digest)
    return seq, rid, patch, digest, entry


def _verify_rows(rows: list[tuple[object, ...]], start: bytes) -> dict[int, tuple[bytes, bytes]]:
    """Recompute the chain over ``rows`` (in ``seq`` order) from ``start``; their links.

    Raises:
        AuditChainCorrupted: an example, its link or its position was changed.
    """
    head = bytes(start)
    links: dict[int, tuple[bytes, bytes]] = {}
    for row in rows:
        seq, rid, patch, digest, entry = _row_entry(row)
        prev, stored = row[8], row[9]
        if blake3(patch.encode()).hexdigest() != digest:
            raise AuditChainCorrupted(f"solved example {rid} (#{seq}): patch was changed")
        if prev != head:
            raise AuditChainCorrupted(f"solved example {rid} (#{seq}) does not link")
        new = chain_hash(head, entry)
        if new != stored:
            raise AuditChainCorrupted(f"solved example {rid} (#{seq}) was changed")
        links[seq] = (head, new)
        head = new
    return links


class SolvedExampleStore:
    """Solved examples in one SQLite file (or ``":memory:"``), searched with BM25.

    Args:
        path: the database file; created (mode 0600) if missing.

    Raises:
        AuditChainCorrupted: the stored chain does not verify.
        StorageError: the database (or its directory) cannot be made or opened, or lacks
            FTS5.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self._lock = threading.Lock()
        self.path = str(path)
        # seq -> (prev_head, head) of every row this store has verified or written.
        self._links: dict[int, tuple[bytes, bytes]] = {}
        try:
            if self.path != ":memory:":
                file = Path(self.path)
                file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                file.touch(mode=0o600, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StorageError(f"cannot open the solved-example store {self.path}: {exc}") from exc
        self.verify()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One consistent snapshot: search results and head come from the same transaction."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
                try:
                    yield self._db
                finally:
                    self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StorageError(f"solved-example store: {exc}") from exc

    def _head(self, db: sqlite3.Connection) -> ChainHead:
        row = db.execute("SELECT head FROM examples ORDER BY seq DESC LIMIT 1").fetchone()
        return GENESIS if row is None else ChainHead(bytes(row[0]))

    @property
    def chain_head(self) -> ChainHead:
        """The head over every insertion so far (32 zero bytes when empty).

        Raises:
            AuditChainCorrupted: the head is not the one of the chain this store verified.
        """
        with self._read() as db:
            self._catch_up(db)
            return self._head(db)

    def __len__(self) -> int:
        with self._read() as db:
            return int(db.execute("SELECT count(*) FROM examples").fetchone()[0])

    def verify(self) -> ChainHead:
        """Recompute the chain over every example; returns the head.

        Raises:
            AuditChainCorrupted: an example, its link or its position was changed.
        """
        with self._read() as db:
            rows = db.execute(_ROWS + " ORDER BY seq").fetchall()
            links = _verify_rows(rows, GENESIS)
            self._links = links
        return ChainHead(links[max(links)][1]) if links else GENESIS

    def _catch_up(self, db: sqlite3.Connection) -> None:
        """Verify the rows added (by another process) since this store last looked, as a
        continuation of the chain it already verified; remember their links."""
        last = max(self._links, default=0)
        start = self._links[last][1] if last else GENESIS
        rows = db.execute(_ROWS + " WHERE seq > ? ORDER BY seq", (last,)).fetchall()
        if rows:
            self._links.update(_verify_rows(rows, start))
        if self._head(db) != (self._links[max(self._links)][1] if self._links else GENESIS):
            raise AuditChainCorrupted(
                "the solved-example store's head changed since it was verified: a row was "
                "changed since the store was opened"
            )

    def _check_row(self, row: tuple[object, ...]) -> None:
        """A row as read now must be the row this store verified (content, digest, link)."""
        seq, rid, patch, digest, entry = _row_entry(row)
        known = self._links.get(seq)
        if (
            known is None
            or blake3(patch.encode()).hexdigest() != digest
            or chain_hash(known[0], entry) != known[1]
        ):
            raise AuditChainCorrupted(
                f"solved example {rid} (#{seq}) changed since the store verified it"
            )

    def on_validated(
        self, ctx: ApplyContext, plan: PlanOutcome, *, redactor: Redactor | None = None
    ) -> RagRecordId | None:
        """Harvest a plan whose trust outcome passed; returns its record id.

        The same patch for the same advisory is stored once (``None`` on the duplicate).
        Only verified plans go in: a store that accepts unverified patches would turn one
        bad plan into many. ``redactor`` redacts the advisory's text before it is stored
        (``RetryLoop`` passes its gate runner's); without one the text is stored as given,
        as ``Ledger.record`` writes what it is given. The patch is the tier's, which
        refuses any patch the redactor would change.

        Raises:
            ValidationFailed: the plan was refused, or its trust outcome is missing or
                failed.
        """
        if plan.patch is None or plan.patch_blake3 is None:
            raise ValidationFailed("plan.patch", "a refused plan is not a solved example")
        if plan.trust is None or not plan.trust.passed:
            raise ValidationFailed("plan.trust", "only a plan whose trust outcome passed")
        text = advisory_text(ctx)
        if redactor is not None:
            text = redactor.redact_text(text).value
        package = normalise_name(ctx.package)
        seed = f"{ctx.advisory.id}\x00{ctx.ecosystem}\x00{package}\x00{plan.patch_blake3}"
        record_id = RagRecordId("se-" + blake3(seed.encode()).hexdigest()[:24])
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    if self._db.execute(
                        "SELECT 1 FROM examples WHERE record_id = ?", (record_id,)
                    ).fetchone():
                        self._db.execute("COMMIT")
                        return None
                    self._catch_up(self._db)
                    prev = self._head(self._db)
                    entry = _entry(
                        record_id,
                        ctx.advisory.id,
                        ctx.ecosystem,
                        package,
                        text=text,
                        patch_digest=plan.patch_blake3,
                    )
                    head = chain_hash(prev, entry)
                    seq = self._db.execute(
                        "INSERT INTO examples (record_id, advisory_id, ecosystem, package, "
                        "advisory_text, patch, patch_blake3, prev_head, head) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            record_id,
                            ctx.advisory.id,
                            ctx.ecosystem,
                            package,
                            text,
                            plan.patch,
                            plan.patch_blake3,
                            prev,
                            head,
                        ),
                    ).lastrowid
                    self._db.execute("COMMIT")
                    assert seq is not None
                    self._links[seq] = (bytes(prev), head)
                except BaseException:
                    rollback_open(self._db)
                    raise
            except sqlite3.Error as exc:
                raise StorageError(f"solved-example store: {exc}") from exc
        return record_id

    def search(self, ctx: ApplyContext, *, limit: int = 3) -> Retrieval:
        """BM25 search for examples of the same package and ecosystem.

        The query is the advisory's words (quoted, OR-ed: no FTS5 syntax from the advisory
        is ever interpreted); the head is read in the same transaction. Every row returned
        is checked against the chain this store verified.

        Raises:
            AuditChainCorrupted: a row, or the head, changed since the store verified it.
            StorageError: the database failed.
        """
        tokens: list[str] = []
        for token in _TOKEN.findall(advisory_text(ctx) + " " + ctx.package):
            low = token.lower()
            if low not in _STOP and low not in tokens:
                tokens.append(low)
        tokens = tokens[:_MAX_QUERY_TOKENS]
        with self._read() as db:
            self._catch_up(db)
            head = self._head(db)
            if not tokens:
                return Retrieval((), head)
            query = " OR ".join(f'"{t}"' for t in tokens)
            rows = db.execute(
                "SELECT e.seq, e.record_id, e.advisory_id, e.ecosystem, e.package, "
                "e.advisory_text, e.patch, e.patch_blake3, bm25(examples_fts) AS score "
                "FROM examples_fts JOIN examples e ON e.seq = examples_fts.rowid "
                "WHERE examples_fts MATCH ? AND e.package = ? AND e.ecosystem = ? "
                "ORDER BY score, e.seq LIMIT ?",
                (query, normalise_name(ctx.package), ctx.ecosystem, limit),
            ).fetchall()
            for row in rows:
                self._check_row(row)
        return Retrieval(
            tuple(
                SolvedExample(RagRecordId(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], float(r[8]))
                for r in rows
            ),
            head,
        )
