"""`tracebound project ...` and `tracebound report ...`, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracebound.cli.app import app
from tracebound.cli.report import DEFAULT_LIMIT, _gate_rows, _limited
from tracebound.projections import ProjectionRunner, SQLiteViews
from tracebound.store.sqlite import SQLiteStore

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def _append_lines() -> str:
    """The golden runs as `tracebound append` input (payloads, ids and times kept)."""
    lines = []
    for name in ("successful", "retried", "refused", "gated"):
        for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines():
            e = json.loads(line)
            payload = {k: v for k, v in e["payload"].items() if k != "kind"}
            payload["kind"] = e["event_type"]
            lines.append(
                json.dumps(
                    {
                        "stream_id": e["stream_id"],
                        "workflow_id": e["workflow_id"],
                        "event_id": e["event_id"],
                        "timestamp": e["timestamp"],
                        "payload": payload,
                    }
                )
            )
    return "\n".join(lines) + "\n"


class CLI:
    def __init__(self, tmp_path: Path) -> None:
        self.cwd = tmp_path
        self.env = {**os.environ, "HOME": str(tmp_path / "home"), "NO_COLOR": "1", "COLUMNS": "200"}
        for var in ("TRACEBOUND_STORE", "TRACEBOUND_VIEWS"):
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

    def json(self, *args: str, code: int = 0) -> Any:
        proc = self.run(*args, "--json")
        assert proc.returncode == code, (proc.stdout, proc.stderr)
        return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CLI:
    c = CLI(tmp_path_factory.mktemp("cli"))
    assert c.run("init", "--origin", "tracebound.test/cli").returncode == 0
    proc = c.run("append", stdin=_append_lines())
    assert proc.returncode == 0, proc.stderr
    return c


def test_project_run_status_rebuild(cli: CLI) -> None:
    total = len(_append_lines().splitlines())  # every golden event was appended
    assert total > 50
    run = cli.json("project", "run")
    assert run["applied"] == total and run["head"] == total
    assert cli.json("project", "run")["applied"] == 0  # idempotent: nothing left to do
    status = cli.json("project", "status")["projections"]
    assert {s["name"] for s in status} >= {"cost_ledger", "roi", "audit_trail", "learning"}
    assert {(s["position"], s["lag"]) for s in status} == {(total, 0)}
    assert cli.json("project", "rebuild", "--only", "roi")["applied"] == total
    assert (cli.cwd / ".tracebound" / "views.db").exists()
    human = cli.run("project", "status")
    assert human.returncode == 0 and "audit_trail" in human.stdout


def _all_reports(cli: CLI) -> list[Any]:
    return [
        cli.json("report", *args)
        for args in (("cost",), ("roi",), ("plugins",), ("gates",), ("trail", "wf-gated"))
    ]


def test_project_rebuild_with_workers_makes_the_serial_views(cli: CLI) -> None:
    serial = cli.json("project", "rebuild")
    assert serial["workers"] == 1
    before = _all_reports(cli)
    parallel = cli.json("project", "rebuild", "--workers", "2")
    assert parallel["workers"] == 2
    assert parallel["applied"] == serial["applied"] and parallel["head"] == serial["head"]
    assert _all_reports(cli) == before
    human = cli.run("project", "rebuild", "--workers", "2")
    assert human.returncode == 0, human.stderr
    assert "by 2 processes" in human.stdout
    bad = cli.run("project", "rebuild", "--workers", "0")
    assert bad.returncode == 2
    assert "--workers" in bad.stderr


def test_project_rebuild_workers_on_jsonl_runs_in_one_process_and_says_so(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    assert c.run("init", "--store", "jsonl:///ledger", "--origin", "t/jsonl").returncode == 0
    proc = c.run("append", "--store", "jsonl:///ledger", stdin=_append_lines())
    assert proc.returncode == 0, proc.stderr
    assert (
        c.json("project", "rebuild", "--store", "jsonl:///ledger", "--workers", "2")["workers"] == 1
    )
    human = c.run("project", "rebuild", "--store", "jsonl:///ledger", "--workers", "2")
    assert human.returncode == 0, human.stderr
    assert "rebuilding in one process" in human.stderr


def test_reports_as_json(cli: CLI) -> None:
    cost = cli.json("report", "cost")
    # 0.0253 + 0.1000 overhead (successful) + 0.0466 (retried) + 0.0007 + 0.0253 (gated)
    assert cost["total_usd"] == "0.1979"
    roi = cli.json("report", "roi")
    assert (roi["merged"], roi["modified"], roi["closed"]) == (1, 1, 1)
    assert roi["merge_rate"] == "0.6667"
    plugins = {p["plugin_id"]: p for p in cli.json("report", "plugins")["plugins"]}
    assert plugins["universal"]["fallback_rate"] == "1.0000"
    gates = cli.json("report", "gates")
    assert gates["retry_causes"] == [["tests_pass", 1]]
    trail = cli.json("report", "trail", "wf-refused")["entries"]
    assert [e["event_type"] for e in trail][:2] == ["plugin_resolved", "provenance_classified"]
    erased = [e for e in trail if e["event_type"] == "blob_erased"]
    assert [e["detail"]["reason"] for e in erased] == ["GDPR erasure request"]
    assert trail[-1]["event_type"] == "slo_alert_raised"


def test_reports_as_tables(cli: CLI) -> None:
    for args in (("cost",), ("roi",), ("plugins",), ("gates",), ("trail", "wf-gated")):
        proc = cli.run("report", *args)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip()
    assert "npm-express" in cli.run("report", "plugins").stdout


def _first_cells(table: str) -> list[str]:
    """The first column of a rich table's body rows (rows drawn as ``│ cell │ ...``)."""
    return [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]


def test_report_tables_show_at_most_limit_rows_and_json_every_row(cli: CLI) -> None:
    rows = cli.json("report", "cost", "--limit", "1")["rows"]  # --limit is for tables only
    assert len(rows) > 3
    # Ties keep the listed order, as the report does (both read the same view order).
    costliest = sorted(rows, key=lambda r: Decimal(r["amount_usd"]), reverse=True)[:2]
    table = cli.run("report", "cost", "--limit", "2").stdout
    assert f"2 of {len(rows)} rows, costliest first" in table
    assert _first_cells(table) == [r["workflow_id"] or "(portfolio)" for r in costliest]
    for r in costliest:
        assert r["amount_usd"] in table
    whole = cli.run("report", "cost", "--limit", "0").stdout
    assert "costliest first" not in whole
    assert len(_first_cells(whole)) == len(rows)
    assert "costliest first" not in cli.run("report", "cost").stdout  # fewer than the default 50
    plugins = cli.json("report", "plugins")["plugins"]
    most_used = max(plugins, key=lambda p: p["workflows"])
    one = cli.run("report", "plugins", "--limit", "1").stdout
    assert f"1 of {len(plugins)} rows, most used first" in one
    assert _first_cells(one) == [most_used["plugin_id"]]
    bad = cli.run("report", "cost", "--limit", "-1")
    assert bad.returncode == 2
    assert "--limit" in bad.stderr


def test_limited_keeps_the_top_rows_by_default_and_lists_short_tables_as_they_are() -> None:
    rows: list[dict[str, Any]] = [{"id": i, "usd": Decimal(i % 7)} for i in range(120)]
    kept, caption = _limited(rows, DEFAULT_LIMIT, top=lambda r: r["usd"], first="costliest")
    assert len(kept) == DEFAULT_LIMIT == 50
    assert caption == "50 of 120 rows, costliest first (--limit 0: all)"
    # The largest amounts first (about 17 rows of each of 0..6); ties in listed order.
    assert [r["usd"] for r in kept] == sorted((r["usd"] for r in rows), reverse=True)[:50]
    sixes = [r["id"] for r in kept if r["usd"] == 6]
    assert sixes == sorted(sixes) and sixes[0] == 6
    assert _limited(rows, 0, top=lambda r: r["usd"], first="costliest") == (rows, None)
    assert _limited(rows[:5], 50, top=lambda r: r["usd"], first="costliest") == (rows[:5], None)
    ranked = [("a", 9), ("b", 5), ("c", 1)]
    assert _limited(ranked, 2, first="most frequent") == (
        ranked[:2],
        "2 of 3 rows, most frequent first (--limit 0: all)",
    )


def test_gate_rows_show_the_histogram_of_the_gates_shown() -> None:
    busy = {"a": 1, "b": 40, "c": 7, "d": 25}  # passed + failed per gate
    data = {
        "gates": [
            {"gate": g, "passed": n, "failed": 0, "retries": 0} for g, n in sorted(busy.items())
        ],
        "scores": [
            {"gate": g, "verdict": v, "bucket": b * 1000, "count": 1}
            for g in sorted(busy)
            for v in ("failed", "passed")
            for b in range(10)
        ],
    }
    gates, caption, scores, scores_caption = _gate_rows(data, 2)
    assert [g["gate"] for g in gates] == ["b", "d"]
    assert caption == "2 of 4 rows, busiest gates first (--limit 0: all)"
    assert [s["gate"] for s in scores] == ["b", "b"]
    assert scores_caption == "2 of 80 rows, busiest gates first (--limit 0: all)"
    # Every gate fits, the histogram does not: its rows go busiest gate first.
    gates, caption, scores, scores_caption = _gate_rows(data, 50)
    assert (len(gates), caption) == (4, None)
    assert [s["gate"] for s in scores] == ["b"] * 20 + ["d"] * 20 + ["c"] * 10
    assert scores_caption == "50 of 80 rows, busiest gates first (--limit 0: all)"
    # Both fit, or no limit: as listed.
    assert _gate_rows(data, 80)[2] == data["scores"]
    assert _gate_rows(data, 0) == (data["gates"], None, data["scores"], None)


def test_trail_merges_an_engine_history_file(cli: CLI) -> None:
    history = cli.cwd / "temporal.json"
    history.write_text(
        json.dumps(
            {
                "events": [
                    {
                        "eventId": "1",
                        "eventTime": "2026-05-18T11:59:59Z",
                        "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
                    }
                ]
            }
        )
    )
    entries = cli.json("report", "trail", "wf-gated", "--temporal", str(history))["entries"]
    assert entries[0]["source"] == "temporal"
    missing = cli.json("report", "trail", "wf-nope", code=2)
    assert "no events" in missing["error"]["message"]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff[]", "not UTF-8"),
        (b"[" * 100_000, "depth limit"),
        (b'[{"eventId": 1e400, "eventTime": "2026-05-18T11:59:59", "eventType": "x"}]', "inf"),
        (b'[{"eventId": Infinity, "eventTime": "2026-05-18T11:59:59Z", "eventType": "x"}]', "JSON"),
        (b'[{"eventId": 1.5, "eventTime": "2026-05-18T11:59:59Z", "eventType": "x"}]', "eventId"),
    ],
)
def test_an_engine_history_tracebound_cannot_read_plainly_is_exit_2_naming_it(
    cli: CLI, content: bytes, says: str
) -> None:
    history = cli.cwd / "temporal.json"
    history.write_bytes(content)
    out = cli.json(
        "report", "trail", "wf-gated", "--temporal", str(history), "--save-history", code=2
    )
    assert says in out["error"]["message"]


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_charts(cli: CLI, suffix: str) -> None:
    pytest.importorskip("matplotlib")
    for report, name in (("cost", "cost"), ("gates", "retries")):
        path = cli.cwd / f"{name}{suffix}"
        out = cli.json("report", report, "--chart", str(path))
        assert out["chart"] == str(path)
        head = path.read_bytes()[:64]
        assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in path.read_bytes()
    bad = cli.json("report", "cost", "--chart", str(cli.cwd / "x.gif"), code=2)
    assert ".png or .svg" in bad["error"]["message"]


def test_a_chart_that_cannot_be_written_says_where_and_why(cli: CLI) -> None:
    pytest.importorskip("matplotlib")
    (cli.cwd / "notes").write_text("a file, not a folder")
    (cli.cwd / "made").mkdir()
    cases = [
        # Before: "File exists: notes" (FileExistsError), as if the chart had been there.
        (cli.cwd / "notes" / "cost.png", "notes is a file, not a folder"),
        (cli.cwd / "made" / "sub.png", "is a folder"),  # before: "Is a directory" as kind
    ]
    (cli.cwd / "made" / "sub.png").mkdir()
    for path, why in cases:
        error = cli.json("report", "cost", "--chart", str(path), code=2)["error"]
        assert error["kind"] == "ConfigError"
        assert error["message"].startswith(f"cannot write the chart {path}: ")
        assert why in error["message"]
    drawn = cli.cwd / "new" / "folder" / "cost.svg"  # a missing folder is made, as before
    assert cli.json("report", "cost", "--chart", str(drawn))["chart"] == str(drawn)
    assert b"<svg" in drawn.read_bytes()


def test_a_report_catches_up_beside_another_runner_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`project run --follow` in one terminal and a report in another: the report's own
    catch-up can lose the race for a batch the follower commits first."""
    cli = CLI(tmp_path)
    assert cli.run("init").returncode == 0
    assert cli.run("append", stdin=_append_lines()).returncode == 0
    views = tmp_path / ".tracebound" / "views.db"
    real_commit = SQLiteViews.commit
    raced: list[int] = []
    racing = False

    def commit_after_a_follower(self: SQLiteViews, writes: Any, *anchor: Any) -> None:
        nonlocal racing
        if not raced and not racing:  # the follower commits between the report's read and write
            racing = True
            with SQLiteStore(tmp_path / ".tracebound") as store, SQLiteViews(views) as other:
                raced.append(ProjectionRunner(store, other).run().events)
        real_commit(self, writes, *anchor)

    monkeypatch.setattr(SQLiteViews, "commit", commit_after_a_follower)
    monkeypatch.chdir(tmp_path)
    env = {"HOME": str(tmp_path / "home"), "TRACEBOUND_STORE": None, "TRACEBOUND_VIEWS": None}
    result = CliRunner().invoke(app, ["report", "roi", "--json"], env=env)
    assert raced and raced[0] > 0, result.output
    # Before: exit 2, ConcurrencyConflict "stream 'projection:workflow_state': expected
    # version 0, but it is at N".
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["workflows"] == 4


def test_missing_matplotlib_is_a_clear_error(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    monkeypatch.chdir(cli.cwd)
    result = CliRunner().invoke(app, ["report", "gates", "--chart", "g.png", "--json"])
    assert result.exit_code == 2
    assert "pip install 'tracebound[charts]'" in json.loads(result.stdout)["error"]["message"]


def test_no_store_is_a_usage_error(tmp_path: Path) -> None:
    out = CLI(tmp_path).json("project", "status", code=2)
    assert out["error"]["kind"] == "StoreNotFound"
