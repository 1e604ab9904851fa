"""`log --type` and `log --workflow` are filtered inside the store, not in Python.

On a ledger of 1,000,000 events, `log --workflow W` and `log --type T` read and decoded
every record (21 s), for 18 matches or none. The store's filter
(:func:`~tracebound.store.port.read_matching`) now hands Python only the records that
match, in log order, so ``next_start`` paging lists the same events; JSONL, which has no
columns to filter by, is filtered in Python as before. What ``log`` lists is still what
the records' hashed bodies say: a column edited behind the chain hides nothing.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.conftest import cost
from tracebound.cli.app import app
from tracebound.events.catalog import MergeOutcome
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.port import RecordFilter
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.url import open_store


def _write(url: str, padding: int) -> None:
    """Five merge outcomes of workflow "wf-x" among ``padding`` costs of "wf-pad" per
    outcome, and costs of "wf-x" beside each."""
    store = open_store(url, create=True)
    with Ledger(store, clock=FixedClock(), ids=SequentialIds(namespace=3)) as led:
        for i in range(5):
            led.record("pad", [cost(n) for n in range(padding)], workflow_id="wf-pad")
            outcome = MergeOutcome(
                pr_url=f"https://example.test/{i}", decision="merged", reviewer=None
            )
            led.record(f"run-{i}", [outcome, cost(i)], workflow_id="wf-x")


def _log(url: str, *args: str, code: int = 0) -> dict[str, Any]:
    out = CliRunner().invoke(app, ["log", *args, "--json", "--store", url])
    assert out.exit_code == code, out.output
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def _positions(data: dict[str, Any]) -> list[int]:
    return [e["position"] for e in data["events"]]


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_filtered_pages_continue_where_the_last_one_stopped(tmp_path: Path, kind: str) -> None:
    url = f"jsonl:///{tmp_path / 's'}" if kind == "jsonl" else str(tmp_path / "s")
    _write(url, 7)
    outcomes = [8, 17, 26, 35, 44]  # after 7 costs each time, then its own cost
    for args, want in (
        (("--type", "merge_outcome"), outcomes),
        (("--workflow", "wf-x"), sorted(outcomes + [p + 1 for p in outcomes])),
        (("--workflow", "wf-x", "--type", "cost_incurred"), [p + 1 for p in outcomes]),
        (("--type", "nothing"), []),
    ):
        whole = _log(url, *args, "--limit", "0")
        assert _positions(whole) == want and whole["next_start"] is None, args
        got: list[int] = []
        start: int | None = 1
        while start is not None:
            page = _log(url, *args, "--limit", "2", "--start", str(start))
            got += _positions(page)
            start = page["next_start"]
            assert start is None or start == got[-1] + 1, (args, page)
        assert got == want, args
        from_20 = _log(url, *args, "--start", "20", "--limit", "0")
        assert _positions(from_20) == [p for p in want if p >= 20], args


def test_only_the_matching_records_reach_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "s")
    _write(url, 400)
    handed: list[int] = []
    real = SQLiteStore.read_raw_matching

    def counted(self: SQLiteStore, where: RecordFilter, **kwargs: Any) -> Any:
        for raw in real(self, where, **kwargs):
            handed.append(raw.position)
            yield raw

    def everything(self: SQLiteStore, **kwargs: Any) -> Any:
        raise AssertionError("log read the whole log")

    monkeypatch.setattr(SQLiteStore, "read_raw_matching", counted)
    monkeypatch.setattr(SQLiteStore, "read_raw", everything)
    assert len(_log(url, "--type", "merge_outcome")["events"]) == 5
    assert len(handed) == 5
    handed.clear()
    assert len(_log(url, "--workflow", "wf-x", "--limit", "3")["events"]) == 3
    assert len(handed) == 3


@pytest.mark.parametrize("column", ["workflow_id", "event_type"])
def test_a_column_edited_behind_the_chain_hides_no_event(tmp_path: Path, column: str) -> None:
    """``verify`` reports the edit as tamper; meanwhile ``log`` lists what the body says,
    as it did when it decoded every record."""
    url = str(tmp_path / "s")
    _write(url, 3)  # outcomes at 4, 9, 14, 19, 24
    conn = sqlite3.connect(tmp_path / "s" / "ledger.db")
    with conn:
        conn.execute(f"UPDATE events SET {column} = 'forged' WHERE position = 9")
    conn.close()
    assert _positions(_log(url, "--type", "merge_outcome")) == [4, 9, 14, 19, 24]
    assert _positions(_log(url, "--workflow", "wf-x", "--type", "merge_outcome")) == [
        4, 9, 14, 19, 24,
    ]  # fmt: skip
    # Nor does a forged column add one: the body does not say "forged", so no event of
    # the ledger has that workflow (refused as a name the ledger never had).
    refused = _log(url, "--workflow", "forged", code=2)["error"]["message"]
    assert refused.startswith("no event in this ledger has workflow 'forged'")
    assert _positions(_log(url, "--type", "forged")) == []
