"""The validators' behaviour beyond the fixtures: API, errors, caching, format checking."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import tracebound.contract
from tracebound.contract import (
    ARLEntry,
    TPCArtifact,
    validate_arl,
    validate_envelope,
    validate_tpc,
)
from tracebound.contract import validate as validate_module
from tracebound.errors import ContractError, TraceboundError, ValidationFailed
from tracebound.events.catalog import StepRecorded

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "contract"


def _fixture(rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / rel).read_text(encoding="utf-8"))
    return data


def test_public_names_are_pinned() -> None:
    assert sorted(tracebound.contract.__all__) == sorted([
        "ARL_SCHEMA_ID", "TPC_SCHEMA_ID", "ARLEntry", "Approval", "ApprovalDecision",
        "CostEstimate", "HandoffEnvelope", "LatencyEstimate", "Outputs", "Role", "StepStatus",
        "Storage", "TPCArtifact", "Validations", "load_schema", "validate_arl",
        "validate_envelope", "validate_tpc",
    ])  # fmt: skip
    for name in tracebound.contract.__all__:
        assert getattr(tracebound.contract, name) is not None


def test_the_records_example_is_refused_for_its_floats_and_accepted_once_converted() -> None:
    """The record shows `confidence: 0.0` and `compute_usd_est: 0.02`; docs/adr/0004."""
    record = _fixture("tpc/valid/tpc-planner.json")
    record["cost_est"]["compute_usd_est"] = 0.02
    with pytest.raises(ValidationFailed) as caught:
        validate_tpc(record)
    assert caught.value.field == "cost_est.compute_usd_est"
    record["cost_est"]["compute_usd_est"] = "0.02"
    record["confidence"] = 0.0
    with pytest.raises(ValidationFailed) as caught:
        validate_tpc(record)
    assert caught.value.field == "confidence"
    record["confidence"] = round(0.0 * 10_000)
    assert validate_tpc(record).confidence == 0


@pytest.mark.parametrize("data", [[], "tpc", None, 42])
def test_a_document_that_is_not_an_object_is_refused_at_the_root(data: Any) -> None:
    for validate in (validate_tpc, validate_envelope, validate_arl):
        with pytest.raises(ValidationFailed) as caught:
            validate(data)
        assert caught.value.field == "$"
        assert "JSON object" in caught.value.reason


def test_validation_failed_is_a_contract_error() -> None:
    with pytest.raises(ContractError):
        validate_envelope({})
    with pytest.raises(TraceboundError):
        validate_arl({})


def test_a_missing_envelope_is_named_not_its_fields() -> None:
    artifact = _fixture("tpc/valid/tpc-planner.json")
    del artifact["handoff_envelope"]
    with pytest.raises(ValidationFailed, match=r"^handoff_envelope: is required$"):
        validate_tpc(artifact)


def test_validators_are_compiled_once() -> None:
    assert validate_module._validator("tpc") is validate_module._validator("tpc")
    before = validate_module._validator.cache_info().misses
    for _ in range(3):
        validate_tpc(_fixture("tpc/valid/tpc-executor.json"))
        validate_envelope(_fixture("envelope/valid/envelope-many.json"))
        validate_arl(_fixture("arl/valid/arl-approved.json"))
    assert validate_module._validator.cache_info().misses == before


def test_date_time_is_checked_without_optional_packages() -> None:
    """jsonschema skips `date-time` unless rfc3339-validator is installed; we don't rely on it."""
    checker = validate_module._validator("arl").format_checker
    assert checker.conforms("2026-11-22T10:00:00Z", "date-time")
    assert checker.conforms("2026-11-22t10:00:00.5+05:30", "date-time")
    for bad in ("2026-11-22T10:00:00", "2026-02-30T10:00:00Z", "2026-11-22T24:00:00Z", "now"):
        assert not checker.conforms(bad, "date-time"), bad
    assert not checker.conforms("not-a-uuid", "uuid")


def test_several_errors_report_one_field_deterministically() -> None:
    envelope: dict[str, list[str]] = {"assumptions": [], "constraints": []}
    fields = set()
    for _ in range(5):
        with pytest.raises(ValidationFailed) as caught:
            validate_envelope(copy.deepcopy(envelope))
        fields.add(caught.value.field)
    assert len(fields) == 1


def test_models_refuse_invariants_on_construction_too() -> None:
    artifact = _fixture("tpc/valid/tpc-planner.json")
    artifact["latency_est"] = {"p50_ms": 10, "p95_ms": 9}
    with pytest.raises(ValidationError, match="must not be less than p50_ms"):
        TPCArtifact.model_validate(artifact)


def test_models_are_frozen() -> None:
    entry = validate_arl(_fixture("arl/valid/arl-root-success.json"))
    with pytest.raises(ValidationError):
        entry.status = "error"  # type: ignore[misc]


def test_optional_fields_are_left_out_not_written_as_null() -> None:
    entry = validate_arl(_fixture("arl/valid/arl-root-success.json"))
    assert entry.payload_pointer is None and entry.approval is None
    dumped = entry.model_dump(mode="json")
    assert not {"payload_pointer", "approval", "redaction_reason"} & set(dumped)
    assert dumped["parent_step_id"] is None and dumped["error_origin"] is None


def test_an_arl_entry_becomes_a_step_recorded_payload() -> None:
    """The ARL contract and the ledger's event agree on names and types (no translation)."""
    entry = validate_arl(_fixture("arl/valid/arl-approved.json"))
    fields = {k: v for k, v in entry if k not in {"approval", "redaction_reason"}}
    payload = StepRecorded(**fields, redaction_reason=entry.redaction_reason)
    assert payload.artifact_hash == entry.artifact_hash
    assert payload.validations == entry.validations
    assert payload.cost_est.compute_usd_est == entry.cost_est.compute_usd_est


def test_arl_entry_model_refuses_self_parent() -> None:
    data = _fixture("arl/valid/arl-executor-error.json")
    data["parent_step_id"] = data["step_id"]
    with pytest.raises(ValidationFailed) as caught:
        validate_arl(data)
    assert caught.value.field == "parent_step_id"
    entry = ARLEntry.model_validate(_fixture("arl/valid/arl-executor-error.json"))
    assert entry.error_origin == entry.step_id  # an executor may be its own failure's origin
