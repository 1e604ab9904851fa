"""The log and its stored Merkle nodes, as the pure tree of ``integrity/nodes.py`` reads them.

:class:`LogNodes` reads leaves (chain hashes, leaf-hashed here) and stored nodes from any
store; a store without the :class:`~tracebound.store.port.MerkleNodeStore` capability
simply has no stored nodes, and every subtree is computed from its leaves.
:func:`store_nodes` adds the nodes a store lacks.
"""

from __future__ import annotations

import hashlib

from tracebound.errors import DamageKind, LedgerDamaged, ProofError
from tracebound.integrity import nodes as _nodes
from tracebound.integrity.merkle import HASH_SIZE
from tracebound.integrity.nodes import StoredTree, new_nodes
from tracebound.store.port import LedgerStore, MerkleNodeStore

__all__ = ["LogNodes", "store_nodes"]

_LEAF_PREFIX = b"\x00"


class LogNodes:
    """A :class:`~tracebound.integrity.nodes.NodeSource` over a store.

    Args:
        store: the log.
        use_stored: read the store's nodes; False computes every subtree from the leaves
            (the reference a suspect node is judged against).
    """

    def __init__(self, store: LedgerStore, *, use_stored: bool = True) -> None:
        self._store = store
        self._nodes = store if isinstance(store, MerkleNodeStore) else None
        self._use_stored = use_stored
        self._counted: set[int] = set()  # levels whose stored nodes are known to be 0..n-1

    def leaf_hashes(self, start: int, stop: int) -> list[bytes]:
        first, last = start + 1, stop  # 0-based leaves are positions 1 on
        if self._nodes is not None:
            hashes = self._nodes.read_hashes(first, last)
        else:
            hashes = [r.hash for r in self._store.read_raw(start=first, stop=last)]
        if len(hashes) != stop - start:
            raise self.missing(first, last)
        for i, h in enumerate(hashes):
            if type(h) is not bytes or len(h) != HASH_SIZE:  # a column edited by hand
                raise LedgerDamaged(
                    DamageKind.MALFORMED, first + i, f"the stored hash is not {HASH_SIZE} bytes"
                )
        sha, prefix = hashlib.sha256, _LEAF_PREFIX
        return [sha(prefix + h).digest() for h in hashes]

    def nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        if self._nodes is None or not self._use_stored:
            return []
        run = self._nodes.merkle_nodes(level, start, stop)
        if len(run) < stop - start and level not in self._counted:
            # Fewer than asked: not stored yet, or a stored node deleted from the middle
            # (or one written far beyond the others). The count tells them apart: a
            # gap is named (ProofError), never computed around unsaid. Once a level.
            self._nodes.merkle_node_count(level)
            self._counted.add(level)
        return run

    def missing(self, first: int, last: int) -> LedgerDamaged:
        """The damage of a log that lacks a position of ``first..last``: the first one
        missing, as a gap or, past the log's end, a truncation."""
        expected = first
        for r in self._store.read_raw(start=first, stop=last):
            if r.position != expected:
                break
            expected += 1
        if expected > self._store.size():
            return LedgerDamaged(
                DamageKind.TRUNCATION,
                expected,
                f"the log ends at position {expected - 1}, before position {last}",
            )
        return LedgerDamaged(
            DamageKind.GAP, expected, f"position {expected} is missing from the log"
        )


def store_nodes(store: LedgerStore, size: int) -> int:
    """Store the nodes the store lacks for its first ``size`` events; return how many.

    Reads each missing node's leaves (or lower nodes) once. A store without the
    capability keeps none (0).

    Raises:
        ProofError: the stored nodes of a level are not nodes ``0 .. n - 1`` (a gap, an
            index that is not one), or more than the log has (``size >> 8L`` for level
            ``L``): someone wrote them. They are named, not stored around.
    """
    if not isinstance(store, MerkleNodeStore):
        return 0
    nodes = store

    def stored(level: int) -> int:
        # The stored count says where to go on from; a count a log of this size cannot
        # have (nodes forged beyond it) would have nothing stored again, unsaid.
        count = nodes.merkle_node_count(level)
        have = store.size()  # read after the count: the log only grows
        limit = have >> (_nodes.LEVEL_BITS * level)
        if count > limit:
            raise ProofError(
                f"level {level} holds {count} stored Merkle nodes (up to index {count - 1}), "
                f"but a log of {have} events has only {limit} of them: nodes beyond the log "
                "were written by hand; `tracebound checkpoint --full` stores the nodes "
                "again from the verified log"
            )
        return count

    added = 0
    tree = StoredTree(LogNodes(store))
    for level, start, hashes in new_nodes(tree, stored, size):
        store.add_merkle_nodes(level, start, hashes)
        added += len(hashes)
    return added
