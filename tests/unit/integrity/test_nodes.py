"""Stored Merkle nodes (integrity/nodes.py) against the plain RFC 6962 functions.

Levels are shrunk to 4 leaves per node (``LEVEL_BITS = 2``) so that small trees have
several levels, partly stored, partly missing, and sometimes wrong.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.errors import ProofError
from tracebound.integrity import _kernel, merkle, nodes
from tracebound.integrity.merkle import (
    MerkleAccumulator,
    consistency_proof,
    consistency_proof_from_leaves,
    inclusion_proof,
    inclusion_proof_from_leaves,
    leaf_hash,
    root_of,
)
from tracebound.integrity.nodes import StoredTree, new_nodes


@pytest.fixture(autouse=True)
def small_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "LEVEL_BITS", 2)
    monkeypatch.setattr(nodes, "WIDTH", 4)
    monkeypatch.setattr(nodes, "_BATCH", 3)  # missing runs computed in several steps
    monkeypatch.setattr(nodes, "_FILL_BATCH", 5)


def leaves(n: int) -> list[bytes]:
    return [leaf_hash(hashlib.blake2s(i.to_bytes(4, "big")).digest()) for i in range(n)]


class MemorySource:
    """Leaves in a list; stored nodes in a dict per level; every read counted."""

    def __init__(self, leaf_hashes: list[bytes]) -> None:
        self.leaves = leaf_hashes
        self.stored: dict[int, dict[int, bytes]] = {}
        self.leaf_reads = 0

    def leaf_hashes(self, start: int, stop: int) -> list[bytes]:
        assert 0 <= start <= stop <= len(self.leaves)
        self.leaf_reads += stop - start
        return self.leaves[start:stop]

    def nodes(self, level: int, start: int, stop: int) -> list[bytes]:
        row = self.stored.get(level, {})
        out = []
        for i in range(start, stop):
            if i not in row:
                break
            out.append(row[i])
        return out

    def count(self, level: int) -> int:
        row = self.stored.get(level, {})
        return max(row, default=-1) + 1

    def fill(self, size: int) -> int:
        added = 0
        for level, start, hashes in new_nodes(StoredTree(self), self.count, size):
            row = self.stored.setdefault(level, {})
            for i, h in enumerate(hashes):
                row.setdefault(start + i, h)
            added += len(hashes)
        return added


def true_node(all_leaves: list[bytes], level: int, index: int) -> bytes:
    span = 4**level
    return root_of(all_leaves[index * span : (index + 1) * span])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), fill_to=st.integers(0, 300), data=st.data())
def test_subtree_roots_and_proofs_match_the_leaves(
    n: int, fill_to: int, data: st.DataObject
) -> None:
    hashes = leaves(n)
    source = MemorySource(hashes)
    source.fill(min(fill_to, n))
    tree = StoredTree(source)
    start = data.draw(st.integers(0, n - 1))
    end = data.draw(st.integers(start + 1, n))
    assert tree.subtree_root(start, end) == root_of(hashes[start:end])
    size = data.draw(st.integers(1, n))
    index = data.draw(st.integers(0, size - 1))
    assert inclusion_proof(index, size, tree.subtree_root) == inclusion_proof_from_leaves(
        hashes, index, size
    )
    older = data.draw(st.integers(0, size))
    assert consistency_proof(older, size, tree.subtree_root) == consistency_proof_from_leaves(
        hashes, older, size
    )
    acc = MerkleAccumulator()
    acc.extend(hashes[:size])
    assert MerkleAccumulator.from_state(size, tree.peaks(size)).root() == acc.root()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 400), first=st.integers(0, 400))
def test_new_nodes_stores_exactly_the_true_nodes_once(n: int, first: int) -> None:
    hashes = leaves(n)
    source = MemorySource(hashes)
    source.fill(min(first, n))  # an earlier checkpoint filled part of it
    source.fill(n)
    for level in range(1, 5):
        row = source.stored.get(level, {})
        assert sorted(row) == list(range(n // 4**level))
        for i, h in row.items():
            assert h == true_node(hashes, level, i)
    assert source.fill(n) == 0  # nothing left to add


def test_a_proof_reads_a_few_leaves_once_nodes_are_stored() -> None:
    hashes = leaves(4**5)  # 1,024 leaves: levels 1..5
    cold = MemorySource(hashes)
    inclusion_proof(700, len(hashes), StoredTree(cold).subtree_root)
    warm = MemorySource(hashes)
    warm.fill(len(hashes))
    warm.leaf_reads = 0
    assert inclusion_proof(700, len(hashes), StoredTree(warm).subtree_root) == (
        inclusion_proof_from_leaves(hashes, 700)
    )
    assert cold.leaf_reads >= len(hashes) - 1  # the whole log, less the leaf itself
    assert warm.leaf_reads <= 3  # inside the level-1 block of the leaf: 701, 702, 703


def test_a_wrong_stored_node_changes_the_answer_and_nothing_hides_it() -> None:
    """A node is never trusted on its own: a wrong one yields a root or proof that fails
    against the true root, which is how the ledger catches it."""
    hashes = leaves(64)
    source = MemorySource(hashes)
    source.fill(64)
    true_root = root_of(hashes)
    source.stored[1][5] = b"\x42" * 32  # leaves 20..23: inside the stored level-3 root
    tree = StoredTree(source)
    assert tree.subtree_root(0, 64) == true_root  # the root does not use that node ...
    proof = inclusion_proof(17, 64, tree.subtree_root)  # ... but this proof does
    with pytest.raises(ProofError):
        merkle.verify_inclusion(hashes[17], 17, 64, proof, true_root)
    source.stored[3][0] = b"\x42" * 32
    assert StoredTree(source).subtree_root(0, 64) != true_root


def test_missing_nodes_in_the_middle_are_computed_from_below() -> None:
    hashes = leaves(256)
    source = MemorySource(hashes)
    source.fill(256)
    del source.stored[1][17]  # a hole: the run stops there, the rest is computed
    del source.stored[3]
    assert StoredTree(source).subtree_root(0, 256) == root_of(hashes)


@pytest.mark.parametrize("full_run", [False, True])
@pytest.mark.parametrize("bad", [b"short", b"\x00" * 64, 7, "a" * 32])
def test_a_stored_node_of_the_wrong_size_is_refused(full_run: bool, bad: object) -> None:
    """Also when every node asked for is stored: the C kernel joins them into one
    buffer, where a node of the wrong size would shift every node after it."""
    source = MemorySource(leaves(32))
    source.fill(32)
    if not full_run:
        source.stored[1] = {0: source.stored[1][0]}
    source.stored[1][1 if full_run else 0] = bad  # type: ignore[assignment]
    del source.stored[2]
    with pytest.raises(ProofError, match="not 32 bytes"):
        StoredTree(source).subtree_root(0, 32)


def test_empty_and_reversed_ranges_are_refused() -> None:
    tree = StoredTree(MemorySource(leaves(8)))
    for start, end in ((3, 3), (5, 2), (-1, 4)):
        with pytest.raises(ProofError):
            tree.subtree_root(start, end)


def test_the_same_roots_without_the_c_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    hashes = leaves(100)
    with_kernel = MemorySource(hashes)
    with_kernel.fill(100)
    monkeypatch.setattr(_kernel, "KERNEL", None)
    pure = MemorySource(hashes)
    pure.fill(100)
    assert pure.stored == with_kernel.stored
    assert StoredTree(pure).subtree_root(0, 100) == root_of(hashes)


def test_perfect_root_refuses_a_run_that_is_not_a_power_of_two() -> None:
    with pytest.raises(ProofError, match="power-of-two"):
        merkle.perfect_root(leaves(3))
    with pytest.raises(ProofError):
        merkle.perfect_root([])
    assert merkle.perfect_root(leaves(4)) == root_of(leaves(4))
