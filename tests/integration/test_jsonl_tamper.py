"""At-rest attacks on a JSONL store's files: each one is reported with its kind and position.

The attacker holds the store directory: they can edit, delete, reorder and rewrite lines of
``log.jsonl`` (recomputing every hash), rewrite ``checkpoints.jsonl`` or copy an old
directory back. They hold neither the signing key nor the witness file, which live elsewhere.
The same attacks on SQLite are in ``test_tamper.py``.

In a JSONL log an event's position is its line number, so removing a line in the middle
moves every later record up one line: verify reports that at the first moved record as
REORDER, naming the position the record was written at.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import typer
from blake3 import blake3

from tests.integration.conftest import ORIGIN, cost
from tracebound.cli.repair import repair
from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.events.catalog import MergeOutcome
from tracebound.integrity.keys import NoteSigner
from tracebound.integrity.note import Checkpoint, sign_checkpoint
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.jsonl import JsonlStore
from tracebound.store.witness import FileWitness

_FRAME = re.compile(rb'^\{"batch":\[(\d+),(\d+)\],"hash":"([0-9a-f]{64})","record":(.*)\}\n$', re.S)


@dataclass
class JsonlWorld:
    """A signed JSONL ledger: the store (attackable) and the key and witness (not)."""

    store_dir: Path
    witness_path: Path
    signer: NoteSigner

    def open(self) -> Ledger:
        return Ledger(
            JsonlStore(self.store_dir, create=False),
            clock=FixedClock(),
            ids=SequentialIds(namespace=7),
            signer=self.signer,
            verifier=self.signer.verifier,
            witness=FileWitness(self.witness_path, origin=ORIGIN, store_dir=self.store_dir),
            origin=ORIGIN,
        )

    @property
    def log(self) -> Path:
        return self.store_dir / "log.jsonl"

    def lines(self) -> list[bytes]:
        return self.log.read_bytes().splitlines(keepends=True)

    def write(self, lines: list[bytes]) -> None:
        self.log.write_bytes(b"".join(lines))


@pytest.fixture
def world(tmp_path: Path) -> JsonlWorld:
    store_dir = tmp_path / "store"
    JsonlStore(store_dir).close()
    signer = NoteSigner("tb-test", bytes(range(32)))
    return JsonlWorld(store_dir, tmp_path / "outside" / "witness.note", signer)


@pytest.fixture
def filled(world: JsonlWorld) -> Callable[[int], JsonlWorld]:
    """``n`` events over three streams and two workflows, then a signed checkpoint."""

    def fill(n: int) -> JsonlWorld:
        with world.open() as ledger:
            for i in range(n):
                payload = (
                    cost(i)
                    if i % 5
                    else MergeOutcome(
                        pr_url=f"https://example.test/pr/{i}", decision="merged", reviewer=None
                    )
                )
                ledger.record(f"run-{i % 3}", [payload], workflow_id=f"wf-{i % 2}")
            ledger.checkpoint()
        return world

    return fill


def damage_of(world: JsonlWorld) -> LedgerDamaged:
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.damage is not None, report.as_dict()
    assert not report.ok
    return report.damage


def test_intact_ledger_verifies(filled: Callable[[int], JsonlWorld]) -> None:
    world = filled(40)
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.ok, report.as_dict()
    assert (report.size, report.checkpoint_size, report.witness_size) == (40, 40, 40)


def test_edit_one_payload_byte_is_tamper_at_that_position(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(30)
    lines = world.lines()
    assert b'"amount_usd":"0.0017"' in lines[17]
    lines[17] = lines[17].replace(b'"amount_usd":"0.0017"', b'"amount_usd":"0.9017"')
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 18)


def test_edit_the_stored_hash_is_tamper(filled: Callable[[int], JsonlWorld]) -> None:
    world = filled(30)
    lines = world.lines()
    m = _FRAME.match(lines[6])
    assert m is not None
    lines[6] = lines[6].replace(m[3], m[3][::-1])
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 7)


def test_delete_last_lines_is_truncation(filled: Callable[[int], JsonlWorld]) -> None:
    world = filled(30)
    world.write(world.lines()[:26])
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TRUNCATION, 27)


def test_delete_a_middle_line_is_reported_where_the_records_moved(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(30)
    lines = world.lines()
    del lines[11]
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 12)
    assert "written at position 13" in d.detail


def test_swap_two_lines_is_reorder(filled: Callable[[int], JsonlWorld]) -> None:
    world = filled(30)
    lines = world.lines()
    lines[8], lines[20] = lines[20], lines[8]
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 9)
    assert "written at position 21" in d.detail


def test_duplicate_a_line_is_reorder(filled: Callable[[int], JsonlWorld]) -> None:
    world = filled(30)
    lines = world.lines()
    lines.insert(5, lines[4])
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.REORDER, 6)


def test_reformatted_line_is_reported_at_its_position(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(30)
    lines = world.lines()
    lines[9] = (
        orjson.dumps(orjson.loads(lines[9]), option=orjson.OPT_INDENT_2).replace(b"\n", b" ")
        + b"\n"
    )  # still one line, still the same JSON data, but not the same bytes
    world.write(lines)
    d = damage_of(world)
    assert d.position == 10
    assert d.kind in {DamageKind.TAMPER, DamageKind.MALFORMED}


def test_garbage_line_in_the_middle_is_malformed(filled: Callable[[int], JsonlWorld]) -> None:
    world = filled(30)
    lines = world.lines()
    lines[14] = lines[14][:60] + b"\n"  # a torn line, but not at the tail
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.MALFORMED, 15)
    with JsonlStore(world.store_dir, create=False) as store:
        assert store.torn_tails() == []
        with pytest.raises(LedgerDamaged) as info:
            list(store.read_log())
        assert (info.value.kind, info.value.position) == (DamageKind.MALFORMED, 15)
        with pytest.raises(LedgerDamaged):  # which stream line 15 belonged to is unknown
            store.append("run-0", [])


def _rewrite_chain(world: JsonlWorld, position: int) -> None:
    """Change one payload and recompute every hash after it: a consistent forgery."""
    heads: dict[str, bytes] = {}
    out = []
    for line in world.lines():
        m = _FRAME.match(line)
        assert m is not None
        body = m[4]
        record = orjson.loads(body)
        old_prev = bytes.fromhex(record["prev_hash"])
        new_prev = heads.get(record["stream_id"], old_prev)
        if record["position"] == position:
            body = body.replace(b'"amount_usd":"0.', b'"amount_usd":"9.')
        body = body.replace(old_prev.hex().encode(), new_prev.hex().encode())
        digest = blake3(new_prev + body).digest()
        heads[record["stream_id"]] = digest
        out.append(
            b'{"batch":[%s,%s],"hash":"%s","record":%s}\n'
            % (m[1], m[2], digest.hex().encode(), body)
        )
    world.write(out)


def test_consistent_rewrite_without_key_fails_merkle(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    with world.open() as ledger:
        report = ledger.verify(workers=1)
    assert report.checks["chain"] == "ok"  # the forgery is internally consistent...
    assert report.damage is not None  # ...but not with what was signed
    assert report.damage.kind is DamageKind.TAMPER
    assert report.checks["merkle"] == "failed"


def test_rewrite_and_resign_with_own_key_is_forged_signature(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    with world.open() as ledger:
        forged_root = bytes.fromhex(ledger.verify(workers=1).root)
    attacker = NoteSigner("tb-test", b"\x01" * 32)  # same name, different key
    note = sign_checkpoint(Checkpoint(origin=ORIGIN, size=30, root=forged_root), attacker)
    (world.store_dir / "checkpoints.jsonl").write_bytes(
        orjson.dumps({"note": note, "size": 30}) + b"\n"
    )
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.FORGED_SIGNATURE, 30)


def test_rewrite_and_drop_checkpoints_is_caught_by_witness(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(30)
    _rewrite_chain(world, 14)
    (world.store_dir / "checkpoints.jsonl").unlink()
    d = damage_of(world)
    assert d.kind is DamageKind.ROLLBACK


def test_copy_back_older_snapshot_is_rollback(world: JsonlWorld) -> None:
    with world.open() as ledger:
        for i in range(10):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    snapshot = world.store_dir.with_name("snapshot")
    shutil.copytree(world.store_dir, snapshot)
    with world.open() as ledger:
        for i in range(10, 25):
            ledger.record("run", [cost(i)])
        ledger.checkpoint()
    shutil.rmtree(world.store_dir)
    shutil.copytree(snapshot, world.store_dir)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.ROLLBACK, 11)


def test_cut_inside_a_signed_line_is_truncation_and_not_repaired(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(20)
    data = world.log.read_bytes()
    cut = len(data) - 100  # inside line 20, which the checkpoint covers
    world.log.write_bytes(data[:cut])
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TRUNCATION, 20)
    assert f"byte offset {len(b''.join(world.lines()[:19]))}" in d.detail
    with JsonlStore(world.store_dir, create=False) as store:
        (tail,) = store.torn_tails()
        assert not tail.crash
        with pytest.raises(LedgerDamaged) as info:
            store.repair(now=FixedClock().now())
        assert info.value.kind is DamageKind.TRUNCATION
    assert world.log.read_bytes() == data[:cut]  # nothing was cut
    with pytest.raises(typer.Exit) as exit_info:  # the CLI refuses too, with exit code 1
        repair(store=f"jsonl:///{world.store_dir}", yes=True, as_json=True)
    assert exit_info.value.exit_code == 1
    assert world.log.read_bytes() == data[:cut]


def test_events_after_last_checkpoint_are_chain_checked(
    filled: Callable[[int], JsonlWorld],
) -> None:
    world = filled(20)
    with world.open() as ledger:
        ledger.record("run-x", [cost(99)])
        report = ledger.verify(workers=1)
        assert report.ok and report.uncovered == 1
    lines = world.lines()
    lines[20] = lines[20].replace(b'"0.0099"', b'"0.0098"')
    world.write(lines)
    d = damage_of(world)
    assert (d.kind, d.position) == (DamageKind.TAMPER, 21)


def test_parallel_verify_reports_same_as_serial(
    filled: Callable[[int], JsonlWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracebound.ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "CHUNK", 8)  # many chunks from a small log
    world = filled(45)
    with world.open() as ledger:
        serial, parallel = ledger.verify(workers=1), ledger.verify(workers=2)
    assert serial.ok and parallel.ok
    assert serial.root == parallel.root
    lines = world.lines()
    lines[32] = lines[32].replace(b'"wf-0"', b'"wf-9"').replace(b'"wf-1"', b'"wf-9"')
    world.write(lines)
    with world.open() as ledger:
        a, b = ledger.verify(workers=1), ledger.verify(workers=2)
    assert a.damage is not None and b.damage is not None
    assert (a.damage.kind, a.damage.position) == (b.damage.kind, b.damage.position)
    assert (a.damage.kind, a.damage.position) == (DamageKind.TAMPER, 33)


def test_inclusion_proof_round_trip(filled: Callable[[int], JsonlWorld]) -> None:
    from tracebound.ledger import InclusionBundle, verify_bundle

    world = filled(23)
    with world.open() as ledger:
        for position in (1, 2, 13, 23):
            bundle = ledger.prove(position)
            again = InclusionBundle.from_dict(bundle.as_dict())
            assert verify_bundle(again, world.signer.verifier).size == 23
