"""The redaction prefilter and the entropy bound skip work, never a secret.

``may_match`` lets the redactor skip its thirty-four detectors on text that holds none of
their hints (see ``Hint`` in ``_redaction_detectors``), and most rules sit behind a gate (a
substring test) as well. Both are only sound if every hint and gate is necessary: whenever
a rule *itself* finds something (the ungated rule: checking the gated one would hide a gate
that is too narrow), its hint is in the text as the rule's own regex engine reads it
(``re.IGNORECASE`` for a case-insensitive rule, which also matches dotless i, long s,
dotted capital I and the Kelvin sign to ASCII letters), and its gate lets the text through.
That is checked on the whole corpus and on generated text built from the rules' own trigger
strings, spelt with every character ``re`` folds to each letter, and the redactor's output
is compared with a run that has no prefilter at all. ``fold_case``, which the gates and
hints use, is compared with ``re`` over every code point.
"""

from __future__ import annotations

import functools
import json
import random
import re
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracebound.pipeline.redaction as redaction_module
from tracebound.pipeline._redaction_detectors import (
    _B64,
    _HEX,
    _KEYWORD_THEN_OPERATOR,
    _KEYWORD_THEN_OPERATOR_LOWER,
    CASE_TWINS,
    DETECTORS,
    Detector,
    _entropy_may_exceed,
    _Gated,
    fold_case,
    may_match,
)
from tracebound.pipeline.redaction import Redactor

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "fixtures" / "redaction" / "corpus.jsonl"
ROWS: list[dict[str, Any]] = [
    json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line
]
REDACTOR = Redactor(b"prefilter-test-key-0123456789abc")
SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _hint_holds(detector: Detector, text: str) -> bool:
    """Whether the hint is in ``text``, decided by ``re`` (not by the code under test)."""
    hint = detector.hint
    assert hint is not None
    if hint.pattern is not None and re.search(hint.pattern, text):
        return True
    flags = re.IGNORECASE if hint.ignore_case else 0
    return any(re.search(re.escape(literal), text, flags) for literal in hint.literals)


def _ungated(detector: Detector) -> Callable[[str], Iterator[tuple[int, int]]]:
    find = detector.find
    return find.find if isinstance(find, _Gated) else find


def _check_sound(text: str) -> None:
    found_any = False
    for detector in DETECTORS:
        found = list(_ungated(detector)(text))
        if found:
            found_any = True
            assert _hint_holds(detector, text), (detector.name, text)
            assert list(detector.find(text)) == found, ("gate", detector.name, text)
    if found_any:
        assert may_match(text), text


def _redact_without_prefilter(value: object) -> Any:
    with mock.patch.object(redaction_module, "may_match", return_value=True):
        return REDACTOR.redact(value)


# --- the corpus -----------------------------------------------------------------------------


def test_every_detector_has_a_hint() -> None:
    # A rule without one would switch the prefilter off (it would let every text through).
    assert all(d.hint is not None for d in DETECTORS)


def test_plain_prose_is_skipped() -> None:
    for text in ("the lockfile is the source of truth", "Planner", "0.02", "plan 1.1: pin x==2"):
        assert not may_match(text), text


@pytest.mark.parametrize("row", ROWS, ids=[row["note"][:50] for row in ROWS])
def test_hints_hold_on_the_corpus(row: dict[str, Any]) -> None:
    text = row["text"]
    _check_sound(text)
    if row["expect"]:
        assert may_match(text)
    for line in text.splitlines():
        _check_sound(line)


@pytest.mark.parametrize("row", ROWS, ids=[row["note"][:50] for row in ROWS])
def test_corpus_redacts_the_same_without_the_prefilter(row: dict[str, Any]) -> None:
    value = {"text": row["text"], "lines": row["text"].splitlines(), "api_key": row["text"]}
    assert REDACTOR.redact(value) == _redact_without_prefilter(value)


# --- generated text -------------------------------------------------------------------------

_TRIGGERS = sorted(
    {
        literal
        for detector in DETECTORS
        if detector.hint is not None
        for literal in detector.hint.literals
    }
    | {secret["secret"] for row in ROWS for secret in row["expect"]}
    | {"=", ":", " ", "-", ".", "\n", '"', "'", "/", "@", "+", "(", ")", "0", "1", "5", "9"}
    | {
        "\u212a",
        "\u0130",
        "\u0131",
        "\u017f",
        "\u1e9e",
        "\ufb00",
        "\u2126",
    }  # lower() changes length or folds oddly, or re.IGNORECASE folds them to ASCII
)


@functools.cache
def _every_character() -> str:
    return "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


@functools.cache
def _same_ignoring_case() -> dict[str, frozenset[str]]:
    """Every character ``re.IGNORECASE`` matches with some printable ASCII character, to
    the ASCII characters it matches."""
    any_ascii = re.compile("[" + re.escape(string.printable) + "]", re.IGNORECASE)
    return {
        char: frozenset(
            n for n in string.printable if re.fullmatch(re.escape(n), char, re.IGNORECASE)
        )
        for char in set(any_ascii.findall(_every_character()))
    }


def _spellings(literal: str) -> st.SearchStrategy[str]:
    """``literal`` with each letter in any spelling ``re.IGNORECASE`` matches it with."""
    twins = {**{c.lower(): c.lower() + c.upper() for c in string.ascii_letters}}
    for odd, letter in CASE_TWINS.items():
        twins[letter] += odd
    return st.tuples(*(st.sampled_from(twins.get(c.lower(), c)) for c in literal)).map("".join)


_SPELT_TRIGGERS = st.sampled_from([t for t in _TRIGGERS if t.isascii()]).flatmap(_spellings)
_TEXT = st.lists(
    st.sampled_from(_TRIGGERS)
    | _SPELT_TRIGGERS
    | st.text(max_size=4)
    | st.text(alphabet="0123456789 -.", min_size=3, max_size=20)
    | st.text(alphabet="ABCDEFabcdef0123456789+/_-", min_size=15, max_size=40),
    max_size=8,
).map("".join)


@SETTINGS
@given(_TEXT)
def test_hints_hold_on_generated_text(text: str) -> None:
    _check_sound(text)


_SECRET_LINES = sorted(
    {line for row in ROWS if row["expect"] for line in row["text"].splitlines() if line}
)


def _respelt(text: str, seed: int) -> str:
    """``text`` with its i, s and k (either case) each spelt at random as ``re.IGNORECASE``
    reads them: the letter in either case or one of its twins (dotless i, long s, ...)."""
    choose = random.Random(seed).choice
    spellings = {c: c.lower() + c.upper() for c in "iskISK"}
    for odd, letter in CASE_TWINS.items():
        spellings[letter] += odd
        spellings[letter.upper()] += odd
    return "".join(choose(spellings[c]) if c in spellings else c for c in text)


@SETTINGS
@given(st.sampled_from(_SECRET_LINES), st.integers(0, 2**32))
def test_hints_hold_on_secrets_spelt_with_case_twins(line: str, seed: int) -> None:
    # Whole secrets from the corpus, so that the (?i) rules really match: generated text
    # rarely spells a whole "Authorization: Basic <credential>" by chance.
    _check_sound(_respelt(line, seed))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT, st.sampled_from(["note", "api_key", "Authorization", "password", "db_token"]))
def test_generated_text_redacts_the_same_without_the_prefilter(text: str, key: str) -> None:
    value = {key: text, "list": [text, 4111111111111111], "n": 5551234567}
    assert REDACTOR.redact(value) == _redact_without_prefilter(value)


# The rules added with form bodies, a third layer and auth keys: their triggers are a
# pattern (the base64 credential rule) or live in decoded text, so build them explicitly.
_NEW_RULE_PARTS = st.sampled_from(
    [
        "auth",
        "_auth",
        "AUTH",
        "Auth",
        "author",
        '"auth": "',
        "auth=",
        "auth :",
        "'",
        '"',
        "dXNlcjpwYXNzd29yZA==",
        "Y2ktYm90Omh1bnRlcjItRVhBTVBMRQ==",
        "Tm90ZTogcm90YXRlIHdlZWtseQ==",
        "ParameterKey",
        "ParameterValue",
        '"ParameterKey": "DbPassword", "ParameterValue": "',
        "ParameterKey=DbPassword,ParameterValue=",
        "hunter2-long-secret",
        # Pairs in either order, AWS Query pairs, OAuth scopes, wrapped lines.
        '"ParameterValue": "hunter2-long-secret", ',
        '"UsePreviousValue": false, ',
        '"ParameterKey": "DbPassword"}',
        "Parameters.member.1.",
        "ParameterKey=DbPassword&",
        "oauth",
        "cmVhZDp1c2Vy",
        "\n",
        "%22",
        "%3A",
        "+",
        "=",
        "&",
        "\\n",
        "\\",
        "n",
    ]
)
_NEW_RULE_TEXT = st.lists(_NEW_RULE_PARTS | st.text(max_size=3), max_size=10).map("".join)


@SETTINGS
@given(_NEW_RULE_TEXT)
def test_hints_hold_for_the_auth_pair_and_form_rules(text: str) -> None:
    _check_sound(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_NEW_RULE_TEXT, st.sampled_from(["note", "auth", "_auth", "ParameterValue"]))
def test_new_rules_redact_the_same_without_the_prefilter(text: str, key: str) -> None:
    value = {
        key: text,
        "text": text,
        "pair": {"ParameterKey": "DbPassword", "ParameterValue": text},
    }
    assert REDACTOR.redact(value) == _redact_without_prefilter(value)


def test_the_auth_credential_rule_passes_the_prefilter() -> None:
    for text in ('{"auth": "dXNlcjpwYXNzd29yZA=="}', "_AUTH = dXNlcjpwYXNzd29yZA=="):
        assert may_match(text)
        assert "[REDACTED:basic-auth-header:" in REDACTOR.redact_text(text).value
    assert not may_match("the author wrote the authentication guide")


# --- case folding as re.IGNORECASE does it -------------------------------------------------


def test_case_twins_are_the_ones_re_folds_to_ascii_letters() -> None:
    derived = {
        char: min(matched).lower()
        for char, matched in _same_ignoring_case().items()
        if not char.isascii()
    }
    assert derived == CASE_TWINS


def _folds_like_re(char: str, folded: str) -> bool:
    """``folded`` equals an ASCII character's fold exactly when ``re`` matches ``char`` to it."""
    matched = _same_ignoring_case().get(char, frozenset())
    return all((folded == n.lower()) == (n in matched) for n in string.printable)


def test_fold_case_is_re_ignorecase_at_every_code_point() -> None:
    everything = _every_character()
    whole = fold_case(everything)  # the translate path: it holds every twin
    assert len(whole) == len(everything)
    for char, folded in zip(everything, whole, strict=True):
        if folded.isascii() or char in _same_ignoring_case():
            assert _folds_like_re(char, folded), hex(ord(char))
    for char in everything:  # one at a time: mostly the lower() path
        folded = fold_case(char)
        assert len(folded) == 1, hex(ord(char))
        if folded.isascii() or char in _same_ignoring_case():
            assert _folds_like_re(char, folded), hex(ord(char))


@SETTINGS
@given(_TEXT)
def test_the_keyword_rule_finds_what_its_ignorecase_pattern_finds(text: str) -> None:
    def spans(matches: Iterator[re.Match[str]]) -> list[tuple[Any, ...]]:
        return [(m.span(), m.span("kw"), m.span("op")) for m in matches]

    folded = fold_case(text)
    assert len(folded) == len(text)
    assert spans(_KEYWORD_THEN_OPERATOR_LOWER.finditer(folded)) == spans(
        _KEYWORD_THEN_OPERATOR.finditer(text)
    )


@pytest.mark.parametrize(
    ("text", "detector"),
    [
        ("Author\u0131zation: Basic dXNlcjpwYXNzd29yZDEyMw==", "basic-auth-header"),
        ("AUTHORİZATİON: Basic dXNlcjpwYXNzd29yZDEyMw==", "basic-auth-header"),
        ("AW\u017f_SECRET_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret-key"),
        (
            (
                "see http\u017f://hook\u017f.slack.com/services/T0000000/B0000000/"
                "XXXXXXXXXXXXXXXXXXXXXXXX"
            ),
            "slack-webhook",
        ),
        ("\u212aey: Bearer abcdef0123456789", "bearer-token"),
        ("pa\u017f\u017fword=hunter2hunter2", "secret-keyword"),
        ("xo\u212a: \u0130ts pa\u017fsword = 'Zq9!vR3#'", "secret-keyword"),
    ],
)
def test_secrets_spelt_with_case_twins_are_redacted(text: str, detector: str) -> None:
    result = REDACTOR.redact_text(text)
    assert f"[REDACTED:{detector}:" in result.value, result.value
    with mock.patch.object(redaction_module, "may_match", return_value=True):
        assert result == REDACTOR.redact_text(text)


# --- the entropy bound ----------------------------------------------------------------------

_B64_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/-_="
_HEX_CHARS = "0123456789abcdefABCDEF"


@SETTINGS
@given(st.data(), st.sampled_from([(_B64, _B64_CHARS), (_HEX, _HEX_CHARS)]))
def test_entropy_bound_only_skips_certain_noes(data: Any, rule: tuple[Any, str]) -> None:
    plugin, charset = rule
    # Few distinct characters, spread evenly or not: the worst case sits right at the bound.
    alphabet = data.draw(st.lists(st.sampled_from(charset), min_size=1, max_size=30, unique=True))
    token = data.draw(st.text(alphabet=alphabet, min_size=1, max_size=200))
    if data.draw(st.booleans()):
        token = "".join(alphabet) * data.draw(st.integers(1, 8))  # uniform: maximal entropy
    if not _entropy_may_exceed(token, plugin.entropy_limit):
        assert plugin.calculate_shannon_entropy(token) <= plugin.entropy_limit


def test_entropy_bound_sits_where_the_arithmetic_says() -> None:
    b64_22 = _B64_CHARS[:22]
    assert not _entropy_may_exceed(b64_22, _B64.entropy_limit)  # log2(22) < 4.5
    assert _entropy_may_exceed(_B64_CHARS[:23], _B64.entropy_limit)  # log2(23) > 4.5
    assert not _entropy_may_exceed("0123456", _HEX.entropy_limit)  # log2(7) < 3
    assert _entropy_may_exceed("01234567", _HEX.entropy_limit)  # log2(8) == 3: computed
