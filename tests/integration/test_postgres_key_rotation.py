"""`keys rotate` on a PostgreSQL ledger signed from two hosts (docs/postgresql.md, "Several
hosts"): two working folders with their own HOME (key files copied, each its own witness),
real `tracebound` processes, one real database."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.e2e.test_cli import CLI, _lines
from tests.pg import PgServer


def _keys(cli: CLI) -> Path:
    return Path(cli.env["HOME"]) / ".config" / "tracebound" / "keys"


def test_the_host_still_holding_the_retired_key_is_told_where_the_new_one_is(
    tmp_path: Path, postgres_server: PgServer, postgres_dsn: str
) -> None:
    url = postgres_server.url(postgres_dsn.rsplit("dbname=", 1)[1], schema="rot")
    a, b = CLI(tmp_path / "a"), CLI(tmp_path / "b")
    a.json("init", "--store", url)
    a.json("keys", "init")
    _keys(b).parent.mkdir(parents=True)
    shutil.copytree(_keys(a), _keys(b))
    a.json("append", "--store", url, stdin=_lines(3))
    a.json("checkpoint", "--store", url)
    b.json("append", "--store", url, stdin=_lines(2, start=3))
    b.json("checkpoint", "--store", url)  # B's witness: the old key's note of 5
    a.json("append", "--store", url, stdin=_lines(1, start=5))
    a.json("checkpoint", "--store", url)
    a.json("keys", "rotate", "--by", "alice", "--store", url)
    # B goes on writing; its checkpoint with the retired key is refused, saying where the
    # new key is: not on this host (no .next.key here), but where `keys rotate` ran.
    b.json("append", "--store", url, stdin=_lines(2, start=6))
    message = b.json("checkpoint", "--store", url, code=2)["error"]["message"]
    assert "retired by the rotation at position 7" in message
    assert "copy" in message and "host" in message and "alice" in message
    for host in (a, b):
        assert host.json("verify", "--store", url)["ok"] is True
    # With the key copied over, B signs on; its witness is handed the hand-over first.
    shutil.rmtree(_keys(b))
    shutil.copytree(_keys(a), _keys(b))
    run = b.json("checkpoint", "--store", url)
    assert run["size"] == 9 and run["verified"]["incremental"] is True, run
    for host in (a, b):
        report = host.json("verify", "--store", url)
        assert report["ok"] is True and report["checkpoint_size"] == 9, report
    assert b.json("verify", "--store", url)["witness_size"] == 9
