"""The eventsourcing peer: an aggregate recording the same ~1 KB cost events.

A module of its own, imported only when the peer runs, because eventsourcing registers each
aggregate class by topic once per process and refuses a second class of the same name.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event


class CostAccount(Aggregate):
    """One aggregate; every ``incur`` call triggers one CostIncurred event."""

    @event("Created")
    def __init__(self) -> None:
        self.count = 0

    @event("CostIncurred")
    def incur(
        self,
        context: str,
        tier: str,
        amount_usd: str,
        source: str,
        tokens_in: int,
        tokens_out: int,
        cached_input_tokens: int,
        reasoning_tokens: int,
        model: str,
        role: str,
        step_id: str,
    ) -> None:
        self.count += 1


class CostApp(Application[Any]):
    """A plain application: default mapper (JSON transcoder), no snapshots, no cipher."""


def open_app(db: str) -> CostApp:
    return CostApp(
        env={
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": db,
            "IS_SNAPSHOTTING_ENABLED": "n",
        }
    )
