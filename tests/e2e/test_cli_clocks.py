"""The `tracebound` command run by an operator whose machines disagree about time.

Hosts in zones with half-hour and 45-minute offsets, a VM whose clock came back at 1970
(its RTC reset) or years ahead, and timestamps typed into `append` lines: what the CLI
records, buckets and draws must not depend on the zone it runs in, and a wrong clock on
one host must not crash or hide a report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI

ZONES = ("America/St_Johns", "Asia/Kathmandu", "Pacific/Chatham")


def _cost(timestamp: str, amount: str = "1", role: str = "Executor") -> str:
    payload = {
        "kind": "cost_incurred",
        "tier": "direct",
        "amount_usd": amount,
        "source": "openai",
        "role": role,
    }
    line = {"stream_id": "run-1", "workflow_id": "wf-1", "timestamp": timestamp}
    return json.dumps({**line, "payload": payload}) + "\n"


def _zoned(cli: CLI, zone: str) -> CLI:
    """The same ledger, read by a host whose local zone is ``zone``."""
    other = CLI.__new__(CLI)
    other.cwd, other.env = cli.cwd, {**cli.env, "TZ": zone}
    return other


@pytest.mark.parametrize(
    "stamps",
    [
        # A VM whose clock came back at 1970 next to the right time: was 15 s of drawing
        # 20 000 empty daily slots, and a chart with no visible bar.
        ("1970-01-01T00:00:01Z", "2026-05-18T12:00:00Z"),
        # The ends of the range a timestamp may have: was an OverflowError traceback.
        ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"),
    ],
)
def test_a_cost_chart_over_a_wrong_clock_is_drawn(tmp_path: Path, stamps: tuple[str, str]) -> None:
    pytest.importorskip("matplotlib")
    cli = CLI(tmp_path)
    cli.json("init")
    cli.json("append", stdin="".join(_cost(t) for t in stamps))
    for zone in ZONES:
        chart = cli.cwd / f"cost-{zone.replace('/', '-')}.svg"
        out = _zoned(cli, zone).json("report", "cost", "--chart", str(chart))
        assert out["chart"] == str(chart) and b"<svg" in chart.read_bytes()
        assert [r["hour"] for r in out["by_role_and_hour"]] == [t[:13] for t in stamps]


def test_an_appended_line_hashes_the_same_whatever_the_hosts_zone(tmp_path: Path) -> None:
    # One line, appended on three hosts of different zones with its offset written in three
    # ways (and nine fractional digits, cut to six): the same record, byte for byte.
    stamps = ("2026-05-18T17:45:00.123456789+05:45", "2026-05-18t12:00:00.123456z",
              "2026-05-18T08:30:00.1234569-03:30")  # fmt: skip
    hashes = set()
    for zone, stamp in zip(ZONES, stamps, strict=True):
        cli = _zoned(CLI(tmp_path / zone.replace("/", "-")), zone)
        cli.json("init")
        line = json.loads(_cost(stamp))
        line["event_id"] = "00000000-0000-0000-0000-000000000001"
        cli.json("append", stdin=json.dumps(line) + "\n")
        (event,) = cli.json("log")["events"]
        assert event["timestamp"] == "2026-05-18T12:00:00.123456Z"
        table = cli.run("log").stdout  # the table is UTC too, its date in the title
        assert "on 2026-05-18" in table and " 12:00:00.123 " in table
        hashes.add(event["hash"])
    assert len(hashes) == 1
