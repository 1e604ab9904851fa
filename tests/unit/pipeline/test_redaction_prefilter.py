"""The redaction prefilter and the entropy bound skip work, never a secret.

``may_match`` lets the redactor skip its thirty-one detectors on text that holds none of
their hints (see ``Hint`` in ``_redaction_detectors``). It is only sound if every rule's
hint really is necessary: whenever a rule finds something, its hint is in the text. That is
checked on the whole corpus and on generated text built from the rules' own trigger strings,
and the redactor's output is compared with a run that has no prefilter at all.
"""

from __future__ import annotations

import json
import re
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
    DETECTORS,
    Detector,
    _entropy_may_exceed,
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
    hint = detector.hint
    assert hint is not None
    if hint.lowered and len(text.lower()) != len(text):
        return True  # not claimed there: may_match lets such text through (checked below)
    if hint.pattern is not None and re.search(hint.pattern, text):
        return True
    haystack = text.lower() if hint.lowered else text
    return any(literal in haystack for literal in hint.literals)


def _check_sound(text: str) -> None:
    found_any = False
    for detector in DETECTORS:
        if list(detector.find(text)):
            found_any = True
            assert _hint_holds(detector, text), (detector.name, text)
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
        "\u017f",
        "\u1e9e",
        "\ufb00",
        "\u2126",
    }  # lower() changes length or folds oddly
)
_TEXT = st.lists(
    st.sampled_from(_TRIGGERS)
    | st.text(max_size=4)
    | st.text(alphabet="0123456789 -.", min_size=3, max_size=20)
    | st.text(alphabet="ABCDEFabcdef0123456789+/_-", min_size=15, max_size=40),
    max_size=8,
).map("".join)


@SETTINGS
@given(_TEXT)
def test_hints_hold_on_generated_text(text: str) -> None:
    _check_sound(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT, st.sampled_from(["note", "api_key", "Authorization", "password", "db_token"]))
def test_generated_text_redacts_the_same_without_the_prefilter(text: str, key: str) -> None:
    value = {key: text, "list": [text, 4111111111111111], "n": 5551234567}
    assert REDACTOR.redact(value) == _redact_without_prefilter(value)


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
