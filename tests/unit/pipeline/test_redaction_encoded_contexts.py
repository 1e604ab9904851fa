"""Secrets that only a decoder sees, in the contexts where they turn up in practice.

- Form bodies (``application/x-www-form-urlencoded``), where ``+`` is a space: a JSON
  payload (Slack's ``payload=``) or a header posted as a form field.
- A third layer of encoding: base64 of base64 of base64, or percent-escaped base64 of base64.
  Deeper than three is not decoded, and the work stays linear in the input's length.
- Base64 wrapped in lines inside a JSON string, where the line breaks are ``\\n`` escapes
  (EC2 user data, a certificate bundle or a secret's file dumped as JSON).
- ``user:password`` in base64 under an ``auth`` key (Docker's ``config.json``, npm's
  ``_auth``), outside any ``Authorization`` header.
- CloudFormation ``ParameterKey``/``ParameterValue`` pairs, in structures and in text.

Each has its negatives: ordinary form values with ``+``, harmless base64 (images, text
with a colon), and harmless parameters.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.pipeline.redaction_work import scanned

from tracebound.pipeline.redaction import Redactor

KEY = b"encoded-contexts-key-0123456789ab"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GHP = "ghp_EXAMPLEfakeTOKENforTESTS000000000000"
SLACK = "xoxb-1234567890-1234567890123-EXAMPLEfakeSLACKtoken00"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(KEY)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def pct(text: str) -> str:
    return quote(text, safe="")


def names(result: Any) -> set[str]:
    return {n for r in result.redactions for n in (r.detector, *r.also_detected)}


# --- form bodies: + is a space -------------------------------------------------------------


def test_a_json_payload_posted_as_a_form_field(redactor: Redactor) -> None:
    # Slack interactivity, GitHub webhooks (form content type) and many HTML forms post
    # JSON as one form field: quote_plus turns `": "` into `%22%3A+%22`.
    payload = json.dumps({"type": "block_actions", "password": "hunter2-EXAMPLE", "n": 1})
    body = urlencode({"payload": payload})
    assert "+" in body
    result = redactor.redact_text(f"POST /slack/actions body={body}")
    (record,) = result.redactions
    assert record.detector == "secret-keyword"
    tail = "%22password%22%3A+%22" + record.marker + "%22%2C+%22n%22%3A+1%7D"
    assert result.value.endswith(tail)
    assert "hunter2" not in result.value


@pytest.mark.parametrize(
    ("field", "detector"),
    [
        ("Authorization: Basic dXNlcjpodW50ZXIyLUVYQU1QTEU=", "basic-auth-header"),
        ("Authorization: Bearer abcdef0123456789abcd", "bearer-token"),
        (f"aws_secret_access_key = {AWS_SECRET}", "aws-secret-key"),
        (f"token = {SLACK}", "slack-token"),
    ],
)
def test_credentials_in_form_fields_keep_their_detector(
    redactor: Redactor, field: str, detector: str
) -> None:
    body = urlencode({"note": "see below", "header": field, "page": "2"})
    result = redactor.redact_text(body)
    assert detector in names(result), result
    secret = field.rsplit(maxsplit=1)[-1]
    assert quote_plus(secret) not in result.value
    assert result.value.startswith("note=see+below&header=")
    assert result.value.endswith("&page=2")


def test_a_bearer_token_in_a_form_without_escapes(redactor: Redactor) -> None:
    text = "grant=Bearer+mF9kQz71bWx0aPq3Rv8Ns2&scope=read+write"
    result = redactor.redact_text(text)
    assert "bearer-token" in names(result)
    assert "mF9kQz71bWx0aPq3Rv8Ns2" not in result.value
    assert result.value.endswith("&scope=read+write")


@pytest.mark.parametrize(
    "text",
    [
        "q=hello+world&lang=en&sort=desc",
        "search?q=c%2B%2B+templates+tutorial&page=2",
        "name=Dana+Smith&city=San+Francisco&zip=94107&note=ring+twice%21",
        "comment=2+%2B+2+%3D+4&tags=math+basics",
        "x=a+b; y = c + d; z=e+f",
        "data: iVBORw0KGgo+AAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ== total=3+4",
    ],
)
def test_ordinary_form_values_with_plus_are_untouched(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    assert result.redactions == ()
    assert result.value == text


def test_a_form_encoded_phone_number_is_found(redactor: Redactor) -> None:
    # ``%2B`` is the plus sign, ``+`` the spaces: ``+1 415 555 0132``.
    text = "name=Dana&phone=%2B1+415+555+0132&ok=1"
    result = redactor.redact_text(text)
    (record,) = result.redactions
    assert record.detector == "phone"
    assert text[record.start : record.end] == "%2B1+415+555+0132"


# --- a third layer ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "inner"),
    [(AWS_ID, "aws-access-key"), ("dana@example.com", "email"), ("pwd=hunter2!", "secret-keyword")],
)
@pytest.mark.parametrize(
    "encode",
    [
        lambda s: b64(b64(b64(s))),
        lambda s: b64url(b64(b64url(s))),
        lambda s: pct(b64(b64(s))),
        lambda s: b64(pct(b64(s))),
    ],
    ids=["b64-b64-b64", "b64url-b64-b64url", "pct-b64-b64", "b64-pct-b64"],
)
def test_three_layers_are_decoded(redactor: Redactor, secret: str, inner: str, encode: Any) -> None:
    token = encode(secret)
    text = f"attachment: {token} (3 layers)"
    result = redactor.redact_text(text)
    assert token not in result.value
    assert inner in names(result), result.redactions


def test_a_fourth_layer_is_not_decoded(redactor: Redactor) -> None:
    # The documented bound. (The token may still be redacted: base64 of base64 is
    # random-looking, and the entropy rule often takes it.)
    token = b64(b64(b64(b64(AWS_ID))))
    assert "aws-access-key" not in names(redactor.redact_text(f"x {token} y"))
    assert "aws-access-key" in names(redactor.redact_text(f"x {b64(b64(b64(AWS_ID)))} y"))


def test_harmless_nested_base64_stays(redactor: Redactor) -> None:
    text = f"cursor={b64(b64(b64('offset=40&limit=20')))} region={b64(b64('eu-west-1'))}"
    assert redactor.redact_text(text).redactions == ()


# --- base64 wrapped with \n escapes inside a JSON string -----------------------------------


def _wrapped_json(secret_text: str, *, crlf: bool = False, trailing: bool = True) -> str:
    blob = base64.encodebytes(secret_text.encode()).decode()
    if not trailing:
        blob = blob.rstrip("\n")
    if crlf:
        blob = blob.replace("\n", "\r\n")
    return json.dumps({"Reservations": [{"UserData": blob, "InstanceId": "i-0abc"}]})


USER_DATA = (
    "#!/bin/bash\nexport AWS_ACCESS_KEY_ID=" + AWS_ID + "\n"
    "export AWS_SECRET_ACCESS_KEY=" + AWS_SECRET + "\naws s3 sync s3://bucket /srv\n"
)


@pytest.mark.parametrize(
    ("crlf", "trailing"), [(False, True), (True, True), (False, False)], ids=["lf", "crlf", "none"]
)
def test_base64_wrapped_with_json_newline_escapes(
    redactor: Redactor, crlf: bool, trailing: bool
) -> None:
    text = _wrapped_json(USER_DATA, crlf=crlf, trailing=trailing)
    assert "\\n" in text
    result = redactor.redact_text(text)
    lines = base64.encodebytes(USER_DATA.encode()).decode().split()
    assert len(lines) >= 3
    leaked = [line for line in lines if line in result.value]
    assert leaked == []
    (record,) = result.redactions
    assert record.detector == "base64-secret"
    assert {"aws-access-key", "aws-secret-key"} <= set(record.also_detected)
    assert result.value.endswith(', "InstanceId": "i-0abc"}]}')


def test_harmless_wrapped_base64_in_json_is_not_a_base64_secret(redactor: Redactor) -> None:
    # Long base64 lines are random-looking, so the entropy rule takes them, as it does
    # with real line breaks (ADR 0005, over-redaction); but they hold no secret, and a
    # marker never swallows the ``n`` of a ``\n`` escape (the JSON stays valid).
    config = "#cloud-config\npackages:\n  - nginx\n  - jq\nruncmd:\n  - [systemctl, start]\n"
    text = _wrapped_json(config * 2)
    result = redactor.redact_text(text)
    assert "base64-secret" not in names(result)
    json.loads(result.value)


# --- user:password in base64 under an auth key ---------------------------------------------

DOCKER_AUTH = b64("ci-bot:hunter2-EXAMPLE")


@pytest.mark.parametrize(
    "text",
    [
        '{"auths": {"registry.example.com": {"auth": "' + DOCKER_AUTH + '"}}}',
        '{\n  "auths": {\n    "ghcr.io": {\n      "auth": "dXNlcjpwYXNzd29yZA=="\n    }\n  }\n}',
        "//registry.npmjs.org/:_auth=" + DOCKER_AUTH,
        "auth: " + DOCKER_AUTH,
        "registry_auth = '" + DOCKER_AUTH + "'",
    ],
)
def test_user_password_in_base64_under_an_auth_key(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    (record,) = result.redactions
    assert record.detector == "basic-auth-header"
    token = text[record.start : record.end]
    assert ":" in base64.b64decode(token).decode()
    assert token not in result.value


def test_user_password_in_base64_under_an_auth_key_in_a_structure(redactor: Redactor) -> None:
    config = {"auths": {"registry.example.com": {"auth": DOCKER_AUTH, "email": None}}}
    result = redactor.redact(config)
    (record,) = result.redactions
    assert record.path == '$.auths["registry.example.com"].auth'
    assert record.detector == "basic-auth-header"
    assert result.value["auths"]["registry.example.com"]["auth"] == record.marker


def test_a_docker_config_inside_a_kubernetes_secret(redactor: Redactor) -> None:
    inner = json.dumps({"auths": {"registry.example.com": {"auth": DOCKER_AUTH}}})
    manifest = (
        "kind: Secret\ntype: kubernetes.io/dockerconfigjson\n"
        f"data:\n  .dockerconfigjson: {b64(inner)}\n"
    )
    result = redactor.redact_text(manifest)
    (record,) = result.redactions
    assert record.detector == "base64-secret"
    assert "basic-auth-header" in record.also_detected


@pytest.mark.parametrize(
    "value",
    [
        {"auth": b64("Note: rotate weekly")},  # a colon, then prose
        {"auth": b64("no colon in this one")},
        {"auth": "oauth2"},
        {"auth": {"type": "bearer"}},
        {"auth": b64("user:")},  # no password
        {"caption": b64("ci-bot:hunter2-EXAMPLE")},  # not an auth key
        {"author": b64("ci-bot:hunter2-EXAMPLE")},
        {"thumbnail": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"},
    ],
)
def test_base64_with_a_colon_that_is_not_a_credential(redactor: Redactor, value: Any) -> None:
    assert redactor.redact(value).redactions == ()
    assert redactor.redact_text(json.dumps(value)).redactions == ()


def test_base64_of_text_with_a_colon_outside_an_auth_key(redactor: Redactor) -> None:
    for plain in ("Time: 10:30", "user:password", "key:value"):
        text = f"caption: {b64(plain)} author: {b64(plain)}"
        assert redactor.redact_text(text).redactions == (), plain


# --- CloudFormation parameters -------------------------------------------------------------

CFN = [
    {"ParameterKey": "DbPassword", "ParameterValue": "hunter2-long-secret"},
    {"ParameterKey": "InstanceType", "ParameterValue": "t3.micro"},
    {"ParameterKey": "GitHubToken", "ParameterValue": GHP},
    {"ParameterKey": "ApiKey", "UsePreviousValue": True},
]


def test_cloudformation_parameters_in_a_structure(redactor: Redactor) -> None:
    result = redactor.redact({"StackName": "app", "Parameters": CFN})
    out = result.value["Parameters"]
    assert out[0]["ParameterValue"].startswith("[REDACTED:secret-keyword:")
    assert out[1] == CFN[1]
    assert out[2]["ParameterValue"].startswith("[REDACTED:github-token:")
    assert out[3] == CFN[3]
    assert [r.path for r in result.redactions] == [
        "$.Parameters[0].ParameterValue",
        "$.Parameters[2].ParameterValue",
    ]


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"Parameters": CFN[:2]}),
        json.dumps({"Parameters": CFN[:2]}, indent=2),
        (
            "aws cloudformation deploy --parameters "
            "ParameterKey=DbPassword,ParameterValue=hunter2-long-secret "
            "ParameterKey=InstanceType,ParameterValue=t3.micro"
        ),
        (
            "Parameters:\n  - ParameterKey: DbPassword\n    ParameterValue: hunter2-long-secret\n"
            "  - ParameterKey: InstanceType\n    ParameterValue: t3.micro\n"
        ),
    ],
)
def test_cloudformation_parameters_in_text(redactor: Redactor, text: str) -> None:
    result = redactor.redact_text(text)
    (record,) = result.redactions
    assert record.detector == "secret-keyword"
    assert text[record.start : record.end] == "hunter2-long-secret"
    assert "t3.micro" in result.value


@pytest.mark.parametrize(
    "text",
    [
        '[{"ParameterKey": "InstanceType", "ParameterValue": "t3.micro"}]',
        '[{"ParameterKey": "DbPassword", "UsePreviousValue": true}]',
        '[{"ParameterKey": "DbPassword", "ParameterValue": "{{resolve:ssm-secure:db}}"}]',
        "ParameterKey=DbPasswordParam,ParameterValue=/app/db/password-ref",
    ],
)
def test_cloudformation_parameters_that_are_not_secrets(redactor: Redactor, text: str) -> None:
    assert redactor.redact_text(text).redactions == ()


# --- properties and cost -------------------------------------------------------------------

_LAYERS = st.lists(st.sampled_from(["b64", "b64url", "pct"]), min_size=1, max_size=3)
_PLAINS = st.sampled_from([AWS_ID, GHP, "dana@example.com", "pwd=hunter2!", SLACK])


@SETTINGS
@given(_PLAINS, _LAYERS, st.sampled_from([" ", "\n", '"', "="]))
def test_no_secret_survives_up_to_three_layers(plain: str, layers: list[str], glue: str) -> None:
    encoders = {"b64": b64, "b64url": b64url, "pct": pct}
    token = plain
    for layer in layers:
        token = encoders[layer](token)
    redactor = Redactor(KEY)
    once = redactor.redact_text(f"start{glue}{token}{glue}end")
    assert token not in once.value
    assert redactor.redact_text(once.value).redactions == ()


def _adversarial(size: int) -> str:
    """Text built to make every layer decode as much as it can: lines with escapes (so
    each line is percent-decoded again) holding base64 of escaped base64 of base64."""
    inner = b64("%41" * 8 + " " + b64("%42%43 " * 12))
    line = f"%2541 {b64(pct(inner))} {inner} %41+{b64(inner)}\n"
    return (line * (size // len(line) + 1))[:size]


def test_adversarial_nesting_does_linear_work() -> None:
    # Counted, not timed (tests/unit/pipeline/redaction_work.py): 1 MB must scan about
    # eight times what 128 KB scans, far from the 64 times a quadratic blow-up would
    # need, and no more than a bounded multiple of as much plain base64-heavy text. Each
    # layer decodes at most 1.75 times the text above it.
    redactor = Redactor(KEY)
    small, large = _adversarial(128 * 1024), _adversarial(1024 * 1024)
    w_small, w_large = scanned(redactor, small), scanned(redactor, large)
    assert w_large / w_small < 8 * 1.25, (w_small, w_large)
    plain = ((b64("harmless text ") * 20 + "\n") * 10_000)[: len(large)]
    assert w_large / scanned(redactor, plain) < 40, (w_large,)
