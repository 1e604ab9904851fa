"""RFC 8785 canonical bytes: published vectors, fuzzing against ``rfc8785``, and rejections.

Every behavioural test runs against both implementations (the C accelerator and the pure-Python
reference), so a difference between them shows up as a failing parameter, not as a hash that
silently depends on which one was installed.

Property tests run a modest number of examples to keep the suite fast; set
``TRACEBOUND_FUZZ_EXAMPLES`` (e.g. to 50000) for a long fuzzing run.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import json
import math
import os
import subprocess
import sys
import types
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracebound import _canonical_py, canonical
from tracebound.canonical import MAX_SAFE_INTEGER, canonical_bytes, canonicalize
from tracebound.errors import CanonicalizationError, ContractError, TraceboundError

Encoder = Callable[[object], bytes]

# The rfc8785 package is the independent oracle. Its annotations name a JSON-value alias; these
# tests deliberately pass plain objects, so it is typed as a general encoder here.
reference_dumps = cast(Encoder, rfc8785.dumps)

_EXAMPLES = int(os.environ.get("TRACEBOUND_FUZZ_EXAMPLES", "150"))
_PROPERTY = settings(
    max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _vectors_dir() -> Path:
    # Imported lazily so the module also imports when run outside the package layout.
    from tests.conftest import shared_vectors_dir

    return shared_vectors_dir() / "rfc8785"


def _implementation(name: str) -> Any:
    return pytest.param(
        name,
        marks=pytest.mark.skipif(
            name not in canonical._IMPLEMENTATIONS,
            reason="C accelerator not built (pure-Python install)",
        ),
        id=name,
    )


IMPLEMENTATIONS = [_implementation("c"), _implementation("python")]


def _hash_safe(name: str) -> Encoder:
    return canonical._IMPLEMENTATIONS[name][0]


def _full(name: str) -> Encoder:
    return canonical._IMPLEMENTATIONS[name][1]


# --- strategies ------------------------------------------------------------------------

# Characters chosen to hit every rule: escapes, DEL (not escaped), the U+E000..U+FFFF versus
# non-BMP ordering, line separators, multi-byte UTF-8 of each length.
_TRICKY = st.sampled_from(
    [
        *["a", "B", "\x00", "\x08", "\x1f", '"', "\\", "/", "\x7f", "\x80", "é", "\u2028"],
        *["\u20ac", "\ud7ff", "\ue000", "\uf8ff", "\ufb33", "\uffff", "\U00010000"],
        *["\U0001f600", "\U0001f602", "\U0010ffff"],
    ]
)
_CHARS = st.one_of(_TRICKY, st.characters(codec="utf-8"))
_TEXT = st.text(alphabet=_CHARS, max_size=12)
_SAFE_INTS = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.sampled_from([0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 2**31, -(2**63) // 2**11]),
)
_FINITE_FLOATS = st.floats(allow_nan=False, allow_infinity=False)


def _json(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(_TEXT, children, max_size=6),
        ),
        max_leaves=25,
    )


_HASH_SAFE_SCALARS = st.one_of(st.none(), st.booleans(), _SAFE_INTS, _TEXT)
HASH_SAFE_JSON = _json(_HASH_SAFE_SCALARS)
FULL_JSON = _json(st.one_of(_HASH_SAFE_SCALARS, _FINITE_FLOATS))


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


# Values of every kind the encoders must refuse, mixed with valid ones below.
_BAD_SCALARS = st.one_of(
    _FINITE_FLOATS,
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0]),
    st.integers().filter(lambda n: abs(n) > MAX_SAFE_INTEGER),
    st.sampled_from([2**53, -(2**53), 2**64, -(2**64)]),
    st.text(alphabet=st.one_of(_CHARS, st.characters(categories=["Cs"])), min_size=1, max_size=6),
    st.sampled_from(
        [
            b"bytes",
            bytearray(b"x"),
            dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            dt.date(2024, 1, 1),
            uuid.UUID(int=1),
            decimal.Decimal("1.5"),
            {1, 2},
            frozenset(),
            Colour.RED,
            Level.HIGH,
            OrderedDict(a=1),
            complex(1, 2),
            object(),
        ]
    ),
)
_ANY_KEY = st.one_of(
    _TEXT,
    st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=2),
    st.integers(),
    st.none(),
    st.booleans(),
    st.sampled_from([(1, 2), Colour.RED, 1.5]),
)


def _messy_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(_ANY_KEY, children, max_size=4),
    )


MESSY = st.recursive(st.one_of(_HASH_SAFE_SCALARS, _BAD_SCALARS), _messy_containers, max_leaves=12)


def _outcome(encoder: Encoder, value: object) -> bytes | str:
    """Bytes on success, the error message on a typed rejection; anything else propagates."""
    try:
        return encoder(value)
    except CanonicalizationError as exc:
        return f"error: {exc}"


# --- published vectors -----------------------------------------------------------------


def _vector_names() -> list[str]:
    return sorted(path.name for path in (_vectors_dir() / "input").glob("*.json"))


def test_vectors_are_present() -> None:
    # Guards the parametrisation below against silently collecting zero vectors.
    assert len(_vector_names()) >= 6


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", _vector_names())
def test_rfc8785_published_vectors(impl: str, name: str) -> None:
    vectors = _vectors_dir()
    value = json.loads((vectors / "input" / name).read_text(encoding="utf-8"))
    expected = (vectors / "output" / name).read_bytes()
    assert _full(impl)(value) == expected


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_vectors_agree_with_hex_dumps(impl: str) -> None:
    # outhex/ holds the same expected bytes as hex; checking it too catches a mangled output/ file.
    vectors = _vectors_dir()
    for name in _vector_names():
        value = json.loads((vectors / "input" / name).read_text(encoding="utf-8"))
        hex_text = (vectors / "outhex" / name.replace(".json", ".txt")).read_text()
        assert _full(impl)(value) == bytes.fromhex("".join(hex_text.split()))


# --- exact behaviour ---------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_keys_sort_by_utf16_code_units_not_code_points(impl: str) -> None:
    value = {"\ue000": 1, "\U0001f600": 2, "z": 3, "\uffff": 4, "\U00010000": 5}
    expected = '{"z":3,"\U00010000":5,"\U0001f600":2,"\ue000":1,"\uffff":4}'.encode()
    assert _hash_safe(impl)(value) == expected
    assert reference_dumps(value) == expected


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_string_escaping(impl: str) -> None:
    text = "".join(chr(cp) for cp in range(0x20)) + '"\\/\x7f\u2028é😀'
    expected = (
        '"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r'
        "\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018"
        '\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\"\\\\/\x7f\u2028é😀"'
    ).encode()
    assert _hash_safe(impl)(text) == expected
    assert _hash_safe(impl)({text: text}) == b"{" + expected + b":" + expected + b"}"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_scalars_and_containers(impl: str) -> None:
    encode = _hash_safe(impl)
    assert encode(None) == b"null"
    assert encode(True) == b"true"
    assert encode(False) == b"false"
    assert encode(0) == b"0"
    assert encode(-MAX_SAFE_INTEGER) == b"-9007199254740991"
    assert encode(MAX_SAFE_INTEGER) == b"9007199254740991"
    assert encode("") == b'""'
    assert encode([]) == b"[]"
    assert encode({}) == b"{}"
    assert encode((1, (2, "x"), [])) == b'[1,[2,"x"],[]]'
    assert encode({"b": [True, None], "a": {"": 0}}) == b'{"a":{"":0},"b":[true,null]}'


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_long_strings_and_many_keys_grow_the_buffers(impl: str) -> None:
    # Larger than the accelerator's inline buffer (4 KiB) and member stack (64 entries).
    value = {f"k{i:04d}": {"s": "x" * 300 + "é" * 50, "n": i} for i in range(200, 0, -1)}
    assert _hash_safe(impl)(value) == reference_dumps(value)


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (56.0, "56"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (333333333.33333329, "333333333.3333333"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740993.0, "9007199254740992"),
    ],
)
def test_format_float_follows_ecmascript(number: float, expected: str) -> None:
    assert _canonical_py.format_float(number) == expected


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_canonicalize_rejects_non_finite_floats(impl: str, number: float) -> None:
    with pytest.raises(CanonicalizationError, match=r"^\$\.x\[1\]: float (nan|inf|-inf) "):
        _full(impl)({"x": [0, number]})


# --- rejections, each with a JSON path ---------------------------------------------------

_REJECTIONS: list[tuple[object, str]] = [
    (
        {"payload": {"items": [0, 1, 2, 1.5]}},
        (
            "$.payload.items[3]: float 1.5 is not allowed in hashed data; "
            "use an integer or a decimal string"
        ),
    ),
    (1.0, "$: float 1.0 is not allowed in hashed data"),
    ({"n": 2**53}, "$.n: integer 9007199254740992 is outside ±(2**53-1)"),
    ([-(2**53)], "$[0]: integer -9007199254740992 is outside"),
    ([10**30], "$[0]: integer 1000000000000000000000000000000 is outside"),
    ({"a": {1: "x"}}, "$.a: object key 1 of type int is not allowed; keys must be str"),
    ({"a": {None: "x"}}, "$.a: object key None of type NoneType is not allowed"),
    ({"a": {(1,): "x"}}, "$.a: object key (1,) of type tuple is not allowed"),
    ({"s": "ok\ud800"}, '$.s: string "ok\\ud800" contains a lone surrogate U+D800 at index 2'),
    ({"s": "\ud83d\ude00"}, "$.s: string "),  # a surrogate *pair* in a str is still two lone ones
    ({"x": {"\udfff": 1}}, '$.x: object key "\\udfff" contains a lone surrogate U+DFFF'),
    ({"when": dt.datetime(2024, 1, 1)}, "$.when: type datetime.datetime is not JSON; use an RFC"),
    ({"id": uuid.UUID(int=1)}, "$.id: type uuid.UUID is not JSON"),
    ({"amount": decimal.Decimal("1.5")}, "$.amount: type decimal.Decimal is not JSON; use a dec"),
    ({"blob": b"\x00"}, "$.blob: type bytes is not JSON; encode it"),
    ({"tags": {"a"}}, "$.tags: type set is not JSON"),
    ({"c": Colour.RED}, "$.c: type test_canonical.Colour (a subclass of str) is not allowed"),
    ({"l": Level.HIGH}, "$.l: type test_canonical.Level (a subclass of int) is not allowed"),
    ({"o": OrderedDict(a=1)}, "$.o: type collections.OrderedDict (a subclass of dict)"),
    ({"odd key": [{"ok": 1, "bad": 0.5}]}, '$["odd key"][0].bad: float 0.5'),
    ({"é": 0.5}, '$["\\u00e9"]: float 0.5'),
]


def _paths_ids() -> list[str]:
    return [str(index) for index in range(len(_REJECTIONS))]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize(("value", "message"), _REJECTIONS, ids=_paths_ids())
def test_rejections_name_the_json_path(impl: str, value: object, message: str) -> None:
    with pytest.raises(CanonicalizationError) as caught:
        _hash_safe(impl)(value)
    # The module-qualified name of a test-local class depends on how pytest imported us.
    text = str(caught.value).replace(f"{Colour.__module__}.", "test_canonical.")
    assert text.startswith(message), text
    # No internal exception is shown chained to the error a caller sees.
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or caught.value.__suppress_context__


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_full_mode_rejects_the_same_non_float_values(impl: str) -> None:
    for value, message in _REJECTIONS:
        if "float" in message:
            continue
        with pytest.raises(CanonicalizationError):
            _full(impl)(value)


def test_error_is_part_of_the_hierarchy() -> None:
    assert issubclass(CanonicalizationError, ContractError)
    assert issubclass(CanonicalizationError, TraceboundError)
    assert not issubclass(CanonicalizationError, ValueError)  # callers catch TraceboundError


# --- nesting -----------------------------------------------------------------------------


def _nested_lists(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def _nested_dicts(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("build", [_nested_lists, _nested_dicts])
def test_nesting_at_the_limit_is_encoded(impl: str, build: Callable[[int], object]) -> None:
    value = build(_canonical_py.MAX_DEPTH)
    assert _hash_safe(impl)(value) == reference_dumps(value)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("build", [_nested_lists, _nested_dicts])
@pytest.mark.parametrize("depth", [_canonical_py.MAX_DEPTH + 1, 10_000, 200_000])
def test_deep_nesting_is_a_typed_error(
    impl: str, build: Callable[[int], object], depth: int
) -> None:
    with pytest.raises(CanonicalizationError, match=r"nesting deeper than 256 levels"):
        _hash_safe(impl)(build(depth))
    with pytest.raises(CanonicalizationError, match=r"nesting deeper than 256 levels"):
        _full(impl)(build(depth))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_cycles_are_a_typed_error(impl: str) -> None:
    loop: list[object] = []
    loop.append(loop)
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    for value in (loop, cyclic):
        with pytest.raises(CanonicalizationError, match="nesting deeper"):
            _hash_safe(impl)(value)


def test_reference_near_the_recursion_limit_raises_a_typed_error() -> None:
    # Called with little Python stack left, the recursive reference must still not leak
    # RecursionError: it converts it into CanonicalizationError.
    value = _nested_lists(_canonical_py.MAX_DEPTH)
    limit = sys.getrecursionlimit()

    def descend(remaining: int) -> bytes | str:
        if remaining:
            return descend(remaining - 1)
        return _outcome(_canonical_py.canonical_bytes, value)

    result = descend(limit - 150)
    assert result == reference_dumps(value) or str(result).startswith("error: $: nesting too deep")


# --- properties ----------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@_PROPERTY
@given(value=HASH_SAFE_JSON)
def test_canonical_bytes_matches_rfc8785_package(impl: str, value: object) -> None:
    assert _hash_safe(impl)(value) == reference_dumps(value)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@_PROPERTY
@given(value=FULL_JSON)
def test_canonicalize_matches_rfc8785_package(impl: str, value: object) -> None:
    assert _full(impl)(value) == reference_dumps(value)


@_PROPERTY
@given(number=_FINITE_FLOATS)
def test_format_float_matches_rfc8785_package(number: float) -> None:
    assert _canonical_py.format_float(number).encode() == reference_dumps(number)


@_PROPERTY
@given(value=FULL_JSON)
def test_canonical_output_is_json_that_reads_back_equal(value: object) -> None:
    # RFC 8785 numbers are doubles: 5.257184695872258e16 is written "52571846958722580",
    # which is the same double but not the same Python int, so read numbers back as floats.
    decoded = json.loads(canonicalize(value), parse_int=float)
    assert decoded == json.loads(json.dumps(value), parse_int=float)


@pytest.mark.skipif("c" not in canonical._IMPLEMENTATIONS, reason="C accelerator not built")
@_PROPERTY
@given(value=MESSY)
def test_implementations_agree_on_results_and_rejections(value: object) -> None:
    for mode in (0, 1):
        c_result = _outcome(canonical._IMPLEMENTATIONS["c"][mode], value)
        py_result = _outcome(canonical._IMPLEMENTATIONS["python"][mode], value)
        assert c_result == py_result


@_PROPERTY
@given(value=MESSY)
def test_every_rejection_is_typed_and_names_a_path(value: object) -> None:
    for encoder in (canonical_bytes, canonicalize):
        result = _outcome(encoder, value)
        if isinstance(result, str):
            assert result.startswith("error: $")
            assert ": " in result.removeprefix("error: ")


# --- implementation selection ----------------------------------------------------------------


def test_max_safe_integer_is_exported() -> None:
    assert MAX_SAFE_INTEGER == 2**53 - 1
    assert "MAX_SAFE_INTEGER" in canonical.__all__


def test_accelerator_is_used_when_built() -> None:
    if "c" not in canonical._IMPLEMENTATIONS:
        pytest.skip("C accelerator not built")
    expected = "python" if os.environ.get("TRACEBOUND_PURE_PYTHON") == "1" else "c"
    assert expected == canonical._IMPLEMENTATION
    assert canonical_bytes is canonical._IMPLEMENTATIONS[expected][0]


def test_pure_python_can_be_forced_by_environment() -> None:
    code = "import tracebound.canonical as c; print(c._IMPLEMENTATION, c.canonical_bytes([1]))"
    env = {**os.environ, "TRACEBOUND_PURE_PYTHON": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["python", "b'[1]'"]


def test_accelerator_disagreement_fails_closed() -> None:
    # If the C encoder ever refused a value the reference accepts, the value must be refused
    # (not hashed with bytes nobody vouched for) and the message must say it is a bug.
    class Rejected(ValueError):
        pass

    def always_refuse(value: object, float_formatter: object = None) -> bytes:
        raise Rejected("refused")

    fake = types.ModuleType("fake_accelerator")
    fake.encode = always_refuse  # type: ignore[attr-defined]
    fake.Rejected = Rejected  # type: ignore[attr-defined]
    hash_safe, full = canonical._accelerated(fake)
    for encoder in (hash_safe, full):
        with pytest.raises(CanonicalizationError, match="refused a value the reference accepts"):
            encoder({"fine": [1, "two"]})
    with pytest.raises(CanonicalizationError, match=r"^\$\.x: float 0\.5 is not allowed"):
        hash_safe({"x": 0.5})  # a genuine rejection is still explained by the reference
