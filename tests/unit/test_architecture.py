"""ARCHITECTURE.md, enforced: layers import only downwards; the core does no I/O; only
`system.py` reads the clock or mints random ids."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tracebound"

# Lower number = lower layer. A module may import its own layer or any below it.
LAYERS: dict[str, int] = {
    "errors": 0, "ids": 0, "canonical": 0, "_canonical_py": 0, "_canonical": 0,
    "sources": 0, "events": 0, "integrity": 0, "_verifykernel": 0,
    "store": 1, "system": 1,
    "ledger": 2,
    "contract": 3, "pipeline": 3, "projections": 3, "replay": 3,
    "integrations": 4, "export": 4,
    "cli": 5, "web": 5, "__main__": 5,
}  # fmt: skip
CORE = {name for name, layer in LAYERS.items() if layer == 0}

# What the pure core may import: computation only, no files, sockets, processes or env.
CORE_ALLOWED = {
    "__future__", "abc", "base64", "binascii", "collections", "contextlib", "dataclasses",
    "datetime", "decimal", "enum", "functools", "hashlib", "hmac", "itertools", "math",
    "operator", "re", "string", "struct", "types", "typing", "typing_extensions",
    "unicodedata", "uuid", "json",
    "pydantic", "pydantic_core", "blake3", "cryptography", "orjson", "tracebound",
}  # fmt: skip
# Reading an env var to choose the C or pure canonical encoder is configuration, not I/O.
CORE_EXCEPTIONS = {("canonical", "os")}

# (owner, call) pairs that read the wall clock or randomness; only system.py may make them.
FORBIDDEN_CALLS = {
    ("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"),
    ("uuid", "uuid1"), ("uuid", "uuid4"), ("", "uuid1"), ("", "uuid4"),
    ("time", "time"), ("time", "time_ns"), ("os", "urandom"),
}  # fmt: skip


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel == Path("__init__.py"):
            continue  # the public API re-exports from every layer by design
        out.append((rel.parts[0].removesuffix(".py"), path))
    return out


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


MODULES = _modules()


def test_every_top_level_module_has_a_layer() -> None:
    assert MODULES, "no modules found: the test would pass vacuously"
    unknown = {top for top, _ in MODULES} - set(LAYERS)
    assert not unknown, f"add these to LAYERS (and ARCHITECTURE/ADR): {unknown}"


@pytest.mark.parametrize(
    ("top", "path"), MODULES, ids=[str(p.relative_to(SRC)) for _, p in MODULES]
)
def test_imports_point_downwards(top: str, path: Path) -> None:
    mine = LAYERS[top]
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] != "tracebound" or len(parts) < 2:
            continue
        theirs = LAYERS.get(parts[1])
        assert theirs is not None, f"{path}: imports unknown module {name}"
        assert theirs <= mine, f"{path} (layer {mine}) imports {name} (layer {theirs})"


@pytest.mark.parametrize(
    ("top", "path"),
    [(t, p) for t, p in MODULES if t in CORE],
    ids=[str(p.relative_to(SRC)) for t, p in MODULES if t in CORE],
)
def test_core_is_pure(top: str, path: Path) -> None:
    for name in _imports(path):
        root = name.split(".")[0]
        if (top, root) in CORE_EXCEPTIONS:
            continue
        assert root in CORE_ALLOWED, f"{path}: the core may not import {name}"


def _clock_calls(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = getattr(func.value, "id", getattr(func.value, "attr", "?"))
            pair = (owner, func.attr)
        elif isinstance(func, ast.Name):
            pair = ("", func.id)
        else:
            continue
        if pair in FORBIDDEN_CALLS:
            found.append(f"line {node.lineno}: {'.'.join(filter(None, pair))}()")
    return found


@pytest.mark.parametrize(
    ("top", "path"), MODULES, ids=[str(p.relative_to(SRC)) for _, p in MODULES]
)
def test_clock_and_ids_are_injected(top: str, path: Path) -> None:
    if top == "system":
        return
    calls = _clock_calls(path.read_text(encoding="utf-8"))
    assert not calls, f"{path}: use an injected Clock/IdSource instead of {calls}"


def test_the_architecture_test_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from tracebound.cli import app\nimport sqlite3\nx = datetime.now()\n")
    assert "tracebound.cli" in _imports(bad)
    assert "sqlite3" not in CORE_ALLOWED
    assert _clock_calls(bad.read_text()) == ["line 3: datetime.now()"]
    assert _clock_calls("from uuid import uuid4\nuuid4()\n") == ["line 2: uuid4()"]
