"""AttemptAnchor (ADR-04-0017): shape, invariants, deferred attach and the JSONL round trip."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Literal
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from tracebound.errors import ContractError, ValidationFailed
from tracebound.events.anchor import (
    ANCHOR_ADAPTER,
    AttemptAnchor,
    PlanOutcomeTag,
    TrustConfidence,
    _plain_decimal,
)
from tracebound.ids import (
    AdvisoryId,
    AttemptId,
    ChainHead,
    PromptDigest,
    RagRecordId,
    ResponseDigest,
    WorkflowId,
)

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)
ATTEMPT = AttemptId(UUID("6a1d2f0e-8f3b-4c55-9e0a-1b2c3d4e5f60"))

# The record's field list, in its order; the anchor must hold exactly these.
ADR_FIELDS = [
    "schema_version",
    "attempt_id",
    "workflow_id",
    "attempt_index",
    "advisory_id",
    "prompt_digest_blake3",
    "retrieved_evidence_chain_head",
    "retrieved_record_ids",
    "plan_proposal_kind",
    "response_digest_blake3",
    "validator_outcome",
    "refusal_reason",
    "trust_outcome_passed",
    "trust_outcome_confidence",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "timestamp_utc",
    "extras",
]


def _fields(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "attempt_id": ATTEMPT,
        "workflow_id": WorkflowId("wf-1"),
        "attempt_index": 0,
        "advisory_id": AdvisoryId("GHSA-aaaa-bbbb-cccc"),
        "prompt_digest_blake3": PromptDigest("0f" * 32),
        "retrieved_evidence_chain_head": ChainHead(bytes(range(200, 232))),
        "retrieved_record_ids": (RagRecordId("rec-1"),),
        "plan_proposal_kind": "apply_recipe",
        "response_digest_blake3": ResponseDigest("f0" * 32),
        "validator_outcome": "AppliedFromRecipe",
        "tokens_in": 900,
        "tokens_out": 100,
        "cost_usd": Decimal("0.0042"),
        "timestamp_utc": T0,
        "extras": {"phase7.base_image": "distroless/static", "phase15.note": ""},
    }
    fields.update(overrides)
    return fields


def _anchor(**overrides: Any) -> AttemptAnchor:
    return AttemptAnchor(**_fields(**overrides))


def test_fields_are_the_records_fields_in_order() -> None:
    assert list(AttemptAnchor.model_fields) == ADR_FIELDS


def test_schema_version_is_pinned_to_one() -> None:
    anchor = _anchor()
    assert anchor.schema_version == 1
    with pytest.raises(ValidationError):
        AttemptAnchor(**_fields(), schema_version=2)  # type: ignore[arg-type]


def test_frozen() -> None:
    anchor = _anchor()
    with pytest.raises(ValidationError):
        anchor.tokens_in = 1  # type: ignore[misc]


def test_extra_fields_forbidden() -> None:
    with pytest.raises(ValidationError, match="critic_score"):
        AttemptAnchor.model_validate({**_fields(), "critic_score": "0.9"})


def test_extras_are_read_only_and_detached_from_the_input() -> None:
    source = {"phase7.foo": "bar"}
    anchor = _anchor(extras=source)
    assert isinstance(anchor.extras, MappingProxyType)
    with pytest.raises(TypeError):
        anchor.extras["phase7.foo"] = "baz"  # type: ignore[index]
    source["phase7.foo"] = "changed"
    assert anchor.extras == {"phase7.foo": "bar"}


def test_extras_default_to_empty() -> None:
    fields = _fields()
    del fields["extras"]
    anchor = AttemptAnchor(**fields)
    assert dict(anchor.extras) == {}
    assert anchor.model_dump(mode="json")["extras"] == {}


@pytest.mark.parametrize(
    "key", ["foo", "phase7.", ".foo", "Phase7.foo", "phase7.foo.bar", "phase 7.foo", ""]
)
def test_extras_keys_must_be_namespaced(key: str) -> None:
    with pytest.raises(ValidationError, match="namespace"):
        _anchor(extras={key: "x"})


@pytest.mark.parametrize("value", [1, True, None, ["a"]])
def test_extras_values_are_strings_only(value: object) -> None:
    with pytest.raises(ValidationError):
        _anchor(extras={"phase7.foo": value})


@pytest.mark.parametrize(
    ("outcome", "reason", "ok"),
    [
        ("Refused", "no applicable recipe", True),
        ("Refused", None, False),
        ("AppliedFromLlm", "stray reason", False),
        ("AppliedFromLlm", None, True),
        ("RagOnlyApplicable", None, True),
    ],
)
def test_refusal_reason_is_set_iff_refused(
    outcome: PlanOutcomeTag, reason: str | None, ok: bool
) -> None:
    if ok:
        assert _anchor(validator_outcome=outcome, refusal_reason=reason).refusal_reason == reason
    else:
        with pytest.raises(ValidationError, match="refusal_reason"):
            _anchor(validator_outcome=outcome, refusal_reason=reason)


def test_bypassed_retrieval_has_no_record_ids() -> None:
    bypassed = _anchor(retrieved_evidence_chain_head=None, retrieved_record_ids=())
    assert bypassed.retrieved_evidence_chain_head is None
    with pytest.raises(ValidationError, match="bypassed"):
        _anchor(retrieved_evidence_chain_head=None)


def test_trust_outcome_fields_come_together() -> None:
    with pytest.raises(ValidationError, match="together"):
        _anchor(trust_outcome_passed=True)
    with pytest.raises(ValidationError, match="together"):
        _anchor(trust_outcome_confidence="high")


def test_timestamp_must_be_aware_and_is_kept_in_utc() -> None:
    with pytest.raises(ValidationError):
        _anchor(timestamp_utc=datetime(2026, 5, 18, 12, 0))
    east = _anchor(
        timestamp_utc=datetime(2026, 5, 18, 17, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    )
    assert east.timestamp_utc.tzinfo is UTC
    assert east.timestamp_utc == T0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attempt_index", -1),
        ("tokens_in", -5),
        ("tokens_out", True),
        ("cost_usd", 0.1),
        ("cost_usd", "-1"),
        ("prompt_digest_blake3", "0F" * 32),
        ("response_digest_blake3", "f0" * 31),
        ("retrieved_evidence_chain_head", b"short"),
        ("plan_proposal_kind", "apply_anything"),
        ("validator_outcome", "Applied"),
        ("workflow_id", ""),
    ],
)
def test_field_types_are_enforced(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        _anchor(**{field: value})


# --- deferred attach ------------------------------------------------------------------------


def test_attach_trust_outcome_returns_a_new_anchor() -> None:
    original = _anchor()
    attached = original.attach_trust_outcome(passed=True, confidence="medium")
    assert attached is not original
    assert (attached.trust_outcome_passed, attached.trust_outcome_confidence) == (True, "medium")
    assert (original.trust_outcome_passed, original.trust_outcome_confidence) == (None, None)
    # Everything else is carried over unchanged.
    unchanged = set(ADR_FIELDS) - {"trust_outcome_passed", "trust_outcome_confidence"}
    for name in unchanged:
        assert getattr(attached, name) == getattr(original, name), name
    assert isinstance(attached.extras, MappingProxyType)


@dataclass(frozen=True)
class _TrustOutcome:
    """Stands in for Phase 5's TrustOutcome: only the slice the anchor reads."""

    passed: bool
    confidence: TrustConfidence
    signals: tuple[str, ...] = ()


def test_attach_accepts_a_trust_outcome_object() -> None:
    attached = _anchor().attach_trust_outcome(_TrustOutcome(passed=False, confidence="low"))
    assert (attached.trust_outcome_passed, attached.trust_outcome_confidence) == (False, "low")


def test_attach_validates_the_confidence() -> None:
    with pytest.raises(ValidationError):
        _anchor().attach_trust_outcome(True, "certain")  # type: ignore[call-overload]


def test_attach_twice_is_refused() -> None:
    once = _anchor().attach_trust_outcome(True, "high")
    with pytest.raises(ValidationFailed) as info:
        once.attach_trust_outcome(False, "low")
    assert isinstance(info.value, ContractError)
    assert info.value.field == "trust_outcome_passed"


def test_attach_argument_mistakes_are_type_errors() -> None:
    anchor = _anchor()
    with pytest.raises(TypeError):
        anchor.attach_trust_outcome(True)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        anchor.attach_trust_outcome(_TrustOutcome(True, "high"), "high")  # type: ignore[call-overload]


# --- JSON lines ---------------------------------------------------------------------------


def test_json_round_trip_through_one_type_adapter() -> None:
    adapter = TypeAdapter(AttemptAnchor)
    anchor = _anchor().attach_trust_outcome(True, "high")
    line = adapter.dump_json(anchor)
    assert b"\n" not in line  # one anchor per JSONL line
    again = adapter.validate_json(line)
    assert again == anchor
    assert isinstance(again.extras, MappingProxyType)
    assert adapter.dump_json(again) == line


def test_json_shape_is_plain_and_hash_safe() -> None:
    data = json.loads(ANCHOR_ADAPTER.dump_json(_anchor()))
    assert data["schema_version"] == 1
    assert data["attempt_id"] == str(ATTEMPT)
    assert data["retrieved_evidence_chain_head"] == bytes(range(200, 232)).hex()
    assert data["retrieved_record_ids"] == ["rec-1"]
    assert data["cost_usd"] == "0.0042"
    assert data["timestamp_utc"] == "2026-05-18T12:00:00.000000Z"
    assert data["extras"] == {"phase7.base_image": "distroless/static", "phase15.note": ""}
    schema = json.dumps(AttemptAnchor.model_json_schema(mode="serialization"))
    assert '"number"' not in schema


def test_a_reader_refuses_a_future_schema_version() -> None:
    data = json.loads(ANCHOR_ADAPTER.dump_json(_anchor()))
    data["schema_version"] = 2
    with pytest.raises(ValidationError):
        ANCHOR_ADAPTER.validate_python(data)


_confidence: st.SearchStrategy[TrustConfidence | None] = st.sampled_from(
    [None, "high", "medium", "low"]
)


@st.composite
def _anchors(draw: st.DrawFn) -> AttemptAnchor:
    bypassed = draw(st.booleans())
    outcome: PlanOutcomeTag = draw(
        st.sampled_from(["AppliedFromRecipe", "AppliedFromLlm", "RagOnlyApplicable", "Refused"])
    )
    confidence = draw(_confidence)
    kind: Literal["apply_recipe", "apply_transform", "request_human", "refuse"] = draw(
        st.sampled_from(["apply_recipe", "apply_transform", "request_human", "refuse"])
    )
    return AttemptAnchor(
        attempt_id=AttemptId(draw(st.uuids())),
        workflow_id=WorkflowId(draw(st.text(min_size=1))),
        attempt_index=draw(st.integers(min_value=0, max_value=1000)),
        advisory_id=AdvisoryId(draw(st.text(min_size=1))),
        prompt_digest_blake3=PromptDigest(draw(st.binary(min_size=32, max_size=32)).hex()),
        retrieved_evidence_chain_head=None
        if bypassed
        else ChainHead(draw(st.binary(min_size=32, max_size=32))),
        retrieved_record_ids=()
        if bypassed
        else tuple(RagRecordId(r) for r in draw(st.lists(st.text(min_size=1), max_size=5))),
        plan_proposal_kind=kind,
        response_digest_blake3=ResponseDigest(draw(st.binary(min_size=32, max_size=32)).hex()),
        validator_outcome=outcome,
        refusal_reason=draw(st.text(min_size=1)) if outcome == "Refused" else None,
        trust_outcome_passed=None if confidence is None else draw(st.booleans()),
        trust_outcome_confidence=confidence,
        tokens_in=draw(st.integers(min_value=0, max_value=2**53 - 1)),
        tokens_out=draw(st.integers(min_value=0, max_value=2**53 - 1)),
        cost_usd=draw(st.decimals(min_value=0, max_value=10**6, places=8, allow_nan=False)),
        timestamp_utc=draw(
            st.datetimes(
                min_value=datetime(2000, 1, 1),
                timezones=st.just(UTC),
            )
        ),
        extras={
            f"phase{n}.{name}": value
            for n, name, value in draw(
                st.lists(
                    st.tuples(
                        st.integers(min_value=0, max_value=99),
                        st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
                        st.text(),
                    ),
                    max_size=4,
                )
            )
        },
    )


@given(anchor=_anchors())
def test_generated_anchors_round_trip(anchor: AttemptAnchor) -> None:
    line = ANCHOR_ADAPTER.dump_json(anchor)
    again = ANCHOR_ADAPTER.validate_json(line)
    assert again == anchor
    assert ANCHOR_ADAPTER.dump_json(again) == line
    assert AttemptAnchor.model_validate(anchor.model_dump(mode="json")) == anchor


def _positional(value: Decimal) -> str:
    """Money's JSON text by its definition: format "f", and no negative zero."""
    return format(value.copy_abs() if value.is_zero() else value, "f")


@given(
    st.one_of(
        st.decimals(allow_nan=True, allow_infinity=True),
        st.builds(
            Decimal,
            st.from_regex(r"-?[0-9]{1,12}(\.[0-9]{0,12})?(E[+-]?[0-9]{1,3})?", fullmatch=True),
        ),
    )
)
def test_plain_decimal_text_is_positional_and_never_negative_zero(value: Decimal) -> None:
    assert _plain_decimal(value) == _positional(value)


def test_plain_decimal_edges() -> None:
    for text, want in [
        ("1E+2", "100"),
        ("1.5E-7", "0.00000015"),
        ("0.000001", "0.000001"),
        ("-0", "0"),
        ("-0.00", "0.00"),
        ("0E-9", "0.000000000"),
        ("-2.50", "-2.50"),
    ]:
        assert _plain_decimal(Decimal(text)) == want
