"""Shared test helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def shared_vectors_dir() -> Path:
    """The published test vectors shared by the project's repositories (``../shared/vectors``).

    They are read in place, not copied, so a test runs against exactly the files that were
    published (RFC 8785, RFC 6962 / transparency-dev).
    """
    return Path(__file__).resolve().parents[2] / "shared" / "vectors"


# What a user may have configured for the CLI and the library: a test must never read it
# (a developer's TRACEBOUND_STORE would receive the tests' appends) nor write into the real
# home (the default key and witness folders are under ~).
_USER_SETTINGS = (
    "TRACEBOUND_BLOBS",
    "TRACEBOUND_CODEOWNERS",
    "TRACEBOUND_KEY",
    "TRACEBOUND_KEY_DIR",
    "TRACEBOUND_POLICY",
    "TRACEBOUND_REDACTION_KEY",
    "TRACEBOUND_STORE",
    "TRACEBOUND_VERIFIER_KEY",
    "TRACEBOUND_VIEWS",
    "TRACEBOUND_WITNESS",
    "TRACEBOUND_WITNESS_DIR",
)


@pytest.fixture(autouse=True, scope="session")
def private_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home of the test session's own, inherited by every CLI subprocess."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(home))
        for name in _USER_SETTINGS:
            patch.delenv(name, raising=False)
        yield home


# A real PostgreSQL server (session-scoped, one per xdist worker) and a fresh database per
# test; see tests/pg.py. Imported here so every test module can request them by name.
from tests.pg import postgres_dsn, postgres_server  # noqa: E402, F401
