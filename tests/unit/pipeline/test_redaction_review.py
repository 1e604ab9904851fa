"""Review of the encoded-contexts redaction (form ``+``, third layer, JSON-escaped
wrapping, ``auth`` keys, CloudFormation pairs): the defects found, one test each.

- A wrapped base64 block that does not decode (an image, any binary blob) had each of its
  lines tried as the start of a block again: quadratic in the number of lines. With ``\\n``
  escapes read as line breaks, every JSON-dumped image took that path.
- A token right after a JSON escape other than ``\\n``, ``\\r``, ``\\t`` (``\\u00e9``, which
  ``json.dumps`` writes for any non-ASCII character, ``\\/``, ``\\b``, ``\\f``) was read with
  the escape's letters in it: base64 of a secret was not decoded, and an entropy marker
  took the letters and left a bad escape (``\\[REDACTED…``).
- ``"auth": "Basic <base64 of user:password>"`` was not taken by the ``auth`` rule.
"""

from __future__ import annotations

import base64
import json
import random
import re
from typing import Any

import pytest

from tracebound.pipeline import _redaction_decoding as decoding
from tracebound.pipeline.redaction import Redactor

KEY = b"redaction-review-key-0123456789ab"
TOKEN = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"  # taken by the base64 entropy rule
HEX = "0a1b2c3d4e5f60718293a4b5"  # taken by the hex entropy rule
DOCKER_AUTH = base64.b64encode(b"ci-bot:hunter2-EXAMPLE").decode()


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(KEY)


def names(result: Any) -> set[str]:
    return {n for r in result.redactions for n in (r.detector, *r.also_detected)}


# --- a wrapped block that does not decode costs linear time ------------------------------


class _Counting:
    """Stands in for ``_NEXT_LINE``: counts the lines the block scanner reads."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def match(self, text: str, pos: int) -> re.Match[str] | None:
        self.calls += 1
        return self.pattern.match(text, pos)


def _binary_blob(lines: int) -> str:
    rng = random.Random(7)
    data = bytes(rng.getrandbits(8) for _ in range(57 * lines))  # 76-character lines
    return base64.encodebytes(data).decode()


@pytest.mark.parametrize(
    "wrap",
    [lambda blob: json.dumps({"image": blob}), lambda blob: "image: |\n" + blob],
    ids=["json-escapes", "real-lines"],
)
def test_a_wrapped_binary_blob_is_read_in_linear_time(
    monkeypatch: pytest.MonkeyPatch, wrap: Any
) -> None:
    counting = _Counting(decoding._NEXT_LINE)
    monkeypatch.setattr(decoding, "_NEXT_LINE", counting)
    reads = []
    for lines in (100, 800):
        counting.calls = 0
        text = wrap(_binary_blob(lines))
        assert list(decoding.base64_texts(text)) == []
        reads.append(counting.calls)
    # Eight times the lines, about eight times the reads (quadratic: about 64 times).
    assert reads[1] / reads[0] < 8 * 1.5, reads


# --- tokens after any JSON escape -------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"k": "é" + base64.b64encode(b"password=hunter2-EXAMPLE").decode()}),
        '{"k": "\\/' + base64.b64encode(b"password=hunter2-EXAMPLE").decode() + '"}',
    ],
    ids=["u-escape", "slash"],
)
def test_base64_of_a_secret_after_a_json_escape_is_decoded(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    assert "base64-secret" in names(result), result
    assert "cGFzc3dvcmQ9aHVudGVyMi1FWEFNUExF" not in result.value
    assert json.loads(result.value)["k"].startswith(json.loads(text)["k"][0])


@pytest.mark.parametrize(
    "inside",
    [
        "é" + TOKEN,  # json.dumps writes \u00e9
        "é" + HEX,
        "\b" + HEX,
        "\f" + HEX,
        "<" + TOKEN,  # Go writes \u003c
    ],
    ids=["u-b64", "u-hex", "b-hex", "f-hex", "go-lt"],
)
def test_an_entropy_marker_never_takes_part_of_a_json_escape(
    redactor: Redactor, inside: str
) -> None:
    text = json.dumps({"k": inside})
    if inside.startswith("<"):
        text = text.replace("<", "\\u003c")
    result = redactor.redact_text(text)
    assert result.redactions, text
    value = json.loads(result.value)["k"]  # still valid JSON
    assert value.startswith(inside[0] + "[REDACTED:high-entropy-")


@pytest.mark.parametrize(
    "text",
    ['{"k": "\\\\n' + TOKEN + '"}', '{"k": "\\n' + TOKEN + '"}', '{"k": "\\r\\n' + TOKEN + '"}'],
    ids=["escaped-backslash", "n", "crlf"],
)
def test_newline_escapes_still_work(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    assert TOKEN[1:] not in result.value
    json.loads(result.value)


# --- "auth": "Basic …" --------------------------------------------------------------------


def test_a_basic_scheme_under_an_auth_key_is_a_credential(redactor: Redactor) -> None:
    value = {"auth": "Basic " + DOCKER_AUTH}
    result = redactor.redact(value)
    assert [r.detector for r in result.redactions] == ["basic-auth-header"]
    assert result.value["auth"].startswith("Basic [REDACTED:basic-auth-header:")
    text = redactor.redact_text(json.dumps(value))
    assert DOCKER_AUTH not in text.value
    assert "basic-auth-header" in names(text)
    assert json.loads(text.value)["auth"].startswith("Basic [REDACTED:")


def test_other_schemes_and_prose_under_an_auth_key_stay(redactor: Redactor) -> None:
    for value in (
        "Basic",
        "Basic realm",
        "none",
        "Basic " + base64.b64encode(b"no colon").decode(),
    ):
        assert redactor.redact({"auth": value}).redactions == (), value
