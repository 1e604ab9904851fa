"""Text tracebound did not write, fed to the CLI's readers: a typed error or the result.

`append`'s JSON lines and `report trail`'s engine histories come from other programs. Each
reader either returns what it documents or raises a :class:`ConfigError` /
:class:`ContractError` naming the problem; never a ValueError (Python's int() refuses more
than 4300 digits), RecursionError (deep nesting), OverflowError (``Infinity`` as an int) or
UnicodeDecodeError escaping as a traceback.
"""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.cli.app import _read_requests
from tracebound.cli.report import _engine_rows
from tracebound.errors import ConfigError, ContractError
from tracebound.projections.trail import parse_temporal_history

GOOD_LINE = json.dumps(
    {
        "stream_id": "run-1",
        "payload": {"kind": "cost_incurred", "tier": "direct", "amount_usd": "0.5", "source": "s"},
    }
)

# What an edit may splice into a line: a number past int()'s digit limit, deep nesting,
# JSON's non-numbers, escapes, a lone surrogate, a key twice.
_SPLICES = st.sampled_from(
    [
        "9" * 5000, "[" * 5000, "{" * 3000, "[" * 50_000 + "]" * 50_000, "NaN", "-Infinity",
        "1e999", '"\\ud800"', "\\u0000", '"kind": 1, "kind"', "\ud800", "\x00", "null", "[]",
    ]
)  # fmt: skip


def _read(text: str) -> None:
    try:
        _read_requests(io.StringIO(text), None)
    except ConfigError as exc:
        assert str(exc).startswith("line ")  # noqa: PT017 - says which line


@pytest.mark.parametrize(
    "line",
    [
        '{"stream_id": "s", "payload": ' + "1" * 5000 + "}",
        '{"stream_id": "s", "expected_version": ' + "1" * 4301 + ', "payload": {}}',
        "[" * 100_000,
        '{"stream_id": "s", "payload": ' + '{"a":' * 100_000 + "}",
    ],
    ids=["huge-int", "huge-expected-version", "deep-array", "deep-object"],
)
def test_a_line_python_json_cannot_hold_is_a_config_error_naming_the_line(line: str) -> None:
    with pytest.raises(ConfigError, match=r"^line 2: not JSON"):
        _read_requests(io.StringIO(GOOD_LINE + "\n" + line + "\n"), None)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_an_edited_append_line_is_read_or_refused_as_config_error(data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(GOOD_LINE)))
    j = data.draw(st.integers(i, len(GOOD_LINE)))
    _read(GOOD_LINE[:i] + data.draw(_SPLICES | st.text(max_size=8)) + GOOD_LINE[j:] + "\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_read_or_refused_as_config_error(text: str) -> None:
    _read(text)


# -- engine histories for `report trail --temporal/--langgraph` --------------------------------

TEMPORAL_EVENT = {
    "eventId": "1",
    "eventTime": "2026-05-18T12:00:00Z",
    "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
    "workflowExecutionStartedEventAttributes": {"workflowType": {"name": "Remediate"}},
}


@pytest.mark.parametrize(
    "event_id", [float("inf"), float("nan"), 1.5, True, 2**63, -1, "1" * 30, " 1", "\u0661", []]
)
def test_an_event_id_that_is_no_sequence_number_is_a_contract_error(event_id: object) -> None:
    # Stored in an INTEGER column by --save-history: past 2**63 SQLite refuses it, and a
    # float would be cut to another number without a word.
    with pytest.raises(ContractError, match="eventId"):
        parse_temporal_history([{**TEMPORAL_EVENT, "eventId": event_id}], workflow_id="w")


@pytest.mark.parametrize("event_id", ["1", 1, str(2**63 - 1)])
def test_an_event_id_is_an_integer_or_its_decimal_text(event_id: object) -> None:
    (row,) = parse_temporal_history([{**TEMPORAL_EVENT, "eventId": event_id}], workflow_id="w")
    assert row["seq"] == int(str(event_id))


@pytest.mark.parametrize(
    "content",
    [
        b"\xff\xfe[]",
        b"[" * 100_000,
        b'[{"eventId": 1' + b"0" * 5000 + b"}]",
        (  # NaN would be stored as null: the value lost
            b'[{"eventId": 1, "eventTime": "2026-05-18T12:00:00Z", "eventType": "x", '
            b'"aEventAttributes": {"v": NaN}}]'
        ),
        b'[{"eventId": 1, "eventId": 2}]',
    ],
    ids=["not-utf8", "deep", "huge-int", "nan", "key-twice"],
)
def test_an_engine_history_file_json_cannot_read_plainly_is_a_config_error(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "history.json"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=r"history\.json"):
        _engine_rows("w", path, None)
    with pytest.raises(ConfigError, match=r"history\.json"):
        _engine_rows("w", None, path)


_ENGINE_SPLICES = st.sampled_from(
    ["Infinity", "NaN", "1e999", "9" * 5000, "[" * 3000, "1.5", "true", "null", '"\\ud800"',
     "[]", "{}", '"x"', "-1", '"2026-02-30T00:00:00Z"', '"0001-01-01T00:00:00+23:59"']
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_an_edited_engine_history_is_read_or_refused_with_a_typed_error(
    data: st.DataObject,
) -> None:
    text = json.dumps([TEMPORAL_EVENT, {"ts": "2026-05-18T12:00:02+00:00", "id": "c"}])
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 40)))
    edited = (text[:i] + data.draw(_ENGINE_SPLICES | st.text(max_size=6)) + text[j:]).encode(
        "utf-8", "surrogatepass"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.json"
        path.write_bytes(edited)
        for temporal, langgraph in ((path, None), (None, path)):
            try:
                rows = _engine_rows("w", temporal, langgraph)
            except (ConfigError, ContractError):
                continue
            for row in rows:  # what --save-history writes: an int SQLite holds
                assert type(row["seq"]) is int and 0 <= row["seq"] < 2**63
