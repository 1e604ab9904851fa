"""Every valid fixture passes and round-trips; every invalid one fails, naming its field.

The fixtures live in ``tests/fixtures/contract/`` and are written by ``generate.py`` there;
see its docstring for the layout and the meaning of ``expected.json``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
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

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "contract"
KINDS: dict[str, tuple[Callable[[Mapping[str, Any]], BaseModel], type[BaseModel]]] = {
    "tpc": (validate_tpc, TPCArtifact),
    "envelope": (validate_envelope, HandoffEnvelope),
    "arl": (validate_arl, ARLEntry),
}


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _files(kind: str, group: str) -> list[Path]:
    return sorted((FIXTURES / kind / group).glob("*.json"))


def _expected(kind: str) -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = _load(FIXTURES / kind / "expected.json")
    return data


VALID = [(kind, path) for kind in KINDS for path in _files(kind, "valid")]
INVALID = [(kind, path) for kind in KINDS for path in _files(kind, "invalid")]


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("contract_fixtures", FIXTURES / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_committed_fixtures_are_what_the_generator_writes() -> None:
    generator = _generator()
    built = {rel: generator.dumps(doc) for rel, doc in generator.build().items()}
    on_disk = {
        str(path.relative_to(FIXTURES)): path.read_text(encoding="utf-8")
        for kind in KINDS
        for path in (FIXTURES / kind).rglob("*.json")
    }
    assert sorted(on_disk) == sorted(built), "run tests/fixtures/contract/generate.py"
    stale = [rel for rel in built if built[rel] != on_disk[rel]]
    assert not stale, f"stale fixtures, run tests/fixtures/contract/generate.py: {stale}"


def test_there_are_fixtures_of_every_kind() -> None:
    for kind in KINDS:
        assert len(_files(kind, "valid")) >= 2, kind
        assert len(_files(kind, "invalid")) >= 20, kind
        assert set(_expected(kind)) == {p.name for p in _files(kind, "invalid")}, kind


# --- valid ------------------------------------------------------------------------------------


def _normalise(value: Any, key: str = "") -> Any:
    """The fixture as the model writes it: time in UTC. Nothing else may change on the trip."""
    if isinstance(value, dict):
        return {k: _normalise(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    if isinstance(value, str) and key.startswith("timestamp"):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))  # aware: compares instants
    return value


@pytest.mark.parametrize(("kind", "path"), VALID, ids=[p.name for _, p in VALID])
def test_valid_fixture_passes_and_round_trips(kind: str, path: Path) -> None:
    validate, model = KINDS[kind]
    document = _load(path)
    result = validate(document)
    assert type(result) is model
    dumped = result.model_dump(mode="json")
    assert _normalise(dumped) == _normalise(document)
    if kind != "arl" or "offset" not in path.name:
        assert dumped == document  # tracebound's own spelling survives byte for byte
    assert validate(dumped) == result  # and what the model writes validates again


def test_offset_timestamps_are_written_in_utc() -> None:
    entry = validate_arl(_load(FIXTURES / "arl/valid/arl-router-offset-timestamps.json"))
    dumped = entry.model_dump(mode="json")
    assert dumped["timestamp_start"] == "2026-11-22T10:00:00.000000Z"
    assert dumped["timestamp_end"] == "2026-11-22T10:00:01.500000Z"


# --- invalid ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "path"), INVALID, ids=[p.name for _, p in INVALID])
def test_invalid_fixture_fails_naming_the_field(kind: str, path: Path) -> None:
    validate, _ = KINDS[kind]
    expected = _expected(kind)[path.name]
    with pytest.raises(ValidationFailed) as caught:
        validate(_load(path))
    assert caught.value.field == expected["field"]
    assert expected["reason"] in caught.value.reason
    assert str(caught.value) == f"{caught.value.field}: {caught.value.reason}"


def _schema_for(kind: str) -> dict[str, Any]:
    if kind == "envelope":
        tpc = load_schema("tpc")
        return {"$schema": tpc["$schema"], "$defs": tpc["$defs"], "$ref": "#/$defs/HandoffEnvelope"}
    return load_schema("tpc" if kind == "tpc" else "arl")


@pytest.mark.parametrize(("kind", "path"), INVALID, ids=[p.name for _, p in INVALID])
def test_which_layer_refuses_each_invalid_fixture(kind: str, path: Path) -> None:
    """JSON Schema alone refuses the `schema` rules; only the model refuses the `model` ones.

    This keeps `caught_by` honest, which docs/contracts.md relies on when it tells a
    non-Python consumer what a plain JSON Schema validator will miss.
    """
    checker = FormatChecker(formats=("uuid",))
    checker.checks("date-time")(_is_rfc3339)
    validator = Draft202012Validator(_schema_for(kind), format_checker=checker)
    refused_by_schema = not validator.is_valid(_load(path))
    assert refused_by_schema == (_expected(kind)[path.name]["caught_by"] == "schema")


def _diff(a: Any, b: Any, at: str = "") -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                yield f"{at}.{key}"
            else:
                yield from _diff(a[key], b[key], f"{at}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff(x, y, f"{at}[{index}]")
    elif type(a) is not type(b) or a != b:
        yield at


@pytest.mark.parametrize(("kind", "path"), INVALID, ids=[p.name for _, p in INVALID])
def test_invalid_fixture_differs_from_a_valid_one_in_one_place(kind: str, path: Path) -> None:
    base_name = _expected(kind)[path.name]["base"]
    base = _load(FIXTURES / kind / "valid" / base_name)
    assert len(list(_diff(base, _load(path)))) == 1


def test_diff_counts_changes() -> None:
    assert list(_diff({"a": [1, 2]}, {"a": [1, 2]})) == []
    assert list(_diff({"a": [1, 2]}, {"a": [1, 3], "b": 0})) == [".a[1]", ".b"]
    assert list(_diff({"a": 0}, {"a": 0.0})) == [".a"]  # a float is a change


# --- coverage ---------------------------------------------------------------------------------


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        nested = [
            arg
            for arg in (info.annotation, *getattr(info.annotation, "__args__", ()))
            if isinstance(arg, type) and issubclass(arg, BaseModel)
        ]
        for sub in nested:
            paths += _field_paths(sub, f"{path}.")
    return paths


def test_field_paths_reach_nested_models() -> None:
    paths = _field_paths(ARLEntry)
    assert {"approval.approver", "validations.failed", "cost_est.compute_usd_est"} <= set(paths)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_model_field_has_invalid_fixtures(kind: str) -> None:
    _, model = KINDS[kind]
    fields = _field_paths(model)
    expected = _expected(kind)
    assert len(expected) >= len(fields)
    named = {entry["field"].split("[")[0] for entry in expected.values()}
    untested = [field for field in fields if field not in named]
    assert not untested, f"no invalid fixture breaks {untested}"
    # ...and every field is broken both by leaving it out (or null) and by the wrong type.
    for field in fields:
        reasons = [e["reason"] for e in expected.values() if e["field"] == field]
        assert any(r == "is required" for r in reasons) or field.split(".")[-1] in {
            "payload_pointer",
            "approval",
            "redaction_reason",
        }, field
        assert any(r.startswith("must be") for r in reasons), field
