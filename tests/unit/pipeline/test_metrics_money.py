"""`tracebound metrics` computes money exactly, whatever its size (MONEY_CONTEXT)."""

from __future__ import annotations

from decimal import Decimal, localcontext

from tracebound.pipeline.metrics import GroupMetrics


def test_a_cost_past_28_digits_is_divided_and_shown_exactly() -> None:
    # decimal's default context (28 digits) rounded this sum and could not quantize the
    # cost per step to micro-dollars (InvalidOperation).
    group = GroupMetrics(outputs=2, cost_usd=Decimal("200000000000000000000000.0000004"))
    with localcontext() as ctx:
        ctx.prec = 5  # a caller's own context must not matter either
        shown = group.as_dict()
    assert shown["cost_usd"] == "200000000000000000000000.0000004"
    assert shown["cost_per_step_usd"] == "100000000000000000000000"


def test_small_amounts_are_written_in_plain_notation() -> None:
    """A run that spent a hundred-millionth of a dollar was reported as "1E-8" (str of a
    Decimal) in the `spent $` column and in --json, where every other amount is plain."""
    group = GroupMetrics(outputs=1)
    for amount in ("0.00000001", "0.00000001"):
        group.cost_usd += Decimal(amount)
        group.cost_est_usd += Decimal(amount) * 25
    shown = group.as_dict()
    assert (shown["cost_usd"], shown["cost_est_usd"]) == ("0.00000002", "0.00000050")
    assert GroupMetrics(cost_usd=Decimal("1E+2")).as_dict()["cost_usd"] == "100"
