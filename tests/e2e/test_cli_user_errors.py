"""What a new user runs into first, said plainly (found by a walkthrough of the README).

A ledger file SQLite cannot read is damage (exit 1, ``malformed``), not a setup error, and
so is a ledger gone from a place bound to a log (``truncation``);
``log`` says when its limit cut the list and takes ``--limit 0``; ``append`` names every
problem of a line at once and the kinds it can write; ``prove`` past the end of the log
does not advise a checkpoint; a refused ``init`` names the store as a path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI, _lines, ready_cli


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    return ready_cli(tmp_path, 5, checkpoint=True)


@pytest.mark.parametrize("damage", ["overwritten header", "cut short"])
def test_a_ledger_file_sqlite_cannot_read_is_reported_as_damage(cli: CLI, damage: str) -> None:
    copy = cli.cwd / "copy"
    shutil.copytree(cli.cwd / ".tracebound", copy)
    db = copy / "ledger.db"
    for extra in copy.glob("ledger.db-*"):  # the WAL and its index: only the file itself
        extra.unlink()
    if damage == "overwritten header":
        with db.open("r+b") as f:
            f.write(b"\x5a" * 100)
    else:
        with db.open("r+b") as f:
            f.truncate(2000)
    out = cli.json("verify", "--store", str(copy), code=1)
    assert out["ok"] is False
    assert out["error"]["kind"] == "LedgerDamaged"
    assert out["error"]["damage"]["kind"] == "malformed"
    assert str(db) in out["error"]["damage"]["detail"]
    human = cli.run("log", "--store", str(copy))
    assert human.returncode == 1 and "malformed" in human.stderr


def test_log_says_when_its_limit_cut_the_list(cli: CLI) -> None:
    cut = cli.json("log", "--limit", "2")
    assert [e["position"] for e in cut["events"]] == [1, 2] and cut["next_start"] == 3
    rest = cli.json("log", "--start", "3", "--limit", "0")
    assert [e["position"] for e in rest["events"]] == [3, 4, 5] and rest["next_start"] is None
    human = cli.run("log", "--limit", "2")
    assert human.returncode == 0 and "--start 3 continues" in human.stdout


def test_append_names_every_problem_of_a_line_and_the_kinds_it_writes(cli: CLI) -> None:
    line = json.dumps({"stream_id": "s", "payload": {"kind": "step_recorded"}})
    out = cli.json("append", stdin=line + "\n", code=2)
    message = out["error"]["message"]
    for field in ("run_id", "step_id", "role", "status"):
        assert f"step_recorded.{field}: Field required" in message
    line = json.dumps({"stream_id": "s", "payload": {"kind": "my_event"}})
    message = cli.json("append", stdin=line + "\n", code=2)["error"]["message"]
    assert "'my_event'" in message and "cost_incurred" in message and "register_event" in message


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            '{"stream_id": "s", "payload": {"a": 1\n',
            "Expecting ',' delimiter at column 38; the line ends",
        ),
        ('{"stream_id": "s", "payl', "Unterminated string starting at column 20; the line ends"),
        ('{"stream_id": x}\n', "Expecting value at column 15)"),
        ('{"stream_id": "s"}}\r\n', "Extra data at column 19)"),
    ],
)
def test_a_line_that_is_not_json_is_named_where_it_breaks(cli: CLI, line: str, said: str) -> None:
    # The column is the line's own, never one past its newline ("column 1" of nothing).
    out = cli.json("append", stdin=line, code=2)
    assert said in out["error"]["message"], out["error"]["message"]


def test_prove_past_the_end_of_the_log_does_not_advise_a_checkpoint(cli: CLI) -> None:
    message = cli.json("prove", "99", code=2)["error"]["message"]
    assert "the log holds positions 1..5" in message and "checkpoint`" not in message
    cli.json("append", stdin=_lines(1, start=5))
    message = cli.json("prove", "6", code=2)["error"]["message"]
    assert "run `tracebound checkpoint`" in message


def test_a_refused_init_names_the_store_as_a_path(cli: CLI) -> None:
    (cli.cwd / ".tracebound" / "ledger.db").unlink()
    for extra in (cli.cwd / ".tracebound").glob("ledger.db-*"):
        extra.unlink()
    message = cli.json("init", "--origin", "another.example/log", code=2)["error"]["message"]
    # as given (here the default, relative to where it runs): it pastes as --store
    assert "the store at .tracebound/ledger.db is bound" in message
    assert "sqlite:" not in message.split(" is bound")[0]


@pytest.mark.parametrize("gone", ["file", "folder"])
def test_a_ledger_gone_from_a_place_bound_to_a_log_is_damage(cli: CLI, gone: str) -> None:
    store = cli.cwd / ".tracebound"
    if gone == "file":
        for f in store.glob("ledger.db*"):
            f.unlink()
    else:
        shutil.rmtree(store)
    out = cli.json("verify", code=1)
    damage = out["error"]["damage"]
    assert (damage["kind"], damage["position"]) == ("truncation", 1)
    assert "holds the log" in damage["detail"] and "restore" in damage["detail"]
    # a place nothing was ever bound to is only missing: run init
    missing = cli.json("verify", "--store", str(cli.cwd / "elsewhere"), code=2)
    assert missing["error"]["kind"] == "StoreNotFound"


@pytest.mark.parametrize("as_json", [True, False])
def test_ctrl_c_is_reported_as_an_interrupt(
    cli: CLI, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """Ctrl-C ended every command but `copy` with exit 130 and nothing said: with --json,
    no JSON document (README: errors too are one document on stdout)."""
    from typer.testing import CliRunner

    from tracebound.cli import runs as runs_cli
    from tracebound.cli.app import app

    def interrupted(*args: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(runs_cli, "_run_rows", interrupted)
    store = str(cli.cwd / ".tracebound")
    args = ["runs", "--store", store, *(["--json"] if as_json else [])]
    result = CliRunner().invoke(app, args, env={"HOME": cli.env["HOME"]})
    assert result.exit_code == 130, result.output
    if as_json:
        error = json.loads(result.stdout)["error"]
        assert (error["kind"], error["message"]) == ("Interrupted", "interrupted (Ctrl-C)")
    else:
        assert "error: interrupted (Ctrl-C)" in result.output


def test_a_proof_the_disk_refuses_names_the_file(cli: CLI) -> None:
    # "No space left on device" alone read as if the ledger's disk were full.
    error = cli.json("prove", "1", "-o", "/dev/full", code=2)["error"]
    assert error["message"] == "cannot write --output /dev/full: No space left on device"


def _closed(cli: CLI, fd: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``tracebound ARGS`` with file descriptor ``fd`` closed (a cron job's `<&-`, `>&-`)."""
    redirect = "<&-" if fd == 0 else ">&-"
    return subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", sys.executable, "-m", "tracebound", *args],
        cwd=cli.cwd,
        env=cli.env,
        stdout=subprocess.PIPE if fd != 1 else None,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )


def test_append_with_stdin_closed_says_there_is_no_input(cli: CLI) -> None:
    # Python's sys.stdin is None then: an AttributeError traceback, exit 1 (as if damaged).
    proc = _closed(cli, 0, "append", "--json")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["kind"] == "ConfigError"
    assert "stdin is closed" in error["message"]


@pytest.mark.parametrize(
    ("args", "code"), [(("log", "--json"), 0), (("log",), 0), (("--version",), 0), (("verify",), 0)]
)
def test_a_closed_stdout_is_no_traceback(cli: CLI, args: tuple[str, ...], code: int) -> None:
    # sys.stdout is None then: `log --json` and `--version` failed with a traceback, exit 1.
    proc = _closed(cli, 1, *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr


@pytest.mark.parametrize(
    "args",
    [("verify",), ("log",), ("log", "--json"), ("verify", "--json"), ("runs",), ("prove", "1")],
)
def test_a_reader_gone_is_exit_141_not_damage(cli: CLI, args: tuple[str, ...]) -> None:
    # `tracebound verify | head -1`: the reader leaves before the output is written. Exit 1
    # (and a broken pipe traceback, or rich's exit 1) read as "the ledger is damaged" in
    # the exit-code table. Now 141, as a shell reports a process SIGPIPE ended (128 + 13).
    read, write = os.pipe()
    os.close(read)  # every write to this pipe fails with EPIPE: no race with a real reader
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tracebound", *args],
            cwd=cli.cwd,
            env=cli.env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""  # no traceback, no "Exception ignored" at exit


@pytest.mark.parametrize("unbuffered", [False, True])
@pytest.mark.parametrize("args", [("log", "--limit", "0", "--json"), ("log", "--limit", "0")])
def test_a_reader_that_leaves_mid_output_is_exit_141(
    tmp_path: Path, args: tuple[str, ...], unbuffered: bool
) -> None:
    # `tracebound log --limit 0 | head -c 10` with PYTHONUNBUFFERED=1, as container images
    # set it: stdout was a text wrapper straight over the pipe, which dropped the rest of a
    # write the reader's leaving cut short. The output was cut and the exit code was 0,
    # as if it had all been written. The output (> 64 KB, a pipe's capacity) is still
    # being written when the reader leaves, so the write is cut short every time.
    cli = ready_cli(tmp_path, 1500)
    env = {k: v for k, v in cli.env.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracebound", *args],
        cwd=cli.cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert os.read(proc.stdout.fileno(), 10)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, stderr
    assert stderr == ""


@pytest.mark.parametrize(
    "args",
    [
        ("keys", "init"),
        ("keys", "show"),
        ("verify-proof", "proof.json"),
        ("verify-evidence", "run.json"),
        ("copy", "sqlite:///.tracebound", "jsonl:///copy"),
        ("checkpoint",),
        ("verify",),
    ],
)
def test_an_empty_key_path_is_refused_by_name(cli: CLI, args: tuple[str, ...]) -> None:
    # `--key ""` (an unset variable in a script) is the folder `.`: a ValueError traceback.
    error = cli.json(*args, "--key", "", code=2)["error"]
    assert error["kind"] == "SigningKeyError"
    assert "--key" in error["message"] and "key file" in error["message"]


@pytest.mark.parametrize("folder", ["", "keys-folder"])
def test_a_redaction_key_that_is_a_folder_is_not_to_be_chmodded(cli: CLI, folder: str) -> None:
    # It was "accessible by group or others; fix it with: chmod 600 ." (the working folder).
    (cli.cwd / "keys-folder").mkdir()
    error = cli.json("append", "--redaction-key", folder, stdin=_lines(1), code=2)["error"]
    assert error["kind"] == "SigningKeyError"
    assert "is a folder" in error["message"] and "chmod" not in error["message"]
    assert cli.json("log")["events"][-1]["position"] == 5  # nothing appended
