"""JSON inside a JSON string, seen as text: a log line or an artifact that holds a
serialized request body (``{"body": "{\\"password\\": \\"…\\"}"}``).

The escaped quotes hide the key from the keyword and pair rules, so the redactor also
reads such text JSON-unescaped (one level, and a second for doubly escaped text) and maps
each hit back to exactly the escaped characters that wrote it. The marker replaces whole
escapes only, so the text stays valid JSON at every level. Ordinary escaped JSON with no
secret comes out byte-identical, and the work stays linear.

Also here: a URL password with ``+`` (or another character RFC 3986 allows in userinfo)
that detect-secrets' BasicAuth pattern excludes.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote, unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.pipeline.redaction_work import scanned

from tracebound.pipeline.redaction import Redactor

KEY = b"escaped-json-key-0123456789abcdef"
SECRET = "hunter2-long-secret"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(KEY)


def esc(value: Any) -> str:
    """``value`` serialized, then serialized again as a string: one level of escapes."""
    return json.dumps(json.dumps(value))


def names(result: Any) -> set[str]:
    return {n for r in result.redactions for n in (r.detector, *r.also_detected)}


def loads_all(text: str, levels: int) -> Any:
    """Parse ``text`` and the JSON string inside it, ``levels`` times (each must parse)."""
    value: Any = json.loads(text)
    for _ in range(levels):
        value = json.loads(value["body"] if isinstance(value, dict) else value)
    return value


# --- the cases from the field ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret", "detector"),
    [
        ('{"body": "{\\"password\\": \\"' + SECRET + '\\"}"}', SECRET, "secret-keyword"),
        (
            '{"msg": "{\\"auth\\": \\"dXNlcjpwYXNzd29yZA==\\"}"}',
            "dXNlcjpwYXNzd29yZA==",
            "basic-auth-header",
        ),
        (
            '{\\"ParameterKey\\": \\"DbPassword\\", \\"ParameterValue\\": \\"' + SECRET + '\\"}',
            SECRET,
            "secret-keyword",
        ),
        (
            '{"env": "[{\\"name\\": \\"DB_PASSWORD\\", \\"value\\": \\"' + SECRET + '\\"}]"}',
            SECRET,
            "secret-keyword",
        ),
        # A log line, not JSON at all around the escaped body.
        (
            'POST /login 401 body="{\\"user\\": \\"ops\\", \\"password\\": \\"' + SECRET + '\\"}"',
            SECRET,
            "secret-keyword",
        ),
        # The key itself written with a \\u escape.
        ('{"body": "{\\"pass\\u0077ord\\": \\"' + SECRET + '\\"}"}', SECRET, "secret-keyword"),
        (
            '{"body": "{\\"headers\\": {\\"Authorization\\": \\"Basic dXNlcjpwYXNzd29yZA==\\"}}"}',
            "dXNlcjpwYXNzd29yZA==",
            "basic-auth-header",
        ),
    ],
)
def test_escaped_json_is_read_unescaped(
    redactor: Redactor, text: str, secret: str, detector: str
) -> None:
    result = redactor.redact_text(text)
    assert secret not in result.value
    assert detector in names(result)
    # The record's span is exactly the escaped characters of the secret.
    assert [text[r.start : r.end] for r in result.redactions] == [secret]
    assert redactor.redact_text(result.value).redactions == ()


def test_serialized_body_stays_valid_json(redactor: Redactor) -> None:
    body = {"user": "ops", "password": SECRET, "note": 'say "hi"\n'}
    text = json.dumps({"body": json.dumps(body)})
    result = redactor.redact_text(text)
    assert SECRET not in result.value
    inner = loads_all(result.value, 1)
    assert inner["user"] == "ops" and inner["note"] == 'say "hi"\n'
    assert inner["password"].startswith("[REDACTED:secret-keyword:")


def test_doubly_escaped_json(redactor: Redactor) -> None:
    body = {"password": SECRET, "user": "ops"}
    text = json.dumps({"body": json.dumps({"body": json.dumps(body)})})
    assert '\\\\\\"password\\\\\\": \\\\\\"' in text  # \\\"password\\\": \\\"…
    result = redactor.redact_text(text)
    assert SECRET not in result.value
    inner = loads_all(result.value, 2)
    assert inner["user"] == "ops"
    assert inner["password"].startswith("[REDACTED:secret-keyword:")
    assert [text[r.start : r.end] for r in result.redactions] == [SECRET]


def test_escapes_inside_the_secret_are_taken_whole(redactor: Redactor) -> None:
    # The value holds a quote and a backslash: the marker takes their escapes whole, at
    # both levels, and the quotes around the value stay.
    value = 'p"ss\\word-12345'
    for levels in (1, 2):
        body: Any = {"password": value, "n": 1}
        for _ in range(levels):
            body = {"body": json.dumps(body)}
        text = json.dumps(body)
        result = redactor.redact_text(text)
        inner = loads_all(result.value, levels)
        assert inner["n"] == 1
        assert inner["password"].startswith("[REDACTED:secret-keyword:")
        assert "word-12345" not in result.value


def test_escaped_json_in_a_structure(redactor: Redactor) -> None:
    line = json.dumps({"body": json.dumps({"password": SECRET})})
    result = redactor.redact({"log": [line], "step": "login"})
    assert SECRET not in json.dumps(result.value)
    assert result.redactions[0].path == "$.log[0]"
    assert loads_all(result.value["log"][0], 1)["password"].startswith("[REDACTED:")


def test_three_levels_are_not_unescaped(redactor: Redactor) -> None:
    # The bound: two levels of unescaping. A third level is left as it is (a long random
    # value would still be taken by the entropy rule).
    body: Any = {"password": SECRET}
    for _ in range(3):
        body = {"body": json.dumps(body)}
    text = json.dumps(body)
    assert redactor.redact_text(text).value == text


# --- negatives: ordinary escaped JSON is untouched ---------------------------------------

HARMLESS = [
    esc({"user": "ops", "action": "login", "ok": True, "retries": 3}),
    esc({"max_tokens": 1024, "token_count": 17, "model": "claude", "prompt": 'say "hi"\n'}),
    esc({"password": "", "token": None, "api_key": "${API_KEY}", "secret": "<redacted>"}),
    esc({"password_policy": "min 12 chars", "reset_password_url": "/reset"}),
    esc({"name": "DB_HOST", "value": "db.internal"}),
    esc({"path": "C:\\Users\\ops\\new\\table.txt", "emoji": "\U0001f600 caf\u00e9"}),
    esc({"sha256": "sha256:" + "ab" * 32, "id": "550e8400-e29b-41d4-a716-446655440000"}),
    json.dumps({"body": esc({"user": "ops", "lines": ["a\tb", "c\\d"]})}),
    'log: request={\\"q\\": \\"weather in Paris\\", \\"n\\": 3} took 12ms',
    'a stray \\" and \\\\" and \\u00e9 and \\x in prose',
]


@pytest.mark.parametrize("text", HARMLESS)
def test_ordinary_escaped_json_is_byte_identical(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    assert result.redactions == ()
    assert result.value == text


_WORDS = st.sampled_from(["ops", "login", "Paris", "ok", "a b", 'q"x', "c\\d", "\n", "é", "42"])
_HARMLESS_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | _WORDS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["user", "note", "n", "items", "q"]), inner, max_size=3)
    ),
    max_leaves=8,
)


@SETTINGS
@given(value=_HARMLESS_VALUES, levels=st.integers(1, 3))
def test_harmless_escaped_json_is_byte_identical(value: Any, levels: int) -> None:
    text = json.dumps(value)
    for _ in range(levels):
        text = json.dumps({"body": text})
    assert Redactor(KEY).redact_text(text).value == text


_SECRETS = st.sampled_from(
    [SECRET, "Tr0ub4dor&3-horse", 'p"ss\\word-12345', "AKIAIOSFODNN7EXAMPLE"]
)


@SETTINGS
@given(
    secret=_SECRETS,
    key=st.sampled_from(["password", "api_key", "db_password", "clientSecret", "token"]),
    other=_HARMLESS_VALUES,
    levels=st.integers(1, 2),
)
def test_no_secret_survives_and_json_stays_valid(
    secret: str, key: str, other: Any, levels: int
) -> None:
    body: Any = {"other": other, key: secret}
    for _ in range(levels):
        body = {"body": json.dumps(body)}
    text = json.dumps(body)
    redactor = Redactor(KEY)
    once = redactor.redact_text(text)
    inner = loads_all(once.value, levels)  # valid JSON at every level
    assert inner["other"] == other
    assert inner[key].startswith("[REDACTED:")
    assert redactor.redact_text(once.value).redactions == ()


# --- the view itself -----------------------------------------------------------------------


def test_json_view_maps_back_to_whole_escapes() -> None:
    from tracebound.pipeline._redaction_decoding import json_view

    text = 'a\\"b\\\\c\\u00e9d\\n\\ud83d\\x'
    view = json_view(text)
    assert view is not None
    # \\ud83d (half a surrogate pair) and \\x (not an escape) stay as written.
    assert view.text == 'a"b\\c\u00e9d\n\\ud83d\\x'
    assert view.original(1, 2) == (1, 3)  # " came from \"
    assert view.original(3, 4) == (4, 6)  # \ from \\
    assert view.original(5, 6) == (7, 13)  # é from \u00e9
    assert view.original(0, 8) == (0, 16)
    assert json_view("no escaped quote here \\n") is None  # the gate: a backslash-quote


# --- cost --------------------------------------------------------------------------------


def _escaped_log(size: int) -> str:
    """Lines of escaped bodies with secrets, doubly escaped ones and runs of backslashes:
    every line is unescaped twice and has hits to map back."""
    line = (
        json.dumps({"body": json.dumps({"password": SECRET, "q": 'a "b" \\ c' * 3})})
        + " "
        + json.dumps({"body": json.dumps({"body": json.dumps({"api_key": SECRET})})})
        + ' \\\\\\\\\\\\\\" \\u00e9\\n\n'
    )
    return (line * (size // len(line) + 1))[:size]


def test_unescaping_does_linear_work() -> None:
    # Counted, not timed (tests/unit/pipeline/redaction_work.py): 512 KB must scan about
    # eight times what 64 KB scans (quadratic growth would give 64), and unescaping a
    # bounded multiple of the same bodies written without escapes. Each of the two views
    # is no longer than the text it unescapes.
    redactor = Redactor(KEY)
    small, large = _escaped_log(64 * 1024), _escaped_log(512 * 1024)
    w_small, w_large = scanned(redactor, small), scanned(redactor, large)
    assert w_large / w_small < 8 * 1.25, (w_small, w_large)
    plain = large.replace('\\"', "'").replace("\\", "/")
    assert w_large / scanned(redactor, plain) < 20, (w_large,)


# --- URL passwords with characters the library's pattern excludes ----------------------------


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("https://user:pass+word-secret@host.example.com/x", "pass+word-secret"),
        ("postgresql://app:s3cr3t!$*@db.internal:5432/app", "s3cr3t!$*"),
        ("amqp://user+tag:pass=word;x@mq.internal", "pass=word;x"),
        ("redis://:p+ss-word@cache:6379", "p+ss-word"),
    ],
)
def test_url_password_with_sub_delims(redactor: Redactor, text: str, password: str) -> None:
    result = redactor.redact_text(text)
    assert password not in result.value
    assert [text[r.start : r.end] for r in result.redactions] == [password]
    assert result.redactions[0].detector == "basic-auth"


@pytest.mark.parametrize(
    "text",
    [
        "https://host.example.com:8443/a+b@c",  # a port and a path, no userinfo
        "see https://example.com, or mail ops+alerts@example.org",
        "git@github.com:org/repo+x.git",
    ],
)
def test_url_without_a_password_is_untouched(redactor: Redactor, text: str) -> None:
    assert not any(r.detector == "basic-auth" for r in redactor.redact_text(text).redactions)


def test_whole_escapes_never_cuts_an_escape() -> None:
    from tracebound.pipeline._redaction_decoding import whole_escapes

    text = 'x\\"secret\\"y\\u00e9z\\\\w'
    assert len(text) == 22
    # Ending on the backslash of \" stops before it; starting on its quote starts after.
    assert whole_escapes(text, 0, 2) == (0, 1)
    assert whole_escapes(text, 0, 3) == (0, 3)
    assert whole_escapes(text, 2, 9) == (3, 9)
    # Inside \u00e9: before it at the end, after it at the start.
    assert whole_escapes(text, 11, 15) == (11, 12)
    assert whole_escapes(text, 10, 11) == (11, 11)  # only the quote of \": nothing
    assert whole_escapes(text, 14, 19) == (18, 19)
    # \\ is one escape: its second backslash opens none, and neither half is cut.
    assert whole_escapes(text, 18, 21) == (18, 21)
    assert whole_escapes(text, 18, 20) == (18, 19)
    assert whole_escapes(text, 20, 22) == (21, 22)


def test_encoded_escaped_json_is_unescaped_after_decoding(redactor: Redactor) -> None:
    # A decoded text (base64, a percent view) gets its own JSON view.
    body = json.dumps({"body": json.dumps({"password": SECRET})})
    encoded = base64.b64encode(body.encode()).decode()
    result = redactor.redact_text(f"data={encoded}")
    assert encoded not in result.value
    assert "secret-keyword" in names(result)
    escaped = quote(body, safe="")
    result = redactor.redact_text(f"q={escaped}")
    assert SECRET not in unquote(result.value)
    assert json.loads(json.loads(unquote(result.value[2:]))["body"])["password"].startswith(
        "[REDACTED:secret-keyword:"
    )
