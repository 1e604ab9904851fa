"""RFC 6962 Merkle trees: transparency-dev vectors, then properties over random trees.

The published vectors pin the exact hashing and proof shapes; the properties check that every
proof we generate verifies and that any single change to a proof, index, size or root is
caught.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import shared_vectors_dir

from tracebound.errors import ProofError
from tracebound.integrity.merkle import (
    EMPTY_ROOT,
    MerkleAccumulator,
    _roots_from_consistency,
    aligned_subtrees,
    consistency_proof,
    consistency_proof_from_leaves,
    inclusion_proof,
    inclusion_proof_from_leaves,
    leaf_hash,
    node_hash,
    root_from_inclusion,
    root_of,
    verify_consistency,
    verify_inclusion,
)

VECTORS = shared_vectors_dir() / "rfc6962-merkle"


def _files(kind: str) -> list[Path]:
    return sorted((VECTORS / kind).rglob("*.json"))


def _id(path: Path) -> str:
    return str(path.relative_to(VECTORS))


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value) if value else b""


def _proof(value: list[str] | None) -> list[bytes]:
    return [_b64(p) for p in value or []]


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


INCLUSION = _files("inclusion")
CONSISTENCY = _files("consistency")


def test_vector_files_are_present() -> None:
    # An empty glob would make the parametrised tests below pass vacuously.
    assert len(INCLUSION) > 50
    assert len(CONSISTENCY) > 50
    both = [_load(p) for p in INCLUSION + CONSISTENCY]
    assert any(d["wantErr"] for d in both)
    assert any(not d["wantErr"] for d in both)


@pytest.mark.parametrize("path", INCLUSION, ids=_id)
def test_inclusion_vectors(path: Path) -> None:
    d = _load(path)
    args = (_b64(d["leafHash"]), d["leafIdx"], d["treeSize"], _proof(d["proof"]), _b64(d["root"]))
    if d["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@pytest.mark.parametrize("path", CONSISTENCY, ids=_id)
def test_consistency_vectors(path: Path) -> None:
    d = _load(path)
    args = (d["size1"], d["size2"], _b64(d["root1"]), _b64(d["root2"]), _proof(d["proof"]))
    if d["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


def test_happy_inclusion_vectors_are_the_proofs_we_generate() -> None:
    # The vectors' tree is the RFC 6962 reference tree of 8 leaves: check that our generator
    # emits byte-identical proofs, not merely proofs that verify.
    leaves = [
        leaf_hash(bytes.fromhex(h))
        for h in [
            "",
            "00",
            "10",
            "2021",
            "3031",
            "40414243",
            "5051525354555657",
            "606162636465666768696a6b6c6d6e6f",
        ]
    ]
    checked = 0
    for path in INCLUSION:
        d = _load(path)
        if d["wantErr"] or d["treeSize"] > len(leaves) or d["treeSize"] < 2:
            continue
        got = inclusion_proof_from_leaves(leaves, d["leafIdx"], d["treeSize"])
        assert got == _proof(d["proof"])
        assert root_of(leaves[: d["treeSize"]]) == _b64(d["root"])
        checked += 1
    for path in CONSISTENCY:
        d = _load(path)
        if d["wantErr"] or d["size2"] > len(leaves) or d["size1"] == d["size2"]:
            continue
        got = consistency_proof_from_leaves(leaves, d["size1"], d["size2"])
        assert got == _proof(d["proof"])
        checked += 1
    assert checked >= 6


# --- basics --------------------------------------------------------------------------------


def test_hash_domain_separation() -> None:
    assert hashlib.sha256(b"").digest() == EMPTY_ROOT
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    a, b = bytes(32), bytes([1]) * 32
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert leaf_hash(a + b) != node_hash(a, b)


def _mth(leaves: Sequence[bytes]) -> bytes:
    """The RFC 6962 definition, recursively, as an independent oracle."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _leaves(n: int, salt: int = 0) -> list[bytes]:
    return [leaf_hash(salt.to_bytes(4, "big") + i.to_bytes(8, "big")) for i in range(n)]


def test_accumulator_empty_and_errors() -> None:
    acc = MerkleAccumulator()
    assert acc.size == 0
    assert acc.root() == EMPTY_ROOT
    with pytest.raises(ProofError):
        acc.append_leaf_hash(b"short")
    with pytest.raises(ProofError):
        acc.extend([bytes(32), b"x" * 31])
    assert acc.size == 0  # the bad chunk left nothing behind
    with pytest.raises(ProofError, match="power of two"):
        acc.append_subtree(bytes(32), 3)
    acc.append_leaf_hash(bytes(32))
    with pytest.raises(ProofError, match="aligned"):
        acc.append_subtree(bytes(32), 2)
    with pytest.raises(ProofError):
        acc.append_subtree(b"x", 1)
    with pytest.raises(ProofError):
        MerkleAccumulator.from_state(3, [bytes(32)])
    with pytest.raises(ProofError):
        MerkleAccumulator.from_state(-1, [])
    with pytest.raises(ProofError):
        root_of([b"x"])


def test_accumulator_extend_streams_past_one_chunk() -> None:
    leaves = _leaves(70_001)
    acc = MerkleAccumulator()
    acc.extend(iter(leaves))  # a generator-like input, longer than one internal chunk
    assert acc.size == len(leaves)
    assert acc.root() == root_of(leaves)


def test_append_data_hashes_as_leaf() -> None:
    acc = MerkleAccumulator()
    for i in range(5):
        acc.append(bytes([i]))
    assert acc.root() == _mth([leaf_hash(bytes([i])) for i in range(5)])
    batched = MerkleAccumulator()
    batched.extend_data(bytes([i]) for i in range(5))
    assert batched.state() == acc.state()


def test_proof_generation_range_errors() -> None:
    leaves = _leaves(4)
    with pytest.raises(ProofError):
        inclusion_proof_from_leaves(leaves, 4)
    with pytest.raises(ProofError):
        inclusion_proof_from_leaves(leaves, -1)
    with pytest.raises(ProofError):
        inclusion_proof_from_leaves(leaves, 0, 5)
    with pytest.raises(ProofError):
        consistency_proof_from_leaves(leaves, 3, 2)
    with pytest.raises(ProofError):
        consistency_proof_from_leaves(leaves, 1, 5)
    assert consistency_proof_from_leaves(leaves, 0, 4) == []
    assert consistency_proof_from_leaves(leaves, 4, 4) == []
    with pytest.raises(ProofError, match="returned"):
        inclusion_proof(0, 4, lambda s, e: b"short")


def test_proof_generation_reads_each_leaf_about_once() -> None:
    # A store-backed subtree_root streams its range; the ranges asked for must be few and
    # must not overlap, or generating a proof would read the log many times.
    n = 1_000_003
    calls: list[tuple[int, int]] = []

    def fake_root(start: int, end: int) -> bytes:
        calls.append((start, end))
        return hashlib.sha256(f"{start}:{end}".encode()).digest()

    inclusion_proof(123_456, n, fake_root)
    assert len(calls) <= n.bit_length()
    assert sum(e - s for s, e in calls) < n
    calls.clear()
    consistency_proof(500_001, n, fake_root)
    assert len(calls) <= 2 * n.bit_length()
    assert sum(e - s for s, e in calls) <= n


# --- properties ----------------------------------------------------------------------------

sizes = st.integers(min_value=1, max_value=300)


@given(n=st.integers(min_value=0, max_value=300), salt=st.integers(0, 2**16))
def test_accumulator_matches_root_of_and_recursive_definition(n: int, salt: int) -> None:
    leaves = _leaves(n, salt)
    one_by_one = MerkleAccumulator()
    for h in leaves:
        one_by_one.append_leaf_hash(h)
    batched = MerkleAccumulator()
    batched.extend(leaves)
    from_data = MerkleAccumulator()
    from_data.extend_data(salt.to_bytes(4, "big") + i.to_bytes(8, "big") for i in range(n))
    assert from_data.state() == batched.state()
    expected = _mth(leaves)
    assert one_by_one.root() == batched.root() == root_of(leaves) == expected
    assert one_by_one.state() == batched.state()
    assert len(batched.peaks) == n.bit_count()


@given(n=sizes, cut=st.data())
def test_copy_and_state_resume(n: int, cut: st.DataObject) -> None:
    leaves = _leaves(n)
    k = cut.draw(st.integers(0, n))
    acc = MerkleAccumulator()
    acc.extend(leaves[:k])
    snapshot = acc.copy()
    resumed = MerkleAccumulator.from_state(*acc.state())
    acc.extend(leaves[k:])
    resumed.extend(leaves[k:])
    assert snapshot.size == k
    assert snapshot.root() == root_of(leaves[:k])  # the copy is independent
    assert resumed.root() == acc.root() == root_of(leaves)


@given(n=st.integers(0, 600), start_hint=st.integers(0, 600), split=st.integers(0, 600))
def test_subtree_merging_gives_same_root(n: int, start_hint: int, split: int) -> None:
    # Two "workers": the parent hashes leaves[:start] itself, and the aligned pieces of
    # [start, n) are hashed independently with root_of and merged with append_subtree.
    leaves = _leaves(n)
    start = min(start_hint, n)
    acc = MerkleAccumulator()
    acc.extend(leaves[:start])
    pieces = aligned_subtrees(start, n)
    assert sum(e - s for s, e in pieces) == n - start
    for s, e in pieces:
        acc.append_subtree(root_of(leaves[s:e]), e - s)
    assert acc.root() == root_of(leaves)
    # Merging two accumulators' worth at any aligned boundary also works.
    boundary = min(split, n) & ~0xF
    other = MerkleAccumulator()
    other.extend(leaves[:boundary])
    for s, e in aligned_subtrees(boundary, n):
        other.append_subtree(root_of(leaves[s:e]), e - s)
    assert other.root() == acc.root()


def _flip_bit(proof: list[bytes], which: int, bit: int) -> list[bytes]:
    out = list(proof)
    i = which % len(out)
    b = bytearray(out[i])
    b[(bit // 8) % len(b)] ^= 1 << (bit % 8)
    out[i] = bytes(b)
    return out


@settings(max_examples=200)
@given(n=sizes, data=st.data())
def test_inclusion_proofs_verify_and_any_change_is_rejected(n: int, data: st.DataObject) -> None:
    leaves = _leaves(n)
    root = root_of(leaves)
    index = data.draw(st.integers(0, n - 1))
    proof = inclusion_proof_from_leaves(leaves, index)
    verify_inclusion(leaves[index], index, n, proof, root)
    assert root_from_inclusion(leaves[index], index, n, proof) == root

    bad: list[tuple[bytes, int, int, list[bytes], bytes]] = []
    if proof:
        bit = data.draw(st.integers(0, 255))
        which = data.draw(st.integers(0, len(proof) - 1))
        bad.append((leaves[index], index, n, _flip_bit(proof, which, bit), root))
        bad.append((leaves[index], index, n, proof[:-1], root))
        bad.append((leaves[index], index, n, proof[1:], root))
    bad.append((leaves[index], index, n, [*proof, bytes(32)], root))
    bad.append((leaves[index], index, n, [bytes(32), *proof], root))
    flipped_leaf = _flip_bit([leaves[index]], 0, data.draw(st.integers(0, 255)))[0]
    bad.append((flipped_leaf, index, n, proof, root))
    bad.append((leaves[index], index, n, proof, _flip_bit([root], 0, 7)[0]))
    other_index = data.draw(st.integers(-2, n + 2).filter(lambda i: i != index))
    bad.append((leaves[index], other_index, n, proof, root))
    for args in bad:
        with pytest.raises(ProofError):
            verify_inclusion(*args)

    # A wrong size is caught whenever it changes the path's shape. When it does not (index 0
    # of 257 vs 258 leaves), the proof really is a proof for both sizes: the size is bound by
    # the signed root, not by the proof. Check both halves of that statement.
    other_size = data.draw(st.integers(0, 2 * n + 2).filter(lambda s: s != n))
    if _same_inclusion_shape(index, n, other_size, len(proof)):
        verify_inclusion(leaves[index], index, other_size, proof, root)
    else:
        with pytest.raises(ProofError):
            verify_inclusion(leaves[index], index, other_size, proof, root)


def _symbols(k: int) -> list[bytes]:
    return [hashlib.sha256(b"symbol" + i.to_bytes(4, "big")).digest() for i in range(k)]


def _same_inclusion_shape(index: int, size: int, other: int, length: int) -> bool:
    """Whether the verifier combines a proof the same way for both sizes (symbolic check)."""
    seed = hashlib.sha256(b"leaf").digest()
    try:
        other_root = root_from_inclusion(seed, index, other, _symbols(length))
    except ProofError:
        return False
    return other_root == root_from_inclusion(seed, index, size, _symbols(length))


def _same_consistency_shape(m: int, n: int, m2: int, n2: int, root1: bytes, length: int) -> bool:
    if not 0 < m2 < n2:
        return False
    try:
        other = _roots_from_consistency(m2, n2, root1, _symbols(length))
    except ProofError:
        return False
    return other == _roots_from_consistency(m, n, root1, _symbols(length))


@settings(max_examples=200)
@given(n=st.integers(2, 300), data=st.data())
def test_consistency_proofs_verify_and_any_change_is_rejected(n: int, data: st.DataObject) -> None:
    leaves = _leaves(n)
    m = data.draw(st.integers(1, n - 1))
    root1, root2 = root_of(leaves[:m]), root_of(leaves)
    proof = consistency_proof_from_leaves(leaves, m, n)
    verify_consistency(m, n, root1, root2, proof)
    verify_consistency(m, m, root1, root1, [])

    which, bit = data.draw(st.integers(0, 99)), data.draw(st.integers(0, 255))
    bad: list[tuple[int, int, bytes, bytes, list[bytes]]] = [
        (m, n, root1, root2, _flip_bit(proof, which, bit)),
        (m, n, root1, root2, proof[:-1]),
        (m, n, root1, root2, proof[1:]),
        (m, n, root1, root2, [*proof, bytes(32)]),
        (m, n, root1, root2, [bytes(32), *proof]),
        (m, n, _flip_bit([root1], 0, 3)[0], root2, proof),
        (m, n, root1, _flip_bit([root2], 0, 3)[0], proof),
        (m, n, root2, root1, proof),
        (n, m, root2, root1, proof),
        (m, m, root1, root2, []),
        (0, n, EMPTY_ROOT, root2, proof),
    ]  # fmt: skip
    for args in bad:
        with pytest.raises(ProofError):
            verify_consistency(*args)

    # As for inclusion: a wrong size is caught unless the proof has the very same shape for
    # it, in which case the sizes are bound only by the signed roots.
    other_m = data.draw(st.integers(1, n).filter(lambda s: s != m))
    other_n = data.draw(st.integers(m + 1, 2 * n + 2).filter(lambda s: s != n))
    for m2, n2 in ((other_m, n), (m, other_n)):
        if _same_consistency_shape(m, n, m2, n2, root1, len(proof)):
            verify_consistency(m2, n2, root1, root2, proof)
        else:
            with pytest.raises(ProofError):
                verify_consistency(m2, n2, root1, root2, proof)


@given(
    leaf=st.binary(max_size=40),
    index=st.integers(-(2**70), 2**70),
    size=st.integers(-(2**70), 2**70),
    proof=st.lists(st.binary(max_size=40), max_size=70),
    root=st.binary(max_size=40),
)
def test_verifiers_only_raise_proof_error_on_garbage(
    leaf: bytes, index: int, size: int, proof: list[bytes], root: bytes
) -> None:
    # Anything but ProofError (IndexError, OverflowError, ValueError...) escapes and fails.
    with contextlib.suppress(ProofError):
        verify_inclusion(leaf, index, size, proof, root)
    with contextlib.suppress(ProofError):
        verify_consistency(index, size, leaf, root, proof)
