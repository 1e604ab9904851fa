"""The realistic corpus: every positive secret is found, no negative line is touched.

``tests/fixtures/redaction/corpus.jsonl`` holds one sample per line:
``{"text": ..., "expect": [{"detector": ..., "secret": ...}], "note": ...}``. Every fake
secret is format-valid but clearly fake (AWS's documented example key, card-network test
numbers, base64 of "FAKE-…" strings). Lines with an empty ``expect`` are negatives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector

from tracebound.pipeline.redaction import RedactionResult, Redactor, detectors

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "fixtures" / "redaction" / "corpus.jsonl"
ADR = ROOT / "docs" / "adr" / "0005-redaction-detectors.md"

ROWS: list[dict[str, Any]] = [
    json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line
]
POSITIVES = [row for row in ROWS if row["expect"]]
NEGATIVES = [row for row in ROWS if not row["expect"]]
LIBRARY_PLUGINS: tuple[RegexBasedDetector, ...] = (
    AWSKeyDetector(), AzureStorageKeyDetector(), BasicAuthDetector(), GitHubTokenDetector(),
    GitLabTokenDetector(), JwtTokenDetector(), NpmDetector(), OpenAIDetector(),
    PrivateKeyDetector(), PypiTokenDetector(), SendGridDetector(), SlackDetector(),
    StripeDetector(),
)  # fmt: skip

REDACTOR = Redactor(b"corpus-test-key-0123456789abcdef")


def _occurrences(text: str, needle: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(re.escape(needle), text)]


def _detected_by(result: RedactionResult[str], start: int, end: int) -> set[str]:
    names: set[str] = set()
    for r in result.redactions:
        if r.start <= start and end <= r.end:
            names |= {r.detector, *r.also_detected}
    return names


def _misses(row: dict[str, Any]) -> list[str]:
    """What the redactor got wrong on one positive row (empty when it is right)."""
    text: str = row["text"]
    result = REDACTOR.redact_text(text)
    problems = []
    for expected in row["expect"]:
        secret, detector = expected["secret"], expected["detector"]
        spans = _occurrences(text, secret)
        assert spans, f"corpus error: {secret!r} is not in its text"
        if secret in result.value:
            problems.append(f"leaked {secret!r}")
        for start, end in spans:
            if detector not in _detected_by(result, start, end):
                problems.append(f"{secret!r} not attributed to {detector}")
    return problems


def _extras(row: dict[str, Any]) -> list[str]:
    """Redactions that cover none of the row's expected secrets (false positives)."""
    text: str = row["text"]
    wanted = [span for e in row["expect"] for span in _occurrences(text, e["secret"])]
    return [
        f"{r.detector}: {text[r.start : r.end]!r}"
        for r in REDACTOR.redact_text(text).redactions
        if not any(r.start < end and start < r.end for start, end in wanted)
    ]


def test_corpus_is_big_enough_to_mean_something() -> None:
    assert len(POSITIVES) >= 50
    assert len(NEGATIVES) >= 25
    assert sum(len(row["expect"]) for row in POSITIVES) >= 60


def test_every_detector_has_a_positive_sample() -> None:
    covered = {e["detector"] for row in POSITIVES for e in row["expect"]}
    structure_only = {"auth-header"}  # needs a dict key; covered in test_redaction.py
    assert {d.name for d in detectors()} - structure_only <= covered


def test_recall_is_total_on_the_positive_corpus() -> None:
    expected = sum(len(row["expect"]) for row in POSITIVES)
    missed = [(row["note"], m) for row in POSITIVES for m in _misses(row)]
    recall = (expected - len(missed)) / expected
    assert missed == []
    assert recall == 1.0


def test_no_false_positives_on_the_negative_corpus() -> None:
    flagged = [(row["note"], REDACTOR.redact_text(row["text"]).redactions) for row in NEGATIVES]
    false_positives = [(note, [r.detector for r in rs]) for note, rs in flagged if rs]
    assert false_positives == []


@pytest.mark.parametrize("row", POSITIVES, ids=[row["note"][:50] for row in POSITIVES])
def test_positive(row: dict[str, Any]) -> None:
    assert _misses(row) == []
    assert _extras(row) == [], "redacted something that is not one of the expected secrets"


@pytest.mark.parametrize("row", NEGATIVES, ids=[row["note"][:50] for row in NEGATIVES])
def test_negative(row: dict[str, Any]) -> None:
    result = REDACTOR.redact_text(row["text"])
    assert result.value == row["text"]
    assert result.redactions == ()


@pytest.mark.parametrize("row", ROWS, ids=[row["note"][:50] for row in ROWS])
def test_corpus_is_idempotent(row: dict[str, Any]) -> None:
    once = REDACTOR.redact_text(row["text"])
    twice = REDACTOR.redact_text(once.value)
    assert twice.value == once.value
    assert twice.redactions == ()


@pytest.mark.parametrize("row", ROWS, ids=[row["note"][:50] for row in ROWS])
def test_whatever_the_library_plugins_find_never_survives(row: dict[str, Any]) -> None:
    """Our span-based use of the plugins' patterns loses nothing their own API finds.

    Guards a detect-secrets upgrade: if a plugin's ``analyze_string`` starts yielding
    values our span extraction does not cover, this fails.
    """
    output = REDACTOR.redact_text(row["text"]).value
    for plugin in LIBRARY_PLUGINS:
        for value in plugin.analyze_string(row["text"]):
            assert value not in output, f"{type(plugin).__name__} found {value!r}"


def test_the_adr_table_matches_the_detectors() -> None:
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| ([a-z-]+) \|", ADR.read_text(encoding="utf-8"), re.M)
    documented = set(rows)
    actual = {(d.name, d.source) for d in detectors()}
    assert actual <= documented, f"undocumented in ADR 0005: {actual - documented}"
