"""The `tracebound` command in an environment that is not the developer's.

A terminal or cron job whose locale is not UTF-8 (Python's stdout is then ASCII or
Latin-1), a stdout that cannot take what is written (a full disk, ``/dev/full``), and a
store path with ``~`` written where no shell expands it (an env file, a quoted argument).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI

TEXT = "caf\u00e9 \u65e5\u672c \U0001f389"  # Latin-1, CJK, an emoji: not all of it is ASCII
SHOWN = r"caf\xe9"  # how an ASCII stdout shows the é (a visible escape, as control chars)

# A locale without UTF-8. Python turns the C locale into UTF-8 by itself (PEP 538/540);
# these two variables switch that off, as a system with a real non-UTF-8 locale has it.
ASCII_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CLI:
    c = CLI(tmp_path_factory.mktemp("env"))
    c.json("init")
    c.json("keys", "init")
    payload = {"kind": "cost_incurred", "tier": "direct", "amount_usd": "0.5", "source": TEXT}
    line = json.dumps({"stream_id": TEXT, "workflow_id": TEXT, "payload": payload})
    c.json("append", "--no-redact", stdin=line + "\n")
    return c


def _ascii(cli: CLI, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**cli.env, **ASCII_LOCALE}
    env.pop("PYTHONIOENCODING", None)
    return subprocess.run(
        [sys.executable, "-m", "tracebound", *args],
        cwd=cli.cwd,
        env=env,
        capture_output=True,
        encoding="ascii",  # a byte above 127 on stdout would fail this test too
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [("log",), ("tail",), ("report", "cost"), ("runs",), ("checkpoint",)],
)
def test_human_output_prints_where_stdout_is_not_utf8(cli: CLI, args: tuple[str, ...]) -> None:
    # Was a UnicodeEncodeError traceback and exit 1 ("damaged"); `checkpoint` had signed
    # and stored the checkpoint first, then said it failed.
    proc = _ascii(cli, *args)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    if args[0] in {"log", "tail"}:
        assert SHOWN in proc.stdout, proc.stdout


def test_json_output_is_the_same_where_stdout_is_not_utf8(cli: CLI) -> None:
    proc = _ascii(cli, "log", "--json")
    assert proc.returncode == 0, proc.stderr
    (event,) = json.loads(proc.stdout)["events"]
    assert event["stream_id"] == TEXT and event["payload"]["source"] == TEXT


@pytest.mark.parametrize(
    "args", [("inspect", b"a\xff"), ("log", "--stream", b"a\xff"), ("report", "trail", b"a\xff")]
)
def test_an_argument_that_is_not_utf8_is_named(cli: CLI, args: tuple[str | bytes, ...]) -> None:
    # Python keeps the byte as "\udcff"; the store's query raised UnicodeEncodeError.
    proc = subprocess.run(
        [sys.executable, "-m", "tracebound", *args],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(r"error: not UTF-8 text: a\udcff"), proc.stderr


@pytest.mark.parametrize(
    "args", [("log",), ("log", "--json"), ("verify",), ("keys", "show"), ("report", "cost")]
)
def test_a_stdout_that_cannot_be_written_is_said_without_a_traceback(
    cli: CLI, args: tuple[str, ...]
) -> None:
    with Path("/dev/full").open("w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "tracebound", *args],
            cwd=cli.cwd,
            env=cli.env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    # Was two chained tracebacks, "Exception ignored" and exit 120.
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.stderr.startswith("error: cannot write to stdout: No space left on device")


@pytest.mark.parametrize("store", ["sqlite:///~/a.db", "jsonl:///~/b", "~/c"])
def test_a_tilde_in_a_store_path_is_the_home_folder(tmp_path: Path, store: str) -> None:
    # Was a folder named "~" in the working directory (a different ledger per folder the
    # command ran in), while --key and --witness took "~" as the home folder.
    c = CLI(tmp_path)
    created = c.json("init", "--store", store)
    home = Path(c.env["HOME"])
    assert created["created"] is True
    assert not (c.cwd / "~").exists()
    assert any(home.iterdir()), list(home.iterdir())
    assert c.json("log", "--store", store)["events"] == []
