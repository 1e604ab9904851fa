"""Pricing and the precheck / precharge / reconcile cycle."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from tracebound.errors import BudgetExceeded, ConfigError, ValidationFailed
from tracebound.pipeline.fallback import Budget, ModelPrice, PricingTable, TokenUsage

PRICE = ModelPrice(
    input_per_mtok=Decimal("2.00"),
    cached_input_per_mtok=Decimal("0.50"),
    output_per_mtok=Decimal("8.00"),
    reasoning_per_mtok=Decimal("12.00"),
    cache_write_per_mtok=Decimal("2.50"),
)


def test_cost_prices_each_token_class_once() -> None:
    usage = TokenUsage(
        input_tokens=1_000_000,
        cached_input_tokens=400_000,
        cache_write_input_tokens=100_000,
        output_tokens=200_000,
        reasoning_tokens=50_000,
    )
    # 500k plain in @2 + 400k cached @0.5 + 100k written @2.5 + 150k out @8 + 50k reasoning @12
    assert PRICE.cost(usage) == Decimal("1.00") + Decimal("0.20") + Decimal("0.25") + Decimal(
        "1.20"
    ) + Decimal("0.60")


def test_defaults_for_reasoning_and_cache_writes() -> None:
    price = ModelPrice(
        input_per_mtok=Decimal(1), cached_input_per_mtok=Decimal(0), output_per_mtok=Decimal(4)
    )
    usage = TokenUsage(
        input_tokens=10, cache_write_input_tokens=10, output_tokens=10, reasoning_tokens=10
    )
    assert price.cost(usage) == Decimal(50) / Decimal(1_000_000)


def test_token_parts_cannot_exceed_totals() -> None:
    with pytest.raises(ValueError, match="parts of input"):
        TokenUsage(input_tokens=1, cached_input_tokens=2, output_tokens=0)
    with pytest.raises(ValueError, match="reasoning"):
        TokenUsage(input_tokens=1, output_tokens=1, reasoning_tokens=2)


def test_floats_are_refused_for_money() -> None:
    with pytest.raises(ValueError, match="no floats"):
        ModelPrice(input_per_mtok=0.1, cached_input_per_mtok=Decimal(0), output_per_mtok=Decimal(0))  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed):
        Budget(0.5)  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed):
        Budget(Decimal(-1))


def test_estimate_is_an_upper_bound_shape() -> None:
    table = PricingTable({"m": PRICE}, bytes_per_token=3)
    # 300 bytes -> 100 tokens @2, 50 output tokens at the dearer of output/reasoning (12)
    assert table.estimate("m", "x" * 300, max_tokens=50) == (
        Decimal(100) * 2 + Decimal(50) * 12
    ) / Decimal(1_000_000)
    with pytest.raises(ConfigError, match="no price"):
        table.estimate("other", "x", max_tokens=1)


def test_precheck_precharge_reconcile() -> None:
    budget = Budget(Decimal("1.00"))
    assert budget.precheck(Decimal("0.60"))
    held = budget.precharge(Decimal("0.60"))
    assert budget.available_usd == Decimal("0.40")
    assert not budget.precheck(Decimal("0.50"))
    with pytest.raises(BudgetExceeded):
        budget.precharge(Decimal("0.50"))
    assert budget.reconcile(held, Decimal("0.10")) == Decimal("0.90")
    with pytest.raises(ValidationFailed, match="already"):
        budget.reconcile(held, Decimal("0.10"))
    over = budget.precharge(Decimal("0.90"))
    assert budget.reconcile(over, Decimal("2.00")) == Decimal("-1.10")  # recorded, not hidden
    assert budget.precheck(Decimal(0))  # free work is never refused for money
    assert not budget.precheck(Decimal("0.01"))


def test_parallel_precharges_never_overspend() -> None:
    budget = Budget(Decimal("1.00"))
    granted: list[object] = []
    lock = threading.Lock()

    def grab() -> None:
        for _ in range(50):
            try:
                r = budget.precharge(Decimal("0.03"))
            except BudgetExceeded:
                continue
            with lock:
                granted.append(r)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 33  # floor(1.00 / 0.03)
    assert budget.available_usd == Decimal("0.01")
