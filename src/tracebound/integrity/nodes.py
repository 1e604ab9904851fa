"""Stored Merkle nodes: proofs and checkpoints that read O(log n) of the log, not all of it.

An RFC 6962 proof, and the root of a tree at some size, are built from the roots of a
few perfect aligned subtrees. Computed from the leaves, each such root costs reading and
hashing every leaf under it, so a single ``prove`` read the whole log (2.4 s at 1M events)
and every checkpoint re-verified the whole log before signing. Perfect aligned subtrees
never change once their leaves exist (the log only grows), so a store may keep their
roots: level ``L`` holds the roots of the subtrees of ``2**(8*L)`` leaves (level 1: 256
leaves; level 2: 65,536; ...). With them, the root of any aligned subtree takes at most
255 reads per level, and a proof a few dozen small reads whatever the log's size.

**The nodes are derived data and never trusted.** Whoever can write the log can write
them, so an attacker who holds the store can change them too. Every use is checked
against a signed root: a proof is verified against its checkpoint before it is handed
out, and an incremental checkpoint starts only from a frontier whose root equals the
previous signed root. A wrong node can make a proof fail, never a false one pass.

Pure: the store is reached through :class:`NodeSource`; a missing node is computed from
the level below (down to the leaves), in bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Final, Protocol

from tracebound.errors import ProofError
from tracebound.integrity import _kernel
from tracebound.integrity.merkle import HASH_SIZE, node_hash, perfect_root

__all__ = [
    "LEVEL_BITS",
    "MAX_LEVEL",
    "WIDTH",
    "NodeSource",
    "StoredTree",
    "new_nodes",
]

LEVEL_BITS: Final = 8
"""A node of level ``L`` is the root of ``2**(LEVEL_BITS * L)`` leaves."""

WIDTH: Final = 1 << LEVEL_BITS
"""Nodes of level ``L - 1`` (leaves for level 1) under one node of level ``L``."""

MAX_LEVEL: Final = 7
"""The highest level kept: subtrees of 2**56 leaves, beyond any real log."""

_BATCH: Final = 64
"""Nodes of one level computed per step when the store lacks them (bounds memory: 64 x 256
hashes of the level below at a time)."""

_FILL_BATCH: Final = 1024
"""Nodes handed to the store per write by :func:`new_nodes`."""


class NodeSource(Protocol):
    """Where a :class:`StoredTree` reads leaves and stored nodes from."""

    def leaf_hashes(self, start: int, stop: int) -> list[bytes]:
        """The RFC 6962 leaf hashes of leaves ``start <= i < stop`` (0-based), every one.

        Raises:
            LedgerDamaged: the log does not hold all of them.
        """
        ...

    def nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        """Stored nodes of ``level`` with index ``start <= i < stop``: the run present from
        ``start``, which may be shorter than asked, or empty."""
        ...


def _block_root(hashes: Sequence[bytes]) -> bytes:
    """The root of a power-of-two run of hashes, in C when the kernel is loaded."""
    kernel = _kernel.KERNEL
    if kernel is not None and len(hashes) > 1:
        root: bytes = kernel.perfect_root(b"".join(hashes), 0, len(hashes))
        return root
    return perfect_root(hashes)


class StoredTree:
    """RFC 6962 subtree roots of a log, from stored nodes where present, leaves elsewhere.

    One instance memoises the perfect subtrees it computed, so the proofs of one run (the
    evidence of a pipeline run, say) share their reads. Use a fresh instance after the log
    or its nodes may have changed.
    """

    def __init__(self, source: NodeSource) -> None:
        self._source = source
        self._memo: dict[tuple[int, int], bytes] = {}

    def subtree_root(self, start: int, end: int) -> bytes:
        """MTH of leaves ``[start, end)``: a :data:`~tracebound.integrity.merkle.SubtreeRoot`.

        Raises:
            ProofError: the range is empty or negative.
            LedgerDamaged: the log lacks a leaf of the range (from the source).
        """
        n = end - start
        if start < 0 or n <= 0:
            raise ProofError(f"invalid leaf range [{start}, {end})")
        if n & (n - 1) == 0 and start % n == 0:
            return self.perfect(start, n.bit_length() - 1)
        k = 1 << ((n - 1).bit_length() - 1)  # RFC 6962: the largest power of two below n
        return node_hash(self.subtree_root(start, start + k), self.subtree_root(start + k, end))

    def perfect(self, start: int, height: int) -> bytes:
        """The root of the aligned perfect subtree of ``2**height`` leaves at ``start``."""
        key = (start, height)
        root = self._memo.get(key)
        if root is None:
            level = min(height // LEVEL_BITS, MAX_LEVEL)
            shift = LEVEL_BITS * level
            count = 1 << (height - shift)
            row = self.row(level, start >> shift, count)
            root = row[0] if count == 1 else _block_root(row)
            self._memo[key] = root
        return root

    def row(self, level: int, start: int, count: int) -> list[bytes]:
        """Nodes ``start .. start+count-1`` of ``level`` (level 0: leaf hashes): stored
        ones as read, missing ones computed from the level below."""
        if level == 0:
            return self._source.leaf_hashes(start, start + count)
        stored = self._source.nodes(level, start, start + count)
        # Checked before any use: the C kernel takes the nodes as one joined buffer, and
        # a node of the wrong size would shift every node after it.
        if any(type(h) is not bytes or len(h) != HASH_SIZE for h in stored):
            raise ProofError(f"a stored Merkle node of level {level} is not {HASH_SIZE} bytes")
        if len(stored) == count:
            return stored
        out = list(stored)
        i, stop = start + len(stored), start + count
        while i < stop:
            n = min(_BATCH, stop - i)
            below = self.row(level - 1, i * WIDTH, n * WIDTH)
            out += [_block_root(below[j * WIDTH : (j + 1) * WIDTH]) for j in range(n)]
            i += n
        return out

    def peaks(self, size: int) -> list[bytes]:
        """The roots of the perfect subtrees a tree of ``size`` leaves splits into, largest
        first: a :class:`~tracebound.integrity.merkle.MerkleAccumulator`'s state."""
        out: list[bytes] = []
        offset = 0
        for bit in range(size.bit_length() - 1, -1, -1):
            if size >> bit & 1:
                out.append(self.perfect(offset, bit))
                offset += 1 << bit
        return out


def new_nodes(
    tree: StoredTree, stored: Callable[[int], int], size: int
) -> Iterator[tuple[int, int, list[bytes]]]:
    """The nodes a store lacks for a log of ``size`` leaves, as ``(level, start, hashes)``.

    ``stored(level)`` is how many nodes of that level the store holds (from index 0).
    Levels are filled bottom up, and each batch must be stored before the next one is
    asked for: a level is computed from the stored level below it.
    """
    for level in range(1, MAX_LEVEL + 1):
        want = size >> (LEVEL_BITS * level)
        if want == 0:
            return
        for i in range(stored(level), want, _FILL_BATCH):
            yield level, i, tree.row(level, i, min(_FILL_BATCH, want - i))
