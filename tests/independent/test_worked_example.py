"""docs/evidence-format.md's worked examples (§8, and §9's consistency proof): the independent
verifier recomputes every value from the page alone, and tracebound writes the same bytes for
the same inputs."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI
from tests.independent import verify_evidence as iv
from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.integrity.consistency import ConsistencyBundle, verify_consistency_bundle
from tracebound.integrity.note import open_checkpoint
from tracebound.integrity.run_head import RunHead, sign_run_head
from tracebound.integrity.stream_head import StreamHead, sign_stream_head

SPEC = Path(__file__).parents[2] / "docs" / "evidence-format.md"
TEXT = SPEC.read_text(encoding="utf-8")
EXAMPLE = TEXT[TEXT.index("## 8. Worked example") : TEXT.index("## 9. ")]
BLOCKS = re.findall(r"```text\n(.*?)```", EXAMPLE, flags=re.S)
VALUES = dict(re.findall(r"^(\S.*?\S) += (.*)$", BLOCKS[0], flags=re.M))
CHECKPOINT, RUN_HEAD, STREAM_HEAD, EMPTY_HEAD = BLOCKS[1], BLOCKS[2], BLOCKS[3], BLOCKS[4]
ORIGIN = "example.com/log"

# §9's worked example: §8's log, its key rotated, one more event.
SECTION_9 = TEXT[TEXT.index("## 9. ") :]
EXAMPLE_9 = SECTION_9[SECTION_9.index("### Worked example") :]
BLOCKS_9 = re.findall(r"```text\n(.*?)```", EXAMPLE_9, flags=re.S)
VALUES_9 = dict(re.findall(r"^(\S.*?\S) += (.*)$", BLOCKS_9[0], flags=re.M))
HANDOVER, NEWEST = BLOCKS_9[1], BLOCKS_9[2]
(CONSISTENCY_FILE,) = re.findall(r"```json\n(.*?)```", EXAMPLE_9, flags=re.S)


def _hex(name: str) -> bytes:
    return bytes.fromhex(VALUES[name])


def _hex9(name: str) -> bytes:
    return bytes.fromhex(VALUES_9[name])


def _hashes9(name: str) -> list[bytes]:
    return [bytes.fromhex(h) for h in VALUES_9[name].split(", ")]


def _cost(amount: str) -> CostIncurred:
    return CostIncurred(tier="direct", amount_usd=Decimal(amount), source=CostSource("openai"))


@contextmanager
def _example_ledger(path: Path, signer: NoteSigner) -> Iterator[Ledger]:
    """§8's ledger, open: two spend events in `s-1`, in a fresh store at ``path``."""
    ledger = Ledger(SQLiteStore(path), clock=FixedClock(), ids=SequentialIds(namespace=1),
                    signer=signer, origin=ORIGIN)  # fmt: skip
    with ledger:
        for amount in ("0.0213", "0.5"):
            ledger.record("s-1", [_cost(amount)], workflow_id="wf-1")
        yield ledger


def test_the_page_alone_gives_every_value() -> None:
    key = iv.Key.parse(VALUES["verifier key"])
    assert key.public == _hex("public key") and f"{key.key_id:08x}" == VALUES["key ID"]
    r1, r2 = VALUES["record 1"].encode(), VALUES["record 2"].encode()
    assert iv.canonical_record(r1) and iv.canonical_record(r2)
    assert iv.chain_hash(bytes(32), r1) == _hex("hash 1")
    assert iv.chain_hash(_hex("hash 1"), r2) == _hex("hash 2")
    leaves = [iv.leaf_hash(_hex("hash 1")), iv.leaf_hash(_hex("hash 2"))]
    assert leaves == [_hex("leaf 1"), _hex("leaf 2")]
    assert (
        iv.merkle_root(leaves)
        == _hex("root")
        == hashlib.sha256(b"\x01" + b"".join(leaves)).digest()
    )
    path = [_hex("proof of 1 in 2")]
    assert iv.root_from_inclusion(leaves[0], 0, 2, path) == _hex("root")
    cp = iv.open_checkpoint(CHECKPOINT, key)
    assert (cp.origin, cp.size, cp.root) == ("example.com/log", 2, _hex("root"))
    head = iv.open_run_head(RUN_HEAD, key)
    said = (head.run_id, head.stream_version, head.hash, head.status, head.tree_size, head.root)
    assert said == ("r-1", 2, _hex("hash 2"), "completed", 2, _hex("root"))
    spend = iv.open_stream_head(STREAM_HEAD, key)
    assert spend == iv.StreamHead("example.com/log", "s-1", 2, _hex("hash 2"), 2, _hex("root"))
    empty = iv.open_stream_head(EMPTY_HEAD, key)
    assert empty == iv.StreamHead("example.com/log", "costs/r-1", 0, bytes(32), 2, _hex("root"))
    # The spend the page states, summed by the page's rule from the two records.
    records = [iv.Record(i + 1, i + 1, b"", b"", iv.canonical_record(r)) for i, r in
               enumerate((r1, r2))]  # fmt: skip
    summed = iv._spend(records, proven=True)
    assert (summed["total_usd"], summed["records"]) == ("0.5213", 2)
    assert "exactly `0.0213` + `0.5` = `0.5213` USD in 2 records" in " ".join(EXAMPLE.split())
    assert summed["by_role"] == [{"role": None, "total_usd": "0.5213", "records": 2}]


def test_tracebound_writes_the_same_bytes(tmp_path: Path) -> None:
    signer = NoteSigner("example", bytes(32))
    assert signer.verifier.format() == VALUES["verifier key"]
    with _example_ledger(tmp_path / "s", signer) as ledger:
        ledger.checkpoint()
        first, second = ledger.prove(1), ledger.prove(2)
        assert ledger.store.latest_checkpoint() == CHECKPOINT
    assert (first.body.decode(), first.hash.hex()) == (VALUES["record 1"], VALUES["hash 1"])
    assert (second.body.decode(), second.hash.hex()) == (VALUES["record 2"], VALUES["hash 2"])
    assert [p.hex() for p in first.proof] == [VALUES["proof of 1 in 2"]]
    assert [p.hex() for p in second.proof] == [VALUES["leaf 1"]]
    head = RunHead("example.com/log", "r-1", 2, second.hash, "completed", 2, _hex("root"))
    assert sign_run_head(head, signer) == RUN_HEAD
    spend = StreamHead("example.com/log", "s-1", 2, second.hash, 2, _hex("root"))
    assert sign_stream_head(spend, signer) == STREAM_HEAD
    empty = StreamHead("example.com/log", "costs/r-1", 0, bytes(32), 2, _hex("root"))
    assert sign_stream_head(empty, signer) == EMPTY_HEAD


def _signers(note: str) -> list[str]:
    """The key IDs of a note's signature lines, in order."""
    lines = note.split("\n\n", 1)[1].splitlines()
    return [base64.b64decode(line.rsplit(" ", 1)[1])[:4].hex() for line in lines]


def test_the_page_alone_gives_every_value_of_the_consistency_example() -> None:
    old, new = iv.Key.parse(VALUES["verifier key"]), iv.Key.parse(VALUES_9["new verifier key"])
    assert new.public == _hex9("new public key") and f"{new.key_id:08x}" == VALUES_9["new key ID"]
    assert iv.key_text(new) == VALUES_9["new verifier key"] and new.name == old.name == "example"
    r3, r4 = VALUES_9["record 3"].encode(), VALUES_9["record 4"].encode()
    rotated, spent = iv.canonical_record(r3), iv.canonical_record(r4)
    assert (rotated["stream_id"], rotated["stream_version"], rotated["position"]) == (
        "tracebound.keys", 1, 3,
    )  # fmt: skip
    assert rotated["payload"]["old_key"] == iv.key_text(old)
    assert rotated["payload"]["new_key"] == iv.key_text(new)
    assert (spent["stream_id"], spent["stream_version"], spent["position"]) == ("s-1", 3, 4)
    assert iv.chain_hash(bytes(32), r3) == _hex9("hash 3")
    assert iv.chain_hash(_hex("hash 2"), r4) == _hex9("hash 4")
    leaves = [_hex("leaf 1"), _hex("leaf 2"), _hex9("leaf 3"), _hex9("leaf 4")]
    assert leaves[2:] == [iv.leaf_hash(_hex9("hash 3")), iv.leaf_hash(_hex9("hash 4"))]
    root2, root3, root4 = _hex("root"), _hex9("root of 3"), _hex9("root of 4")
    assert iv.merkle_root(leaves[:3]) == root3 == iv.node_hash(root2, leaves[2])
    assert iv.merkle_root(leaves) == root4 == iv.node_hash(root2, iv.node_hash(*leaves[2:]))
    # The two proofs, as the page spells them out, and as RFC 9162 checks them.
    assert _hashes9("proof from 2 to 3") == [leaves[2]]
    assert _hashes9("proof from 3 to 4") == [leaves[2], leaves[3], root2]
    assert iv.roots_from_consistency(2, 3, root2, _hashes9("proof from 2 to 3")) == (root2, root3)
    assert iv.roots_from_consistency(3, 4, root3, _hashes9("proof from 3 to 4")) == (root3, root4)
    # The hand-over is signed by both keys, old first; the newest by the new key alone.
    assert _signers(HANDOVER) == [VALUES["key ID"], VALUES_9["new key ID"]]
    assert _signers(NEWEST) == [VALUES_9["new key ID"]]
    for key in (old, new):
        assert iv.open_checkpoint(HANDOVER, key) == iv.Checkpoint(ORIGIN, 3, root3)
    assert iv.open_checkpoint(NEWEST, new) == iv.Checkpoint(ORIGIN, 4, root4)
    with pytest.raises(iv.Refused):
        iv.open_checkpoint(NEWEST, old)
    # The file: its steps are the page's notes, keys and proofs, and it verifies.
    steps = json.loads(CONSISTENCY_FILE)["checkpoints"]
    assert [s["checkpoint"] for s in steps] == [CHECKPOINT, HANDOVER, NEWEST]
    assert [s["key"] for s in steps] == [iv.key_text(k) for k in (old, new, new)]
    assert [s["proof"] for s in steps] == [
        [], VALUES_9["proof from 2 to 3"].split(", "), VALUES_9["proof from 3 to 4"].split(", ")
    ]  # fmt: skip
    said = iv.verify_consistency(CONSISTENCY_FILE.encode(), old, held_note=CHECKPOINT,
                                 newest_key=new, origin=ORIGIN)  # fmt: skip
    assert said == iv.ConsistencySummary(
        iv.Checkpoint(ORIGIN, 2, root2), iv.Checkpoint(ORIGIN, 4, root4),
        (iv.key_text(old), iv.key_text(new)),
    )  # fmt: skip


def test_tracebound_writes_the_same_consistency_proof(tmp_path: Path) -> None:
    old, new = NoteSigner("example", bytes(32)), NoteSigner("example", b"\x01" * 32)
    assert new.verifier.format() == VALUES_9["new verifier key"]
    with _example_ledger(tmp_path / "s", old) as ledger:
        ledger.checkpoint()
        ledger.rotate_key(new, rotated_by="alice")
        ledger.record("s-1", [_cost("0.25")], workflow_id="wf-1")
        ledger.checkpoint()
        third, fourth = ledger.prove(3), ledger.prove(4)
        assert ledger.store.checkpoints() == [(2, CHECKPOINT), (3, HANDOVER), (4, NEWEST)]
        bundle = ledger.prove_consistency(CHECKPOINT)
    assert (third.body.decode(), third.hash.hex()) == (VALUES_9["record 3"], VALUES_9["hash 3"])
    assert (fourth.body.decode(), fourth.hash.hex()) == (VALUES_9["record 4"], VALUES_9["hash 4"])
    assert bundle.as_dict() == json.loads(CONSISTENCY_FILE)
    # The file as the command writes it, byte for byte.
    (tmp_path / "kept.note").write_text(CHECKPOINT, encoding="utf-8")
    proc = CLI(tmp_path).run("prove-consistency", str(tmp_path / "kept.note"), "--store",
                             str(tmp_path / "s"), "--verifier-key", VALUES_9["new verifier key"],
                             "--json")  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, CONSISTENCY_FILE), proc.stderr
    result = verify_consistency_bundle(
        ConsistencyBundle.from_json(CONSISTENCY_FILE), old.verifier, origin=ORIGIN,
        held=open_checkpoint(CHECKPOINT, old.verifier), newest_key=new.verifier,
    )  # fmt: skip
    assert (result.old.size, result.new.size, result.keys) == (2, 4, (old.verifier, new.verifier))
    assert [h.size for h in result.handovers] == [3]
