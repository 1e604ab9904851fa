"""`log --stream` and `inspect` read one stream's records, not the whole log.

On a ledger of 500,000 events, `log --stream S` read and decoded every record from
position 1 to find S's (15 s, also for a stream that does not exist), and `inspect S`
decoded all of S's events only to learn their positions, then read them back one query
per event. Both now find the stream's records through the store's stream index
(``stream_positions``) and read each run of neighbouring positions with one query. The
shape asserted: the records read and the queries made depend on the stream, not on how
many other events the log holds, on SQLite and on JSONL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.conftest import cost
from tracebound.cli.app import app
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.jsonl import JsonlStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.url import open_store

STORES: dict[str, type[Any]] = {"sqlite": SQLiteStore, "jsonl": JsonlStore}


class Reads:
    """The store's read_raw calls, the records they yielded, and read_stream's records
    (decoded events)."""

    def __init__(self) -> None:
        self.calls = self.records = self.decoded = 0


@pytest.fixture(params=sorted(STORES))
def kind(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def reads(kind: str, monkeypatch: pytest.MonkeyPatch) -> Reads:
    seen = Reads()
    cls = STORES[kind]
    real_read, real_stream = cls.read_raw, cls.read_stream

    def read_raw(self: Any, *, start: int = 1, stop: int | None = None) -> Iterator[Any]:
        seen.calls += 1
        for raw in real_read(self, start=start, stop=stop):
            seen.records += 1
            yield raw

    def read_stream(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for event in real_stream(self, *args, **kwargs):
            seen.decoded += 1
            yield event

    monkeypatch.setattr(cls, "read_raw", read_raw)
    monkeypatch.setattr(cls, "read_stream", read_stream)
    return seen


def _url(tmp_path: Path, kind: str) -> str:
    return f"jsonl:///{tmp_path / 'store'}" if kind == "jsonl" else str(tmp_path / "store")


def _write(url: str, padding: int, namespace: int) -> None:
    """Stream "s": 20 events, then 10 more after ``padding`` events of other streams."""
    store = open_store(url, create=True)
    with Ledger(store, clock=FixedClock(), ids=SequentialIds(namespace=namespace)) as led:
        led.record("s", [cost(i) for i in range(20)])
        for n in range(0, padding, 200):
            led.record(f"other-{n}", [cost(i) for i in range(200)], workflow_id="wf")
        led.record("s", [cost(i) for i in range(10)])


def _cli(url: str, reads: Reads, *args: str) -> tuple[dict[str, Any], tuple[int, int, int]]:
    reads.calls = reads.records = reads.decoded = 0
    out = CliRunner().invoke(app, [*args, "--json", "--store", url])
    # A stream the ledger never had is refused (exit 2), found out as cheaply.
    assert out.exit_code == (2 if ABSENT in args else 0), out.output
    data: dict[str, Any] = json.loads(out.stdout)
    return data, (reads.calls, reads.records, reads.decoded)


ABSENT = "nothing-here"
COMMANDS = [
    ("log", "--stream", "s", "--limit", "0"),
    ("log", "--stream", "s", "--start", "3", "--limit", "5"),
    ("log", "--stream", "s", "--type", "cost_incurred", "--limit", "25"),
    ("log", "--stream", ABSENT),
    ("inspect", "s"),
]


def _without_positions(data: dict[str, Any]) -> Any:
    """What the two ledgers agree on: the stream's events, not where they are in the log
    (their positions, hence their hashes and ids)."""
    same = ("stream_id", "stream_version", "event_type", "payload")
    events = [{k: e[k] for k in same} for e in data.get("events", [])]
    return events, data.get("ok"), data.get("next_start") is None


def test_a_streams_reads_do_not_grow_with_the_rest_of_the_log(
    tmp_path: Path, kind: str, reads: Reads
) -> None:
    small, big = _url(tmp_path / "small", kind), _url(tmp_path / "big", kind)
    _write(small, 0, 1)
    _write(big, 1000, 1)
    for cmd in COMMANDS:
        (a, work_a), (b, work_b) = _cli(small, reads, *cmd), _cli(big, reads, *cmd)
        assert _without_positions(a) == _without_positions(b), cmd
        assert work_a[1:] == work_b[1:], (cmd, work_a, work_b)
        calls, records, decoded = work_b
        assert records <= 30 and decoded == 0, (cmd, work_b)
        assert calls <= 2, (cmd, work_b)  # two runs of neighbouring positions
    whole = _cli(big, reads, "log", "--stream", "s", "--limit", "0")[0]["events"]
    assert [e["stream_version"] for e in whole] == list(range(1, 31))
    assert _cli(big, reads, "inspect", "s")[0]["version"] == 30
