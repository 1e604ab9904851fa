"""docs/contracts.md is tested: its JSON examples validate and round-trip.

Its Python block runs in tests/e2e/test_docs_examples.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tracebound.contract import validate_arl, validate_tpc

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "contracts.md"
ADR = ROOT / "docs" / "adr" / "0004-tpc-confidence.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def _blocks(info: str) -> list[str]:
    return [body for tag, body in FENCE.findall(DOC.read_text(encoding="utf-8")) if tag == info]


def test_the_doc_has_the_contracts_section() -> None:
    assert "\n## Contracts (TPC and ARL)\n" in DOC.read_text(encoding="utf-8")


def test_fence_extraction_finds_every_block() -> None:
    tags = [tag for tag, _ in FENCE.findall(DOC.read_text(encoding="utf-8"))]
    assert sorted(tags) == ["json arl", "json tpc", "python"]


@pytest.mark.parametrize(
    ("info", "validate"), [("json tpc", validate_tpc), ("json arl", validate_arl)]
)
def test_doc_examples_validate_and_round_trip(
    info: str, validate: Callable[[Mapping[str, Any]], BaseModel]
) -> None:
    (block,) = _blocks(info)
    document = json.loads(block)
    model = validate(document)
    assert model.model_dump(mode="json") == document


def test_fixtures_named_in_the_docs_exist() -> None:
    fixtures = ROOT / "tests" / "fixtures" / "contract"
    named = 0
    for text in (DOC.read_text(encoding="utf-8"), ADR.read_text(encoding="utf-8")):
        for name in re.findall(r"`([a-z]+-[\w.-]+\.json)`", text):
            named += 1
            kind = name.split("-")[0]
            assert (fixtures / kind / "invalid" / name).exists() or (
                fixtures / kind / "valid" / name
            ).exists(), name
    assert named >= 1
