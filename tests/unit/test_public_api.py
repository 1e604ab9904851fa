"""The public surface of `tracebound` is pinned: changing it must be a visible decision."""

from __future__ import annotations

from types import ModuleType

import tracebound

EXPECTED = {
    "ANY_VERSION", "GENESIS", "NO_STREAM", "AppendRequest", "AuditChainCorrupted",
    "ChainCursor", "Checkpoint", "Clock", "ConcurrencyConflict", "ConsistencyBundle",
    "ContractError",
    "DamageKind", "Event", "EventRegistry", "FixedClock", "IdSource", "InclusionBundle",
    "IntegrityError", "Ledger", "LedgerAttemptOutOfOrder", "LedgerDamaged", "LedgerStore",
    "NoteSigner", "NoteVerifier", "Payload", "PolicyError", "RandomIds", "RecordedEvent",
    "SQLiteStore", "SequentialIds", "StorageError", "SystemClock", "TraceboundError",
    "VerifyReport", "__version__", "canonical_bytes", "canonicalize", "chain_hash",
    "open_store", "register_event", "verify_bundle", "verify_consistency_bundle",
}  # fmt: skip


def test_exports_are_pinned() -> None:
    assert set(tracebound.__all__) == EXPECTED
    assert len(tracebound.__all__) == len(EXPECTED), "duplicate names in __all__"


def test_every_export_resolves() -> None:
    for name in tracebound.__all__:
        assert hasattr(tracebound, name), name
    assert tracebound.ANY_VERSION is None  # "skip the concurrency check"
    assert tracebound.NO_STREAM == 0


def test_no_unexported_public_names_leak() -> None:
    # Submodules become attributes once anything imports them; they are not API leaks.
    public = {
        name
        for name, value in vars(tracebound).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert public - set(tracebound.__all__) == set()
