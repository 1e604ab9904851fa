"""A record body edited in a SQLite store, then read by the commands a user runs first.

``verify`` names the damage; but ``log``, ``inspect``, ``report`` and ``project run`` read
bodies without re-verifying the chain first, so a body someone with the file rewrote
(deep nesting, a number past Python's int() limit or 64 bits, JSON's non-numbers, bytes
that are not UTF-8, a field of the wrong type) must be shown, refused with a message, or
reported as damage: exit 0, 1 or 2, never a traceback.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tracebound.cli.app import app

_LINES = "".join(
    f'{{"stream_id": "run-{n % 2}", "workflow_id": "wf-1", "payload": {{"kind": '
    f'"cost_incurred", "tier": "direct", "amount_usd": "0.{n}", "source": "s"}}}}\n'
    for n in range(1, 4)
)
_COMMANDS = (
    ["log"], ["log", "--json"], ["inspect", "run-0"], ["report", "cost"], ["project", "run"],
    ["verify"],
)  # fmt: skip
_SPLICES = st.sampled_from(
    [
        b"9" * 5000, b"[" * 5000, b"[" * 50_000 + b"]" * 50_000, b"NaN", b"1e999",
        b"18446744073709551616", b"-1", b"1.5", b"true", b"null", b"[]", b"{}", b'""',
        b'"\\ud800"', b'"\\u0000"', b"\xff", b'"kind":"x","kind"', b'"2026-02-30T00:00:00Z"',
    ]
)  # fmt: skip


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("body-fuzz")
    env = {
        "TRACEBOUND_KEY": str(root / "keys" / "fuzz.key"),
        "TRACEBOUND_WITNESS_DIR": str(root / "witness"),
        "NO_COLOR": "1",
    }
    store = root / "good"
    runner = CliRunner()
    steps = [(["keys", "init"], None), (["init"], None), (["append"], _LINES)]
    steps.append((["checkpoint"], None))
    for args, stdin in steps:
        result = runner.invoke(app, [*args, "--store", str(store)], input=stdin, env=env)
        assert result.exit_code == 0, result.output
    copy = root / "copy"  # a copy elsewhere reads cleanly: the edits are what is tested
    shutil.copytree(store, copy)
    for args in _COMMANDS:
        result = runner.invoke(app, [*args, "--store", str(copy)], env=env)
        assert result.exit_code == 0, (args, result.output)
    return store / "ledger.db", env


def _with_body(good_db: Path, folder: Path, body: bytes) -> Path:
    """A copy of the ledger in ``folder``/store whose record at position 2 has ``body``."""
    store = folder / "store"
    store.mkdir()
    shutil.copy(good_db, store / "ledger.db")
    with sqlite3.connect(store / "ledger.db") as db:
        db.execute("UPDATE events SET body = ? WHERE position = 2", (body,))
    db.close()
    return store


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_tampered_body_is_shown_refused_or_damage_never_a_traceback(
    ledger: tuple[Path, dict[str, str]], data: st.DataObject
) -> None:
    good_db, env = ledger
    with sqlite3.connect(good_db) as db:
        (body,) = db.execute("SELECT body FROM events WHERE position = 2").fetchone()
    good = bytes(body)
    i = data.draw(st.integers(0, len(good)))
    j = data.draw(st.integers(i, min(len(good), i + 40)))
    edited = good[:i] + data.draw(_SPLICES | st.binary(max_size=6)) + good[j:]
    with tempfile.TemporaryDirectory() as tmp:
        store = _with_body(good_db, Path(tmp), edited)
        for args in _COMMANDS:
            result = CliRunner().invoke(app, [*args, "--store", str(store)], env=env)
            if not isinstance(result.exception, SystemExit | None):
                raise result.exception  # the traceback a user would see
            assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)


@pytest.mark.parametrize("value", [b"[]", b"7", b"{}"])
def test_a_body_whose_event_id_is_no_string_is_damage_exit_1(
    ledger: tuple[Path, dict[str, str]], tmp_path: Path, value: bytes
) -> None:
    good_db, env = ledger
    with sqlite3.connect(good_db) as db:
        (body,) = db.execute("SELECT body FROM events WHERE position = 2").fetchone()
    db.close()
    start = body.index(b'"event_id":') + len(b'"event_id":')
    store = _with_body(good_db, tmp_path, body[:start] + value + body[body.index(b",", start) :])
    for args in (["log"], ["inspect", "run-0"]):
        result = CliRunner().invoke(app, [*args, "--store", str(store)], env=env)
        assert result.exit_code == 1, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("body", [b"[]", b"7", b'"x"', b"null"])
def test_a_body_rewritten_as_another_json_value_is_reported_as_tamper(
    ledger: tuple[Path, dict[str, str]], tmp_path: Path, body: bytes
) -> None:
    # It was "malformed: unreadable record: 'list' object has no attribute 'get'": valid
    # JSON whose bytes no longer hash to the record's hash is an altered record.
    good_db, env = ledger
    store = _with_body(good_db, tmp_path, body)
    result = CliRunner().invoke(app, ["verify", "--json", "--store", str(store)], env=env)
    assert result.exit_code == 1, result.output
    damage = json.loads(result.stdout)["damage"]
    assert (damage["kind"], damage["position"]) == ("tamper", 2), damage
