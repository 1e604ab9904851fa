"""A new user's first run of the core ledger commands, and what they get wrong.

Each test stands for a finding of a fresh-user walkthrough of the README's quick start and
the core commands (`append`, `log`, `tail`, `inspect`, `verify`, `demo`) and failed before
its fix: a raw traceback, a partial write reported as a plain error, a folder of the
user's deleted, advice that could not work, or events the CLI refused to show.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.e2e.test_cli import CLI, _lines
from tracebound import Event, TraceboundError
from tracebound.errors import ConcurrencyConflict, UnknownEventType
from tracebound.events import default_registry


def _cost_line(**fields: Any) -> str:
    payload = {"kind": "cost_incurred", "tier": "direct", "amount_usd": "1", "source": "openai"}
    return json.dumps({"stream_id": "s", "payload": payload, **fields}) + "\n"


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    c = CLI(tmp_path)
    c.json("init")
    c.json("keys", "init")
    return c


def _bytes_run(cli: CLI, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tracebound", *args],
        cwd=cli.cwd, env=cli.env, input=stdin, capture_output=True, timeout=120, check=False,
    )  # fmt: skip


# -- append: every bad line is a line-numbered error, and nothing is written ---------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (_cost_line(stream_id=5), "line 2: `stream_id` must be a non-empty string"),
        (_cost_line(stream_id=""), "line 2: `stream_id` must be a non-empty string"),
        (_cost_line(stream_id="\ud800"), "line 2: stream_id: "),
        (_cost_line(expected_version=True), "line 2: `expected_version` must be an integer"),
        (_cost_line(expected_version=-1), "line 2: `expected_version` must be an integer"),
        ('{"stream_id": "s", "payload": {"kind": ["x"]}}\n', "line 2: "),
        ('{"stream_id": "s", "payload": {"tier": "direct"}}\n', "`kind`"),
        (_cost_line(timestamp="0001-01-01T00:00:00+01:00"), "line 2: timestamp: "),
        # Numbers were read as Unix seconds (or milliseconds, by size), and 0, "" and false
        # silently became the time of appending; a time without seconds or zone-less digits
        # were let through too. The README says RFC 3339 with a zone.
        *(
            (_cost_line(timestamp=ts), "line 2: `timestamp` must be RFC 3339 text")
            for ts in (
                0,
                1,
                1700000000,
                "1700000000",
                "",
                False,
                "2026-05-18T12:00Z",
                "2026-05-18",
                "2026-05-18T12:00:00",
            )
        ),
        # A leap second: was "unexpected extra characters at the end of the input".
        (_cost_line(timestamp="2016-12-31T23:59:60Z"), "line 2: `timestamp` 23:59:60 is a "),
        # "" and false silently got a fresh id (`or`), a given id dropped without a word;
        # absent or null still means "make one".
        *(
            (_cost_line(event_id=v), "line 2: `event_id` must be a UUID as text")
            for v in ("", 0, False, 5, ["00000000-0000-0000-0000-000000000001"])
        ),
        (_cost_line(event_id="abc"), "line 2: event_id: Input should be a valid UUID"),
        ("[1, 2]\n", "one event object per line"),
        ('{\n  "stream_id": "s"\n}\n', "one event per line"),
    ],
)
def test_a_bad_line_is_a_clean_error(cli: CLI, line: str, message: str) -> None:
    proc = cli.run("append", "--json", stdin=_cost_line() + line)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is False and message in out["error"]["message"], out
    assert out["error"]["message"].count("line 2:") == 1, out  # was "line 2: line 2: ..."
    assert cli.json("log")["events"] == []


def test_an_event_id_absent_or_null_is_made_and_a_given_one_kept(cli: CLI) -> None:
    given = "00000000-0000-0000-0000-00000000000a"
    cli.json("append", stdin=_cost_line() + _cost_line(event_id=None) + _cost_line(event_id=given))
    ids = [e["event_id"] for e in cli.json("log")["events"]]
    assert len(set(ids)) == 3 and ids[2] == given


def test_a_conflict_past_the_first_thousand_lines_writes_nothing(cli: CLI) -> None:
    lines = [_cost_line() for _ in range(1500)]
    lines[1200] = _cost_line(expected_version=0)  # the stream is at 1200 by then
    out = cli.json("append", code=2, stdin="".join(lines))
    assert out["error"]["kind"] == "ConcurrencyConflict"
    assert out["error"]["message"].startswith("line 1201: stream 's' is at version 1200")
    assert cli.json("log")["events"] == []  # was: positions 1..1000 written, and an error


def test_a_batch_failing_after_others_were_written_says_what_was_written(
    cli: CLI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that gets in between the check and the second batch: the error says which
    events are in the ledger now, instead of reading as if nothing was written."""
    from typer.testing import CliRunner

    from tracebound.cli import app as cli_app
    from tracebound.store.url import open_store as opened  # what cli_app.open_store is

    def open_store(url: str | None, **kw: Any) -> Any:
        backend = opened(str(cli.cwd / ".tracebound"), **kw)
        real, calls = backend.append_batch, []

        def append_batch(requests: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:
                raise ConcurrencyConflict("s", 1000, 1001)
            return real(requests)

        backend.append_batch = append_batch  # type: ignore[method-assign]  # a failing writer
        return backend

    monkeypatch.setattr(cli_app, "open_store", open_store)
    result = CliRunner().invoke(cli_app.app, ["append", "--json"], input=_cost_line() * 1500)
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "ConcurrencyConflict"
    assert (error["appended"], error["first_position"], error["last_position"]) == (1000, 1, 1000)
    assert "the first 1000 event(s) were written before it (positions 1..1000)" in error["message"]


def test_expected_versions_count_the_lines_before_them(cli: CLI) -> None:
    text = _cost_line(expected_version=0) + _lines(1) + _cost_line(expected_version=1)
    assert cli.json("append", stdin=text)["appended"] == 3
    assert cli.json("append", code=2, stdin=_cost_line(expected_version=0))["ok"] is False


def test_stdin_is_read_as_utf8_like_a_file(cli: CLI) -> None:
    bad = _cost_line(stream_id="cafe").encode().replace(b"cafe", b"caf\xe9")  # Latin-1
    proc = _bytes_run(cli, "append", "--json", stdin=bad)
    assert proc.returncode == 2, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert "stdin is not UTF-8" in json.loads(proc.stdout)["error"]["message"]
    bom = b"\xef\xbb\xbf" + _cost_line().encode()
    (cli.cwd / "bom.jsonl").write_bytes(bom)
    assert cli.json("append", "bom.jsonl")["appended"] == 1
    assert json.loads(_bytes_run(cli, "append", "--json", stdin=bom).stdout)["appended"] == 1


def _from_a_terminal(c: CLI, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `tracebound` with a terminal as stdin, and Ctrl-D typed into it."""
    main, side = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tracebound", *args], cwd=c.cwd, env=c.env, stdin=side,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        os.write(main, b"\x04")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main)
        os.close(side)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_append_from_a_terminal_says_it_reads_stdin(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    proc = _from_a_terminal(c, "append")  # no ledger: said at once, not after the input
    assert proc.returncode == 2 and "tracebound init" in proc.stderr
    assert "Reading" not in proc.stderr
    c.json("init")
    proc = _from_a_terminal(c, "append")
    assert proc.returncode == 0, proc.stderr
    assert "Reading JSON lines from stdin; end with Ctrl-D." in proc.stderr


# -- reading -------------------------------------------------------------------------------


def test_tail_refuses_a_negative_interval(cli: CLI) -> None:
    out = cli.json("tail", "--follow", "--interval", "-1", code=2)
    assert out["error"]["kind"] == "UsageError" and "--interval" in out["error"]["message"]


_CUSTOM = textwrap.dedent(
    """
    import sys
    from typing import Literal
    from tracebound import Ledger, Payload, RandomIds, SQLiteStore, SystemClock, register_event
    from tracebound.events.catalog import MergeOutcome

    @register_event
    class TicketOpened(Payload):
        kind: Literal["ticket_opened"] = "ticket_opened"
        title: str
        priority: int

    with Ledger(SQLiteStore(sys.argv[1]), clock=SystemClock(), ids=RandomIds()) as ledger:
        ledger.record("t-1", [TicketOpened(title="disk full", priority=2)], workflow_id="wf")
        ledger.record("t-1", [MergeOutcome(pr_url="u", decision="merged", reviewer=None)])
    """
)


def _record_custom(cli: CLI) -> None:
    """Record a ticket_opened event (a type registered only in that script) and a merge."""
    proc = subprocess.run(
        [sys.executable, "-c", _CUSTOM, str(cli.cwd / ".tracebound")], cwd=cli.cwd,
        env=cli.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_events_of_a_type_registered_only_in_python_are_shown(cli: CLI) -> None:
    _record_custom(cli)
    for command in (["log"], ["tail"], ["inspect", "t-1"], ["log", "--type", "ticket_opened"]):
        events = cli.json(*command)["events"]
        assert events[0]["payload"] == {"kind": "ticket_opened", "title": "disk full",
                                        "priority": 2}, command  # fmt: skip
        assert events[0]["workflow_id"] == "wf"
        datetime.fromisoformat(events[0]["timestamp"])
    assert [e["event_type"] for e in cli.json("log")["events"]] == ["ticket_opened",
                                                                     "merge_outcome"]  # fmt: skip
    assert cli.json("inspect", "t-1")["version"] == 2
    human = cli.run("log")
    assert human.returncode == 0 and "ticket_opened" in human.stdout, human.stderr


def test_ids_and_paths_that_look_like_markup_are_printed_as_they_are(
    tmp_path: Path,
) -> None:
    c = CLI(tmp_path)
    proc = c.run("init", "--origin", "example.com/[/b]")
    assert proc.returncode == 0, proc.stderr
    assert "example.com/[/b]" in proc.stdout
    proc = c.run("keys", "init", "--key", str(tmp_path / "[/x]" / "k.key"))
    assert proc.returncode == 0, proc.stderr
    line = json.dumps({"stream_id": "run[/x]", "workflow_id": "wf[bold]",
                       "payload": json.loads(_cost_line())["payload"]})  # fmt: skip
    c.json("append", stdin=line + "\n")
    for command in (["log"], ["tail"], ["inspect", "run[/x]"]):
        proc = c.run(*command)
        assert proc.returncode == 0, proc.stderr
        assert "run[/x]" in proc.stdout and "wf[bold]" in proc.stdout


# -- verify without the key ------------------------------------------------------------------


def test_verify_without_a_key_does_not_say_nothing_is_signed(cli: CLI, tmp_path: Path) -> None:
    cli.json("append", stdin=_lines(3))
    cli.json("checkpoint")
    cli.env["HOME"] = str(tmp_path / "auditor")  # another machine: no key, no witness
    proc = cli.run("verify")
    assert proc.returncode == 3, proc.stderr
    assert "not yet signed" not in proc.stdout
    assert "--verifier-key" in proc.stdout


def test_verify_shows_a_checkpoint_of_size_zero(cli: CLI) -> None:
    cli.json("checkpoint")
    proc = cli.run("verify")
    assert proc.returncode == 0, proc.stdout
    row = next(line for line in proc.stdout.splitlines() if "signed up to" in line)
    assert " 0 " in row


# -- demo ------------------------------------------------------------------------------------


def test_demo_never_deletes_a_folder_it_did_not_make(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    (c.cwd / "store").mkdir()
    (c.cwd / "store" / "models.py").write_text("precious\n")
    out = c.json("demo", "--dir", ".", code=2)
    assert "store" in out["error"]["message"]
    assert (c.cwd / "store" / "models.py").read_text() == "precious\n"
    demo = tmp_path / "demo"
    assert c.json("demo", "--dir", str(demo))["ok"] is True
    assert c.json("demo", "--dir", str(demo))["ok"] is True  # its own folder: run again


# -- the Python API ---------------------------------------------------------------------------


def test_a_payload_kind_that_is_not_a_string_is_a_typed_error() -> None:
    with pytest.raises(UnknownEventType):
        default_registry().get(["x"])  # type: ignore[arg-type]


def test_a_timestamp_out_of_range_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="timestamp"):
        Event.model_validate(
            {
                "event_id": "00000000-0000-0000-0000-000000000001",
                "event_type": "merge_outcome",
                "timestamp": "0001-01-01T00:00:00+01:00",
                "payload": {"kind": "merge_outcome", "pr_url": "u", "decision": "merged",
                            "reviewer": None},
            }
        )  # fmt: skip


def test_the_readme_says_where_default_registry_comes_from() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "tracebound.events.default_registry()" in readme
    assert issubclass(UnknownEventType, TraceboundError)


def test_commands_that_read_pipeline_events_skip_a_type_registered_only_in_python(
    cli: CLI,
) -> None:
    # `runs`, `metrics` and `export anchors` read only the pipeline's own events; a team's
    # own event type in the same ledger (which the CLI never imports) must not stop them.
    _record_custom(cli)
    appended = cli.run("append", stdin=_cost_line())  # an event they do read, after it
    assert appended.returncode == 0, appended.stderr
    assert cli.json("runs")["runs"] == []
    assert cli.json("metrics")["overall"]["cost_usd"] == "1"
    assert cli.json("export", "anchors", "--no-proofs")["rows"] == 0


def test_checkpoint_stays_incremental_past_a_type_registered_only_in_python(cli: CLI) -> None:
    # Linking new events to their stream's newest signed event read that stream decoded:
    # a type the CLI never imports sent every checkpoint back to the whole log, with a
    # reason ("the head of stream ... does not check") that read like damage.
    for _ in range(2):  # the second time, stream t-1 continues past signed events
        _record_custom(cli)
        verified = cli.json("checkpoint")["verified"]
    assert (verified["incremental"], verified["full_reason"], verified["from"]) == (True, None, 3)
    assert cli.run("verify").returncode == 0
