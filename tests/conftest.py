"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path


def shared_vectors_dir() -> Path:
    """The published test vectors shared by the project's repositories (``../shared/vectors``).

    They are read in place, not copied, so a test runs against exactly the files that were
    published (RFC 8785, RFC 6962 / transparency-dev).
    """
    return Path(__file__).resolve().parents[2] / "shared" / "vectors"


# A real PostgreSQL server (session-scoped, one per xdist worker) and a fresh database per
# test; see tests/pg.py. Imported here so every test module can request them by name.
from tests.pg import postgres_dsn, postgres_server  # noqa: E402, F401
