"""RFC 6962 / RFC 9162 Merkle tree hashing, proofs and a compact-range accumulator.

The chain (ADR-0005) proves that each stream continues its own past. It cannot prove that the
*global* log was not truncated, reordered or forked after the fact. A Merkle tree over the global
log gives two short proofs that the chain cannot: *inclusion* (this event is at that position of
a signed tree) and *consistency* (the tree signed yesterday is a prefix of the tree signed
today). Checkpoints sign the root, so both proofs tie back to a key the attacker does not hold.

The module is generic over leaf data. In tracebound, the leaf data at index ``i`` is the 32-byte
BLAKE3 chain hash of the event at global position ``i + 1``, but nothing here knows that.

Everything is pure: no I/O, no clock, no randomness. Proof generation never needs every leaf in
memory; it asks a ``subtree_root(start, end)`` callback for the few subtree roots a proof
contains, and a store-backed caller computes each one by streaming its leaves.

Hash sizes are strict: every leaf hash, node hash, root and proof element is 32 bytes. The one
exception is :func:`verify_consistency` for two trees of the same non-zero size, where the
answer is "the roots are byte-identical" and the transparency-dev reference vectors expect
that comparison and nothing more.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from itertools import islice

from tracebound.errors import ProofError

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MAX_PROOF_PATH",
    "MerkleAccumulator",
    "SubtreeRoot",
    "aligned_subtrees",
    "consistency_proof",
    "consistency_proof_from_leaves",
    "inclusion_proof",
    "inclusion_proof_from_leaves",
    "leaf_hash",
    "node_hash",
    "perfect_root",
    "root_from_inclusion",
    "root_of",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Bytes in every hash this module handles (SHA-256)."""

MAX_PROOF_PATH = 64
"""Hashes in the longest inclusion path: the depth of a tree of 2**64 leaves. Readers of
proof files refuse longer paths before hashing anything."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"
_sha256 = hashlib.sha256

EMPTY_ROOT: bytes = _sha256(b"").digest()
"""MTH({}) = SHA-256 of the empty string: the root of a tree with no leaves (RFC 6962 2.1)."""

_EXTEND_CHUNK = 1 << 16
"""Leaves materialised at a time by :meth:`MerkleAccumulator.extend` (bounds its memory)."""

SubtreeRoot = Callable[[int, int], bytes]
"""``subtree_root(start, end)`` returns MTH(leaves[start:end]) for ``0 <= start < end``."""


def leaf_hash(data: bytes) -> bytes:
    """Hash leaf data with the 0x00 domain prefix, so a leaf can never pose as a node."""
    return _sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Hash two children with the 0x01 domain prefix (second-preimage protection)."""
    return _sha256(_NODE_PREFIX + left + right).digest()


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _split(n: int) -> int:
    """Return k, the largest power of two strictly less than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_hashes(hashes: Iterable[bytes], what: str) -> None:
    for h in hashes:
        if len(h) != HASH_SIZE:
            raise ProofError(f"{what} must be {HASH_SIZE} bytes, got {len(h)}")


def _perfect_root(level: list[bytes]) -> bytes:
    """MTH of a power-of-two-sized list of leaf hashes, one list comprehension per level.

    Level-by-level pairing keeps the inner loop inside a comprehension, which is several times
    faster in CPython than a push/merge per leaf.
    """
    sha = _sha256
    prefix = _NODE_PREFIX
    while len(level) > 1:
        it = iter(level)
        level = [sha(prefix + a + b).digest() for a, b in zip(it, it, strict=True)]
    return level[0]


def perfect_root(hashes: Sequence[bytes]) -> bytes:
    """MTH of a power-of-two-sized run of hashes (leaf hashes, or roots of equal subtrees).

    Raises:
        ProofError: the run is empty or not a power of two long.
    """
    if not _is_pow2(len(hashes)):
        raise ProofError(f"a perfect subtree has a power-of-two size, not {len(hashes)}")
    return _perfect_root(list(hashes))


def root_of(leaf_hashes: Sequence[bytes]) -> bytes:
    """Return MTH of the given leaf hashes (already ``leaf_hash``-ed).

    Bottom-up pairing where a lone last node is carried up unchanged builds exactly the
    RFC 6962 tree (left subtree = largest power of two smaller than n), so no recursion is
    needed.

    Raises:
        ProofError: a leaf hash is not 32 bytes.
    """
    level = list(leaf_hashes)
    if not level:
        return EMPTY_ROOT
    _check_hashes(level, "leaf hash")
    sha = _sha256
    prefix = _NODE_PREFIX
    while len(level) > 1:
        carry = level.pop() if len(level) & 1 else None
        it = iter(level)
        level = [sha(prefix + a + b).digest() for a, b in zip(it, it, strict=True)]
        if carry is not None:
            level.append(carry)
    return level[0]


def aligned_subtrees(start: int, end: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` into the fewest aligned perfect subtrees, left to right.

    Each returned ``(s, e)`` has ``e - s`` a power of two and ``s % (e - s) == 0``, so its MTH
    can be fed to :meth:`MerkleAccumulator.append_subtree` by an accumulator of size ``s``.
    A parallel verifier hashes each piece in another process and merges the roots in order.

    Raises:
        ProofError: the range is negative or reversed.
    """
    if start < 0 or end < start:
        raise ProofError(f"invalid leaf range [{start}, {end})")
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        remaining = end - pos
        k = pos & -pos if pos else 1 << (remaining.bit_length() - 1)
        while k > remaining:
            k >>= 1
        out.append((pos, pos + k))
        pos += k
    return out


class MerkleAccumulator:
    """An append-only Merkle tree that keeps only O(log n) hashes (a compact range from 0).

    It holds one "peak" per set bit of ``size``: the roots of the perfect subtrees that the
    leaves decompose into, largest first. ``verify`` streams millions of leaves through it, so
    the batch path :meth:`extend` hashes whole aligned blocks level by level instead of merging
    leaf by leaf.
    """

    __slots__ = ("_peaks", "_size")

    def __init__(self) -> None:
        """Start an empty tree (root :data:`EMPTY_ROOT`)."""
        self._size = 0
        self._peaks: list[bytes] = []

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    @property
    def peaks(self) -> tuple[bytes, ...]:
        """Roots of the perfect subtrees covering the leaves, largest (leftmost) first."""
        return tuple(self._peaks)

    def state(self) -> tuple[int, tuple[bytes, ...]]:
        """Export ``(size, peaks)``, enough to resume the tree elsewhere (:meth:`from_state`)."""
        return self._size, tuple(self._peaks)

    @classmethod
    def from_state(cls, size: int, peaks: Sequence[bytes]) -> MerkleAccumulator:
        """Rebuild an accumulator from :meth:`state` output, checking that it is well formed.

        Raises:
            ProofError: the number of peaks is not the popcount of ``size``, or a peak is not
                32 bytes.
        """
        if size < 0:
            raise ProofError(f"accumulator size must be >= 0, got {size}")
        if len(peaks) != size.bit_count():
            raise ProofError(
                f"an accumulator of size {size} has {size.bit_count()} peaks, got {len(peaks)}"
            )
        _check_hashes(peaks, "peak")
        acc = cls()
        acc._size = size
        acc._peaks = [bytes(p) for p in peaks]
        return acc

    def copy(self) -> MerkleAccumulator:
        """Return an independent copy in O(log n)."""
        acc = MerkleAccumulator()
        acc._size = self._size
        acc._peaks = list(self._peaks)
        return acc

    def _push(self, root: bytes, height: int) -> None:
        # Adding 2**height leaves at an aligned size is binary addition: every set bit of
        # size at or above `height` that the carry runs into merges two peaks.
        peaks = self._peaks
        size = self._size
        bits = size >> height
        while bits & 1:
            root = _sha256(_NODE_PREFIX + peaks.pop() + root).digest()
            bits >>= 1
        peaks.append(root)
        self._size = size + (1 << height)

    def append_leaf_hash(self, h: bytes) -> None:
        """Append one leaf given its leaf hash.

        Raises:
            ProofError: ``h`` is not 32 bytes.
        """
        if len(h) != HASH_SIZE:
            raise ProofError(f"leaf hash must be {HASH_SIZE} bytes, got {len(h)}")
        peaks = self._peaks
        size = self._size
        while size & 1:
            h = _sha256(_NODE_PREFIX + peaks.pop() + h).digest()
            size >>= 1
        peaks.append(h)
        self._size += 1

    def append(self, data: bytes) -> None:
        """Append one leaf given its raw data (hashed with :func:`leaf_hash`)."""
        self.append_leaf_hash(leaf_hash(data))

    def append_subtree(self, root: bytes, size: int) -> None:
        """Append a perfect subtree of ``size`` leaves whose root was computed elsewhere.

        The subtree must be aligned: ``size`` a power of two dividing the current size (any
        power of two when empty). That is what :func:`aligned_subtrees` produces.

        Raises:
            ProofError: ``size`` is not a power of two, the subtree is not aligned, or ``root``
                is not 32 bytes.
        """
        if not _is_pow2(size):
            raise ProofError(f"subtree size must be a power of two, got {size}")
        if self._size % size:
            raise ProofError(f"a subtree of {size} leaves is not aligned at tree size {self._size}")
        if len(root) != HASH_SIZE:
            raise ProofError(f"subtree root must be {HASH_SIZE} bytes, got {len(root)}")
        self._push(bytes(root), size.bit_length() - 1)

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append many leaf hashes; the fast path for streaming a whole log.

        Leaves are taken in chunks, each chunk is split into aligned perfect blocks, and each
        block is hashed level by level before being merged as one subtree. Memory stays bounded
        by the chunk size whatever the length of ``leaf_hashes``.

        Raises:
            ProofError: a leaf hash is not 32 bytes. Leaves of earlier chunks stay appended;
                none of the offending chunk is.
        """
        it = iter(leaf_hashes)
        while chunk := list(islice(it, _EXTEND_CHUNK)):
            _check_hashes(chunk, "leaf hash")
            pos, n = 0, len(chunk)
            while pos < n:
                size = self._size
                remaining = n - pos
                k = size & -size if size else 1 << (remaining.bit_length() - 1)
                while k > remaining:
                    k >>= 1
                block = chunk[pos] if k == 1 else _perfect_root(chunk[pos : pos + k])
                self._push(block, k.bit_length() - 1)
                pos += k

    def extend_data(self, leaf_data: Iterable[bytes]) -> None:
        """Append many leaves given their raw data; :meth:`extend` after :func:`leaf_hash`.

        Hashing inside one comprehension per chunk avoids a Python call per leaf, which is
        most of the cost when the leaf data (a 32-byte chain hash) is already in hand.
        """
        it = iter(leaf_data)
        sha = _sha256
        prefix = _LEAF_PREFIX
        while chunk := [sha(prefix + d).digest() for d in islice(it, _EXTEND_CHUNK)]:
            self.extend(chunk)

    def root(self) -> bytes:
        """Return MTH of all leaves appended so far (O(log n) hashes)."""
        peaks = self._peaks
        if not peaks:
            return EMPTY_ROOT
        acc = peaks[-1]
        for p in reversed(peaks[:-1]):
            acc = _sha256(_NODE_PREFIX + p + acc).digest()
        return acc

    def __repr__(self) -> str:
        return f"MerkleAccumulator(size={self._size})"


# --- proof generation --------------------------------------------------------------------


def _check_callback_hash(h: bytes, start: int, end: int) -> bytes:
    if len(h) != HASH_SIZE:
        raise ProofError(f"subtree_root({start}, {end}) returned {len(h)} bytes, not {HASH_SIZE}")
    return h


def inclusion_proof(index: int, size: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """Return the audit path PATH(index, D[0:size]) of RFC 6962 section 2.1.1, leaf first.

    Only O(log size) subtree roots are requested; together they cover each leaf at most once,
    so a streaming ``subtree_root`` reads the log about once.

    Raises:
        ProofError: ``index`` is not in ``[0, size)``, or the callback returns a non-32-byte
            hash.
    """
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    path: list[bytes] = []
    start, end, m = 0, size, index
    # Walk down from the root; siblings are collected root-first, then reversed.
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            path.append(_check_callback_hash(subtree_root(start + k, end), start + k, end))
            end = start + k
        else:
            path.append(_check_callback_hash(subtree_root(start, start + k), start, start + k))
            start, m = start + k, m - k
    path.reverse()
    return path


def consistency_proof(size1: int, size2: int, subtree_root: SubtreeRoot) -> list[bytes]:
    """Return PROOF(size1, D[0:size2]) of RFC 6962 section 2.1.2 (SUBPROOF with b = true).

    Equal sizes give the empty proof. So does ``size1 == 0``: every tree extends the empty
    tree, so there is nothing to prove (and :func:`verify_consistency` refuses to "verify"
    such a proof; a caller holding an empty tree simply accepts the new one).

    Raises:
        ProofError: the sizes are out of range, or the callback returns a non-32-byte hash.
    """
    if not 0 <= size1 <= size2:
        raise ProofError(f"no consistency proof from size {size1} to size {size2}")
    if size1 == 0:
        return []
    path: list[bytes] = []
    start, end, m, complete = 0, size2, size1, True
    while m != end - start:
        n = end - start
        k = _split(n)
        if m <= k:
            path.append(_check_callback_hash(subtree_root(start + k, end), start + k, end))
            end = start + k
        else:
            path.append(_check_callback_hash(subtree_root(start, start + k), start, start + k))
            start, m, complete = start + k, m - k, False
    if not complete:
        path.append(_check_callback_hash(subtree_root(start, end), start, end))
    path.reverse()
    return path


def _slice_root(leaf_hashes: Sequence[bytes]) -> SubtreeRoot:
    def subtree_root(start: int, end: int) -> bytes:
        return root_of(leaf_hashes[start:end])

    return subtree_root


def inclusion_proof_from_leaves(
    leaf_hashes: Sequence[bytes], index: int, size: int | None = None
) -> list[bytes]:
    """:func:`inclusion_proof` over in-memory leaf hashes (``size`` defaults to all of them).

    Raises:
        ProofError: ``size`` exceeds the leaves given, or ``index`` is out of range.
    """
    size = len(leaf_hashes) if size is None else size
    if size > len(leaf_hashes):
        raise ProofError(f"tree size {size} exceeds the {len(leaf_hashes)} leaves given")
    return inclusion_proof(index, size, _slice_root(leaf_hashes))


def consistency_proof_from_leaves(
    leaf_hashes: Sequence[bytes], size1: int, size2: int | None = None
) -> list[bytes]:
    """:func:`consistency_proof` over in-memory leaf hashes (``size2`` defaults to all).

    Raises:
        ProofError: ``size2`` exceeds the leaves given, or the sizes are out of range.
    """
    size2 = len(leaf_hashes) if size2 is None else size2
    if size2 > len(leaf_hashes):
        raise ProofError(f"tree size {size2} exceeds the {len(leaf_hashes)} leaves given")
    return consistency_proof(size1, size2, _slice_root(leaf_hashes))


# --- verification (RFC 9162 sections 2.1.3.2 and 2.1.4.2) ---------------------------------


def root_from_inclusion(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """Recompute the root that ``proof`` claims for ``leaf_hash`` at ``index`` of ``size``.

    This is the RFC 9162 inclusion algorithm without the final comparison, for callers that
    want to compare against several roots.

    Raises:
        ProofError: the index is out of range, a hash is not 32 bytes, or the proof has the
            wrong length for this index and size.
    """
    if not 0 <= index < size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    if len(leaf_hash) != HASH_SIZE:
        raise ProofError(f"leaf hash must be {HASH_SIZE} bytes, got {len(leaf_hash)}")
    _check_hashes(proof, "inclusion proof element")
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` sits at ``index`` in the tree of ``size`` leaves and ``root``.

    Raises:
        ProofError: the proof is malformed or leads to a different root.
    """
    if len(root) != HASH_SIZE:
        raise ProofError(f"root must be {HASH_SIZE} bytes, got {len(root)}")
    computed = root_from_inclusion(leaf_hash, index, size, proof)
    if computed != root:
        raise ProofError(
            f"inclusion proof for leaf {index} of {size} gives root {computed.hex()}, "
            f"expected {bytes(root).hex()}"
        )


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree (size1, root1) is a prefix of the tree (size2, root2).

    Equal sizes are consistent only with an empty proof and identical roots (for size 0, the
    root must also be :data:`EMPTY_ROOT`). A consistency proof from the empty tree carries no
    information, so ``size1 == 0 < size2`` is rejected; a caller that trusts an empty tree
    simply has nothing to check.

    Raises:
        ProofError: the sizes are out of order or zero, a hash is not 32 bytes, the proof has
            the wrong shape, or it does not lead to both roots.
    """
    if size1 < 0 or size2 < 0:
        raise ProofError(f"tree sizes must be >= 0, got {size1} and {size2}")
    if size2 < size1:
        raise ProofError(f"tree shrank: size {size1} cannot be a prefix of size {size2}")
    if size1 == size2:
        if proof:
            raise ProofError(f"equal sizes need an empty proof, got {len(proof)} hashes")
        if root1 != root2:
            raise ProofError(f"two different roots for the same tree size {size1} (a fork)")
        if size1 == 0 and root1 != EMPTY_ROOT:
            raise ProofError("a tree of size 0 must have the empty root")
        return
    if size1 == 0:
        raise ProofError("a consistency proof from the empty tree is meaningless")
    if len(root1) != HASH_SIZE or len(root2) != HASH_SIZE:
        raise ProofError(f"roots must be {HASH_SIZE} bytes, got {len(root1)} and {len(root2)}")
    if not proof:
        raise ProofError(f"empty consistency proof from size {size1} to {size2}")
    _check_hashes(proof, "consistency proof element")
    fr, sr = _roots_from_consistency(size1, size2, root1, proof)
    if fr != root1:
        raise ProofError(f"consistency proof does not lead to the size-{size1} root")
    if sr != root2:
        raise ProofError(f"consistency proof does not lead to the size-{size2} root")


def _roots_from_consistency(
    size1: int, size2: int, root1: bytes, proof: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """Recompute both roots from a consistency proof (RFC 9162 2.1.4.2, steps 2 to 6)."""
    path = list(proof)
    if _is_pow2(size1):
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than the tree is deep")
    return fr, sr
