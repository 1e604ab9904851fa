"""Property tests: what the models call valid, the hand-written schemas call valid too;
removing or emptying any part of a handoff envelope is always refused; and no input makes
a validator raise anything but ``ValidationFailed``.

Documents are drawn from each model's own ``model_json_schema()`` (not the hand-written
file), so these tests cross-check the two forms of the contract. Patterns are generated
with Python's regex semantics, the stricter of the two engines for ``\\S``.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]  # jsonschema has no py.typed
from pydantic import BaseModel

from tracebound.contract import (
    ARLEntry,
    HandoffEnvelope,
    TPCArtifact,
    load_schema,
    validate_arl,
    validate_envelope,
    validate_tpc,
)
from tracebound.contract.validate import _is_rfc3339
from tracebound.errors import ValidationFailed
from tracebound.events.envelope import format_timestamp

MAX_LIST = 4


def _strategy(node: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A strategy for the subset of JSON Schema that pydantic writes for these models."""
    if "$ref" in node:
        return _strategy(defs[node["$ref"].removeprefix("#/$defs/")], defs)
    if "anyOf" in node:
        return st.one_of([_strategy(option, defs) for option in node["anyOf"]])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "null":
        return st.none()
    if kind == "integer":
        return st.integers(min_value=node.get("minimum"), max_value=node.get("maximum"))
    if kind == "string":
        if node.get("format") == "date-time":
            # From year 1000: see test_years_before_1000_round_trip below.
            when = st.datetimes(min_value=datetime(1000, 1, 1), timezones=st.just(UTC))
            return when.map(format_timestamp)
        if node.get("format") == "uuid":
            return st.uuids().map(str)
        pattern = node.get("pattern")
        if pattern is None:
            return st.text(min_size=node.get("minLength", 0))
        anchored = pattern.startswith("^") and pattern.endswith("$")
        text = st.from_regex(pattern, fullmatch=anchored)
        return text.filter(lambda s: len(s) >= node.get("minLength", 0))
    if kind == "array":
        items = _strategy(node["items"], defs)
        low = node.get("minItems", 0)
        return st.lists(
            items, min_size=low, max_size=max(low, MAX_LIST), unique=node.get("uniqueItems", False)
        )
    if kind == "object":
        props = node["properties"]
        required = set(node.get("required", ()))
        return st.fixed_dictionaries(
            {name: _strategy(sub, defs) for name, sub in props.items() if name in required},
            optional={
                name: _strategy(sub, defs) for name, sub in props.items() if name not in required
            },
        )
    raise AssertionError(f"no strategy for {node}")


def from_model(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    schema = model.model_json_schema()
    return _strategy(schema, schema.get("$defs", {}))


def _tpc_fixups(doc: dict[str, Any]) -> dict[str, Any]:
    """Cross-field rules the model's JSON Schema cannot state (latency_est.p50 <= p95)."""
    low, high = sorted((doc["latency_est"]["p50_ms"], doc["latency_est"]["p95_ms"]))
    doc["latency_est"] = {"p50_ms": low, "p95_ms": high}
    return doc


def _arl_fixups(doc: dict[str, Any]) -> dict[str, Any]:
    start, end = sorted((doc["timestamp_start"], doc["timestamp_end"]))
    doc["timestamp_start"], doc["timestamp_end"] = start, end
    if doc["parent_step_id"] == doc["step_id"]:
        doc["parent_step_id"] = None
    ran = doc["validations"]["ran"]
    doc["validations"]["failed"] = ran[: len(doc["validations"]["failed"])]
    doc["validations"]["pending"] = [v for v in doc["validations"]["pending"] if v not in ran]
    return doc


TPCS = from_model(TPCArtifact).map(_tpc_fixups)
ENVELOPES = from_model(HandoffEnvelope)
ARLS = from_model(ARLEntry).map(_arl_fixups)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _schema_validator(name: Literal["tpc", "arl"]) -> Any:
    checker = FormatChecker(formats=("uuid",))
    checker.checks("date-time")(_is_rfc3339)
    return Draft202012Validator(load_schema(name), format_checker=checker)


TPC_SCHEMA = _schema_validator("tpc")
ARL_SCHEMA = _schema_validator("arl")


@SETTINGS
@given(TPCS)
def test_model_valid_artifacts_are_schema_valid(doc: dict[str, Any]) -> None:
    model = TPCArtifact.model_validate(doc)
    dumped = model.model_dump(mode="json")
    assert TPC_SCHEMA.is_valid(doc), list(TPC_SCHEMA.iter_errors(doc))
    assert TPC_SCHEMA.is_valid(dumped)
    assert validate_tpc(dumped) == model


@SETTINGS
@given(ARLS)
def test_model_valid_entries_are_schema_valid(doc: dict[str, Any]) -> None:
    model = ARLEntry.model_validate(doc)
    dumped = model.model_dump(mode="json")
    assert ARL_SCHEMA.is_valid(doc), list(ARL_SCHEMA.iter_errors(doc))
    assert validate_arl(dumped) == model
    # The generator writes tracebound's spelling, which survives exactly, except that Money
    # (events.anchor) admits leading zeros on input ("00") and writes the number plainly.
    money = Decimal(doc["cost_est"]["compute_usd_est"])
    assert Decimal(dumped["cost_est"]["compute_usd_est"]) == money
    assert dumped == {**doc, "cost_est": {**doc["cost_est"], **dumped["cost_est"]}}


@SETTINGS
@given(ENVELOPES, st.data())
def test_deleting_any_envelope_field_always_fails(envelope: dict[str, Any], data: Any) -> None:
    validate_envelope(envelope)
    key = data.draw(st.sampled_from(sorted(envelope)))
    broken = {k: v for k, v in envelope.items() if k != key}
    with pytest.raises(ValidationFailed) as caught:
        validate_envelope(broken)
    assert (caught.value.field, caught.value.reason) == (key, "is required")


@SETTINGS
@given(TPCS, st.data())
def test_deleting_or_emptying_any_envelope_field_inside_an_artifact_fails(
    artifact: dict[str, Any], data: Any
) -> None:
    key = data.draw(st.sampled_from(sorted(artifact["handoff_envelope"])))
    empty = data.draw(st.booleans())
    broken = copy.deepcopy(artifact)
    if empty:
        broken["handoff_envelope"][key] = "" if key == "minimal_diff" else []
    else:
        del broken["handoff_envelope"][key]
    with pytest.raises(ValidationFailed) as caught:
        validate_tpc(broken)
    assert caught.value.field == f"handoff_envelope.{key}"
    assert caught.value.reason == ("must not be empty" if empty else "is required")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(TPCS, st.data())
def test_any_value_anywhere_gives_a_result_or_validation_failed(
    artifact: dict[str, Any], data: Any
) -> None:
    """No raw jsonschema, pydantic, KeyError or TypeError escapes (CONVENTIONS, #7)."""
    doc = copy.deepcopy(artifact)
    target = doc
    if data.draw(st.booleans()):
        target = doc[data.draw(st.sampled_from(["outputs", "cost_est", "latency_est"]))]
    target[data.draw(st.sampled_from([*sorted(target), "surprise"]))] = data.draw(JSON)
    try:
        validate_tpc(doc)
    except ValidationFailed as exc:
        failure = exc
    else:
        return
    assert failure.field and failure.reason


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_arbitrary_json_is_refused_cleanly(value: Any) -> None:
    for validate in (validate_tpc, validate_envelope, validate_arl):
        with pytest.raises(ValidationFailed):
            validate(value)


def test_python_whitespace_is_stricter_than_rusts_and_the_stricter_wins() -> None:
    """U+001C is whitespace to Python's `re` (jsonschema) but not to Rust's (pydantic)."""
    envelope = {
        "assumptions": ["a"],
        "constraints": ["c"],
        "required_validations": ["v"],
        "minimal_diff": "\x1c",
    }
    HandoffEnvelope.model_validate(envelope)  # the model alone would take it
    with pytest.raises(ValidationFailed) as caught:
        validate_envelope(envelope)
    assert (caught.value.field, caught.value.reason) == ("minimal_diff", "must not be blank")


def test_years_before_1000_round_trip() -> None:
    fixture = Path(__file__).parents[2] / "fixtures/contract/arl/valid/arl-root-success.json"
    doc = json.loads(fixture.read_text(encoding="utf-8"))
    doc["timestamp_start"] = doc["timestamp_end"] = "0999-01-01T00:00:00Z"
    entry = ARLEntry.model_validate(doc)
    assert validate_arl(entry.model_dump(mode="json")) == entry
