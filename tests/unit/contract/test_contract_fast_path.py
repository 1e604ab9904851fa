"""The compiled fast path (jsonschema-rs) never accepts what the reference (jsonschema) refuses.

``validate_*`` trusts jsonschema-rs only when it says "valid"; everything else goes to the
reference validator, which alone refuses documents and explains why (ADR 0008). So the one
property that matters is: fast path says valid ⇒ reference says valid. It is checked on every
contract fixture, on generated mutations of them (tuples, enums, odd whitespace, huge numbers,
broken timestamps, extra and missing fields), and for the schema patterns over every code point.
"""

from __future__ import annotations

import copy
import enum
import json
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tracebound.contract import load_schema, validate_arl, validate_envelope, validate_tpc
from tracebound.contract import validate as validate_module
from tracebound.contract.validate import (
    _PYTHON_WHITESPACE,
    _fast_accepts,
    _plain_json,
    _rust_pattern,
    _validator,
)
from tracebound.errors import ContractError, ValidationFailed

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "contract"
KINDS: dict[str, Callable[[Mapping[str, Any]], BaseModel]] = {
    "tpc": validate_tpc,
    "envelope": validate_envelope,
    "arl": validate_arl,
}
ALL = [
    (kind, group, path)
    for kind in KINDS
    for group in ("valid", "invalid")
    for path in sorted((FIXTURES / kind / group).glob("*.json"))
]
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _reference_valid(kind: str, document: Any) -> bool:
    return bool(_validator(kind).is_valid(document))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


# --- fixtures -------------------------------------------------------------------------------


def test_every_kind_has_fixtures() -> None:
    assert {kind for kind, _, _ in ALL} == set(KINDS)
    assert len(ALL) > 250


@pytest.mark.parametrize(("kind", "group", "path"), ALL, ids=[p.name for _, _, p in ALL])
def test_fast_path_agrees_with_the_reference_on_every_fixture(
    kind: str, group: str, path: Path
) -> None:
    document = _load(path)
    fast = _fast_accepts(kind, document)  # type: ignore[arg-type]
    reference = _reference_valid(kind, document)
    if group == "valid":
        assert fast and reference  # the fast path is really taken for good documents
    if fast != reference:
        # The one known disagreement, and the safe way round: Python's `$` also matches
        # before a final newline, Rust's does not. The model refuses such values anyway.
        assert reference and not fast
        assert any(s.endswith("\n") for s in _strings(document)), path.name


# --- generated documents ----------------------------------------------------------------------


class _Colour(enum.Enum):
    PLANNER = "Planner"
    LIST = ("a", "b")


class _Str(str):
    __slots__ = ()


# Characters where regex engines disagree about whitespace, and other awkward ones.
_AWKWARD = "\x1c\x1d\x1e\x1f\x85\xa0\ufeff\u2028\u180e\u200b\n\t \r\x0b\x0c\x00é"
_TEXT = st.text(alphabet=st.sampled_from(_AWKWARD) | st.characters(), max_size=8)
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**53 - 1, 2**53, -1, 10_001, 2**64, -(2**70)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.0, 0.0, -0.0, 8000.0, 1e300]),
    _TEXT,
    st.sampled_from(list(_AWKWARD)),
    st.sampled_from(["\ud800", "a\udfff"]),  # lone surrogates: not encodable as UTF-8
    st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True).map(lambda s: s + "\n"),
    st.from_regex(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", fullmatch=True
    ).map(str.upper),
    st.sampled_from(
        [
            "2026-11-22T10:00:60Z",
            "2026-02-30T10:00:00Z",
            "2026-11-22T10:00:00",
            "2026-11-22t10:00:00.5z",
            "2026-11-22T10:00:00+25:00",
            "{0b6c2f8e-3f1a-4c2e-9d7b-5a1e2c3d4f5a}",
            "0b6c2f8e3f1a4c2e9d7b5a1e2c3d4f5a",
        ]
    ),
    st.sampled_from([_Colour.PLANNER, _Colour.LIST, _Str("Planner"), b"x", Path("x")]),
)
_VALUES = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*at, index))
    return out


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, Any]:
    """A valid fixture with one to three places changed: replaced, removed, added, or its
    strings given an awkward character."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    bases = [p for k, g, p in ALL if k == kind and g == "valid"]
    document = copy.deepcopy(_load(draw(st.sampled_from(bases))))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(document)))
        if not path:
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        action = draw(st.sampled_from(["replace", "delete", "add", "append", "wrap"]))
        if action == "replace":
            parent[last] = draw(_VALUES)
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(_VALUES)
        elif action == "append" and isinstance(parent[last], str):
            parent[last] = parent[last] + draw(st.sampled_from(list(_AWKWARD)))
        elif action == "wrap" and isinstance(parent[last], list):
            parent[last] = tuple(parent[last])
    return kind, document


def _outcome(validate: Callable[[Mapping[str, Any]], BaseModel], document: Any) -> object:
    try:
        return validate(document)
    except ValidationFailed as failure:
        return (failure.field, failure.reason)


@SETTINGS
@given(_mutated())
def test_fast_path_never_accepts_what_the_reference_refuses(case: tuple[str, Any]) -> None:
    kind, document = case
    if _fast_accepts(kind, document):  # type: ignore[arg-type]
        assert _reference_valid(kind, document), document


@SETTINGS
@given(_mutated())
def test_validate_gives_what_the_reference_alone_gives(case: tuple[str, Any]) -> None:
    kind, document = case
    validate = KINDS[kind]
    with_fast_path = _outcome(validate, copy.deepcopy(document))
    with mock.patch.object(validate_module, "_fast_accepts", return_value=False):
        reference_only = _outcome(validate, copy.deepcopy(document))
    assert with_fast_path == reference_only


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_text_of_one_odd_space_is_never_fast_accepted(kind: str) -> None:
    """Every text field of every valid fixture, set to one character that Python counts as
    whitespace and ECMA-262 (jsonschema-rs's default reading of \\s) does not, or the
    reverse: the compiled validator must agree with the reference each time."""
    refused = 0
    for _, _, path in (case for case in ALL if case[0] == kind and case[1] == "valid"):
        document = _load(path)
        for where in _paths(document):
            if not where or not isinstance(_get(document, where), str):
                continue
            for char in "\x1c\x1d\x1e\x1f\x85\ufeff\u180e ":
                changed = copy.deepcopy(document)
                _set(changed, where, char)
                reference = _reference_valid(kind, changed)
                assert _fast_accepts(kind, changed) == reference, (path.name, where, char)  # type: ignore[arg-type]
                refused += not reference
    assert refused > 0


def _get(document: Any, where: tuple[Any, ...]) -> Any:
    for part in where:
        document = document[part]
    return document


def _set(document: Any, where: tuple[Any, ...], value: Any) -> None:
    _get(document, where[:-1])[where[-1]] = value


def test_a_tuple_or_an_enum_goes_to_the_reference() -> None:
    document = _load(next(p for k, g, p in ALL if k == "tpc" and g == "valid"))
    for change in (
        {"actions": tuple(document["actions"])},
        {"role": _Colour.PLANNER},
        {"role": _Str(document["role"])},
    ):
        changed = {**document, **change}
        assert not _fast_accepts("tpc", changed)
        # jsonschema-rs alone would take the tuple and the Enum member: the guard is needed.
    assert jsonschema_rs.Draft202012Validator({"type": "array"}).is_valid(("a",))
    with pytest.raises(ValidationFailed) as caught:
        validate_tpc({**document, "actions": tuple(document["actions"])})
    assert (caught.value.field, caught.value.reason) == ("actions", "must be an array")


def test_plain_json_accepts_only_plain_json() -> None:
    assert _plain_json({"a": [1, 2.5, True, None, "x", {"b": []}]})
    for value in ({"a": (1,)}, {1: "a"}, {"a": _Str("x")}, [b"x"], {"a": {"b": [_Colour.LIST]}}):
        assert not _plain_json(value), value
    deep: list[Any] = []
    cursor = deep
    for _ in range(100_000):  # no recursion limit in the guard
        cursor.append([])
        cursor = cursor[0]
    assert _plain_json(deep)


# --- patterns -------------------------------------------------------------------------------


def _schema_patterns() -> set[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "pattern" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(load_schema("tpc"))
    walk(load_schema("arl"))
    return found


def _rust(pattern: str) -> jsonschema_rs.Validator:
    return jsonschema_rs.Draft202012Validator({"pattern": _rust_pattern(pattern)})


@pytest.mark.parametrize("pattern", [r"\S", r"\s"])
def test_whitespace_classes_match_pythons_re_at_every_code_point(pattern: str) -> None:
    rust, python = _rust(pattern), re.compile(pattern)
    differ = [
        hex(code)
        for code in range(sys.maxunicode + 1)
        if not 0xD800 <= code <= 0xDFFF
        and rust.is_valid(chr(code)) != (python.search(chr(code)) is not None)
    ]
    assert differ == []
    assert re.fullmatch(f"[{_PYTHON_WHITESPACE}]", "\x1c")  # the class parses in re as well


def test_schema_patterns_are_the_ones_checked_here() -> None:
    # A new pattern needs a look at what it means in both engines (and, for \s/\S, above).
    assert _schema_patterns() == {
        r"\S",
        r"^\S+$",
        r"^[a-z][a-z0-9+.-]*:\S+$",
        r"^sha256:[0-9a-f]{64}$",
        r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        r"^[0-9]+(\.[0-9]+)?$",
    }


_PATTERN_TEXT = st.text(  # UTF-8 only: a lone surrogate never reaches jsonschema-rs
    alphabet=st.sampled_from(_AWKWARD + "abcfz09:.+-/") | st.characters(codec="utf-8"),
    max_size=12,
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(_schema_patterns())), _PATTERN_TEXT, st.booleans())
def test_rewritten_patterns_match_what_re_matches(pattern: str, text: str, shaped: bool) -> None:
    if shaped:  # something close to a match, so both outcomes occur
        text = {
            r"^sha256:[0-9a-f]{64}$": "sha256:" + "ab" * 32,
            r"^[0-9]+(\.[0-9]+)?$": "0.02",
            r"^[a-z][a-z0-9+.-]*:\S+$": "input://x",
            r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$": (
                "0b6c2f8e-3f1a-4c2e-9d7b-5a1e2c3d4f5a"
            ),
        }.get(pattern, "id") + text
    rust = _rust(pattern).is_valid(text)
    python = re.search(pattern, text) is not None
    if text.endswith("\n") and pattern.endswith("$"):
        assert python or not rust  # Rust's `$` is the stricter one
    else:
        assert rust == python


@pytest.mark.parametrize("pattern", [r"\d+", r"^\w$", r"\bx", r"[\s]", r"[\S]", r"[]a]", "\\"])
def test_patterns_with_unchecked_escapes_are_refused(pattern: str) -> None:
    with pytest.raises(ContractError):
        _rust_pattern(pattern)


def test_escaped_punctuation_is_kept() -> None:
    assert _rust_pattern(r"^[0-9]+(\.[0-9]+)?$") == r"^[0-9]+(\.[0-9]+)?$"
    assert _rust_pattern(r"a\S") == f"a[^{_PYTHON_WHITESPACE}]"


# --- documents no JSON text can be, and schemas that do not compile -------------------------

_CYCLE_PROBE = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a walk for ever dies quickly
from tracebound.contract import validate_tpc
from tracebound.errors import ValidationFailed
doc = json.loads(sys.argv[1])
loop = ["x"]
loop.append(loop)
inner = {"a": []}
inner["a"].append({"b": inner})  # a cycle two containers long, inside the envelope
deep = [1]
deep.append([[deep]])  # three lists deep
cases = {
    "list": ("actions", loop),
    "dict": ("handoff_envelope", inner),
    "nested": ("risks", deep),
}
where, value = cases[sys.argv[2]]
doc[where] = value
try:
    validate_tpc(doc)
except ValidationFailed as exc:
    print("ValidationFailed", exc.field, exc.reason)
"""


@pytest.mark.parametrize("shape", ["list", "dict", "nested"])
def test_a_document_that_contains_itself_is_refused(shape: str) -> None:
    # In a child process with a memory limit and a timeout: the bug this guards against was
    # a walk that never ended.
    import subprocess

    document = _load(next(p for k, g, p in ALL if k == "tpc" and g == "valid"))
    run = subprocess.run(
        [sys.executable, "-c", _CYCLE_PROBE, json.dumps(document), shape],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.stdout.startswith("ValidationFailed $ must not contain itself"), run.stderr[-800:]


def test_shared_values_are_not_cycles() -> None:
    # (Cycles are refused in test_a_document_that_contains_itself_is_refused, in a child
    # process: in this one, a regression would walk for ever and eat the machine's memory.)
    shared = ["a", "b"]
    assert _plain_json({"x": shared, "y": [shared, shared], "z": {"w": shared}})
    wide: list[Any] = [shared] * 200_000  # past the walk's budget: checked, and accepted
    assert _plain_json({"wide": wide, "again": wide})
    document = _load(next(p for k, g, p in ALL if k == "tpc" and g == "valid"))
    actions = list(document["actions"])
    assert validate_tpc({**document, "actions": actions, "risks": actions}).risks == tuple(actions)


def test_a_document_nested_past_the_recursion_limit_is_refused_typed() -> None:
    # Not plain JSON (the tuple at the bottom), so the reference walks it, recursively.
    document = _load(next(p for k, g, p in ALL if k == "tpc" and g == "valid"))
    deep: Any = (1,)
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    with pytest.raises(ValidationFailed, match="nested too deeply"):
        validate_tpc({**document, "actions": deep})


@pytest.mark.parametrize("broken", [{"type": 5}, {"pattern": "("}, {"$ref": "#/nowhere"}])
def test_a_schema_that_does_not_compile_raises_a_contract_error(broken: dict[str, Any]) -> None:
    document = _load(next(p for k, g, p in ALL if k == "tpc" and g == "valid"))
    validate_tpc(document)  # the reference validator is built (and cached) from good schemas
    real = validate_module.load_schema

    def break_it(name: Any) -> Any:
        return {**real(name), **broken}

    validate_module._fast_validator.cache_clear()
    try:
        with (
            mock.patch.object(validate_module, "load_schema", side_effect=break_it),
            pytest.raises(ContractError, match="does not compile") as caught,
        ):
            validate_tpc(document)
    finally:
        validate_module._fast_validator.cache_clear()  # the real schema again
    assert not isinstance(caught.value, ValidationFailed)  # the contract's fault, not the doc's
    validate_tpc(document)
