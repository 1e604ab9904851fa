"""Times as a script and a reader see them: one form in `--json`, one form in the tables.

One ledger (a gated run approved and resumed, a second run approved, a checkpoint, a proof
and an engine history for the trail) is read by every command that prints a time, as real
processes. In JSON an instant is the text the hashed records hold (RFC 3339, UTC,
microseconds, ``Z``): `log` said ``+00:00`` where the record it printed says ``Z``, so a
script that compared the two found them different. In a table it is ``YYYY-MM-DD
HH:MM:SS[.mmm]`` (the date may go to the title) and marked UTC: the trail showed nine
digits with ``T`` and ``Z`` and `tail --follow` six digits without a date or a zone.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.integration.test_cli_runs import Shell, ledger_shell
from tracebound.cli._tables import utc_text

# The one JSON form: the text format_timestamp gives and every stored record holds.
INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
# The trail's sort key, documented with nine digits (docs/projections.md): engine histories
# carry nanoseconds, and text order must stay time order.
TRAIL_KEY = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")
# Anything that looks like a time of day, to catch every form a command might print.
LOOKS_LIKE_TIME = re.compile(r"(\d{4}-\d\d-\d\d[T ])?\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
# The one table form: seconds or milliseconds, the date given or hoisted to the title.
TABLE_TIME = re.compile(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(\.\d{3})?")
HISTORY = {
    "events": [
        {"eventId": "1", "eventTime": "2026-05-18T12:00:00.000000500+02:00",
         "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"},
    ]
}  # fmt: skip


class Ledger:
    def __init__(self, sh: Shell, done: str, approved: str) -> None:
        self.sh, self.done, self.approved = sh, done, approved
        self.evidence = f"artifacts/agent-runs/{done}.json"

    def commands(self) -> list[list[str]]:
        """Every command that prints a time, with what it needs."""
        return [
            ["log"], ["tail"], ["inspect", f"run/{self.done}"], ["runs"],
            ["replay", self.done], ["replay", self.done, "--rerun"],
            ["verify-proof", "proof.json", "--show"],
            ["verify-evidence", self.evidence, "--show"],
            ["report", "trail", self.done, "--temporal", "history.json"],
            ["report", "cost"], ["export", "anchors"], ["metrics"], ["project", "status"],
            ["checkpoint"], ["verify"], ["keys", "show"],
        ]  # fmt: skip


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Ledger:
    sh = ledger_shell(tmp_path_factory.mktemp("times"), "test.example/times")
    done, approved = sh.start("gated"), sh.start("gated")
    sh.tb("approve", done, "execute", "--as", "@alice")
    sh.tb("resume", done)
    sh.tb("checkpoint")
    sh.tb("prove", "4", "-o", "proof.json")
    (sh.cwd / "history.json").write_text(json.dumps(HISTORY), encoding="utf-8")
    return Ledger(sh, done, approved)


def _strings(doc: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string in ``doc`` with its path (``events[].timestamp``)."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _strings(value, f"{path}.{key}" if path else key)
    elif isinstance(doc, list):
        for value in doc:
            yield from _strings(value, f"{path}[]")
    elif isinstance(doc, str):
        yield path, doc


def _times(doc: Any) -> list[tuple[str, str]]:
    return [(p, s) for p, s in _strings(doc) if LOOKS_LIKE_TIME.search(s)]


def _check_instants(times: list[tuple[str, str]]) -> None:
    for path, text in times:
        form = TRAIL_KEY if path == "entries[].timestamp" else INSTANT
        assert form.fullmatch(text), (path, text)


def test_every_json_time_is_the_records_form(ledger: Ledger) -> None:
    sh = ledger.sh
    approval = sh.tb_json("approve", ledger.approved, "execute", "--as", "@alice")
    seen = {"approve": _times(approval)}
    for args in ledger.commands():
        seen[" ".join(args)] = _times(sh.tb_json(*args))
    for times in seen.values():
        _check_instants(times)
    # Each command that prints a time was seen printing one (the check above is not empty).
    printed = {name for name, times in seen.items() if times}
    shown = f"verify-evidence {ledger.evidence} --show"
    trail = f"report trail {ledger.done} --temporal history.json"
    assert printed >= {"approve", "log", "tail", "runs", f"replay {ledger.done}",
                       "verify-proof proof.json --show", shown, trail}  # fmt: skip


def test_a_json_time_is_the_hashed_records_text(ledger: Ledger) -> None:
    """A script can compare `--json`'s time with the record the proof carries, as text."""
    proof = json.loads((ledger.sh.cwd / "proof.json").read_text(encoding="utf-8"))
    record = json.loads(base64.b64decode(proof["record"]))
    shown = ledger.sh.tb_json("verify-proof", "proof.json", "--show")["record"]
    (logged,) = ledger.sh.tb_json("log", "--start", "4", "--limit", "1")["events"]
    assert shown["timestamp"] == logged["timestamp"] == record["timestamp"]
    approvals = ledger.sh.tb_json("replay", ledger.done)["approvals"]
    where = ("--type", "approval_recorded", "--workflow", ledger.done)
    (stored,) = ledger.sh.tb_json("log", *where)["events"]
    assert [a["timestamp"] for a in approvals] == [stored["payload"]["timestamp"]]


def _check_table_times(text: str) -> None:
    found = [m.group() for m in LOOKS_LIKE_TIME.finditer(text)]
    for time_ in found:
        assert TABLE_TIME.fullmatch(time_), (time_, text)
    assert not found or "UTC" in text, text


def test_every_table_time_is_the_one_human_form_marked_utc(ledger: Ledger) -> None:
    for args in [*ledger.commands(), ["approve", ledger.approved, "execute", "--as", "@bob"]]:
        proc = ledger.sh.tb(*args, code=None)
        _check_table_times(proc.stdout)
        assert "Traceback" not in proc.stderr


def test_tail_follow_prints_the_tables_form(ledger: Ledger) -> None:
    """Each line `tail --follow` prints (read as it arrives, then SIGINT) has its date and
    says UTC: it printed ``16:23:42.212416``, a day's time without a date or a zone."""
    sh = ledger.sh
    follower = subprocess.Popen(
        [sys.executable, "-m", "tracebound", "tail", "-n", "2", "--follow"],
        cwd=sh.cwd, env=sh.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        lines = [follower.stdout.readline() for _ in range(2)]
        follower.send_signal(signal.SIGINT)
        follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    for line in lines:
        _check_table_times(line)
        assert re.search(r" \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC ", line), line


def test_the_table_helper_gives_milliseconds_or_seconds_in_utc() -> None:
    """Seconds where a column or a sentence has no room, milliseconds otherwise; a time
    given in another zone is shown in UTC."""
    at = datetime(2026, 5, 18, 14, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=2)))
    assert utc_text(at) == "2026-05-18 12:00:00.999"  # cut, not rounded into the next second
    assert utc_text(at, seconds=True) == "2026-05-18 12:00:00"
    assert utc_text(datetime(999, 1, 2, tzinfo=UTC)) == "0999-01-02 00:00:00.000"
