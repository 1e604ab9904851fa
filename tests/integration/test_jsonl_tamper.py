"""At-rest attacks on a JSONL store's files: the tamper suite with byte edits as the tool.

The attacker holds the store directory: they can edit, delete, reorder and rewrite lines of
``log.jsonl`` (recomputing every hash), rewrite ``checkpoints.jsonl`` or copy an old
directory back. They hold neither the signing key nor the witness file, which live elsewhere.
The shared attacks are in ``tests/conformance/tamper_suite.py``; the ones only a line-based
file allows (torn, duplicated or reformatted lines) are here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import orjson
import pytest
import typer

from tests.conformance.tamper_suite import (
    DirectorySnapshots,
    LedgerWorld,
    SignedWorld,
    TamperSuite,
    damage_of,
    forge_chain,
)
from tracebound.cli.repair import repair
from tracebound.errors import DamageKind, LedgerDamaged
from tracebound.integrity.keys import NoteSigner
from tracebound.sources import FixedClock
from tracebound.store.jsonl import JsonlStore

_FRAME = re.compile(rb'^\{"batch":\[(\d+),(\d+)\],"hash":"([0-9a-f]{64})","record":(.*)\}\n$', re.S)
_LINE = b'{"batch":[%s,%s],"hash":"%s","record":%s}\n'


class JsonlAttacker(DirectorySnapshots):
    """Byte edits of ``log.jsonl`` and ``checkpoints.jsonl``, and copies of the directory.

    A record's position is its line number, so line ``p`` holds position ``p`` and removing
    a line always moves the later ones up: every delete renumbers.
    """

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self.log = store_dir / "log.jsonl"

    def lines(self) -> list[bytes]:
        return self.log.read_bytes().splitlines(keepends=True)

    def write(self, lines: list[bytes]) -> None:
        self.log.write_bytes(b"".join(lines))

    def edit_body(self, position: int, old: str, new: str) -> None:
        lines = self.lines()
        assert old.encode() in lines[position - 1]
        lines[position - 1] = lines[position - 1].replace(old.encode(), new.encode())
        self.write(lines)

    def edit_column(self, position: int, column: str, value: str) -> None:
        """The line's ``hash``, or else a field of its record (the line holds no index)."""
        lines = self.lines()
        m = _FRAME.match(lines[position - 1])
        assert m is not None
        if column == "hash":
            lines[position - 1] = _LINE % (m[1], m[2], value.encode(), m[4])
        else:
            field = rb'"%s":"[^"]*"' % column.encode()
            new = b'"%s":%s' % (column.encode(), orjson.dumps(value))
            record, found = re.subn(field, new, m[4])
            assert found == 1
            lines[position - 1] = _LINE % (m[1], m[2], m[3], record)
        self.write(lines)

    def delete(self, position: int, *, renumber: bool = False) -> None:
        del renumber  # a line's number is its position: removing one always renumbers
        lines = self.lines()
        del lines[position - 1]
        self.write(lines)

    def delete_from(self, position: int) -> None:
        self.write(self.lines()[: position - 1])

    def swap(self, a: int, b: int) -> None:
        lines = self.lines()
        lines[a - 1], lines[b - 1] = lines[b - 1], lines[a - 1]
        self.write(lines)

    def rewrite_chain(self, position: int, *, through: int | None = None) -> None:
        frames = [_FRAME.match(line) for line in self.lines()]
        rows, batches = [], {}
        for m in frames:
            assert m is not None
            record = orjson.loads(m[4])
            rows.append(
                (record["position"], record["stream_id"], bytes.fromhex(record["prev_hash"]), m[4])
            )
            batches[record["position"]] = (m[1], m[2])
        self.write(
            [
                _LINE % (*batches[pos], digest.hex().encode(), body)
                for pos, _, digest, body in forge_chain(rows, position, through=through)
            ]
        )

    def replace_checkpoints(self, notes: Sequence[tuple[int, str]]) -> None:
        path = self.store_dir / "checkpoints.jsonl"
        if not notes:
            path.unlink()
            return
        path.write_bytes(
            b"".join(orjson.dumps({"note": note, "size": size}) + b"\n" for size, note in notes)
        )

    def last_position(self) -> int:
        return len(self.lines())


class TestJsonlTamper(TamperSuite):
    # Line number = position: a deleted middle line moves every later record up one line,
    # and verify reports the first moved record as REORDER, not a missing position.
    middle_delete_kind = DamageKind.REORDER

    @pytest.fixture
    def world(self, tmp_path: Path) -> SignedWorld:
        store_dir = tmp_path / "store"
        JsonlStore(store_dir).close()
        return SignedWorld(
            partial(JsonlStore, store_dir, create=False),
            tmp_path / "outside" / "witness.note",
            NoteSigner("tb-test", bytes(range(32))),
            store_dir=store_dir,
        )

    @pytest.fixture
    def attacker(self, tmp_path: Path) -> JsonlAttacker:
        return JsonlAttacker(tmp_path / "store")

    # -- what only a line-based file allows ----------------------------------------------

    def test_duplicate_a_line_is_reorder(
        self, filled: Callable[[int], LedgerWorld], attacker: JsonlAttacker
    ) -> None:
        world = filled(30)
        lines = attacker.lines()
        lines.insert(5, lines[4])
        attacker.write(lines)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.REORDER, 6)

    def test_reformatted_line_is_reported_at_its_position(
        self, filled: Callable[[int], LedgerWorld], attacker: JsonlAttacker
    ) -> None:
        world = filled(30)
        lines = attacker.lines()
        lines[9] = (
            orjson.dumps(orjson.loads(lines[9]), option=orjson.OPT_INDENT_2).replace(b"\n", b" ")
            + b"\n"
        )  # still one line, still the same JSON data, but not the same bytes
        attacker.write(lines)
        d = damage_of(world)
        assert d.position == 10
        assert d.kind in {DamageKind.TAMPER, DamageKind.MALFORMED}

    def test_garbage_line_in_the_middle_is_malformed(
        self, filled: Callable[[int], LedgerWorld], attacker: JsonlAttacker
    ) -> None:
        world = filled(30)
        lines = attacker.lines()
        lines[14] = lines[14][:60] + b"\n"  # a torn line, but not at the tail
        attacker.write(lines)
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.MALFORMED, 15)
        with JsonlStore(attacker.store_dir, create=False) as store:
            assert store.torn_tails() == []
            with pytest.raises(LedgerDamaged) as info:
                list(store.read_log())
            assert (info.value.kind, info.value.position) == (DamageKind.MALFORMED, 15)
            with pytest.raises(LedgerDamaged):  # which stream line 15 belonged to is unknown
                store.append("run-0", [])

    def test_cut_inside_a_signed_line_is_truncation_and_not_repaired(
        self, filled: Callable[[int], LedgerWorld], attacker: JsonlAttacker
    ) -> None:
        world = filled(20)
        data = attacker.log.read_bytes()
        cut = len(data) - 100  # inside line 20, which the checkpoint covers
        attacker.log.write_bytes(data[:cut])
        d = damage_of(world)
        assert (d.kind, d.position) == (DamageKind.TRUNCATION, 20)
        assert f"byte offset {len(b''.join(attacker.lines()[:19]))}" in d.detail
        with JsonlStore(attacker.store_dir, create=False) as store:
            (tail,) = store.torn_tails()
            assert not tail.crash
            with pytest.raises(LedgerDamaged) as info:
                store.repair(now=FixedClock().now())
            assert info.value.kind is DamageKind.TRUNCATION
        assert attacker.log.read_bytes() == data[:cut]  # nothing was cut
        with pytest.raises(typer.Exit) as exit_info:  # the CLI refuses too, with exit code 1
            repair(store=f"jsonl:///{attacker.store_dir}", yes=True, as_json=True)
        assert exit_info.value.exit_code == 1
        assert attacker.log.read_bytes() == data[:cut]
