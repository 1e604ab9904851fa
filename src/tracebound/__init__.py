"""tracebound: a tamper-evident flight recorder and runtime for multi-agent LLM pipelines.

The public API is what this module exports; everything else is private or lives in a
subpackage whose own ``__all__`` says what it offers. ``tests/unit/test_public_api.py``
pins this list, so a change here is always deliberate.
"""

from tracebound.canonical import canonical_bytes, canonicalize
from tracebound.errors import (
    AuditChainCorrupted,
    ConcurrencyConflict,
    ContractError,
    DamageKind,
    IntegrityError,
    LedgerAttemptOutOfOrder,
    LedgerDamaged,
    PolicyError,
    StorageError,
    TraceboundError,
)
from tracebound.events import Event, EventRegistry, Payload, RecordedEvent, register_event
from tracebound.integrity.chain import GENESIS, ChainCursor, chain_hash
from tracebound.integrity.consistency import ConsistencyBundle, verify_consistency_bundle
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.integrity.note import Checkpoint
from tracebound.ledger import InclusionBundle, Ledger, VerifyReport, verify_bundle
from tracebound.sources import Clock, FixedClock, IdSource, SequentialIds
from tracebound.store.port import ANY_VERSION, NO_STREAM, AppendRequest, LedgerStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.url import open_store
from tracebound.system import RandomIds, SystemClock

__version__ = "0.1.0"

__all__ = [
    "ANY_VERSION",
    "GENESIS",
    "NO_STREAM",
    "AppendRequest",
    "AuditChainCorrupted",
    "ChainCursor",
    "Checkpoint",
    "Clock",
    "ConcurrencyConflict",
    "ConsistencyBundle",
    "ContractError",
    "DamageKind",
    "Event",
    "EventRegistry",
    "FixedClock",
    "IdSource",
    "InclusionBundle",
    "IntegrityError",
    "Ledger",
    "LedgerAttemptOutOfOrder",
    "LedgerDamaged",
    "LedgerStore",
    "NoteSigner",
    "NoteVerifier",
    "Payload",
    "PolicyError",
    "RandomIds",
    "RecordedEvent",
    "SQLiteStore",
    "SequentialIds",
    "StorageError",
    "SystemClock",
    "TraceboundError",
    "VerifyReport",
    "__version__",
    "canonical_bytes",
    "canonicalize",
    "chain_hash",
    "open_store",
    "register_event",
    "verify_bundle",
    "verify_consistency_bundle",
]
