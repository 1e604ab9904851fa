"""Read a ledger's key rotations (ADR 0017) from its store, through the key stream's index.

What the store says is not trusted here: each record is read from its hashed bytes, and
the caller compares the log with its signed checkpoints (`verify`), or proves the record
under a signed root, before relying on it.
"""

from __future__ import annotations

from tracebound.integrity.rotation import KEY_STREAM, Rotation, rotation_from_record
from tracebound.store.port import LedgerStore, indexed_positions, position_runs

__all__ = ["read_rotations"]


def read_rotations(store: LedgerStore) -> list[Rotation]:
    """The rotations recorded on :data:`KEY_STREAM`, in log order.

    Raises:
        LedgerDamaged: TAMPER at a position the key stream's index names whose record is
            not a rotation (or cannot be read as one).
    """
    out: list[Rotation] = []
    for first, last in position_runs(sorted(indexed_positions(store, KEY_STREAM))):
        out.extend(
            rotation_from_record(r.position, r.body) for r in store.read_raw(start=first, stop=last)
        )
    return out
