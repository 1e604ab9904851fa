"""The strict JSON reader of proof, evidence and history files (integrity/strict_json.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracebound.integrity.strict_json import loads_strict

# orjson reads an integer it cannot hold in 64 bits as a float, silently: 10**30 became
# 1e+30, and 2**64 + 1 became 2**64. Another reader of the same file sees the exact integer.
_INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)


@given(_INT64)
def test_every_integer_orjson_holds_exactly_is_read_as_that_integer(n: int) -> None:
    value = loads_strict(f'{{"n": {n}}}'.encode())
    assert value == {"n": n}
    assert type(value["n"]) is int


@given(st.integers(min_value=2**64) | st.integers(max_value=-(2**63) - 1))
def test_an_integer_beyond_64_bits_is_refused_not_turned_into_a_float(n: int) -> None:
    with pytest.raises(ValueError, match="integer"):
        loads_strict(f'[1, {{"n": {n}}}]')


def test_floats_and_exponents_are_still_floats() -> None:
    assert loads_strict("[1.5, 1e30, -0.0]") == [1.5, 1e30, -0.0]
