"""A JSONL store's files edited at random: each command answers, or exits 1 or 2; no traceback.

Whoever holds the store directory can write anything into ``log.jsonl``,
``checkpoints.jsonl`` and ``meta.json``. ``verify`` must name the damage; the commands a
user runs before it (``log``, ``inspect``, ``report``) must read the store or refuse it
with a message, never crash on an exception no handler expected (a RecursionError, a
ValueError past Python's 4300-digit integer limit, a KeyError on a field not there).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tracebound.cli.app import app

_LINES = "".join(
    f'{{"stream_id": "run-{n % 2}", "payload": {{"kind": "cost_incurred", "tier": "direct", '
    f'"amount_usd": "0.{n}", "source": "s"}}}}\n'
    for n in range(1, 5)
)
_FILES = ("log.jsonl", "checkpoints.jsonl", "meta.json")
_COMMANDS = (["verify"], ["log"], ["inspect", "run-1"], ["report", "cost"])
# What an edit may splice in: numbers past int()'s limit or 64 bits, deep nesting, JSON's
# non-numbers, bytes that are not UTF-8, a key twice, a line break.
_SPLICES = st.sampled_from(
    [
        b"9" * 5000, b"[" * 5000, b"{" * 3000, b"[" * 50_000 + b"]" * 50_000, b"NaN",
        b"1e999", b"18446744073709551616", b"-1", b"1.5", b'"\\ud800"', b"\xff", b"\xc3",
        b'"size":1,"size"', b"null", b"[]", b"{}", b'""', b"\n", b"\r\n",
    ]
)  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("jsonl-fuzz")
    env = {
        "TRACEBOUND_STORE": f"jsonl:///{root / 'store'}",
        "TRACEBOUND_KEY": str(root / "keys" / "fuzz.key"),
        "TRACEBOUND_WITNESS_DIR": str(root / "witness"),
        "NO_COLOR": "1",
    }
    runner = CliRunner()
    steps = [(["keys", "init"], None), (["init"], None), (["append"], _LINES)]
    steps.append((["checkpoint"], None))
    for args, stdin in steps:
        result = runner.invoke(app, args, input=stdin, env=env)
        assert result.exit_code == 0, result.output
    return root / "store", env


def _invoke_all(env: dict[str, str]) -> None:
    for args in _COMMANDS:
        result = CliRunner().invoke(app, args, env=env)
        if not isinstance(result.exception, SystemExit | None):
            raise result.exception  # the traceback a user would see
        assert result.exit_code in (0, 1, 2, 3), (args, result.exit_code, result.output)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_an_edited_store_file_is_read_or_refused_never_a_traceback(
    store: tuple[Path, dict[str, str]], data: st.DataObject
) -> None:
    directory, env = store
    path = directory / data.draw(st.sampled_from(_FILES))
    good = path.read_bytes()
    i = data.draw(st.integers(0, len(good)))
    j = data.draw(st.integers(i, min(len(good), i + 60)))
    path.write_bytes(good[:i] + data.draw(_SPLICES | st.binary(max_size=8)) + good[j:])
    try:
        _invoke_all(env)
    finally:
        path.write_bytes(good)
