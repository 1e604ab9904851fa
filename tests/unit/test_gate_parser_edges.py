"""Hostile tool output reaches the parsers, and the parsers promise a bounded signal, never a
crash: a lone surrogate (JSON can carry one) or a digit that is not ASCII in a report."""

from __future__ import annotations

import json
from pathlib import Path

from tracebound.pipeline.retry.parsers import (
    GateOutput,
    parse_pytest_junit,
    parse_ruff_json,
    signal,
)
from tracebound.pipeline.retry.sandbox import ProcessResult


def _out(tmp_path: Path, *, stdout: bytes = b"", junit: bytes | None = None) -> GateOutput:
    files = {}
    if junit is not None:
        files["junitxml"] = tmp_path / "j.xml"
        files["junitxml"].write_bytes(junit)
    return GateOutput("g", ProcessResult(("tool",), 1, False, 1, stdout, b""), tmp_path, files)


def test_a_lone_surrogate_becomes_a_replacement_not_a_validation_error() -> None:
    s = signal("g", "test_failure", "t\ud800", "boom \udcff end", "f.py:\ud83d")
    assert (s.subject, s.message, s.location) == ("t\ufffd", "boom \ufffd end", "f.py:\ufffd")
    s.model_dump_json()  # encodable


def test_ruff_json_with_an_escaped_surrogate_is_a_signal(tmp_path: Path) -> None:
    item = {"code": "F401", "filename": "a.py", "location": {"row": 1, "column": 1}}
    stdout = json.dumps([{**item, "message": "unused \\ud800 import"}]).replace("\\\\", "\\")
    (s,) = parse_ruff_json(_out(tmp_path, stdout=stdout.encode())).signals
    assert s.message == "unused \ufffd import"


def test_a_junit_line_that_is_a_unicode_digit_is_not_a_crash(tmp_path: Path) -> None:
    junit = (
        '<testsuite><testcase classname="t" name="test_x" file="t.py" line="\u00b2">'
        '<failure message="no"/></testcase></testsuite>'
    ).encode()
    (s,) = parse_pytest_junit(_out(tmp_path, junit=junit)).signals
    assert (s.subject, s.location) == ("t.py::test_x", "t.py")
