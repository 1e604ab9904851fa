"""Ledger.record refuses what it cannot write with a typed error, before anything is written.

A caller's mistake (a dict where a payload model goes, an id that is not text, an expected
version given as a string) used to surface as whatever the code underneath tripped over:
``AttributeError``, ``TypeError``, ``UnicodeEncodeError``, pydantic's ``ValidationError``, or
a ``ConcurrencyConflict`` that blamed another writer. ``except TraceboundError`` is meant to
be enough (errors.py), so each is a ``ValidationFailed`` naming the argument.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
from tracebound.errors import ValidationFailed
from tracebound.events.catalog import CostIncurred, CostSource

COST = CostIncurred(tier="direct", amount_usd=Decimal("0.01"), source=CostSource("llm"))


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(SQLiteStore(tmp_path / "store"), clock=FixedClock(), ids=SequentialIds()) as led:
        yield led


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        (("run-1", [{"kind": "cost_incurred"}]), {}, "payloads[0]"),
        (("run-1", COST), {}, "payloads"),
        (("run-1", [COST, "cost"]), {}, "payloads[1]"),
        ((5, [COST]), {}, "stream_id"),
        (("", [COST]), {}, "stream_id"),
        (("a\ud800b", [COST]), {}, "stream_id"),
        (("run-1", [COST]), {"workflow_id": 5}, "workflow_id"),
        (("run-1", [COST]), {"correlation_id": b"c"}, "correlation_id"),
        (("run-1", [COST]), {"expected_version": "1"}, "expected_version"),
        (("run-1", [COST]), {"expected_version": -1}, "expected_version"),
        (("run-1", [COST]), {"expected_version": True}, "expected_version"),
    ],
)
def test_a_bad_argument_is_a_validation_failure_and_writes_nothing(
    ledger: Ledger, args: tuple[Any, ...], kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationFailed) as info:
        ledger.record(*args, **kwargs)
    assert info.value.field == field
    assert ledger.store.size() == 0


def test_a_good_record_still_goes_through(ledger: Ledger) -> None:
    (event,) = ledger.record("run-1", [COST], workflow_id="wf", expected_version=0)
    assert (event.position, event.stream_id, event.workflow_id) == (1, "run-1", "wf")
