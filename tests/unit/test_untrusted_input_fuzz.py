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

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracebound.cli.app import _read_requests
from tracebound.errors import ConfigError

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
