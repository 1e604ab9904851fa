"""The `tracebound` command as a user runs it: a real process, a real SQLite file, real keys.

HOME is a temporary directory, so keys and witness land in a scratch ~/.config and
~/.local/state and the user's real ones are never touched.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


class CLI:
    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path / "work"
        self.cwd.mkdir(parents=True)
        self.env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "NO_COLOR": "1",
            "COLUMNS": "200",
        }
        for var in ("TRACEBOUND_STORE", "TRACEBOUND_KEY", "TRACEBOUND_WITNESS",
                    "TRACEBOUND_KEY_DIR", "TRACEBOUND_WITNESS_DIR"):  # fmt: skip
            self.env.pop(var, None)

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tracebound", *args],
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def json(self, *args: str, code: int = 0, stdin: str | None = None) -> Any:
        proc = self.run(*args, "--json", stdin=stdin)
        assert proc.returncode == code, (proc.stdout, proc.stderr)
        return json.loads(proc.stdout)


def ready_cli(tmp_path: Path, events: int, *, checkpoint: bool = False) -> CLI:
    """An initialised ledger with a signing key and ``events`` cost events (signed by a
    checkpoint if ``checkpoint``)."""
    c = CLI(tmp_path)
    c.json("init")
    c.json("keys", "init")
    c.json("append", stdin=_lines(events))
    if checkpoint:
        c.json("checkpoint")
    return c


def _lines(n: int, start: int = 0) -> str:
    return "".join(
        json.dumps(
            {
                "stream_id": f"run-{i % 2}",
                "workflow_id": "wf-1",
                "payload": {
                    "kind": "cost_incurred",
                    "tier": "direct",
                    "amount_usd": f"0.{i:04d}",
                    "source": "openai",
                },
            }
        )
        + "\n"
        for i in range(start, start + n)
    )


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    c = CLI(tmp_path)
    assert c.json("init")["created"] is True
    keys = c.json("keys", "init")
    assert keys["verifier_key"].startswith("tracebound+")
    assert str(tmp_path / "home") in keys["key"]
    return c


def test_full_cycle_and_tamper_detection(cli: CLI) -> None:
    (cli.cwd / "events.jsonl").write_text(_lines(12))
    assert cli.json("append", "events.jsonl")["appended"] == 12
    assert cli.json("append", stdin=_lines(3, start=12))["last_position"] == 15

    incomplete = cli.json("verify", code=3)  # nothing signed yet: no damage, not complete
    assert incomplete["damage"] is None and incomplete["checks"]["chain"] == "ok"

    cp = cli.json("checkpoint")
    assert cp["size"] == 15 and "\u2014 tracebound " in cp["note"]

    report = cli.json("verify")
    assert report["ok"] is True
    assert (report["size"], report["checkpoint_size"], report["witness_size"]) == (15, 15, 15)

    proof = cli.run("prove", "7", "-o", "p7.json")
    assert proof.returncode == 0, proof.stderr
    assert cli.json("verify-proof", "p7.json")["position"] == 7

    conn = sqlite3.connect(cli.cwd / ".tracebound" / "ledger.db")
    with conn:
        conn.execute(
            "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), '0.0009', '0.9009') "
            "AS BLOB) WHERE position = 10"
        )
    conn.close()
    damaged = cli.json("verify", code=1)
    assert damaged["damage"] == {
        "kind": "tamper",
        "position": 10,
        "detail": "the record's bytes do not hash to its stored hash",
    }
    human = cli.run("verify")
    assert human.returncode == 1
    assert "DAMAGED" in human.stdout and "position 10" in human.stdout


def test_bad_input_line_writes_nothing(cli: CLI) -> None:
    bad = _lines(2) + '{"stream_id": "x", "payload": {"kind": "no_such_event"}}\n'
    out = cli.json("append", code=2, stdin=bad)
    assert out["ok"] is False
    assert out["error"]["message"].startswith("line 3:")
    assert cli.json("log")["events"] == []


def test_float_in_payload_is_refused_with_line_number(cli: CLI) -> None:
    line = json.dumps(
        {
            "stream_id": "x",
            "payload": {
                "kind": "cost_incurred",
                "tier": "direct",
                "amount_usd": 0.5,
                "source": "s",
            },
        }
    )
    out = cli.json("append", code=2, stdin=line + "\n")
    assert "line 1" in out["error"]["message"]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"stream_id": "x", "payload": ' + "1" * 5000 + "}", "4300 digits"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_json_python_cannot_hold_is_refused_with_line_number(cli: CLI, line: str, why: str) -> None:
    out = cli.json("append", code=2, stdin=line + "\n")
    assert out["error"]["message"].startswith("line 1: not JSON this tool reads")
    assert why in out["error"]["message"]
    assert cli.json("log")["events"] == []


def test_key_inside_store_is_refused(cli: CLI) -> None:
    out = cli.json("keys", "init", "--key", ".tracebound/k.key", code=2)
    assert "inside the store" in out["error"]["message"]


def test_missing_store_says_what_to_do(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    out = c.json("log", code=2)
    assert "tracebound init" in out["error"]["message"]


def test_wrong_verifier_key_rejects_proof(cli: CLI, tmp_path: Path) -> None:
    cli.json("append", stdin=_lines(4))
    cli.json("checkpoint")
    assert cli.run("prove", "2", "-o", "p.json").returncode == 0
    other = CLI(tmp_path / "other")
    other_key = other.json("keys", "init")["verifier_key"]
    out = cli.json("verify-proof", "p.json", "--verifier-key", other_key, code=1)
    assert out["ok"] is False


def test_log_tail_inspect(cli: CLI) -> None:
    cli.json("append", stdin=_lines(6))
    events = cli.json("log", "--stream", "run-1")["events"]
    assert [e["stream_version"] for e in events] == [1, 2, 3]
    assert [e["position"] for e in cli.json("tail", "-n", "2")["events"]] == [5, 6]
    inspected = cli.json("inspect", "run-0")
    assert inspected["ok"] is True and inspected["version"] == 3
    assert cli.json("inspect", "nope", code=2)["ok"] is False


def test_inspect_reports_damage_in_the_shape_verify_uses(cli: CLI) -> None:
    cli.json("append", stdin=_lines(6))
    conn = sqlite3.connect(cli.cwd / ".tracebound" / "ledger.db")
    with conn:  # run-0 holds positions 1, 3, 5: its second event is position 3
        conn.execute(
            "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), '0.0002', '0.9002') "
            "AS BLOB) WHERE position = 3"
        )
    conn.close()
    inspected = cli.json("inspect", "run-0", code=1)
    damage = inspected["damage"]
    assert {k: damage[k] for k in ("kind", "position")} == {"kind": "tamper", "position": 3}
    assert "hash" in damage["detail"] and damage["message"].startswith("tamper at position 3")
    assert [e["stream_version"] for e in inspected["events"]] == [1]


def test_inspect_shows_a_window_of_a_long_stream_and_still_verifies_all_of_it(cli: CLI) -> None:
    # `inspect` printed every event of a stream (100,000 events: 600 MB resident, 72 MB of
    # JSON). --start VERSION and --limit N bound what is shown, as `log` bounds a listing;
    # the chain is still verified from genesis through the stream's last event.
    cli.json("append", stdin=_lines(20))  # run-0: versions 1..10 at positions 1, 3, .., 19
    window = cli.json("inspect", "run-0", "--start", "3", "--limit", "4")
    assert [e["stream_version"] for e in window["events"]] == [3, 4, 5, 6]
    assert (window["ok"], window["version"]) == (True, 10)
    assert window["omitted"] == {"before": 2, "after": 4} and window["next_start"] == 7
    whole = cli.json("inspect", "run-0")  # no bound: every event, as before
    assert len(whole["events"]) == 10 and whole["omitted"] == {"before": 0, "after": 0}
    assert whole["next_start"] is None and whole["head"] == window["head"]
    human = cli.run("inspect", "run-0", "--limit", "2")
    assert human.returncode == 0, human.stderr
    assert "--start 3 continues" in human.stdout and "10 event(s)" in human.stdout
    # damage after the window is still found: the verdict is the whole stream's
    conn = sqlite3.connect(cli.cwd / ".tracebound" / "ledger.db")
    with conn:  # run-0's version 9 is position 17
        conn.execute(
            "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), '0.0016', '0.9016') "
            "AS BLOB) WHERE position = 17"
        )
    conn.close()
    damaged = cli.json("inspect", "run-0", "--limit", "2", code=1)
    assert damaged["damage"]["position"] == 17 and damaged["version"] == 8
    assert [e["stream_version"] for e in damaged["events"]] == [1, 2]
    assert damaged["omitted"] == {"before": 0, "after": 6} and damaged["next_start"] == 3


def test_checkpoint_verifies_only_new_events_unless_full(cli: CLI) -> None:
    cli.json("append", stdin=_lines(5))
    first = cli.json("checkpoint")
    assert first["verified"] == {
        "from": 1, "to": 5, "incremental": False, "full_reason": "no checkpoint yet",
    }  # fmt: skip
    cli.json("append", stdin=_lines(3, start=5))
    second = cli.json("checkpoint")
    assert second["verified"] == {"from": 6, "to": 8, "incremental": True, "full_reason": None}
    full = cli.json("checkpoint", "--full")
    assert full["verified"]["incremental"] is False and full["root"] == second["root"]
    human = cli.run("checkpoint")
    assert human.returncode == 0, human.stderr
    assert "No events since the previous checkpoint" in human.stdout
    cli.json("append", stdin=_lines(2, start=8))
    human = cli.run("checkpoint")
    assert "Verified the 2 event(s) since the previous checkpoint" in human.stdout


def test_rollback_of_whole_store_is_detected(cli: CLI) -> None:
    import shutil

    cli.json("append", stdin=_lines(5))
    cli.json("checkpoint")
    shutil.copytree(cli.cwd / ".tracebound", cli.cwd / "snapshot")
    cli.json("append", stdin=_lines(5, start=5))
    cli.json("checkpoint")
    shutil.rmtree(cli.cwd / ".tracebound")
    shutil.copytree(cli.cwd / "snapshot", cli.cwd / ".tracebound")
    out = cli.json("verify", code=1)
    assert out["damage"]["kind"] == "rollback" and out["damage"]["position"] == 6
    # the checks agree with the verdict: the log is behind the witness, which checked it
    assert out["checks"]["witness"] == "failed" and out["checks"]["merkle"] == "failed"


def test_demo_runs_and_catches_its_tampered_copy(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    out = c.json("demo", "--dir", str(tmp_path / "demo"))
    assert out["ok"] is True
    assert out["verify"]["ok"] is True
    assert out["tampered"]["damage"]["kind"] == "tamper"
    assert out["tampered"]["damage"]["position"] == out["tampered"]["changed_position"]


def test_demo_rerun_after_its_key_was_deleted_makes_a_new_one(tmp_path: Path) -> None:
    # The demo replaces its own store and witness, so the .pub of a deleted demo key
    # verifies nothing it keeps: it is not an orphan to protect (keys init still is).
    c = CLI(tmp_path)
    demo = tmp_path / "demo"
    assert c.json("demo", "--dir", str(demo))["ok"] is True
    (demo / "keys" / "demo.key").unlink()
    out = c.json("demo", "--dir", str(demo))
    assert out["ok"] is True
    assert out["verify"]["ok"] is True


@pytest.mark.parametrize(
    "command",
    [[], ["init"], ["keys", "init"], ["append"], ["log"], ["tail"], ["inspect"], ["checkpoint"],
     ["verify"], ["prove"], ["verify-proof"], ["demo"]],
)  # fmt: skip
def test_help_explains_every_command(tmp_path: Path, command: list[str]) -> None:
    proc = CLI(tmp_path).run(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout
    if command:
        assert "--json" in proc.stdout
