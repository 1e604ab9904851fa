"""Redactor behaviour: markers, keyed digests, structures, merging, idempotence, stats."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebound.errors import ContractError, TraceboundError, ValidationFailed
from tracebound.pipeline.redaction import (
    MAX_DEPTH,
    MIN_KEY_BYTES,
    Redaction,
    RedactionStats,
    Redactor,
)

ROOT = Path(__file__).resolve().parents[3]
KEY = b"unit-test-hmac-key-0123456789abc"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id
GHP = "ghp_EXAMPLEfakeTOKENforTESTS000000000000"[:40]
CARD = "4111 1111 1111 1111"  # Visa test number
MARKER = re.compile(r"\[REDACTED:([a-z0-9-]+):hmac-sha256:([0-9a-f]{16})\]")

CORPUS = [
    json.loads(line)
    for line in (ROOT / "tests/fixtures/redaction/corpus.jsonl").read_text("utf-8").splitlines()
]
POSITIVE_TEXTS = [row["text"] for row in CORPUS if row["expect"]]
SECRETS = sorted({e["secret"] for row in CORPUS for e in row["expect"]})


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(KEY)


# --- key and digest ----------------------------------------------------------------------


@pytest.mark.parametrize("key", [b"", b"short", b"x" * (MIN_KEY_BYTES - 1)])
def test_short_keys_are_refused(key: bytes) -> None:
    with pytest.raises(ValidationFailed) as info:
        Redactor(key)
    assert info.value.field == "key"
    assert isinstance(info.value, ContractError)
    assert isinstance(info.value, TraceboundError)


def test_a_text_key_is_refused() -> None:
    with pytest.raises(ValidationFailed):
        Redactor("a-string-key-that-is-long-enough")  # type: ignore[arg-type]


def test_repr_does_not_show_the_key(redactor: Redactor) -> None:
    assert KEY.decode() not in repr(redactor)
    assert "32 bytes" in repr(redactor)


def test_digest_is_a_keyed_hmac_not_a_bare_hash(redactor: Redactor) -> None:
    secret = "+1 415 555 0132"
    expected = hmac.new(
        KEY, b"tracebound/redaction/v1\x00" + secret.encode(), hashlib.sha256
    ).hexdigest()
    assert redactor.digest(secret) == f"hmac-sha256:{expected}"
    assert hashlib.sha256(secret.encode()).hexdigest() not in redactor.digest(secret)


def test_same_secret_same_key_same_digest_other_key_other_digest(redactor: Redactor) -> None:
    first = redactor.redact_text(f"a={AWS_ID}").redactions[0]
    second = redactor.redact_text(f"used {AWS_ID} again").redactions[0]
    other = Redactor(b"another-key-0123456789abcdefghij").redact_text(AWS_ID).redactions[0]
    assert first.digest == second.digest
    assert first.marker == second.marker
    assert other.digest != first.digest


# --- text ----------------------------------------------------------------------------------


def test_marker_record_and_span(redactor: Redactor) -> None:
    text = f"AWS_ACCESS_KEY_ID={AWS_ID}\n"
    result = redactor.redact_text(text)
    (record,) = result.redactions
    match = MARKER.fullmatch(record.marker)
    assert match is not None
    assert match.group(1) == "aws-access-key" == record.detector
    assert record.digest.startswith(f"hmac-sha256:{match.group(2)}")
    assert record.redaction_reason == "AWS access key id"
    assert text[record.start : record.end] == AWS_ID
    assert record.path is None
    assert result.value == f"AWS_ACCESS_KEY_ID={record.marker}\n"
    assert result.redacted


def test_clean_text_is_returned_unchanged(redactor: Redactor) -> None:
    result = redactor.redact_text("nothing to see here, run 42 finished in 1.5s")
    assert result.value == "nothing to see here, run 42 finished in 1.5s"
    assert result.redactions == ()
    assert not result.redacted


def test_url_password_only_the_password_goes(redactor: Redactor) -> None:
    result = redactor.redact_text("postgresql://app:pw-EXAMPLE-123@db.example:5432/app")
    assert result.value.startswith("postgresql://app:[REDACTED:basic-auth:")
    assert result.value.endswith("@db.example:5432/app")


def test_multiline_pem_block_is_one_redaction(redactor: Redactor) -> None:
    body = "RkFLRS1LRVktRk9SLVRFU1RT\nRkFLRS1LRVktRk9SLVRFU1RT"
    pem = f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----"
    result = redactor.redact_text(f"key:\n{pem}\ndone")
    assert [r.detector for r in result.redactions] == ["private-key"]
    assert "RkFLRS" not in result.value
    assert result.value.startswith("key:\n[REDACTED:private-key:")
    assert result.value.endswith("]\ndone")


def test_luhn_decides_card_numbers(redactor: Redactor) -> None:
    assert redactor.redact_text(f"card {CARD}").redactions[0].detector == "payment-card"
    assert redactor.redact_text("card 4111 1111 1111 1112").redactions == ()


def test_redact_text_refuses_non_strings(redactor: Redactor) -> None:
    with pytest.raises(ValidationFailed):
        redactor.redact_text(b"bytes")  # type: ignore[arg-type]


# --- overlap --------------------------------------------------------------------------------


def test_equal_spans_go_to_the_more_specific_detector(redactor: Redactor) -> None:
    (record,) = redactor.redact_text(f"GITHUB_TOKEN={GHP}").redactions
    assert record.detector == "github-token"
    assert "secret-keyword" in record.also_detected


def test_overlaps_merge_and_the_longest_span_wins(redactor: Redactor) -> None:
    text = f'"api_key": "prefix-{AWS_ID}-suffix"'
    result = redactor.redact_text(text)
    (record,) = result.redactions
    assert record.detector == "secret-keyword"
    assert "aws-access-key" in record.also_detected
    assert text[record.start : record.end] == f"prefix-{AWS_ID}-suffix"
    assert result.value == f'"api_key": "{record.marker}"'


def test_partial_overlaps_are_unioned_never_leaked(redactor: Redactor) -> None:
    jwt = (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJleGFtcGxlLXVzZXIifQ."
        "ZmFrZS1zaWduYXR1cmUtZm9yLXRlc3Rz"
    )
    result = redactor.redact_text(f"Authorization: Bearer {jwt}")
    assert jwt not in result.value
    assert "ZmFrZS1zaWduYXR1cmU" not in result.value  # the signature went too
    assert len(result.redactions) == 1


def test_adjacent_secrets_are_all_redacted_in_one_call(redactor: Redactor) -> None:
    # Found by hypothesis: the second number follows a digit, so it only looks like a
    # phone number once the first has been replaced. One call must redact both.
    text = "(212) 555-0199(212) 555-0199"
    result = redactor.redact_text(text)
    assert [(r.start, r.end) for r in result.redactions] == [(0, 14), (14, 28)]
    assert result.value == result.redactions[0].marker * 2
    assert redactor.redact_text(result.value).redactions == ()


def test_text_that_never_settles_fails_closed(redactor: Redactor) -> None:
    with pytest.raises(ValidationFailed, match="did not settle"):
        redactor.redact_text("(212) 555-0199" * 40)


# --- structures ------------------------------------------------------------------------------


def test_structures_keep_their_shape_and_keys(redactor: Redactor) -> None:
    payload: dict[str, Any] = {
        "user": {"email": "dana@example.com", "name": "Dana"},
        "steps": [{"out": f"pushed with {GHP}"}, {"out": "ok"}],
        "alice@example.com": "keys are not scanned",
        "pair": ("x", CARD),
        "n": 3,
        "f": 1.5,
        "flag": True,
        "none": None,
    }
    result = redactor.redact(payload)
    out = result.value
    assert list(out) == list(payload)
    assert out["user"]["name"] == "Dana"
    assert out["user"]["email"].startswith("[REDACTED:email:")
    assert out["steps"][1] == {"out": "ok"}
    assert isinstance(out["pair"], tuple)
    assert out["alice@example.com"] == "keys are not scanned"
    assert (out["n"], out["f"], out["flag"], out["none"]) == (3, 1.5, True, None)
    paths = {r.path: r.detector for r in result.redactions}
    assert paths == {
        "$.user.email": "email",
        "$.steps[0].out": "github-token",
        "$.pair[1]": "payment-card",
    }
    record = next(r for r in result.redactions if r.path == "$.steps[0].out")
    assert payload["steps"][0]["out"][record.start : record.end] == GHP


def test_secret_named_keys_make_their_value_a_secret(redactor: Redactor) -> None:
    payload = {
        "api_key": "plain-looking-value",
        "db_password": 12345678,
        "Authorization": "Basic ZXhhbXBsZTpub3QtcmVhbA==",
        "max_tokens": 1024,
        "token_count": "17",
        "password": None,
        "secret": "<your-secret>",
        "odd key": "x",
    }
    out = redactor.redact(payload).value
    assert out["api_key"].startswith("[REDACTED:secret-keyword:")
    assert out["db_password"].startswith("[REDACTED:secret-keyword:")  # int became marker
    assert out["Authorization"].startswith("Basic [REDACTED:")
    assert out["max_tokens"] == 1024
    assert out["token_count"] == "17"
    assert out["password"] is None
    assert out["secret"] == "<your-secret>"
    assert out["odd key"] == "x"


def test_unsupported_types_fail_closed(redactor: Redactor) -> None:
    with pytest.raises(ValidationFailed) as info:
        redactor.redact({"blob": [b"raw bytes"]})
    assert info.value.field == "$.blob[0]"
    with pytest.raises(ValidationFailed):
        redactor.redact({"when": object()})


def test_nesting_deeper_than_the_limit_is_refused(redactor: Redactor) -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(ValidationFailed):
        redactor.redact(deep)


def test_odd_dict_keys_get_quoted_paths(redactor: Redactor) -> None:
    result = redactor.redact({"a b": {"c-d": [AWS_ID]}, 7: AWS_ID})
    assert {r.path for r in result.redactions} == {'$["a b"]["c-d"][0]', '$["7"]'}


# --- stats -----------------------------------------------------------------------------------


def test_stats_count_by_detector_and_reason() -> None:
    stats = RedactionStats()
    first, second = Redactor(KEY, stats=stats), Redactor(KEY, stats=stats)
    first.redact_text(f"{AWS_ID} and {AWS_ID} and dana@example.com")
    second.redact({"a": "clean", "b": [CARD, "clean"]})
    assert stats.by_detector() == {"aws-access-key": 2, "email": 1, "payment-card": 1}
    assert stats.by_reason()["AWS access key id"] == 2
    assert stats.total == 4
    assert stats.values_scanned == 4
    assert stats.values_redacted == 2
    snap = stats.snapshot()
    assert snap["total"] == 4
    assert snap["by_detector"] == stats.by_detector()


def test_each_redactor_has_its_own_stats_by_default() -> None:
    a, b = Redactor(KEY), Redactor(KEY)
    a.redact_text(AWS_ID)
    assert a.stats.total == 1
    assert b.stats.total == 0


def test_redaction_records_are_frozen_and_strict() -> None:
    record = Redactor(KEY).redact_text(AWS_ID).redactions[0]
    with pytest.raises(Exception, match="frozen"):
        record.detector = "x"  # type: ignore[misc]
    assert Redaction.model_validate(record.model_dump()) == record


# --- properties -------------------------------------------------------------------------------

_LINES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(POSITIVE_TEXTS),
    st.sampled_from([row["text"] for row in CORPUS if not row["expect"]]),
)
_GLUE = st.sampled_from(["", " ", "\n", "=", ":", "@", "/", '"', "://", "-", "."])


@st.composite
def _mixed_text(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(_LINES, _GLUE), max_size=6))
    return "".join(line + glue for line, glue in parts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixed_text())
def test_redaction_is_idempotent(text: str) -> None:
    redactor = Redactor(KEY)
    once = redactor.redact_text(text)
    twice = redactor.redact_text(once.value)
    assert twice.value == once.value
    assert twice.redactions == ()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=40), st.sampled_from(POSITIVE_TEXTS)), max_size=4))
def test_output_never_contains_an_expected_secret(parts: list[tuple[str, str]]) -> None:
    text = "\n".join(f"{noise}\n{sample}" for noise, sample in parts)
    output = Redactor(KEY).redact_text(text).value
    for sample in {sample for _, sample in parts}:
        row = next(r for r in CORPUS if r["text"] == sample)
        for expected in row["expect"]:
            assert expected["secret"] not in output


_JSON_KEYS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["password", "api_key", "Authorization", "token", "max_tokens", "email"]),
)
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=30),
        st.sampled_from(SECRETS),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_JSON_KEYS, children, max_size=4),
    ),
    max_leaves=20,
)


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(v) for v in value])
    return "leaf"


@settings(max_examples=200, deadline=None)
@given(_JSON)
def test_structures_keep_shape_and_redaction_is_idempotent(value: Any) -> None:
    redactor = Redactor(KEY)
    once = redactor.redact(value)
    assert _shape(once.value) == _shape(value)
    twice = redactor.redact(once.value)
    assert twice.value == once.value
    assert twice.redactions == ()


@settings(max_examples=400, deadline=None)
@given(
    st.text(
        alphabet=st.one_of(
            st.characters(exclude_categories=()),  # surrogates included
            st.sampled_from("-_=:/@.+[]() \n0123456789abcdefAKIA"),
        ),
        max_size=200,
    )
)
def test_arbitrary_text_never_raises(text: str) -> None:
    result = Redactor(KEY).redact_text(text)
    assert isinstance(result.value, str)
    for record in result.redactions:
        assert 0 <= record.start < record.end <= len(text)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (__import__("decimal").Decimal("0.25"), 'as a decimal string, e.g. "0.25"'),
        (b"raw", "JSON values"),
        ({1, 2}, "JSON values"),
    ],
)
def test_a_value_json_cannot_hold_is_named_with_what_to_write_instead(
    redactor: Redactor, value: object, hint: str
) -> None:
    with pytest.raises(ValidationFailed) as info:
        redactor.redact({"compute_usd_est": value})
    assert info.value.field == "$.compute_usd_est"
    assert hint in str(info.value)  # was only "cannot redact a value of type Decimal"
