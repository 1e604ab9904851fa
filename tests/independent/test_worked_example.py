"""docs/evidence-format.md's worked example: the independent verifier recomputes every value
from the page alone, and tracebound writes the same bytes for the same inputs."""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from pathlib import Path

from tests.independent import verify_evidence as iv
from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.integrity.run_head import RunHead, sign_run_head
from tracebound.integrity.stream_head import StreamHead, sign_stream_head

SPEC = Path(__file__).parents[2] / "docs" / "evidence-format.md"
TEXT = SPEC.read_text(encoding="utf-8")
EXAMPLE = TEXT[TEXT.index("## 8. Worked example") :]
BLOCKS = re.findall(r"```text\n(.*?)```", EXAMPLE, flags=re.S)
VALUES = dict(re.findall(r"^(\S.*?\S) += (.*)$", BLOCKS[0], flags=re.M))
CHECKPOINT, RUN_HEAD, STREAM_HEAD, EMPTY_HEAD = BLOCKS[1], BLOCKS[2], BLOCKS[3], BLOCKS[4]


def _hex(name: str) -> bytes:
    return bytes.fromhex(VALUES[name])


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
    ledger = Ledger(SQLiteStore(tmp_path / "s"), clock=FixedClock(), ids=SequentialIds(namespace=1),
                    signer=signer, origin="example.com/log")  # fmt: skip
    with ledger:
        for amount in ("0.0213", "0.5"):
            cost = CostIncurred(
                tier="direct", amount_usd=Decimal(amount), source=CostSource("openai")
            )
            ledger.record("s-1", [cost], workflow_id="wf-1")
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
