"""The `--json` contract a script relies on, held for every command that takes `--json`.

Each command is run as a real process against a real SQLite ledger, once where it
succeeds and once where it fails (a missing store, an unknown option, a malformed ledger
file), and its stdout is parsed: exactly one JSON object, which says which command printed
it and the version of its shape (``command``, ``schema_version``), with ``ok``; a failure's
``error`` holds a ``kind`` and a ``message``, with the documented exit code. A new command
with `--json` fails :func:`test_every_json_command_is_held_here` until it is added.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from tests.e2e.test_cli import CLI, _lines, ready_cli
from tracebound.cli._common import JSON_SCHEMA_VERSION
from tracebound.cli.app import app


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> CLI:
    c = ready_cli(tmp_path_factory.mktemp("json"), 4, checkpoint=True)
    proof = c.run("prove", "1", "-o", "proof.json")
    assert proof.returncode == 0, proof.stderr
    # The views exist whichever case runs first (xdist spreads the cases over workers,
    # each with its own copy of this fixture: `project status` must not need `project run`
    # to have run on the same one).
    assert c.run("project", "run").returncode == 0
    (c.cwd / "CODEOWNERS").write_text("* @alice\n", encoding="utf-8")
    (c.cwd / "bad").mkdir()
    # Not a SQLite file: every command that opens it meets damage (`malformed`).
    (c.cwd / "bad" / "ledger.db").write_bytes(b"not a database, " * 512)
    return c


# (arguments, exit code, stdin): each command where it succeeds...
SUCCEEDS: list[tuple[list[str], int, str | None]] = [
    (["init"], 0, None),
    (["keys", "init", "--key", "other/other.key"], 0, None),
    (["keys", "show"], 0, None),
    (["append"], 0, _lines(2, start=10)),
    (["log"], 0, None),
    (["tail"], 0, None),
    (["inspect", "run-0"], 0, None),
    (["checkpoint"], 0, None),
    (["verify"], 0, None),
    (["verify-proof", "proof.json"], 0, None),
    (["demo"], 0, None),
    (["runs"], 0, None),
    (["metrics"], 0, None),
    (["project", "run"], 0, None),
    (["project", "rebuild"], 0, None),
    (["project", "status"], 0, None),
    (["report", "cost"], 0, None),
    (["report", "roi"], 0, None),
    (["report", "plugins"], 0, None),
    (["report", "gates"], 0, None),
    (["report", "trail", "wf-1"], 0, None),
    (["export", "anchors"], 0, None),
    (["copy", "sqlite:///.tracebound/ledger.db", "jsonl:///copied"], 0, None),
    (["repair"], 0, None),
]
# ...and where it fails: no such run or file, and the commands that have no success
# case above because they need a gated run (docs/pipeline.md has those).
FAILS: list[tuple[list[str], int, str | None]] = [
    (["approve", "no-run", "step", "--as", "alice", "--codeowners", "CODEOWNERS"], 2, None),
    (["reject", "no-run", "step", "--as", "alice", "--codeowners", "CODEOWNERS"], 2, None),
    (["resume", "no-run"], 2, None),
    (["abandon", "no-run", "--as", "alice", "--reason", "host lost"], 2, None),
    (["replay", "no-run"], 2, None),
    (["verify-evidence", "no-such-file.json"], 2, None),
    (["prove", "999"], 2, None),
    (["verify-proof", "no-such-proof.json"], 2, None),
    (["prove-consistency", "no-such.note"], 2, None),
    (["verify-consistency", "no-such-proof.json"], 2, None),
    (["inspect", "--attempts", "no-such/attempts.jsonl"], 2, None),
    # another key than the one that signs the ledger (rotating for real would change the
    # key every other case here uses)
    (["keys", "rotate", "--by", "alice", "--key", "other/other.key"], 2, None),
    (["export", "evidence", "no-run"], 2, None),
]


def _document(cli: CLI, args: list[str], code: int, stdin: str | None) -> dict[str, Any]:
    """The one JSON object ``args --json`` printed, checked against the envelope."""
    proc = cli.run(*args, "--json", stdin=stdin)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)  # the whole of stdout: one document, nothing else
    assert isinstance(doc, dict)
    assert doc["schema_version"] == JSON_SCHEMA_VERSION
    assert isinstance(doc["ok"], bool)
    assert doc["ok"] is (code == 0)
    if "error" in doc:
        assert set(doc["error"]) >= {"kind", "message"}
        assert all(isinstance(doc["error"][k], str) for k in ("kind", "message"))
    return doc


def _name(args: list[str]) -> str:
    """The command path of ``args`` (`report cost`), without its arguments."""
    return " ".join(args[: 2 if args[0] in {"keys", "project", "report", "export"} else 1])


@pytest.mark.parametrize(
    ("args", "code", "stdin"),
    SUCCEEDS + FAILS,
    ids=[" ".join(case[0]) for case in SUCCEEDS + FAILS],
)
def test_each_command_prints_one_document_naming_itself(
    cli: CLI, args: list[str], code: int, stdin: str | None
) -> None:
    doc = _document(cli, args, code, stdin)
    assert doc["command"] == _name(args)
    assert ("error" in doc) is (code != 0)


def _takes_store(name: str) -> bool:
    return name not in {
        "keys init", "keys show", "verify-proof", "verify-consistency", "verify-evidence",
        "demo", "copy",
    }  # fmt: skip


_WITH_STORE = [case for case in SUCCEEDS + FAILS[:4] if _takes_store(_name(case[0]))]


# init makes the store: a missing one is what it is for.
@pytest.mark.parametrize("args", [c[0] for c in _WITH_STORE if c[0] != ["init"]], ids=" ".join)
def test_a_missing_store_is_a_json_error(cli: CLI, args: list[str]) -> None:
    doc = _document(cli, [*args, "--store", "no-such-store"], 2, "")
    assert doc["command"] == _name(args)
    assert doc["error"]["kind"] == "StoreNotFound"


@pytest.mark.parametrize("args", [case[0] for case in _WITH_STORE], ids=" ".join)
def test_a_malformed_ledger_is_damage_in_json(cli: CLI, args: list[str]) -> None:
    doc = _document(cli, [*args, "--store", "bad"], 1, "")
    assert doc["command"] == _name(args)
    assert doc["error"]["kind"] == "LedgerDamaged"
    assert doc["error"]["damage"]["kind"] == "malformed"


@pytest.mark.parametrize(
    "args",
    [case[0] for case in SUCCEEDS + FAILS],
    ids=" ".join,
)
def test_a_usage_error_is_a_json_error_naming_the_command(cli: CLI, args: list[str]) -> None:
    doc = _document(cli, [*args, "--no-such-option"], 2, "")
    assert doc["command"] == _name(args)
    assert doc["error"]["kind"] == "UsageError"
    assert "--no-such-option" in doc["error"]["message"]


@pytest.mark.parametrize(
    ("args", "command"),
    [(["no-such-command"], None), (["report", "no-such-report"], "report"), (["prove"], "prove")],
)
def test_a_usage_error_before_a_command_is_known_names_what_was(
    cli: CLI, args: list[str], command: str | None
) -> None:
    doc = _document(cli, args, 2, None)
    assert doc["command"] == command
    assert doc["error"]["kind"] == "UsageError"


def test_prove_prints_the_proof_itself_which_names_its_format(cli: CLI) -> None:
    # Its stdout is the proof file (`prove 1 --json > proof.json`), whose members
    # verify-proof checks: it says what it is in `format`, not in the CLI's envelope.
    proc = cli.run("prove", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["format"] == "tracebound-inclusion/1"
    (cli.cwd / "piped.json").write_text(proc.stdout, encoding="utf-8")
    assert cli.json("verify-proof", "piped.json")["position"] == 1


def _json_commands() -> set[str]:
    found: set[str] = set()

    def walk(command: Any, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        if any("--json" in getattr(p, "opts", ()) for p in command.params):
            found.add(" ".join(path))

    walk(get_command(app), [])
    return found


def test_every_json_command_is_held_here() -> None:
    held = {_name(args) for args, _, _ in SUCCEEDS + FAILS}
    assert held == _json_commands()


def test_the_readme_names_the_envelope_keys() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    assert '"schema_version"' in readme
    assert '"command"' in readme
