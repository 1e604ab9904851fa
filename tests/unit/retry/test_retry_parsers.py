"""Parsers: tool output in, bounded structured signals out (never the raw text)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracebound.pipeline.retry.parsers import (
    GateOutput,
    parse_exit_code,
    parse_pytest_junit,
    parse_ruff_json,
    parse_secret_scan,
    signal,
)
from tracebound.pipeline.retry.sandbox import ProcessResult


def _out(
    tmp_path: Path, *, code: int | None = 1, stdout: bytes = b"", junit: bytes | None = None
) -> GateOutput:
    files = {}
    if junit is not None:
        files["junitxml"] = tmp_path / "j.xml"
        files["junitxml"].write_bytes(junit)
    result = ProcessResult(("tool",), code, code is None, 1, stdout, b"")
    return GateOutput("g", result, tmp_path, files)


def test_pytest_junit_from_a_real_run_with_classes_and_errors(tmp_path: Path) -> None:
    (tmp_path / "test_mix.py").write_text(
        "import pytest\n\n"
        "class TestThing:\n    def test_method(self):\n"
        "        assert 1 == 2, 'nope\\nsecond line'\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n\n"
        "def test_error(broken):\n    pass\n\n"
        "def test_ok():\n    pass\n\n"
        "@pytest.mark.skip\ndef test_skipped():\n    pass\n"
    )
    junit = tmp_path / "out.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
         "junit_family=xunit1", f"--junitxml={junit}", "test_mix.py"],
        cwd=tmp_path, capture_output=True, check=False,
    )  # fmt: skip
    result = ProcessResult(("pytest",), proc.returncode, False, 1, proc.stdout, proc.stderr)
    parsed = parse_pytest_junit(GateOutput("tests", result, tmp_path, {"junitxml": junit}))
    by_subject = {s.subject: s for s in parsed.signals}
    method = by_subject["test_mix.py::TestThing::test_method"]
    assert (method.kind, method.message) == ("test_failure", "AssertionError: nope")
    assert by_subject["test_mix.py::test_error"].kind == "test_error"
    assert parsed.metrics == {
        "tests_total": 4,
        "tests_passed": 1,
        "tests_failed": 2,
        "tests_skipped": 1,
    }
    assert parsed.score == 10_000 // 3


def test_pytest_exit_5_fails_and_dtd_is_refused(tmp_path: Path) -> None:
    (sig,) = parse_pytest_junit(_out(tmp_path, code=5)).signals
    assert sig.message == "no tests were collected"
    evil = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><testsuites/>'
    (sig,) = parse_pytest_junit(_out(tmp_path, junit=evil)).signals
    assert sig.kind == "crash" and "DTD" in sig.message


def test_ruff_json_and_long_fields_are_cut(tmp_path: Path) -> None:
    items = [
        {
            "code": "F401",
            "message": "x" * 5000,
            "filename": str(tmp_path.resolve() / "pkg" / "m.py"),
            "location": {"row": 3, "column": 8},
        }
    ]
    (sig,) = parse_ruff_json(_out(tmp_path, stdout=json.dumps(items).encode())).signals
    assert (sig.subject, sig.location) == ("F401", "pkg/m.py:3:8")
    assert len(sig.message) == 1024 and sig.message.endswith("…")
    (bad,) = parse_ruff_json(_out(tmp_path, stdout=b"not json")).signals
    assert bad.kind == "crash"


@pytest.mark.parametrize("pad", [470, 476, 479, 482, 485, 488])
def test_a_message_cut_to_its_limit_ends_with_a_whole_word(pad: int) -> None:
    """A message was cut at its 1024th character and redacted later (gates.py): a cut
    through `https://user:password@host` left `user:passw` without the `@host` the URL
    rule needs, and that piece went on to the summary and the next attempt's prompt."""
    url = "https://deploy:Sup3rS3cretPassw0rdValue@pypi.internal.example/simple"
    message = "AssertionError: " + "x " * pad + "fetch failed for " + url
    sig = signal("tests", "test_failure", "t::x", message)
    assert len(sig.message) <= 1024 and sig.message.endswith("…")
    assert set(sig.message[:-1].split()) <= set(message.split())  # whole words only
    assert "Sup3r" not in sig.message


def test_secret_scan_and_exit_code(tmp_path: Path) -> None:
    report = {"files_scanned": 1, "findings": [{"path": "a.py", "line": 2, "detector": "jwt",
                                                 "reason": "JSON Web Token"}]}  # fmt: skip
    (sig,) = parse_secret_scan(_out(tmp_path, stdout=json.dumps(report).encode())).signals
    assert (sig.kind, sig.subject, sig.location) == ("secret_found", "jwt", "a.py:2")
    assert parse_exit_code(_out(tmp_path, code=0)).signals == ()
    (failed,) = parse_exit_code(_out(tmp_path, code=3)).signals
    assert (failed.kind, failed.subject, failed.message) == ("test_failure", "g", "exit 3")
    (crash,) = parse_exit_code(_out(tmp_path, code=-11)).signals
    assert (crash.kind, crash.message) == ("crash", "killed by SIGSEGV")


@pytest.mark.parametrize("stdout", [b"", b"OK", b"[]", b'{"findings": null}', b"\xff"])
@pytest.mark.parametrize("code", [0, 1])
def test_a_secret_scan_that_did_not_say_what_it_found_fails_closed(
    tmp_path: Path, stdout: bytes, code: int
) -> None:
    """Output that is not the scan's report passed the gate when the scan exited 0: the
    parser found no findings list and returned no signal. Like ruff's parser, it is now a
    crash: a secrets gate must not pass on a report nobody could read."""
    (sig,) = parse_secret_scan(_out(tmp_path, code=code, stdout=stdout)).signals
    assert (sig.kind, sig.subject) == ("crash", "secret-scan")
    assert "not the secret scan's report" in sig.message


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_blank_subjects_never_fail_validation(tmp_path: Path, text: str) -> None:
    items = [{"code": text, "message": text, "filename": text, "location": {}}]
    (sig,) = parse_ruff_json(_out(tmp_path, stdout=json.dumps(items).encode())).signals
    assert sig.subject
