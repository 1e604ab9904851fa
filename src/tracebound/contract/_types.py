"""Field types shared by the TPC and ARL models, and the plain-words reason for each pattern.

The JSON Schema files spell out the same constraints by hand; ``test_contract_sync.py``
checks that the two agree, keyword for keyword. Patterns are written for both regex
engines in play: Python's ``re`` (jsonschema) and Rust's ``regex`` (pydantic-core). The one
place they differ that matters here is ``$``, which Python also matches before a final
newline; pydantic refuses such a value, and ``validate_*`` runs both, so a trailing newline
cannot slip into a hashed artifact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeAlias, TypeVar

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from tracebound.events.anchor import SHA256_DIGEST_PATTERN
from tracebound.ids import RunId, Sha256Digest, StepId

__all__ = [
    "INVARIANT_ERROR",
    "PATTERN_REASONS",
    "REFERENCE_PATTERN",
    "RUN_ID_PATTERN",
    "SHA256_DIGEST_PATTERN",
    "STEP_ID_PATTERN",
    "TEXT_PATTERN",
    "ArtifactDigest",
    "DigestSet",
    "NonEmptyTextList",
    "NonEmptyTextSet",
    "Reference",
    "ReferenceSet",
    "RunIdField",
    "StepIdField",
    "Text",
    "TextList",
    "TextSet",
    "invariant",
]

TEXT_PATTERN = r"\S"
STEP_ID_PATTERN = r"^\S+$"
RUN_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
REFERENCE_PATTERN = r"^[a-z][a-z0-9+.-]*:\S+$"
_MONEY_PATTERN = r"^[0-9]+(\.[0-9]+)?$"  # tracebound.events.anchor.Money's JSON form

PATTERN_REASONS: dict[str, str] = {
    TEXT_PATTERN: "must not be blank",
    STEP_ID_PATTERN: "must be a non-empty id without whitespace",
    RUN_ID_PATTERN: "must be a lower-case UUID (8-4-4-4-12 hex digits)",
    REFERENCE_PATTERN: "must be a reference of the form 'scheme:rest' (e.g. 'input://path')",
    SHA256_DIGEST_PATTERN: "must be 'sha256:' followed by 64 lower-case hex digits",
    _MONEY_PATTERN: "must be a non-negative decimal string such as '0.02' (no floats)",
}
"""What a value that misses a pattern got wrong, in the words a pipeline author would use."""

INVARIANT_ERROR = "tracebound_invariant"


def invariant(field: str, reason: str) -> PydanticCustomError:
    """A cross-field rule that JSON Schema cannot state, reported against one named field.

    Raised inside a model validator; ``validate_*`` appends ``field`` to the error's location,
    so the caller learns e.g. ``latency_est.p95_ms`` rather than just ``latency_est``.
    """
    return PydanticCustomError(INVARIANT_ERROR, "{reason}", {"field": field, "reason": reason})


_T = TypeVar("_T", bound=Sequence[Any])


def _unique(value: _T) -> _T:
    seen: set[Any] = set()
    for item in value:
        if item in seen:
            raise ValueError(f"must not contain duplicates ({item!r} appears twice)")
        seen.add(item)
    return value


Text: TypeAlias = Annotated[str, Field(min_length=1, pattern=TEXT_PATTERN)]
"""Free text that says something: at least one non-whitespace character."""

TextList: TypeAlias = tuple[Text, ...]
"""An ordered list of texts; repeats are allowed (a test may run twice)."""

TextSet: TypeAlias = Annotated[
    tuple[Text, ...], AfterValidator(_unique), Field(json_schema_extra={"uniqueItems": True})
]
"""A set of texts kept in the producer's order; may be empty; no duplicates."""

NonEmptyTextSet: TypeAlias = Annotated[
    tuple[Text, ...],
    Field(min_length=1),
    AfterValidator(_unique),
    Field(json_schema_extra={"uniqueItems": True}),
]
"""A set of texts that must hold at least one (the handoff envelope's sets)."""

NonEmptyTextList: TypeAlias = Annotated[tuple[Text, ...], Field(min_length=1)]
"""An ordered list of texts that must hold at least one (a step's ``actions``)."""

Reference: TypeAlias = Annotated[str, Field(pattern=REFERENCE_PATTERN)]
"""An input reference, ``scheme:rest``: ``input://path``, ``sha256:<hex>``, ``blob://...``."""

ReferenceSet: TypeAlias = Annotated[
    tuple[Reference, ...], AfterValidator(_unique), Field(json_schema_extra={"uniqueItems": True})
]

ArtifactDigest: TypeAlias = Annotated[Sha256Digest, Field(pattern=SHA256_DIGEST_PATTERN)]
"""A content address in the blob store: ``sha256:<64 lower-case hex>``."""

DigestSet: TypeAlias = Annotated[
    tuple[ArtifactDigest, ...],
    AfterValidator(_unique),
    Field(json_schema_extra={"uniqueItems": True}),
]

StepIdField: TypeAlias = Annotated[StepId, Field(pattern=STEP_ID_PATTERN)]
RunIdField: TypeAlias = Annotated[
    RunId, Field(pattern=RUN_ID_PATTERN, json_schema_extra={"format": "uuid"})
]
"""A run id: a UUID in its one lower-case spelling, so that it hashes one way."""
