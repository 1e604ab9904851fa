"""What a new user sees: tables on a normal-width terminal, `--help` pages, usage errors.

Each test stands for a finding of a fresh-user walkthrough and failed before its fix:
tables on a pipeline ledger (long stream ids) dropped their pos, ver, type and hash columns
at 80 and 120 columns; every flag showed a `<bool>` metavar and arguments read `{stream}`;
a usage error under `--json` printed Click's box on stderr and nothing on stdout;
`project status` created the views file it was asked to read.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from typer.main import get_command
from typer.testing import CliRunner

from tests.e2e.test_cli import CLI
from tracebound.cli._tables import fit
from tracebound.cli.app import app

RUN = "2cfd95df-21f0-41d4-abd0-03a907d435d9"
STREAMS = (f"remediation/attempts/{RUN}/planner", f"run/{RUN}", f"learning/{RUN}")


def _line(i: int, stream: str) -> str:
    payload = {"kind": "cost_incurred", "tier": "amortized", "amount_usd": f"0.{i:04d}",
               "source": "openai"}  # fmt: skip
    return json.dumps({"stream_id": stream, "workflow_id": f"wf-remediate-{RUN}",
                       "payload": payload}) + "\n"  # fmt: skip


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CLI:
    """A ledger as a pipeline writes it: long stream and workflow ids."""
    c = CLI(tmp_path_factory.mktemp("presentation"))
    c.json("init")
    c.json("append", stdin="".join(_line(i, STREAMS[i % 3]) for i in range(12)))
    return c


def _human(cli: CLI, columns: int, *args: str) -> list[str]:
    cli.env["COLUMNS"] = str(columns)
    try:
        proc = cli.run(*args)
    finally:
        cli.env["COLUMNS"] = "200"
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), "\n".join(lines)
    return lines


def _header(lines: list[str], first: str) -> str:
    return next(line for line in lines if re.search(rf"\b{re.escape(first)}\b", line))


# -- tables at 80 and 120 columns -----------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("command", [("log",), ("tail", "-n", "12"), ("inspect", STREAMS[1])])
def test_event_tables_keep_pos_ver_type_and_hash(
    cli: CLI, columns: int, command: tuple[str, ...]
) -> None:
    lines = _human(cli, columns, *command)
    header = _header(lines, "pos")
    for name in ("pos", "stream", "ver", "type", "workflow", "time (UTC)", "hash"):
        assert name in header, header
    rows = [line for line in lines if "cost_incurred" in line]
    events = cli.json(*command)["events"]
    assert len(rows) == len(events)
    for row, event in zip(rows, events, strict=True):
        # Position, then the stream (maybe cut), its version, the whole type, the hash.
        pattern = (
            rf"\b{event['position']}\b.*?{re.escape(event['stream_id'][:4])}.*?"
            rf"\b{event['stream_version']}\b.*?cost_incurred.*?{event['hash'][:8]}"
        )
        assert re.search(pattern, row), row
    assert any("…" in row for row in rows)  # the long ids gave way, with an ellipsis


@pytest.mark.parametrize("columns", [80, 120])
def test_project_status_and_reports_keep_their_columns(cli: CLI, columns: int) -> None:
    cli.json("project", "run")
    status = _header(_human(cli, columns, "project", "status"), "projection")
    for name in ("projection", "version", "position", "lag", "failed at", "error"):
        assert name in status
    cost = "\n".join(_human(cli, columns, "report", "cost"))
    for name in ("tier", "source", "USD", "events", "uncached", "cached", "visible", "reasoning"):
        assert re.search(rf"\b{name}\b", cost), cost
    assert "amortized" in cost and "openai" in cost
    assert "…" not in "".join(re.findall(r"\b(?:USD|events|tier|source)\S*", cost))


@pytest.mark.parametrize("columns", [80, 120])
def test_cost_tables_never_cut_a_number(tmp_path: Path, columns: int) -> None:
    """A long source name and token counts in the billions: at 80 columns the tokens table
    was cropped at the terminal's edge, printing 3,000,000,000 output tokens as "300" and
    leaving the reasoning column out."""
    c = CLI(tmp_path)
    c.json("init")
    payload = {"kind": "cost_incurred", "tier": "amortized", "amount_usd": "1234.5678901",
               "source": "azure-openai-gpt-4o-2024-08-06", "tokens_in": 123456789012,
               "cached_input_tokens": 23456789012, "tokens_out": 3456789012,
               "reasoning_tokens": 456789012}  # fmt: skip
    line = json.dumps({"stream_id": "r", "workflow_id": f"wf-{RUN}", "payload": payload})
    c.json("append", stdin=line + "\n")
    text = "\n".join(_human(c, columns, "report", "cost"))
    for number in ("1234.5678901", "100000000000", "23456789012", "3000000000", "456789012"):
        assert re.search(rf"(?<![0-9]){number}(?![0-9])", text), text
    for name in ("uncached", "cached", "visible", "reasoning"):
        assert re.search(rf"\b{name}\b", text), text


@pytest.mark.parametrize("columns", [80, 120])
def test_the_trail_with_an_engine_history_fits_a_terminal(
    cli: CLI, columns: int, tmp_path: Path
) -> None:
    """Temporal's event types are long; at 80 columns they give way, and the detail keeps a
    width of its own instead of one character per line."""
    history = tmp_path / f"history-{columns}.json"
    event = {"eventId": "1", "eventTime": "2026-05-18T12:00:00Z",
             "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED"}  # fmt: skip
    history.write_text(json.dumps({"events": [event]}), encoding="utf-8")
    cli.json("project", "run")
    lines = _human(cli, columns, "report", "trail", f"wf-remediate-{RUN}",
                   "--temporal", str(history))  # fmt: skip
    assert any("WORKFLOW_E" in line for line in lines)
    assert len([line for line in lines if "cost_incur" in line]) == 12  # all in one workflow
    # each event's detail folds onto a bounded number of lines (it was one character wide:
    # over 60 lines per event)
    assert len(lines) < 12 * 12, "\n".join(lines)


def _runs_like(width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    table = Table(title="1 run(s)")
    for col in ("run", "pipeline", "status", "steps", "waiting at", "started (UTC)"):
        table.add_column(col)
    table.add_row(RUN, "remediate-dependency", "gated", "2", "execute (@security-lead)",
                  "2026-11-23 02:26:39")  # fmt: skip
    fit(table, give={"run": "fold", "pipeline": "ellipsis", "waiting at": "fold",
                     "started (UTC)": "fold"}, prefer="run", console=console)  # fmt: skip
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize("width", [80, 100, 120])
def test_fit_keeps_key_columns_whole_and_the_table_inside_the_terminal(width: int) -> None:
    text = _runs_like(width)
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), text
    assert lines[-1].endswith("┘"), text  # the right border is there: nothing cropped
    assert "2026-11-23" in text and "02:26:39" in text and "gated" in text  # maybe 2 lines
    first_column = "".join(line.split("│")[1].strip() for line in lines if line.startswith("│"))
    assert first_column == RUN  # a run id is folded onto more lines, never cut


def test_fit_drops_the_border_before_it_would_crop() -> None:
    console = Console(width=80, record=True, color_system=None)
    table = Table()
    for col in ("pos", "stream", "ver", "type", "workflow", "time (UTC)", "hash"):
        table.add_column(col)
    table.add_row("1234", STREAMS[0], "12", "attempt_anchor_recorded", f"wf-{RUN}",
                  "02:26:39.267", "55b578136b31")  # fmt: skip
    assert fit(table, give={"stream": "ellipsis", "workflow": "ellipsis", "hash": "crop"},
               console=console)  # fmt: skip
    console.print(table)
    row = console.export_text().splitlines()[-1]
    assert len(row) <= 80
    assert re.search(
        r"1234 .*remediat….* 12 .*attempt_anchor_recorded .*02:26:39.267 .*55b57813", row
    )


# -- --help ------------------------------------------------------------------------------------


def _paths(command: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    subs = getattr(command, "commands", {})
    out = [prefix]
    for name, sub in subs.items():
        out += _paths(sub, (*prefix, name))
    return out


ALL_COMMANDS = _paths(get_command(app))


@pytest.mark.parametrize(
    "path", ALL_COMMANDS, ids=[" ".join(p) or "tracebound" for p in ALL_COMMANDS]
)
def test_help_shows_no_metavar_on_flags_and_upper_case_arguments(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert not re.search(r"\{[a-z_]+\}", result.output), result.output
    assert re.search(r"--help +Show this message", result.output)


@pytest.mark.parametrize(
    "path", ALL_COMMANDS, ids=[" ".join(p) or "tracebound" for p in ALL_COMMANDS]
)
def test_help_paragraphs_are_rewrapped_not_broken_where_the_source_broke_them(
    path: tuple[str, ...],
) -> None:
    # Typer keeps a docstring's line breaks after its first paragraph; at 200 columns each
    # paragraph shorter than the terminal must come out on one line.
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    paragraphs = [" ".join(p.split()) for p in (command.help or "").split("\n\n")]
    output = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"}).output
    lines = {" ".join(line.split()) for line in output.splitlines()}
    for paragraph in paragraphs:
        if paragraph and len(paragraph) < 190:
            assert paragraph in lines, output


def test_arguments_read_as_click_writes_them() -> None:
    runner = CliRunner()
    usage = runner.invoke(app, ["prove", "--help"], env={"COLUMNS": "200"}).output
    assert "tracebound prove [OPTIONS] POSITION" in usage
    usage = runner.invoke(app, ["inspect", "--help"], env={"COLUMNS": "200"}).output
    assert "tracebound inspect [OPTIONS] [STREAM]" in usage  # optional with --attempts
    usage = runner.invoke(app, ["append", "--help"], env={"COLUMNS": "200"}).output
    assert "tracebound append [OPTIONS] [FILE]" in usage


def test_option_help_names_what_it_takes() -> None:
    runner = CliRunner()
    rebuild = runner.invoke(app, ["project", "rebuild", "--help"], env={"COLUMNS": "200"}).output
    assert "<list[str]>" not in rebuild
    for name in ("workflow_state", "cost_ledger", "roi", "audit_trail", "learning"):
        assert name in rebuild
    log = " ".join(runner.invoke(app, ["log", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "jsonl:///" in log and "postgresql://" in log and "sqlite:///" in log
    tail = " ".join(runner.invoke(app, ["tail", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "JSON Lines" in tail


def test_commands_are_listed_in_the_order_a_new_user_needs_them() -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    listed = re.findall(r"^│ ([a-z][a-z-]+) ", out, flags=re.M)
    first = ["init", "keys", "append", "log", "tail", "inspect", "checkpoint", "verify", "prove",
             "verify-proof"]  # fmt: skip
    assert listed[: len(first)] == first, listed
    assert set(listed) == set(get_command(app).commands)  # type: ignore[attr-defined]
    assert "More" not in out  # every command has its panel


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"tracebound {metadata.version('tracebound')}"


# -- usage errors in --json mode ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("log", "--start", "0"), "--start"),
        (("log", "-n", "3"), "No such option: -n"),
        (("prove",), "Missing argument 'POSITION'"),
        (("inspect",), "Missing argument 'STREAM'"),
        (("no-such-command",), "No such command"),
    ],
)
def test_usage_errors_are_json_with_json(cli: CLI, args: tuple[str, ...], message: str) -> None:
    out = cli.json(*args, code=2)
    assert out["ok"] is False
    assert out["error"]["kind"] == "UsageError"
    assert message in out["error"]["message"]
    human = cli.run(*args)  # without --json: Click's message on stderr, as before
    assert human.returncode == 2 and human.stdout == "" and message in human.stderr


# -- project status reads, never creates ------------------------------------------------------


def test_project_status_does_not_create_a_missing_views_file(tmp_path: Path) -> None:
    c = CLI(tmp_path)
    c.json("init")
    missing = tmp_path / "nonexistent" / "dir" / "views.db"
    out = c.json("project", "status", "--views", str(missing), code=2)
    assert "no views database at" in out["error"]["message"]
    assert "tracebound project run" in out["error"]["message"]
    assert not (tmp_path / "nonexistent").exists()
    assert c.json("project", "status", code=2)["error"]["kind"] == "ConfigError"
    assert not (c.cwd / ".tracebound" / "views.db").exists()
    c.json("project", "run")  # `run` creates them; then status reads them
    assert {s["lag"] for s in c.json("project", "status")["projections"]} == {0}


def _squeezed(text: str) -> str:
    """`text` without whitespace and box borders: a word rich folded over two lines of a
    panel reads as one again."""
    return "".join(text.replace("│", " ").split())


@pytest.mark.parametrize(
    "path", ALL_COMMANDS, ids=[" ".join(p) or "tracebound" for p in ALL_COMMANDS]
)
def test_help_at_80_and_120_columns_shows_every_option_and_its_whole_help(
    path: tuple[str, ...], tmp_path: Path
) -> None:
    # At 80 columns a default longer than the help column (`--key`'s
    # ~/.config/tracebound/keys/tracebound.key, `--witness`'s path) was cut to
    # `~/.config/tracebound/keys/trace…`: the one thing the user looked for, unreadable.
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    cli = CLI(tmp_path)
    for columns in ("80", "120"):
        cli.env["COLUMNS"] = columns
        proc = cli.run(*path, "--help")
        assert proc.returncode == 0, proc.stderr
        assert "…" not in proc.stdout, proc.stdout
        assert max(len(line) for line in proc.stdout.splitlines()) <= int(columns)
        page = _squeezed(proc.stdout)
        for param in command.params:
            if getattr(param, "hidden", False):  # accepted, deliberately not listed
                continue
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("-"):
                    assert re.search(rf"(?<![\w-]){opt}(?![\w-])", proc.stdout), (opt, columns)
            helptext = getattr(param, "help", None)
            if helptext:
                assert _squeezed(helptext) in page, (param.name, columns, proc.stdout)


@pytest.mark.parametrize("command", ["verify-evidence", "verify-proof"])
def test_offline_checks_do_not_ask_an_auditor_for_a_private_key(command: str) -> None:
    """`verify-evidence` and `verify-proof` run with the verifier key alone, yet their help
    listed `--key` "Private signing key file", and `--verifier-key` defaulted "from --key's
    .pub": an auditor read that a private key was wanted. `--key` (still accepted, for
    scripts on the owner's machine) is no longer shown, and `--verifier-key` says where the
    public key comes from."""
    out = " ".join(
        CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split()
    )
    assert "--verifier-key" in out and "tracebound keys show" in out
    assert "--key " not in out and "Private" not in out and "private" not in out, out
