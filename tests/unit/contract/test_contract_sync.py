"""The pydantic models and the hand-written JSON Schemas state the same contract.

Both are reduced to a "shape": refs inlined, titles/descriptions/defaults dropped, nullable
``anyOf`` folded into a ``type`` list. The shapes must be equal keyword for keyword
(properties, required, enums, ``additionalProperties: false``, patterns, bounds, formats,
``minItems``, ``uniqueItems``...). Also: the repo-root schemas and the packaged copies are
byte-identical, and the schemas are valid draft 2020-12 documents.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # jsonschema has no py.typed
from pydantic import BaseModel

import tracebound.contract
from tracebound.contract import (
    ARL_SCHEMA_ID,
    TPC_SCHEMA_ID,
    Approval,
    ARLEntry,
    CostEstimate,
    HandoffEnvelope,
    LatencyEstimate,
    Outputs,
    TPCArtifact,
    Validations,
    load_schema,
)

ROOT = Path(__file__).resolve().parents[3]
REPO_SCHEMAS = ROOT / "schemas" / "agent"
PACKAGE_SCHEMAS = ROOT / "src" / "tracebound" / "contract" / "schemas"
NAMES = ["tpc.schema.json", "arl.schema.json"]

# Keywords that carry no constraint.
_IGNORED = {"title", "description", "default", "examples", "$comment", "$schema", "$id", "$defs"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        assert ref.startswith("#/$defs/"), f"only local refs are expected, got {ref}"
        node = {**_resolve(defs[ref.removeprefix("#/$defs/")], defs), **node}
    return {key: _resolve(value, defs) for key, value in node.items()}


def shape(schema: dict[str, Any]) -> Any:
    """The constraint-carrying part of a schema, in one normal form."""
    return _shape(_resolve(schema, schema.get("$defs", {})))


def _shape(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    node = {k: v for k, v in node.items() if k not in _IGNORED}
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        others = [option for option in any_of if option != {"type": "null"}]
        assert len(others) == 1 and len(any_of) == 2, f"unexpected anyOf {any_of}"
        node = {**others[0], **node}
        node["type"] = sorted({*_types(others[0]), "null"})
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _shape(sub) for name, sub in value.items()}
        elif key == "items":
            out[key] = _shape(value)
        elif key == "required" or key == "enum":
            out[key] = sorted(value)
        elif key == "const":
            out["enum"] = [value]
        elif key == "type":
            out[key] = sorted(_types({"type": value}))
        else:
            out[key] = value
    return out


def _types(node: dict[str, Any]) -> list[str]:
    value = node.get("type", [])
    return [value] if isinstance(value, str) else list(value)


# (model, where its schema is in which file)
PAIRS: list[tuple[type[BaseModel], str, str | None]] = [
    (TPCArtifact, "tpc", None),
    (HandoffEnvelope, "tpc", "HandoffEnvelope"),
    (Outputs, "tpc", "Outputs"),
    (CostEstimate, "tpc", "CostEstimate"),
    (LatencyEstimate, "tpc", "LatencyEstimate"),
    (ARLEntry, "arl", None),
    (Validations, "arl", "Validations"),
    (Approval, "arl", "Approval"),
    (CostEstimate, "arl", "CostEstimate"),
]


def _hand_written(name: str, definition: str | None) -> dict[str, Any]:
    schema = load_schema("tpc" if name == "tpc" else "arl")
    if definition is None:
        return schema
    return {**schema["$defs"][definition], "$defs": schema["$defs"]}


@pytest.mark.parametrize(
    ("model", "name", "definition"),
    PAIRS,
    ids=[f"{m.__name__}-{n}" for m, n, _ in PAIRS],
)
def test_model_and_schema_agree(model: type[BaseModel], name: str, definition: str | None) -> None:
    generated = shape(model.model_json_schema())
    written = shape(_hand_written(name, definition))
    assert generated == written


def _objects(node: Any, at: str = "$") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append((at, node))
        for key, value in node.items():
            if key == "properties":
                for name, sub in value.items():
                    found += _objects(sub, f"{at}.{name}")
            elif key == "items":
                found += _objects(value, f"{at}[]")
    return found


@pytest.mark.parametrize("name", ["tpc", "arl"])
def test_every_object_is_closed_and_every_property_described(name: Literal["tpc", "arl"]) -> None:
    schema = shape(load_schema(name))
    objects = _objects(schema)
    assert len(objects) >= 4
    for at, node in objects:
        assert node.get("additionalProperties") is False, at
        assert set(node["required"]) <= set(node["properties"]), at
    raw = load_schema(name)
    undescribed = [
        prop
        for prop, sub in raw["properties"].items()
        if "description" not in sub
        and "description"
        not in raw["$defs"].get(str(sub.get("$ref", "")).removeprefix("#/$defs/"), {})
    ]
    assert not undescribed, f"{name}: add a description to {undescribed}"


def test_tpc_lists_that_may_be_empty_say_so() -> None:
    raw = load_schema("tpc")
    resolved = _resolve(raw, raw["$defs"])
    for prop, sub in resolved["properties"].items():
        if sub.get("type") == "array":
            says_empty = "May be empty" in raw["properties"][prop].get("description", "")
            assert says_empty == ("minItems" not in sub), prop
    envelope = resolved["$defs"]["HandoffEnvelope"]["properties"]
    assert all(sub.get("minItems") == 1 for sub in envelope.values() if sub["type"] == "array")
    assert envelope["minimal_diff"]["minLength"] == 1


def test_cost_estimate_is_written_the_same_in_both_files() -> None:
    assert (
        load_schema("tpc")["$defs"]["CostEstimate"]["properties"]
        == (load_schema("arl")["$defs"]["CostEstimate"]["properties"])
    )


def test_the_comparison_notices_drift() -> None:
    written = _hand_written("tpc", "HandoffEnvelope")
    generated = shape(HandoffEnvelope.model_json_schema())
    assert shape(written) == generated
    mutations: tuple[Callable[[dict[str, Any]], object], ...] = (
        lambda s: s["required"].remove("minimal_diff"),
        lambda s: s.pop("additionalProperties"),
        lambda s: s["properties"].pop("constraints"),
        lambda s: s["properties"].update(extra={"type": "string"}),
        lambda s: s["$defs"]["NonEmptyTextSet"].pop("minItems"),
        lambda s: s["$defs"]["Text"].update(pattern="."),
    )
    for mutate in mutations:
        broken = copy.deepcopy(written)
        mutate(broken)
        assert shape(broken) != generated
    enum_drift = copy.deepcopy(load_schema("tpc"))
    enum_drift["$defs"]["Role"]["enum"].append("Supervisor")
    assert shape(enum_drift) != shape(TPCArtifact.model_json_schema())


@pytest.mark.parametrize("file_name", NAMES)
def test_packaged_schema_is_a_byte_identical_copy(file_name: str) -> None:
    source = (REPO_SCHEMAS / file_name).read_bytes()
    packaged = (PACKAGE_SCHEMAS / file_name).read_bytes()
    assert packaged == source, (
        f"{file_name} drifted: schemas/agent/ is the source; "
        "run `cp schemas/agent/*.schema.json src/tracebound/contract/schemas/`"
    )


def test_package_data_is_what_load_schema_reads() -> None:
    assert load_schema("tpc") == json.loads((REPO_SCHEMAS / "tpc.schema.json").read_bytes())
    assert load_schema("arl") == json.loads((REPO_SCHEMAS / "arl.schema.json").read_bytes())
    assert sorted(p.name for p in PACKAGE_SCHEMAS.glob("*.json")) == sorted(NAMES)


@pytest.mark.parametrize(("name", "schema_id"), [("tpc", TPC_SCHEMA_ID), ("arl", ARL_SCHEMA_ID)])
def test_schemas_are_valid_draft_2020_12(name: Literal["tpc", "arl"], schema_id: str) -> None:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == schema_id == f"https://tracebound.dev/schemas/agent/{name}.schema.json"


def test_load_schema_returns_a_copy() -> None:
    load_schema("tpc")["properties"].clear()
    assert load_schema("tpc")["properties"]


def test_schemas_ship_as_package_data() -> None:
    from importlib import resources

    folder = resources.files(tracebound.contract) / "schemas"
    assert sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".json")) == (
        sorted(NAMES)
    )
