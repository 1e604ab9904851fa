"""The suite runs in a home of its own, with none of the user's tracebound settings."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.conftest import _USER_SETTINGS

SRC = Path(__file__).resolve().parents[2] / "src" / "tracebound"
_NOT_SETTINGS = {"TRACEBOUND_PURE_PYTHON"}  # a switch of the test and bench harnesses


def test_every_setting_the_package_reads_is_cleared_for_the_tests() -> None:
    named = {
        name
        for path in SRC.rglob("*.py")
        for name in re.findall(r"TRACEBOUND_[A-Z_]+", path.read_text(encoding="utf-8"))
    }
    assert named - _NOT_SETTINGS == set(_USER_SETTINGS)


def test_the_home_is_the_sessions_own(private_home: Path) -> None:
    assert Path.home() == private_home == Path(os.environ["HOME"])
    assert not any(name in os.environ for name in _USER_SETTINGS)
