"""events/payload_json.py: the planned JSON-mode dump is pydantic's dump, or is not used."""

from __future__ import annotations

import enum
import uuid
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, cast
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, computed_field, field_serializer
from tests.unit.events.test_catalog import SAMPLES, _id

from tracebound.canonical import plain_values
from tracebound.events import payload_json as module
from tracebound.events.anchor import Money
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.events.payload_json import _plan, payload_json
from tracebound.ids import StepId


def _pydantic(payload: BaseModel) -> Any:
    return payload.model_dump(mode="json")


@pytest.fixture(params=["c", "python"])
def loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the C loop (when built) and with the Python loop."""
    if request.param == "python":
        monkeypatch.setattr(module, "_plain_values", None)
    elif module._plain_values is None:
        pytest.skip("the C accelerator is not built")
    return str(request.param)


@pytest.mark.parametrize("payload", SAMPLES, ids=_id)
def test_every_catalog_payload_dumps_as_pydantic_does(payload: BaseModel, loop: str) -> None:
    assert payload_json(payload) == _pydantic(payload)


def test_the_flat_catalog_payloads_get_a_plan() -> None:
    # The point of the plan: the append path's common events skip pydantic's serializer.
    planned = {type(p).__name__ for p in SAMPLES if _plan(type(p)) is not None}
    assert {"CostIncurred", "LeafInvoked", "BudgetReconciled", "PromptBuilt"} <= planned, planned


_money = st.decimals(min_value=0, max_value=10**9, places=6, allow_nan=False)
_text = st.text(min_size=1, max_size=30)
_tokens = st.one_of(st.none(), st.integers(min_value=0, max_value=2**53 - 1))


@given(_money, _text, _tokens, _tokens, st.one_of(st.none(), _text))
def test_generated_costs_dump_as_pydantic_does(
    amount: Decimal, text: str, tokens_in: int | None, tokens_out: int | None, model: str | None
) -> None:
    payload = CostIncurred(
        tier="amortized",
        amount_usd=amount,
        source=CostSource(text),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        model=model,
        step_id=StepId(text),
    )
    for plain in (plain_values, None):
        with patch.object(module, "_plain_values", plain):
            assert payload_json(payload) == _pydantic(payload)


# --- classes whose dump is not a copy of their fields get no plan -----------------------


class _Aliased(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)
    name: str = Field(serialization_alias="Name")


class _Nested(BaseModel):
    inner: CostSourceHolder | None = None


class CostSourceHolder(BaseModel):
    source: str


_Nested.model_rebuild()


class _FieldSerializer(BaseModel):
    name: str

    @field_serializer("name")
    def _upper(self, value: str) -> str:
        return value.upper()


class _SerializerInOptional(BaseModel):
    # The serializer sits inside the union: not on the field's own schema.
    name: Annotated[str, PlainSerializer(str.upper, return_type=str)] | None = None


def test_a_plain_serializer_inside_an_optional_is_called(loop: str) -> None:
    assert _plan(_SerializerInOptional) is not None
    for payload in (_SerializerInOptional(name="a"), _SerializerInOptional()):
        assert payload_json(payload) == _pydantic(payload)
    assert payload_json(_SerializerInOptional(name="a")) == {"name": "A"}


class _Computed(BaseModel):
    name: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def twice(self) -> str:
        return self.name * 2


class _Excluded(BaseModel):
    name: str
    secret: str = Field(default="s", exclude=True)


class _Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class _Listed(BaseModel):
    names: list[str]


class _OwnDump(BaseModel):
    name: str

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {"overridden": True}


_UNPLANNED: list[BaseModel] = [
    _Aliased(name="a"),
    _Nested(inner=CostSourceHolder(source="x")),
    _FieldSerializer(name="a"),
    _Computed(name="a"),
    _Excluded(name="a"),
    _Extra(name="a", more=1),  # type: ignore[call-arg]
    _Listed(names=["a"]),
    _OwnDump(name="a"),
]


@pytest.mark.parametrize("payload", _UNPLANNED, ids=lambda p: type(p).__name__)
def test_a_dump_that_is_not_a_copy_gets_no_plan(payload: BaseModel) -> None:
    assert _plan(type(payload)) is None
    assert payload_json(payload) == payload.model_dump(mode="json")


# --- values the plan did not foresee go back to pydantic -------------------------------


class _Colour(enum.StrEnum):
    RED = "red"


class _Flat(BaseModel):
    KIND: ClassVar[str] = "flat"
    name: str
    count: int = 0
    flag: bool = False
    level: Literal["low", "high"] = "low"
    amount: Money = Decimal(0)
    maybe: Money | None = None
    ref: uuid.UUID | None = None


class _Text(str):
    pass


def test_a_flat_class_gets_a_plan_with_its_serializer() -> None:
    plan = _plan(_Flat)
    assert plan is not None
    by_name = {name: (passed, serializer) for name, passed, serializer in plan}
    assert by_name["name"] == ((str,), None)
    assert by_name["amount"][1] is not None
    assert by_name["maybe"][0] == (type(None),)
    assert by_name["ref"] == ((type(None),), module._uuid_text)


@pytest.mark.parametrize(
    "values",
    [
        {"count": 1},  # no name at all
        {"name": _Text("sub")},  # a str subclass: pydantic decides what it becomes
        {"name": _Colour.RED},
        {"name": "a", "count": True},  # a bool where an int was validated
        {"name": "a", "amount": 5},  # an int where a Decimal was validated
        {"name": "a", "amount": Decimal("1E+3")},
        {"name": "a", "amount": Decimal("-0")},
        {"name": "a", "maybe": Decimal("2.50")},
        {"name": "a", "ref": "not-a-uuid-object"},
        {"name": "a", "ref": uuid.UUID(int=7)},
    ],
    ids=repr,
)
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_constructed_values_dump_as_pydantic_does(values: dict[str, Any], loop: str) -> None:
    payload = _Flat.model_construct(**values)
    try:
        expected = _pydantic(payload)
    except Exception as exc:  # noqa: BLE001 - then both must raise pydantic's error
        with pytest.raises(type(exc)):
            payload_json(payload)
        return
    assert payload_json(payload) == expected


def test_a_serializer_that_fails_raises_pydantics_error(loop: str) -> None:
    payload = _Flat.model_construct(name="a", amount=cast(Any, object()))
    with pytest.raises(Exception) as pydantic_error:  # noqa: PT011 - whatever pydantic raises
        _pydantic(payload)
    with pytest.raises(pydantic_error.type):
        payload_json(payload)
