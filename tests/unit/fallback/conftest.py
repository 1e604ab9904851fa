"""Planning-side tests: no network but loopback, enforced for every test in this directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.fence.fallback_kit import Kit, guard_network, make_kit


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every socket address a test tried to reach (all must be loopback)."""
    return guard_network(monkeypatch)


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    """A tier with the default recipe book, a retrieval store and no leaf."""
    k = make_kit(tmp_path)
    yield k
    k.close()
