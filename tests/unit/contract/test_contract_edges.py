"""Hostile and odd inputs to the contract validators: each gives ValidationFailed (or, for a
broken packaged schema, ContractError), promptly, and never a raw exception.

Pinned here: dict keys that are not strings, date-times that cannot be brought into UTC,
arrays that make jsonschema's ``uniqueItems`` quadratic, a trailing newline that Python's
``$`` lets through, and a packaged schema whose ``$ref`` cannot be resolved.
"""

from __future__ import annotations

import copy
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # jsonschema has no py.typed

from tracebound.contract import load_schema, validate_arl, validate_envelope, validate_tpc
from tracebound.contract import validate as validate_module
from tracebound.contract.validate import _reference_pattern, _unique_items
from tracebound.errors import ContractError, ValidationFailed

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "contract"


def _fixture(rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / rel).read_text(encoding="utf-8"))
    return data


TPC = _fixture("tpc/valid/tpc-executor.json")
ARL = _fixture("arl/valid/arl-approved.json")
ENVELOPE = _fixture("envelope/valid/envelope-many.json")


def _refused(validate: Any, document: Any) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        validate(document)
    return caught.value


# --- dict keys that are not strings -----------------------------------------------------------


@pytest.mark.parametrize("key", [1, None, 2.5, (1, 2), b"goal"])
def test_a_key_that_is_not_a_string_is_refused_by_name(key: Any) -> None:
    failure = _refused(validate_envelope, {**ENVELOPE, key: "x"})
    assert failure.field == "$"
    assert failure.reason == f"has a key that is not a string ({type(key).__name__})"

    failure = _refused(validate_tpc, {**TPC, key: "x"})
    assert (failure.field, failure.reason[:30]) == ("$", "has a key that is not a string")

    nested = copy.deepcopy(TPC)
    nested["outputs"][key] = "x"
    failure = _refused(validate_tpc, nested)
    assert failure.field == "outputs"
    assert failure.reason.startswith("has a key that is not a string")


def test_a_key_that_is_not_a_string_is_named_before_an_unknown_field() -> None:
    failure = _refused(validate_tpc, {**TPC, "zz": 1, 1: "x"})
    assert (failure.field, failure.reason) == ("$", "has a key that is not a string (int)")
    failure = _refused(validate_tpc, {**TPC, "zz": 1})
    assert (failure.field, failure.reason) == ("zz", "is not an allowed field")


# --- date-times at the edge of what Python can hold ------------------------------------------


@pytest.mark.parametrize(
    "when", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-01:00"]
)
@pytest.mark.parametrize("field", ["timestamp_start", "timestamp_end", "approval.timestamp"])
def test_a_date_time_outside_utcs_range_is_refused_typed(when: str, field: str) -> None:
    entry = copy.deepcopy(ARL)
    if field == "approval.timestamp":
        entry["approval"]["timestamp"] = when
    else:
        entry["timestamp_start"] = entry["timestamp_end"] = when
    failure = _refused(validate_arl, entry)
    assert failure.field in {field, "timestamp_start"}
    assert "out of range" in failure.reason


def test_the_last_instant_in_utc_is_still_accepted() -> None:
    entry = {**ARL, "timestamp_start": "9999-12-31T23:59:59Z"}
    entry["timestamp_end"] = "9999-12-31T23:59:59.999999Z"
    entry["approval"] = {**ARL["approval"], "timestamp": "0001-01-01T00:00:00Z"}
    assert validate_arl(entry).timestamp_end.year == 9999


# --- uniqueItems: linear, and the reference's verdict -----------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        [{"a": i} for i in range(20_000)],  # unsortable: jsonschema compared every pair
        [str(i) for i in range(20_000)] + [1],  # sorting fails at the end, same fallback
        [[i, "x"] for i in range(20_000)] + [{"a": 1}],
    ],
    ids=["dicts", "strings-then-int", "lists-then-dict"],
)
def test_a_large_set_of_unsortable_items_is_refused_without_pairwise_compares(
    items: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not timed (no timed unit tests): jsonschema's own uniqueItems, which compares every
    pair of unsortable items (over a minute for the dicts), must not run on plain JSON."""

    def pairwise(*args: Any) -> Any:
        raise AssertionError("jsonschema's pairwise uniqueItems ran on plain JSON")

    monkeypatch.setattr(validate_module, "_UNIQUE_ITEMS", pairwise)
    failure = _refused(validate_tpc, {**TPC, "risks": items})
    assert failure.field.startswith("risks[")
    assert failure.reason == "must be a string"


@pytest.mark.parametrize(
    ("items", "duplicated"),
    [
        ([{"a": 0}, {"a": 0}], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], True),
        ([[1, 2], [1, 2]], True),
        ([[1, 2], [2, 1]], False),
        ([1, 1.0], True),
        ([True, 1], False),
        ([False, 0, None, ""], False),
        ([[True], [1]], False),
        ([{"a": True}, {"a": 1}], False),
        (["a", 1, "a"], True),
        ([0.0, -0.0], True),
        ([2**53 + 1, float(2**53 + 1)], False),
        ([math.inf, math.inf], True),
    ],
)
def test_duplicates_are_found_as_the_reference_finds_them(
    items: list[Any], duplicated: bool
) -> None:
    reference = Draft202012Validator({"uniqueItems": True})
    assert reference.is_valid(items) is not duplicated
    errors = list(_unique_items(reference, True, items, {}))
    assert bool(errors) is duplicated
    if duplicated:
        failure = _refused(validate_tpc, {**TPC, "risks": items})
        assert (failure.field, failure.reason) == ("risks", "must not contain duplicates")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, -0.0, 1.0, 2.5, math.inf, math.nan])
    | st.sampled_from(["", "a", "b"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(JSON_VALUES, max_size=6))
def test_unique_items_agrees_with_jsonschema(items: list[Any]) -> None:
    reference = Draft202012Validator({"uniqueItems": True})
    assert (not list(_unique_items(reference, True, items, {}))) is reference.is_valid(items)


# --- `$` means the end of the text ------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("cost_est", "compute_usd_est"), "0.02\n"),
        (("outputs", "artifacts"), ["sha256:" + "a" * 64 + "\n"]),
        (("input_refs",), ["input://plan.json\n"]),
    ],
)
def test_a_trailing_newline_is_refused(where: tuple[str, ...], value: Any) -> None:
    document = copy.deepcopy(TPC)
    target = document
    for part in where[:-1]:
        target = target[part]
    target[where[-1]] = value
    failure = _refused(validate_tpc, document)
    assert failure.field.split("[")[0] == ".".join(where)
    # ...and the JSON Schema pass says so, not only the model (which normalises money).
    assert not validate_module._validator("tpc").is_valid(document)


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        (r"^a$", "a", True),
        (r"^a$", "a\n", False),
        (r"^a\$", "a$", True),
        (r"^a[$]", "a$", True),
        (r"^a\\$", "a\\", True),
        (r"^a\\$", "a\\\n", False),
        (r"^(a|b$)", "b\n", False),
        (r"\S", " x ", True),
    ],
)
def test_reference_patterns_read_dollar_as_the_end(pattern: str, text: str, matches: bool) -> None:
    assert (_reference_pattern(pattern).search(text) is not None) is matches


# --- a packaged schema that cannot be resolved -----------------------------------------------


@pytest.mark.parametrize(
    "ref", ["https://example.invalid/evil.json", "file:///etc/passwd", "#/$defs/Nowhere"]
)
def test_an_unresolvable_ref_in_the_reference_is_a_contract_error(ref: str) -> None:
    real = validate_module.load_schema

    def break_it(name: Any) -> Any:
        schema = real(name)
        return {**schema, "$ref": ref} if name == "tpc" else schema

    # A tuple is not plain JSON, so the fast path (which would refuse to compile the schema)
    # is skipped, and the reference meets the reference only while validating.
    document = {**TPC, "actions": ("a",)}
    validate_module._validator.cache_clear()
    try:
        with (
            mock.patch.object(validate_module, "load_schema", side_effect=break_it),
            pytest.raises(ContractError, match="cannot be resolved") as caught,
        ):
            validate_tpc(document)
    finally:
        validate_module._validator.cache_clear()
    assert not isinstance(caught.value, ValidationFailed)
    assert load_schema("tpc")["$id"]  # the real schema again
    validate_tpc(TPC)


# --- fuzz: Python values no JSON text can be -------------------------------------------------

ODD = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**200)
    | st.floats()
    | st.decimals()
    | st.text(max_size=5)
    | st.binary(max_size=3)
    | st.sampled_from(["\ud800", "\x00", "a\n", "\x1c", "\ufeff"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(
            st.text(max_size=3) | st.integers() | st.none() | st.floats(), inner, max_size=3
        )
    ),
    max_leaves=8,
)


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*at, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*at, index))
    return out


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.sampled_from(["tpc", "envelope", "arl"]), st.data())
def test_any_python_value_anywhere_gives_a_result_or_validation_failed(
    kind: str, data: Any
) -> None:
    validate, base = {
        "tpc": (validate_tpc, TPC),
        "envelope": (validate_envelope, ENVELOPE),
        "arl": (validate_arl, ARL),
    }[kind]
    document = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(document)[1:]))
        target = document
        for part in path[:-1]:
            target = target[part]
        if isinstance(target, dict) and data.draw(st.booleans()):
            target[data.draw(ODD.filter(lambda k: isinstance(k, str | int | None)))] = data.draw(
                ODD
            )
        else:
            target[path[-1]] = data.draw(ODD)
    try:
        validate(document)
    except ValidationFailed as exc:
        failure = exc
    else:
        return
    assert failure.field and failure.reason
    assert len(failure.reason) < 500


def test_nan_and_decimal_nan_are_refused_typed() -> None:
    for value in (math.nan, math.inf, Decimal("NaN"), Decimal("sNaN"), 10**5000):
        assert _refused(validate_tpc, {**TPC, "confidence": value}).field in {"confidence", "$"}
        assert _refused(validate_tpc, {**TPC, "risks": [value, value]}).field.startswith(
            ("risks", "$")
        )


# --- the ARL's cross-field checks are linear, and their reasons short ------------------------


@pytest.mark.parametrize("broken", [None, "failed", "pending"])
def test_large_validation_lists_are_checked(broken: str | None) -> None:
    """60k names a list: a membership test per pair took over 20 s (not timed here: the
    reason's length and the verdict are what can be asserted)."""
    ran = [f"check-{i}" for i in range(60_000)]
    validations = {"ran": ran, "failed": ran, "pending": [f"later-{i}" for i in range(60_000)]}
    if broken == "failed":
        validations["failed"] = [*ran[1:], *(f"never-{i}" for i in range(1_000))]
    elif broken == "pending":
        validations["pending"] = [*validations["pending"], *ran]
    entry = {**ARL, "validations": validations}
    if broken is None:
        assert len(validate_arl(entry).validations.ran) == 60_000
    else:
        failure = _refused(validate_arl, entry)
        assert failure.field == f"validations.{broken}"
        assert ("did not run" if broken == "failed" else "already ran") in failure.reason
        assert len(failure.reason) < 200
