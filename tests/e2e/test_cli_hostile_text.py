"""Recorded text written by someone hostile, read by an auditor in a terminal.

A stream id, workflow id, step id, pipeline name or reason is whatever the pipeline (or an
attacker steering a model) wrote. Printed raw, an ESC sequence clears the screen, moves the
cursor up to overwrite a line with "OK" or plants a hyperlink; a CR or backspace overwrites
what came before; U+202E reverses what follows. The human-readable output shows each as a
visible escape (``\\x1b``); the JSON output keeps the exact value (JSON escapes it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI

# Each a way to take over what the auditor sees; the last two are rich's own markup.
CLEAR = "clear\x1b[2J\x1b[H"
CURSOR_UP = "up\x1b[1A\x1b[2KOK: the ledger is intact"
LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
OVERWRITE = "evil\rgood\x08\x08"
BIDI = "invoice\u202etxt.exe"
C1_NUL = "c1\x9b2J\x00nul"
NEWLINE = "one\ntwo"
MARKUP = "[red]OK[/red] :warning:"
HOSTILE = (CLEAR, CURSOR_UP, LINK, OVERWRITE, BIDI, C1_NUL, NEWLINE, MARKUP)
IN_ARGV = tuple(t for t in HOSTILE if "\x00" not in t)  # no NUL in a command's arguments
RAW = ("\x1b", "\r", "\x08", "\u202e", "\x9b", "\x00")
RUN = "run-\x1b[2J"


def _event(stream: str, payload: Mapping[str, object]) -> str:
    return json.dumps({"stream_id": stream, "workflow_id": f"wf-{stream}", "payload": payload})


def _cost(text: str) -> dict[str, object]:
    return {"kind": "cost_incurred", "tier": "direct", "amount_usd": "0.5", "source": text,
            "model": text, "step_id": text}  # fmt: skip


def _run_events() -> list[str]:
    started = {"kind": "run_started", "run_id": RUN, "pipeline": CURSOR_UP,
               "pipeline_type": BIDI, "critical": False, "inputs_digest": "sha256:" + "0" * 64,
               "inputs_pointer": LINK}  # fmt: skip
    finished = {"kind": "run_finished", "run_id": RUN, "status": "failed",
                "failed_step": OVERWRITE, "reason": CLEAR}  # fmt: skip
    return [_event(f"run/{RUN}", started), _event(f"run/{RUN}", finished)]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CLI:
    c = CLI(tmp_path_factory.mktemp("hostile"))
    c.json("init")
    c.json("keys", "init")
    lines = [_event(text, _cost(text)) for text in HOSTILE] + _run_events()
    c.json("append", "--no-redact", stdin="\n".join(lines) + "\n")
    c.json("checkpoint")
    return c


def _assert_inert(out: str) -> None:
    for char in RAW:
        assert char not in out, (char, out)


@pytest.mark.parametrize(
    "args",
    [
        ("log",),
        ("tail", "-n", "20"),
        *(("inspect", text) for text in IN_ARGV),
        ("verify",),
        ("runs",),
        ("report", "cost"),
        *(("report", "trail", f"wf-{text}") for text in (CLEAR, BIDI, OVERWRITE)),
        ("inspect", "no-such\x1b[2J\u202e"),  # an error message quoting the argument
    ],
)
def test_human_output_shows_control_characters_as_visible_escapes(
    cli: CLI, args: tuple[str, ...]
) -> None:
    proc = cli.run(*args)
    assert proc.returncode in {0, 2}, proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_inert(proc.stdout + proc.stderr)


def test_the_escapes_are_visible_and_markup_prints_as_written(cli: CLI) -> None:
    out = cli.run("log").stdout
    for shown in (r"clear\x1b[2J", r"evil\rgood\x08", r"invoice\u202etxt", r"c1\x9b2J\x00"):
        assert shown in out, out
    assert r"one\ntwo" in out  # one stream id, one row: not a second line that says "two"
    assert "[red]OK[/red] :warning:" in out  # neither red nor an emoji
    runs = cli.run("runs").stdout
    assert r"run-\x1b[2J" in runs and r"up\x1b[1A" in runs
    error = cli.run("inspect", "no-such\x1b[2J")
    assert error.returncode == 2 and r"no-such\x1b[2J" in error.stderr


def test_json_output_keeps_the_exact_values(cli: CLI) -> None:
    streams = {e["stream_id"] for e in cli.json("log")["events"]}
    assert set(HOSTILE) <= streams
    (run,) = cli.json("runs")["runs"]
    assert (run["run_id"], run["pipeline"], run["reason"]) == (RUN, CURSOR_UP, CLEAR)
    proc = cli.run("log", "--json")
    assert "\x1b" not in proc.stdout  # JSON escapes it (\u001b), so the terminal is safe too
    for text in IN_ARGV:
        assert cli.json("inspect", text)["stream_id"] == text


def test_years_before_1000_print_with_four_digits(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    c.json("init")
    lines = [
        json.dumps({"stream_id": "s", "timestamp": ts, "payload": _cost("x")})
        for ts in ("0001-01-01T00:00:00Z", "0999-12-31T23:59:59.5Z", "9999-12-31T23:59:59Z")
    ]
    c.json("append", "--no-redact", stdin="\n".join(lines) + "\n")
    out = c.run("log").stdout
    # Was "1-01-01" and "999-12-31": strftime("%Y") does not pad on glibc.
    for shown in ("0001-01-01 00:00:00.000", "0999-12-31 23:59:59.500", "9999-12-31 23:59:59"):
        assert shown in out, out
