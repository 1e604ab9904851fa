"""Fence tests run the real tier; no socket may leave loopback."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fence.fallback_kit import guard_network


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    return guard_network(monkeypatch)
