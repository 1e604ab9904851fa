"""The verifying side's readers fed edited files and tool output: a verdict, never a traceback.

``attempts.jsonl`` and an exported anchor dataset sit on disk where anyone with the folder
can edit them; a gate's output comes from a tool run on a patch the verifier does not
trust. Python's ``json`` raises ValueError past 4300 digits and RecursionError on deep
nesting, neither of them a ``JSONDecodeError``; each reader must turn both into its own
answer (damage at a line, ``ValidationFailed``, a crash signal).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.retry.retry_kit import Kit
from tests.unit.retry.test_retry_anchors import _filled
from tests.unit.retry.test_retry_ledger import two_attempts
from tests.unit.retry.test_retry_parsers import _out

from tracebound.errors import ValidationFailed
from tracebound.pipeline.retry.anchors import anchor_dataset, read_dataset, write_dataset
from tracebound.pipeline.retry.ledger import verify_attempts
from tracebound.pipeline.retry.parsers import parse_ruff_json, parse_secret_scan

# What an edit may splice in: a number past int()'s digit limit, deep nesting, JSON's
# non-numbers, bytes that are not UTF-8, a key twice.
_SPLICES = st.sampled_from(
    [
        b"9" * 5000, b"[" * 5000, b"{" * 3000, b"[" * 50_000 + b"]" * 50_000, b"NaN",
        b"-Infinity", b"1e999", b'"\\ud800"', b"\xff", b"\xc3", b'"prev_hash": 1, "prev_hash"',
        b"null", b"[]", b"\n", b"\r",
    ]
)  # fmt: skip
_DEEP = [b"[" * 100_000, b'{"a":' * 100_000, b"1" * 5000, b'{"n": ' + b"9" * 4301 + b"}"]


def _edit(data: st.DataObject, good: bytes) -> bytes:
    i = data.draw(st.integers(0, len(good)))
    j = data.draw(st.integers(i, min(len(good), i + 40)))
    return good[:i] + data.draw(_SPLICES | st.binary(max_size=8)) + good[j:]


@pytest.mark.parametrize("line", _DEEP, ids=["deep-array", "deep-object", "huge-int", "huge-in"])
def test_an_attempts_line_python_json_cannot_hold_is_damage_at_that_line(
    kit: Kit, line: bytes
) -> None:
    path, head = two_attempts(kit)
    path.write_bytes(path.read_bytes() + line + b"\n")
    result = verify_attempts(kit.run_dir(), prev_chain_head=head)  # never raises
    assert result.damage is not None
    assert result.damage.line == 3


def test_an_edited_attempts_log_is_verified_or_damage_never_a_traceback(kit: Kit) -> None:
    path, head = two_attempts(kit)
    good = path.read_bytes()

    @settings(max_examples=150, deadline=None)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        edited = _edit(data, good)
        path.write_bytes(edited)
        result = verify_attempts(kit.run_dir(), prev_chain_head=head)
        assert (result.damage is None) == (edited == good)

    try:
        check()
    finally:
        path.write_bytes(good)


def test_an_edited_dataset_is_read_or_refused_as_validation_failed(kit: Kit) -> None:
    _filled(kit, 1)
    rows = anchor_dataset(kit.ledger)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "anchors.jsonl"
        with out.open("wb") as fh:
            write_dataset(rows, "jsonl", fh)
        good = out.read_bytes()

        @settings(max_examples=150, deadline=None)
        @given(data=st.data())
        def check(data: st.DataObject) -> None:
            out.write_bytes(_edit(data, good))
            try:
                read_dataset(out, "jsonl")
            except ValidationFailed as exc:
                assert "anchors.jsonl" in str(exc)  # noqa: PT017 - names the file

        check()
        for content in (*_DEEP, b"\xff\xfe{}\n"):
            out.write_bytes(content)
            with pytest.raises(ValidationFailed, match=r"anchors\.jsonl"):
                read_dataset(out, "jsonl")


_TOOL_SPLICES = st.sampled_from(
    ["[" * 5000, "{" * 3000, "9" * 5000, "1e999", "NaN", '"x"', "[]", "{}", "null", "-1", "1.5"]
)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_edited_tool_output_is_read_or_a_signal_never_a_traceback(data: st.DataObject) -> None:
    lint = {"code": "F401", "message": "m", "filename": "a.py", "location": {"row": 1}}
    finding = {"path": "a.py", "line": 2, "detector": "jwt", "reason": "r"}
    ruff = json.dumps([lint])
    scan = json.dumps({"files_scanned": 3, "findings": [finding]})
    with tempfile.TemporaryDirectory() as tmp:
        for good, parse in ((ruff, parse_ruff_json), (scan, parse_secret_scan)):
            i = data.draw(st.integers(0, len(good)))
            j = data.draw(st.integers(i, min(len(good), i + 30)))
            text = good[:i] + data.draw(_TOOL_SPLICES | st.text(max_size=6)) + good[j:]
            parse(_out(Path(tmp), stdout=text.encode("utf-8", "surrogatepass")))


def test_a_file_that_is_no_parquet_is_refused_as_validation_failed(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "anchors.parquet"
    out.write_bytes(b"PAR1 not really")
    with pytest.raises(ValidationFailed, match=r"anchors\.parquet: not a Parquet dataset"):
        read_dataset(out, "parquet")
