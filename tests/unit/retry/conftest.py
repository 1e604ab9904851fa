"""Fixtures for the verifying side's tests; the helpers live in retry_kit.py."""

from tests.unit.retry.retry_kit import isolated, kit, project  # noqa: F401
