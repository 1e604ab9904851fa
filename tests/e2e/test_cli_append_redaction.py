"""`tracebound append` redacts each payload before it is written, as the runner redacts what
a step hands on: a secret piped into the CLI must not be hashed into the log for good."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.e2e.test_cli import CLI, _lines

PASSWORD = "hunter2-EXAMPLE-pass"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def _leaky(stream: str = "run-1") -> str:
    lines = [
        {
            "stream_id": stream,
            "payload": {
                "kind": "merge_outcome",
                "pr_url": f"https://ci:{PASSWORD}@git.example/acme/app/pull/1",
                "decision": "merged",
                "reviewer": "ops@example.com",
            },
        },
        {
            "stream_id": stream,
            "payload": {
                "kind": "cost_incurred",
                "tier": "direct",
                "amount_usd": "0.0100",
                "source": f"llm {AWS_KEY}",
            },
        },
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def _stored(cli: CLI) -> str:
    return (cli.cwd / ".tracebound" / "ledger.db").read_bytes().decode("utf-8", "replace")


def test_append_redacts_secrets_and_personal_data_before_writing(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    out = cli.json("append", stdin=_leaky())
    assert (out["appended"], out["redacted"]) == (2, {"aws-access-key": 1, "basic-auth": 1,
                                                      "email": 1})  # fmt: skip
    stored = _stored(cli)
    for secret in (PASSWORD, AWS_KEY, "ops@example.com"):
        assert secret not in stored
    events = cli.json("log")["events"]
    merge, cost = (e["payload"] for e in events)
    assert merge["pr_url"].startswith("https://ci:[REDACTED:basic-auth:")
    assert merge["decision"] == "merged" and cost["amount_usd"] == "0.0100"
    assert cli.json("verify", code=3)["damage"] is None  # no checkpoint yet, nothing damaged
    key = tmp_path / "home" / ".config" / "tracebound" / "keys" / "redaction.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32


def test_clean_input_is_written_unchanged_and_says_nothing_was_redacted(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    assert cli.json("append", stdin=_lines(4))["redacted"] == {}
    amounts = [e["payload"]["amount_usd"] for e in cli.json("log")["events"]]
    assert amounts == ["0.0000", "0.0001", "0.0002", "0.0003"]
    human = cli.run("append", stdin=_lines(1, start=4))
    assert human.returncode == 0 and "Redacted" not in human.stdout


def test_no_redact_writes_the_payloads_as_given(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    assert cli.json("append", "--no-redact", stdin=_leaky())["redacted"] == {}
    assert PASSWORD in _stored(cli)


def test_the_human_output_names_what_was_redacted(tmp_path: Path) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    proc = cli.run("append", stdin=_leaky())
    assert proc.returncode == 0, proc.stderr
    assert "Redacted before writing: aws-access-key 1, basic-auth 1, email 1" in proc.stdout


def test_a_redaction_key_inside_the_store_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    cli = CLI(tmp_path)
    cli.json("init")
    inside = cli.cwd / ".tracebound" / "redaction.key"
    out = cli.json("append", "--redaction-key", str(inside), code=2, stdin=_leaky())
    assert out["ok"] is False and "inside the store" in out["error"]["message"]
    assert cli.json("log")["events"] == []
