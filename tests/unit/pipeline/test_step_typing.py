"""A team's own step code, type-checked as theirs would be (mypy --strict).

The library ships ``py.typed`` and says ``mypy --strict``; a step that does the two most
ordinary things, recording what its model call cost under its own run and step ids and
being called directly in the team's unit tests, must check clean without casts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

USER_CODE = """
from __future__ import annotations

from decimal import Decimal
from typing import Any

from tracebound import Ledger
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.pipeline.runner import approve
from tracebound.pipeline.runtime import Pipeline, StepContext

pipe = Pipeline("typed")


def charge(ledger: Ledger, ctx: StepContext) -> None:
    cost = CostIncurred(tier="direct", amount_usd=Decimal("0.01"), source=CostSource("openai"),
                        role=ctx.role, step_id=ctx.step_id)
    ledger.record(f"costs/{ctx.run_id}", [cost], workflow_id=ctx.run_id)


def approve_my_own_gate(ledger: Ledger, ctx: StepContext) -> None:
    approve(ledger, ctx.run_id, ctx.step_id, "@alice", codeowners=None)


@pipe.planner()
def plan(ctx: StepContext) -> dict[str, Any]:
    return {"role": "Planner"}


@pipe.critic()
async def review(ctx: StepContext) -> dict[str, Any]:
    return {"role": "Critic"}


async def unit_test_of_the_steps(ctx: StepContext) -> None:
    assert plan(ctx)["role"] == "Planner"
    assert (await review(ctx))["role"] == "Critic"
"""


@pytest.mark.slow
def test_a_users_steps_type_check_without_casts(tmp_path: Path) -> None:
    """It did not: ``ctx.step_id`` was a plain ``str`` where ``CostIncurred`` and
    ``approve`` take a ``StepId`` (``RunResult`` already gave typed ids), and a decorated
    step was retyped as the runner's ``StepFn``, so ``plan(ctx)["role"]`` in a unit test
    was "not indexable"."""
    api = pytest.importorskip("mypy.api")
    script = tmp_path / "team_steps.py"
    script.write_text(USER_CODE, encoding="utf-8")
    stdout, stderr, status = api.run(
        ["--strict", "--no-error-summary", "--show-error-codes", "--config-file", os.devnull,
         "--cache-dir", str(tmp_path / "cache"), str(script)]
    )  # fmt: skip
    assert status == 0, stdout + stderr
