"""The misses a review recorded, one test each, and their negatives.

- A name/value pair with the value first (``{"ParameterValue": "…", "ParameterKey":
  "DbPassword"}``), or with another field between the two (``"UsePreviousValue": false``):
  the text rule only read the name right before the value.
- The AWS Query (form-encoded) spelling of the same pairs:
  ``Parameters.member.1.ParameterKey=DbPassword&Parameters.member.1.ParameterValue=…``.
- Base64 wrapped in lines (MIME 76, PEM 64) after ``Authorization: Basic`` or under an
  ``auth`` key: only the first line was taken, the rest of the credential leaked.
- Under a key ending in ``oauth``, base64 of an OAuth scope list (``read:user``) is taken
  for ``user:password``: an exception for it was tried and taken back, since a scope list
  and a lower-case password read the same (failing closed).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from tests.unit.pipeline.redaction_work import CountingPattern

from tracebound.pipeline import _redaction_decoding as decoding
from tracebound.pipeline import _redaction_detectors as rules
from tracebound.pipeline.redaction import Redactor

KEY = b"known-misses-test-key-0123456789a"
SECRET = "hunter2-secret"
GHP = "ghp_EXAMPLEfakeTOKENforTESTS000000000000"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(KEY)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def names(result: Any) -> set[str]:
    return {n for r in result.redactions for n in (r.detector, *r.also_detected)}


def taken(result: Any, text: str) -> list[str]:
    return [text[r.start : r.end] for r in result.redactions]


# --- 1. pairs with the value first, or a field between ------------------------------------

PAIRS_IN_TEXT = [
    '{"ParameterValue": "hunter2-secret", "ParameterKey": "DbPassword"}',
    '{"ParameterValue": "hunter2-secret", "UsePreviousValue": false, "ParameterKey": "DbPassword"}',
    '{"ParameterKey": "DbPassword", "UsePreviousValue": false, "ParameterValue": "hunter2-secret"}',
    json.dumps(
        {"Parameters": [{"ParameterValue": SECRET, "ParameterKey": "DbPassword"}]}, indent=2
    ),
    json.dumps(
        [
            {"ParameterKey": "InstanceType", "ParameterValue": "t3.micro"},
            {"ParameterValue": SECRET, "ResolvedValue": "x", "ParameterKey": "DbPassword"},
        ]
    ),
    "ParameterValue=hunter2-secret,ParameterKey=DbPassword",
    "ParameterValue=hunter2-secret,UsePreviousValue=false,ParameterKey=DbPassword",
    '{"value": "hunter2-secret", "name": "DB_PASSWORD"}',
    "{value: hunter2-secret, name: DB_PASSWORD}",
    "{'Value': 'hunter2-secret', 'Key': 'db_password'}",
    # JSON inside a JSON string: the unescaped view reads the pair.
    json.dumps({"body": json.dumps({"ParameterValue": SECRET, "ParameterKey": "DbPassword"})}),
]


@pytest.mark.parametrize("text", PAIRS_IN_TEXT)
def test_a_pair_with_the_value_first_or_a_field_between(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    assert taken(result, text) == [SECRET]
    assert result.redactions[0].detector == "secret-keyword"
    assert "t3.micro" in result.value or "t3.micro" not in text


@pytest.mark.parametrize(
    "text",
    [
        "ParameterKey=DbPassword,ParameterValue=hunter2-secret",
        "name: DB_PASSWORD, value: hunter2-secret",
    ],
)
def test_a_pair_at_the_very_start_of_the_text(redactor: Redactor, text: str) -> None:
    # Found after a space, missed at offset 0: the field check read "nothing before" as
    # a quote.
    assert taken(redactor.redact_text(text), text) == [SECRET]
    assert taken(redactor.redact_text(" " + text), " " + text) == [SECRET]


def test_a_har_header_with_the_value_first(redactor: Redactor) -> None:
    text = '{"value": "Basic dXNlcjpodW50ZXIy", "name": "Authorization"}'
    result = redactor.redact_text(text)
    assert taken(result, text) == ["dXNlcjpodW50ZXIy"]
    assert result.redactions[0].detector == "auth-header"


def test_a_token_value_first_keeps_its_own_detector(redactor: Redactor) -> None:
    text = '{"ParameterValue": "' + GHP + '", "ParameterKey": "GitHubToken"}'
    result = redactor.redact_text(text)
    assert taken(result, text) == [GHP]
    assert {"github-token", "secret-keyword"} <= names(result)


@pytest.mark.parametrize(
    "text",
    [
        '[{"ParameterValue": "t3.micro", "ParameterKey": "InstanceType"}]',
        # The pair ends at its object: a value in one object never takes a name in the next.
        '[{"ParameterValue": "t3.micro"}, {"ParameterKey": "DbPassword", "UsePreviousValue": 1}]',
        '[{"ParameterKey": "DbPassword", "UsePreviousValue": 1}, {"ParameterValue": "t3.micro"}]',
        '{"ParameterValue": "{{resolve:ssm-secure:db}}", "ParameterKey": "DbPassword"}',
        '{"value": "unrelated-EXAMPLE-3", "hostname": "db_password"}',
        '{"value": "unrelated-EXAMPLE-4", "key_name": "api_key"}',
        '{"Value": "prod", "UsePreviousValue": false, "Key": "Environment"}',
        (
            "ParameterValue=t3.micro,ParameterKey=InstanceType ParameterKey=DbPassword,"
            "UsePreviousValue=true"
        ),
        # More fields between than a parameter object has: not read as one pair.
        '{"value": "unrelated-EXAMPLE-6", "a": 1, "b": 2, "c": 3, "d": 4, "name": "api_key"}',
        # A nested object between ends the walk.
        '{"value": "unrelated-EXAMPLE-7", "meta": {"x": 1}, "name": "api_key"}',
    ],
)
def test_pairs_in_either_order_that_are_not_secrets(redactor: Redactor, text: str) -> None:
    assert redactor.redact_text(text).redactions == ()


# --- 2. the AWS Query (form-encoded) spelling ----------------------------------------------

QUERY = (
    "Action=CreateStack&StackName=app"
    "&Parameters.member.1.ParameterKey=DbPassword"
    "&Parameters.member.1.ParameterValue={v}"
    "&Parameters.member.2.ParameterKey=InstanceType"
    "&Parameters.member.2.ParameterValue=t3.micro&Version=2010-05-15"
)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (QUERY.format(v=SECRET), SECRET),
        (
            "Parameters.member.1.ParameterKey=DbPassword&Parameters.member.1.ParameterValue="
            + SECRET,
            SECRET,
        ),
        (
            (
                "Parameters.member.1.ParameterValue=hunter2-secret"
                "&Parameters.member.1.ParameterKey=DbPassword"
            ),
            SECRET,
        ),
        (
            (
                "Parameters.member.1.ParameterKey=DbPassword"
                "&Parameters.member.1.UsePreviousValue=false"
                "&Parameters.member.1.ParameterValue=hunter2-secret"
            ),
            SECRET,
        ),
        # Keys first, then values (members interleaved): paired by member, not by position.
        (
            (
                "Parameters.member.1.ParameterKey=InstanceType"
                "&Parameters.member.2.ParameterKey=DbPassword"
                "&Parameters.member.1.ParameterValue=t3.micro"
                "&Parameters.member.2.ParameterValue=hunter2-secret"
            ),
            SECRET,
        ),
        (
            (
                "POST https://cloudformation.us-east-1.amazonaws.com/?Action=UpdateStack"
                "&Parameters.member.1.ParameterKey=DbPassword"
                "&Parameters.member.1.ParameterValue=hunter2-secret HTTP/1.1"
            ),
            SECRET,
        ),
        (QUERY.format(v="hunter2%2Dsecret%21"), "hunter2%2Dsecret%21"),  # escapes in the value
        (QUERY.format(v="hunter2+secret+phrase"), "hunter2+secret+phrase"),  # a form's +
        ("Tags.member.1.Key=ApiToken&Tags.member.1.Value=" + SECRET, SECRET),
    ],
)
def test_aws_query_parameter_pairs(redactor: Redactor, text: str, secret: str) -> None:
    result = redactor.redact_text(text)
    assert taken(result, text) == [secret]
    assert result.redactions[0].detector == "secret-keyword"
    assert "t3.micro" in result.value or "t3.micro" not in text


def test_an_aws_query_body_percent_encoded_inside_a_form_field(redactor: Redactor) -> None:
    body = (
        "Parameters.member.1.ParameterKey%3DDbPassword%26"
        "Parameters.member.1.ParameterValue%3Dhunter2-secret%26Version%3D2010-05-15"
    )
    text = "request=" + body + "&region=eu-west-1"
    result = redactor.redact_text(text)
    assert SECRET not in result.value
    assert taken(result, text) == [SECRET]
    assert result.value.endswith("%26Version%3D2010-05-15&region=eu-west-1")


@pytest.mark.parametrize(
    "text",
    [
        QUERY.format(v="x").replace(
            "&Parameters.member.1.ParameterValue=x", "&Parameters.member.1.UsePreviousValue=true"
        ),
        (
            "Parameters.member.1.ParameterKey=DbPasswordParam"
            "&Parameters.member.1.ParameterValue=/app/db/password-ref"
        ),
        (
            "Parameters.member.1.ParameterKey=DbPassword&Parameters.member.1.UsePreviousValue=true"
            "&Parameters.member.2.ParameterValue=t3.micro"
        ),
        # Another request on the next line: member 1 there is not member 1 here.
        (
            "Parameters.member.1.ParameterKey=DbPassword&Parameters.member.1.UsePreviousValue=true\n"
            "Parameters.member.1.ParameterValue=t3.micro"
        ),
        "Parameters.member.1.ParameterKey=DbPassword&Parameters.member.1.ParameterValue=%24%7BDB%7D",
        "Filter.1.Name=instance-type&Filter.1.Value.1=t3.micro",
    ],
)
def test_aws_query_pairs_that_are_not_secrets(redactor: Redactor, text: str) -> None:
    assert redactor.redact_text(text).redactions == ()


# --- 3. wrapped base64 after Authorization: Basic and under auth keys ----------------------

# Long enough to wrap twice at 64 and once at 76; the colon is in the first line.
CREDENTIAL = b64("deploy-bot:x7Q!correct-horse-battery-staple-0123456789-abcdefghij-KLMNOP")
# A long user name: the colon is only in the second line, so no line alone is one.
LONG_USER = b64("registry-mirror-service-account-for-the-build-farm-0001:Zx9-kQ2mP7")


def wrap(token: str, width: int, br: str = "\n", indent: str = "") -> str:
    return (br + indent).join(token[i : i + width] for i in range(0, len(token), width))


def lines_of(token: str, width: int) -> list[str]:
    return [token[i : i + width] for i in range(0, len(token), width)]


@pytest.mark.parametrize(
    ("template", "width", "br"),
    [
        ("Authorization: Basic {}\nAccept: */*\n", 64, "\n"),
        ("Authorization: Basic {}\r\nAccept: */*\r\n", 76, "\r\n"),
        ("Proxy-Authorization: Basic {}\nAccept: */*\n", 64, "\n"),
        ('{{"headers": {{"Authorization": "Basic {}", "Accept": "*/*"}}}}', 64, "\\n"),
        ('{{"auth": "{}", "serveraddress": "registry.example.com"}}', 76, "\\n"),
        ('{{"auth": "Basic {}"}}', 64, "\\r\\n"),
        ("auth: {}\nnext: line\n", 64, "\n"),
        ("//registry.npmjs.org/:_auth={}\nalways-auth=true\n", 64, "\n"),
    ],
)
@pytest.mark.parametrize("credential", [CREDENTIAL, LONG_USER], ids=["short-user", "long-user"])
def test_a_wrapped_basic_credential_is_taken_whole(
    redactor: Redactor, template: str, width: int, br: str, credential: str
) -> None:
    text = template.format(wrap(credential, width, br))
    assert len(lines_of(credential, width)) >= 2
    result = redactor.redact_text(text)
    leaked = [line for line in lines_of(credential, width) if line in result.value]
    assert leaked == []
    (record,) = [r for r in result.redactions if r.detector == "basic-auth-header"]
    assert text[record.start : record.end] == wrap(credential, width, br)
    if template.startswith("{"):
        json.loads(result.value)


@pytest.mark.parametrize("scheme", ["", "Basic "])
@pytest.mark.parametrize("credential", [CREDENTIAL, LONG_USER], ids=["short-user", "long-user"])
def test_a_wrapped_basic_credential_under_an_auth_key_in_a_structure(
    redactor: Redactor, scheme: str, credential: str
) -> None:
    value = scheme + wrap(credential, 76)
    result = redactor.redact({"auths": {"registry.example.com": {"auth": value}}})
    out = result.value["auths"]["registry.example.com"]["auth"]
    assert out.startswith(scheme + "[REDACTED:basic-auth-header:"), out
    assert out.endswith("]")
    assert [r.detector for r in result.redactions] == ["basic-auth-header"]


def test_the_line_after_a_one_line_basic_header_stays(redactor: Redactor) -> None:
    text = "Authorization: Basic dXNlcjpodW50ZXIy\nX-Request-Id: 42\nbody"
    result = redactor.redact_text(text)
    assert taken(result, text) == ["dXNlcjpodW50ZXIy"]
    assert result.value.endswith("\nX-Request-Id: 42\nbody")


# --- 4. base64 under oauth keys: failing closed --------------------------------------------

SCOPES = ["read:user", "repo:status", "admin:org", "read:user repo:status", "read:org,user:email"]


@pytest.mark.parametrize("scopes", [*SCOPES, "admin:supersecretpassword"])
@pytest.mark.parametrize("key", ["oauth", "github_oauth", "x_oauth", "OAuth"])
def test_base64_of_word_colon_word_under_an_oauth_key_is_taken(
    redactor: Redactor, key: str, scopes: str
) -> None:
    """A scope list and a lower-case password read the same (`admin:org`,
    `admin:supersecretpassword`): base64 of either under a key ending in `auth` is taken.
    An exception for scope lists let the password through (review, session 12)."""
    value = {key: b64(scopes)}
    assert [r.detector for r in redactor.redact(value).redactions] == ["basic-auth-header"]
    assert "basic-auth-header" in names(redactor.redact_text(json.dumps(value)))


@pytest.mark.parametrize(
    "value",
    [
        {"oauth_scope": "read:user"},
        {"oauth_scopes": "read:user repo:status admin:org"},
        {"auth_mode": "mode:strict"},
        {"oauth": "read:user"},
        {"scope": b64("read:user")},
    ],
)
def test_plain_scope_strings_stay(redactor: Redactor, value: dict[str, str]) -> None:
    assert redactor.redact(value).redactions == ()
    assert redactor.redact_text(json.dumps(value)).redactions == ()


@pytest.mark.parametrize(
    "plain",
    [
        "my-client-id:Zx9kQ2mP7vR4tW1yB8nC",  # OAuth client credentials, as Basic sends them
        "ci-bot:hunter2-EXAMPLE",
        "app:s3cret",
        "read:user!",  # a symbol: not a scope
    ],
)
def test_credentials_under_an_oauth_key_are_still_taken(redactor: Redactor, plain: str) -> None:
    value = {"github_oauth": b64(plain)}
    assert [r.detector for r in redactor.redact(value).redactions] == ["basic-auth-header"]
    text = json.dumps(value)
    assert "basic-auth-header" in names(redactor.redact_text(text))


@pytest.mark.parametrize("key", ["auth", "_auth", "registry_auth"])
def test_a_docker_auth_key_still_takes_any_user_password(redactor: Redactor, key: str) -> None:
    # ``auth`` (Docker, npm) holds nothing but base64 of user:password: ``read:user`` there
    # is user ``read`` with password ``user``, weak but a password.
    value = {key: b64("read:user")}
    assert [r.detector for r in redactor.redact(value).redactions] == ["basic-auth-header"]


# --- linear work -----------------------------------------------------------------------------


def _work(monkeypatch: pytest.MonkeyPatch, module: Any, names: tuple[str, ...], text: str) -> int:
    counters = []
    with monkeypatch.context() as patch:
        for name in names:
            counter = CountingPattern(getattr(module, name))
            counters.append(counter)
            patch.setattr(module, name, counter)
        Redactor(KEY).redact_text(text)
    return sum(c.work for c in counters)


def _linear(
    monkeypatch: pytest.MonkeyPatch, module: Any, names: tuple[str, ...], unit: str
) -> None:
    small = _work(monkeypatch, module, names, unit * 200)
    large = _work(monkeypatch, module, names, unit * 1600)
    assert small > 0
    # Eight times the input, about eight times the work (quadratic: about 64 times).
    assert large / small < 8 * 1.25, (small, large)


@pytest.mark.parametrize(
    "unit",
    [
        # Every field a pair field, none closing a pair: each starts a walk.
        '{"value": "v", "value": "v", "Value": "v", "name": "n", "UsePreviousValue": 1, ',
        "ParameterValue=x,ParameterValue=y,UsePreviousValue=false,",
        '"value": "' + "a" * 500 + ", ",  # unterminated strings
    ],
    ids=["fields", "shorthand", "unterminated"],
)
def test_the_pair_walk_is_linear(monkeypatch: pytest.MonkeyPatch, unit: str) -> None:
    _linear(monkeypatch, rules, ("_PAIR_FIELD", "_PAIR_NEXT_FIELD", "_VALUE"), unit)


@pytest.mark.parametrize(
    "unit",
    [
        "&P.member.1.ParameterKey=DbPassword&P.member.1.ParameterValue=x",
        "&a.b.c.d.e.f.g.h.ParameterValue=x&a.b.c.d.e.f.g.h.Key=y",
        "&" + "a." * 50 + "ParameterValue=x",
    ],
    ids=["pairs", "deep-prefix", "long-prefix"],
)
def test_the_query_pairs_are_linear(monkeypatch: pytest.MonkeyPatch, unit: str) -> None:
    _linear(monkeypatch, rules, ("_QUERY_FIELD",), unit)


@pytest.mark.parametrize(
    "unit",
    [
        "Authorization: Basic " + wrap(CREDENTIAL, 64) + "\n",
        '{"auth": "' + wrap(LONG_USER, 76, "\\n") + '"}\n',
        "auth: " + wrap(b64("x" * 300), 64) + "\n",  # wraps, decodes, no colon
    ],
    ids=["header", "auth-json", "no-colon"],
)
def test_wrapped_credentials_are_read_in_linear_time(
    monkeypatch: pytest.MonkeyPatch, unit: str
) -> None:
    _linear(monkeypatch, decoding, ("_NEXT_LINE",), unit)


def test_counting_pattern_counts() -> None:
    counter = CountingPattern(re.compile("a+"))
    assert [m.group() for m in counter.finditer("aa b a")] == ["aa", "a"]
    assert counter.match("aaa", 1) is not None
    assert counter.work >= 2


@pytest.mark.parametrize(
    "text",
    [
        '{"ParameterKey": "DbPassword", "ParameterValue": "%24Xy9kLm2pQ7wZ"}',
        '{"name": "api_token", "value": "%7Bq8Zr4Lp%7D"}',
        '{"Name": "DB_PASSWORD", "Value": "%3Cxk92LmPq%3E"}',
    ],
)
def test_a_percent_sign_outside_a_query_string_is_the_secret_as_written(text: str) -> None:
    """Only a query string's values are percent-decoded before they are judged: in JSON,
    `%24Xy9...` is not the placeholder `$Xy9...` (review: kept in clear for a while)."""
    out = Redactor(b"test-redaction-key-0123").redact_text(text).value
    assert out != text
    assert "Xy9kLm2pQ7wZ" not in out and "q8Zr4Lp" not in out and "xk92LmPq" not in out
