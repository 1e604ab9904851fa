"""`tracebound project` / `tracebound report`, reviewed as a new user runs them.

Each test is a problem found by following README.md and docs/projections.md by hand:
filters that did not filter the chart, errors that were silent or a traceback, views
created by a read-only command, a follower's summary that forgot what it followed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

T0 = "2026-05-18T09:{:02d}:00Z"


def _line(stream: str, wf: str | None, payload: dict[str, Any], minute: int) -> str:
    event: dict[str, Any] = {"stream_id": stream, "payload": payload}
    event["timestamp"] = T0.format(minute)
    if wf is not None:
        event["workflow_id"] = wf
    return json.dumps(event)


def _cost(
    amount: str, role: str | None, tokens: dict[str, int] | None = None, *, tier: str = "direct"
) -> dict[str, Any]:
    payload = {"kind": "cost_incurred", "tier": tier, "amount_usd": amount, "source": "openai"}
    return {**payload, **({"role": role} if role else {}), **(tokens or {})}


_IN: dict[str, int] = {"tokens_in": 1000, "cached_input_tokens": 400}
_OUT: dict[str, int] = {"tokens_out": 300, "reasoning_tokens": 100}
_MERGE = {"kind": "merge_outcome", "pr_url": "https://x/2", "decision": "closed", "reviewer": None}
EVENTS = "".join(
    line + "\n"
    for line in (
        _line("s-a", "wf-a", _cost("0.0100001", "Planner", _IN), 1),
        _line("s-a", "wf-a", _cost("0.0200002", "Executor", _OUT), 2),
        _line("s-b", "wf-b", _cost("0.3", "Executor"), 3),
        _line("s-b", "wf-b", _MERGE, 4),
        _line("s-p", None, _cost("0.1", None, tier="overhead"), 5),
    )
)  # fmt: skip


class CLI:
    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
        self.env.update(HOME=str(cwd / "home"), NO_COLOR="1", COLUMNS="200")

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tracebound", *args]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), cwd=self.cwd, env=self.env, input=stdin,
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def json(self, *args: str, code: int = 0) -> Any:
        proc = self.run(*args, "--json")
        assert proc.returncode == code, (proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    c = CLI(tmp_path)
    assert c.run("init").returncode == 0
    appended = c.run("append", stdin=EVENTS)
    assert appended.returncode == 0, appended.stderr
    return c


def test_cost_of_one_workflow_is_charted_and_reported_by_hour_for_that_workflow(cli: CLI) -> None:
    out = cli.json("report", "cost", "--workflow", "wf-a")
    assert out["total_usd"] == "0.0300003"
    # Before: by_role_and_hour (and the chart) summed every workflow's cost (0.43 USD).
    assert out["by_role_and_hour"] == [
        {"amount_usd": "0.0200002", "events": 1, "hour": "2026-05-18T09", "role": "Executor"},
        {"amount_usd": "0.0100001", "events": 1, "hour": "2026-05-18T09", "role": "Planner"},
    ]
    (row,) = out["rows"]  # tokens: cached input inside tokens_in, reasoning inside tokens_out
    assert (row["input_uncached"], row["input_cached"]) == (600, 400)
    assert (row["output_visible"], row["output_reasoning"]) == (200, 100)
    every = cli.json("report", "cost")["by_role_and_hour"]
    assert sum(float(r["amount_usd"]) for r in every) == pytest.approx(0.4300003)


def test_a_workflow_that_is_not_there_is_an_error(cli: CLI) -> None:
    for report in ("cost", "roi"):
        out = cli.json("report", report, "--workflow", "wf-nope", code=2)
        assert out["error"] == {
            "kind": "ConfigError",
            "message": "no events for workflow 'wf-nope'",
        }
    assert cli.json("report", "roi", "--workflow", "wf-b")["closed"] == 1


def test_a_views_url_of_another_scheme_is_refused_not_taken_for_a_file(cli: CLI) -> None:
    out = cli.json("report", "cost", "--views", "mysql://host/db", code=2)
    assert "unsupported --views URL scheme 'mysql'" in out["error"]["message"]
    assert not (cli.cwd / "mysql:").exists()  # before: a SQLite file at ./mysql:/host/db
    bad = cli.json("project", "status", "--views", "postgresql://[oops", code=2)
    assert bad["error"]["kind"] == "ConfigError"  # before: a ValueError traceback, exit 1
    assert cli.json("project", "run", "--views", "sqlite:///v.db")["applied"] == 5
    assert (cli.cwd / "v.db").is_file() and not (cli.cwd / "sqlite:").exists()
    assert cli.json("project", "status", "--views", "sqlite:///v.db")["projections"]


def test_views_that_name_a_ledger_file_are_refused_and_leave_it_alone(cli: CLI) -> None:
    ledger = cli.cwd / ".tracebound" / "ledger.db"

    def tables() -> list[str]:
        with sqlite3.connect(ledger) as db:
            return sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master"))

    before = tables()
    for command in (("project", "run"), ("report", "cost"), ("project", "rebuild")):
        out = cli.json(*command, "--views", str(ledger), code=2)
        assert out["error"]["kind"] == "ConfigError"
        assert "holds a ledger, not views" in out["error"]["message"]
    # Before: project run wrote its 13 tables into the ledger's own file.
    assert tables() == before
    assert cli.json("project", "run", "--views", "views-elsewhere.db")["applied"] == 5


def test_no_update_reads_existing_views_and_creates_none(cli: CLI) -> None:
    out = cli.json("report", "roi", "--no-update", code=2)
    assert "no views database" in out["error"]["message"]
    assert not (cli.cwd / ".tracebound" / "views.db").exists()
    cli.json("project", "run")
    assert cli.json("report", "roi", "--no-update")["total_cost_usd"] == "0.4300003"


def test_views_named_by_their_folder_are_read_where_project_run_wrote_them(cli: CLI) -> None:
    # `project run --views DIR` writes DIR/views.db; `project status --views DIR` and
    # `report --no-update --views DIR` said "no views database at DIR; project run creates it".
    (cli.cwd / "views-dir").mkdir()
    assert cli.json("project", "run", "--views", "views-dir")["applied"] == 5
    assert (cli.cwd / "views-dir" / "views.db").is_file()
    assert {
        p["lag"] for p in cli.json("project", "status", "--views", "views-dir")["projections"]
    } == {0}
    out = cli.json("report", "roi", "--no-update", "--views", "views-dir")
    assert out["total_cost_usd"] == "0.4300003"


@pytest.mark.parametrize("interval", ["-1", "0", "0.001"])
@pytest.mark.parametrize("command", [("project", "run"), ("tail",)])
def test_a_follow_interval_that_would_spin_is_a_usage_error(
    cli: CLI, interval: str, command: tuple[str, ...]
) -> None:
    # `project run --follow --interval -1` polled without a pause (a core at 100% until
    # stopped); `--interval 0` did too, on both commands, once nothing was left to apply.
    out = cli.json(*command, "--follow", "--interval", interval, code=2)
    assert out["error"]["kind"] == "UsageError" and "--interval" in out["error"]["message"]


def test_the_follow_summary_counts_what_was_followed(cli: CLI) -> None:
    assert cli.json("project", "run")["head"] == 5
    follower = subprocess.Popen(
        cli.argv("project", "run", "--follow", "--interval", "0.05", "--json"),
        cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )  # fmt: skip
    try:
        time.sleep(1.0)
        more = _line("s-c", "wf-c", _cost("0.5", "Critic"), 30)
        assert cli.run("append", stdin=more + "\n").returncode == 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = cli.json("project", "status")["projections"]
            if all(s["position"] == 6 for s in status):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the follower did not apply the new event: {status}")
        follower.send_signal(signal.SIGINT)
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, err
    # Before: {"applied": 0, "head": 5}: only the catch-up, while the views were at 6.
    assert json.loads(out) == {
        "command": "project run",
        "schema_version": 1,
        "ok": True,
        "applied": 1,
        "batches": 1,
        "head": 6,
    }


def test_a_failed_projection_is_named_with_the_others_and_flagged_by_no_update(cli: CLI) -> None:
    ledger = sqlite3.connect(cli.cwd / ".tracebound" / "ledger.db")
    with ledger:  # an altered body (verify reports it as tamper); the projections read it
        (body,) = ledger.execute("SELECT body FROM events WHERE position = 3").fetchone()
        bad = bytes(body).replace(b'"amount_usd":"0.3"', b'"amount_usd":"x"')
        ledger.execute("UPDATE events SET body = ? WHERE position = 3", (bad,))
    ledger.close()
    error = cli.json("project", "run", code=2)["error"]["message"]
    assert error.startswith("projection 'workflow_state' stopped at position 3 (it stands at 2)")
    assert "also stopped: 'cost_ledger' at position 3, 'roi' at position 3" in error
    proc = cli.run("report", "cost", "--no-update", "--json")
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["total_usd"] == "0.0300003"  # what is there: up to 2
    assert "warning: projection 'cost_ledger' stopped at position 3" in proc.stderr


def test_money_past_28_digits_is_reported_exactly_not_rounded_or_a_traceback(cli: CLI) -> None:
    resolved = {"kind": "plugin_resolved", "plugin_id": "npm", "extends_chain": [],
                "matched_scope": "*", "fallback_used": False}  # fmt: skip
    merged = {**_MERGE, "decision": "merged"}
    more = "".join(
        line + "\n"
        for line in (
            _line("s-h", "wf-h", resolved, 40),
            _line("s-h", "wf-h", _cost("100000000000000000000000.0000001", "Executor"), 41),
            _line("s-h", "wf-h", merged, 42),
        )
    )
    assert cli.run("append", stdin=more).returncode == 0
    # Before: the total came out as 100000000000000000000000.4300 (summed in decimal's
    # default 28 significant digits), and roi and plugins exited 1 with an InvalidOperation
    # traceback (a cost per PR of 10**22 USD or more cannot be quantized to 6 places there).
    assert cli.json("report", "cost")["total_usd"] == "100000000000000000000000.4300004"
    roi = cli.json("report", "roi")
    assert roi["total_cost_usd"] == "100000000000000000000000.4300004"
    assert roi["cost_per_merged_pr_usd"] == "100000000000000000000000.430000"
    (npm,) = (p for p in cli.json("report", "plugins")["plugins"] if p["plugin_id"] == "npm")
    assert npm["cost_per_pr_usd"] == "100000000000000000000000.000000"
    for report in ("cost", "roi", "plugins"):
        proc = cli.run("report", report)
        assert proc.returncode == 0, proc.stderr
        assert "100000000000000000000000." in proc.stdout


def test_recorded_text_that_looks_like_markup_is_printed_as_it_is(cli: CLI) -> None:
    wf = "wf-[/x]"
    resolved = {"kind": "plugin_resolved", "plugin_id": "[/p]", "extends_chain": [],
                "matched_scope": "*", "fallback_used": False}  # fmt: skip
    failed = {"kind": "trust_gate_failed", "gate": "[red]tests", "failing_signals": ["[/s]"],
              "score": 100, "retry_count": 0}  # fmt: skip
    more = "".join(
        line + "\n"
        for line in (
            _line("s-m", wf, {**_cost("0.5", "Critic"), "source": "[bold]src[/bold]"}, 50),
            _line("s-m", wf, resolved, 51),
            _line("s-m", wf, failed, 52),
        )
    )
    assert cli.run("append", stdin=more).returncode == 0
    # Before: a MarkupError traceback (exit 1) for "[/x]", and "[bold]src[/bold]" printed
    # as a styled "src": recorded data was read as rich markup.
    for args, shown in (
        (("report", "cost"), "[bold]src[/bold]"),
        (("report", "plugins"), "[/p]"),
        (("report", "gates"), "[red]tests"),
        (("report", "trail", wf), f"audit trail of {wf}"),
    ):
        proc = cli.run(*args)
        assert proc.returncode == 0, proc.stderr
        assert shown in proc.stdout, proc.stdout


def test_rebuild_of_an_unknown_projection_names_the_known_ones(cli: CLI) -> None:
    out = cli.json("project", "rebuild", "--only", "costs", code=2)
    assert (
        "no such projection: costs (the projections are workflow_state, cost_ledger"
        in (out["error"]["message"])
    )


def test_the_trail_table_shows_what_was_recorded_not_nulls(cli: CLI) -> None:
    proc = cli.run("report", "trail", "wf-b")
    assert proc.returncode == 0, proc.stderr
    assert '{"amount_usd": "0.3", "role": "Executor", "source": "openai", "tier": "direct"}' in (
        proc.stdout
    )
    assert "null" not in proc.stdout and '"kind"' not in proc.stdout
    entries = cli.json("report", "trail", "wf-b")["entries"]
    assert entries[0]["detail"]["kind"] == "cost_incurred"  # --json keeps the whole payload
    assert entries[0]["detail"]["model"] is None


def test_status_of_postgresql_views_that_are_not_there_creates_nothing(
    cli: CLI, postgres_server: Any, postgres_dsn: str
) -> None:
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    url = str(postgres_server.url(dbname, schema="never_made"))
    out = cli.json("project", "status", "--views", url, code=2)
    assert "no views in schema 'never_made'" in out["error"]["message"]
    assert cli.json("report", "roi", "--no-update", "--views", url, code=2)["error"]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'never_made'"
        ).fetchone()
    assert found == (0,)  # before: status created the schema and every table
    assert cli.json("project", "run", "--views", url)["applied"] == 5
    assert {s["lag"] for s in cli.json("project", "status", "--views", url)["projections"]} == {0}
    cost = cli.json("report", "cost", "--workflow", "wf-a", "--views", url)
    assert (
        cost["by_role_and_hour"]
        == cli.json("report", "cost", "--workflow", "wf-a")["by_role_and_hour"]
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_views_ahead_of_a_restored_ledger_are_refused_until_rebuilt(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """An SRE restores the ledger from last night's copy while the views hold today's
    events. Before: `project run` said `applied 0` over views 2 events ahead, status showed
    a lag of -2, and once the writers had appended past the old end the runner applied
    the new events from the old positions on: cost and ROI mixed two histories."""
    cli = CLI(tmp_path)
    assert cli.run("init").returncode == 0
    lines = EVENTS.splitlines(keepends=True)
    assert cli.run("append", stdin="".join(lines[:3])).returncode == 0
    ledger = tmp_path / ".tracebound" / "ledger.db"
    (tmp_path / "backup.db").write_bytes(ledger.read_bytes())
    assert cli.run("append", stdin="".join(lines[3:])).returncode == 0
    views: tuple[str, ...] = ()
    if backend == "postgresql":
        dbname = request.getfixturevalue("postgres_dsn").rsplit("dbname=", 1)[1]
        server = request.getfixturevalue("postgres_server")
        views = ("--views", str(server.url(dbname, schema="restored")))
    assert cli.json("project", "run", *views)["applied"] == 5
    ledger.write_bytes((tmp_path / "backup.db").read_bytes())  # back to 3 events

    out = cli.json("project", "run", *views, code=1)
    assert out["error"]["kind"] == "ViewsOfAnotherLog"
    assert "at position 5 but the ledger ends at 3" in out["error"]["message"]
    assert "project rebuild" in out["error"]["message"]
    # Before: status exited 0 (a script or a probe read "fine"), the error only in a column.
    out = cli.json("project", "status", *views, code=1)
    assert out["ok"] is False and out["error"]["kind"] == "ViewsOfAnotherLog"
    assert "ledger ends at 3" in out["error"]["message"]
    assert all("ledger ends at 3" in s["error"] for s in out["projections"])
    table = cli.run("project", "status", *views)
    assert table.returncode == 1 and "Traceback" not in table.stderr
    assert "projections" in table.stdout and "ledger ends at 3" in table.stderr
    assert cli.json("report", "roi", "--no-update", *views, code=1)["error"]
    # The writers go on: other events at positions 4..7, past the views' 5.
    other = _line("s-c", "wf-c", _cost("7", "Executor"), 9)
    assert cli.run("append", stdin=(other + "\n") * 4).returncode == 0
    out = cli.json("report", "cost", *views, code=1)
    assert "at position 5 (hash" in out["error"]["message"]
    assert cli.json("project", "run", "--follow", *views, code=1)["error"]["kind"] == (
        "ViewsOfAnotherLog"
    )
    assert cli.json("project", "rebuild", *views)["applied"] == 7
    fresh = cli.json("report", "cost", "--views", "fresh.db")
    assert cli.json("report", "cost", *views)["rows"] == fresh["rows"]
    assert cli.json("project", "run", *views)["applied"] == 0


def test_a_refund_is_refused_and_overhead_is_the_portfolio_part(cli: CLI) -> None:
    """What docs/projections.md says a reconciler needs: a credit (a negative amount) is
    refused whole, not netted; `overhead_cost_usd` is the costs with no workflow, whatever
    their tier, while every tier of a workflow is in the cost per merged PR."""
    before = cli.json("report", "roi")
    refund = _line("s-b", "wf-b", _cost("-0.3", "Executor"), 43)
    refused = cli.run("append", stdin=refund + "\n")
    assert refused.returncode == 2 and "amount_usd" in refused.stderr
    assert cli.json("report", "roi")["total_cost_usd"] == before["total_cost_usd"]
    merged = {**_MERGE, "pr_url": "https://x/3", "decision": "merged"}
    more = "".join(
        line + "\n"
        for line in (
            _line("s-c", "wf-c", _cost("0.25", None, tier="overhead"), 44),
            _line("s-c", "wf-c", merged, 45),
        )
    )
    assert cli.run("append", stdin=more).returncode == 0
    roi = cli.json("report", "roi")
    assert (before["overhead_cost_usd"], roi["overhead_cost_usd"]) == ("0.1", "0.1")
    # 0.0100001 + 0.0200002 + 0.3 (wf-a, wf-b) + 0.25 (wf-c's overhead) + 0.1 (portfolio)
    assert roi["total_cost_usd"] == "0.6800003"
    assert roi["cost_per_merged_pr_usd"] == "0.680000"
