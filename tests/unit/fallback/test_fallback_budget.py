"""Pricing and the precheck / precharge / reconcile cycle."""

from __future__ import annotations

import threading
from decimal import Decimal, Inexact, localcontext

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


def test_long_cache_writes_are_priced_at_their_own_rate() -> None:
    """Anthropic bills a 1-hour cache write at 2x the input rate and a 5-minute one at
    1.25x. With one cache-write rate, a call that wrote to both caches was priced as if
    every write were a 5-minute one: the 1-hour writes were under-charged by 37.5%."""
    price = ModelPrice(
        input_per_mtok=Decimal("3.00"),
        cached_input_per_mtok=Decimal("0.30"),
        output_per_mtok=Decimal("15.00"),
        cache_write_per_mtok=Decimal("3.75"),
        cache_write_long_per_mtok=Decimal("6.00"),
    )
    usage = TokenUsage(
        input_tokens=1_000_000,
        cache_write_input_tokens=600_000,
        cache_write_long_input_tokens=200_000,
        output_tokens=0,
    )
    # 400k plain @3 + 400k 5-minute writes @3.75 + 200k 1-hour writes @6
    assert price.cost(usage) == Decimal("1.20") + Decimal("1.50") + Decimal("1.20")


def test_long_cache_writes_default_to_the_cache_write_rate() -> None:
    usage = TokenUsage(
        input_tokens=10,
        cache_write_input_tokens=10,
        cache_write_long_input_tokens=4,
        output_tokens=0,
    )
    written = PRICE.model_copy(update={"cache_write_long_per_mtok": None})
    assert written.cost(usage) == Decimal(10) * Decimal("2.50") / Decimal(1_000_000)
    bare = ModelPrice(
        input_per_mtok=Decimal(1), cached_input_per_mtok=Decimal(0), output_per_mtok=Decimal(4)
    )
    assert bare.cost(usage) == Decimal(10) / Decimal(1_000_000)


def test_token_parts_cannot_exceed_totals() -> None:
    with pytest.raises(ValueError, match="parts of input"):
        TokenUsage(input_tokens=1, cached_input_tokens=2, output_tokens=0)
    with pytest.raises(ValueError, match="reasoning"):
        TokenUsage(input_tokens=1, output_tokens=1, reasoning_tokens=2)
    with pytest.raises(ValueError, match="part of cache_write_input_tokens"):
        TokenUsage(
            input_tokens=5,
            cache_write_input_tokens=1,
            cache_write_long_input_tokens=2,
            output_tokens=0,
        )


def test_floats_are_refused_for_money() -> None:
    with pytest.raises(ValueError, match="no floats"):
        ModelPrice(input_per_mtok=0.1, cached_input_per_mtok=Decimal(0), output_per_mtok=Decimal(0))  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed):
        Budget(0.5)  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed):
        Budget(Decimal(-1))


def test_estimate_is_an_upper_bound_shape() -> None:
    table = PricingTable({"m": PRICE}, bytes_per_token=3)
    # 300 bytes -> 100 tokens at the dearer of input/cache write (2.5), 50 output tokens at
    # the dearer of output/reasoning (12)
    assert table.estimate("m", "x" * 300, max_tokens=50) == (
        Decimal(100) * Decimal("2.5") + Decimal(50) * 12
    ) / Decimal(1_000_000)


def test_estimate_covers_a_prompt_written_to_the_cache_in_full() -> None:
    """Anthropic bills a cache write at 1.25x (5 min) or 2x (1 h) the input rate. The
    reservation priced the prompt at the plain input rate, so a call whose whole prompt
    was written to the cache cost more than was reserved: the "worst case" was not."""
    price = ModelPrice(
        input_per_mtok=Decimal("3.00"),
        cached_input_per_mtok=Decimal("0.30"),
        output_per_mtok=Decimal("15.00"),
        cache_write_per_mtok=Decimal("6.00"),
    )
    table = PricingTable({"claude": price})
    prompt = "p" * 3000
    tokens_in = table.estimate_input_tokens(prompt)
    written = TokenUsage(
        input_tokens=tokens_in, cache_write_input_tokens=tokens_in, output_tokens=100
    )
    assert table.cost("claude", written) <= table.estimate("claude", prompt, max_tokens=100)
    long_price = price.model_copy(update={"cache_write_long_per_mtok": Decimal("9.00")})
    long_table = PricingTable({"claude": long_price})
    held_an_hour = written.model_copy(update={"cache_write_long_input_tokens": tokens_in})
    assert long_table.cost("claude", held_an_hour) == long_table.estimate(
        "claude", prompt, max_tokens=0
    ) + Decimal(100) * 15 / Decimal(1_000_000)
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


# --- configuration: clear, typed errors up front -------------------------------------------


@pytest.mark.parametrize("limit", [Decimal("NaN"), Decimal("sNaN"), Decimal("Infinity")])
def test_a_limit_that_is_not_a_finite_amount_is_refused(limit: Decimal) -> None:
    # NaN used to escape as decimal.InvalidOperation; Infinity was accepted, then every
    # attempt failed when BudgetPrechecked (which holds no infinity) was built.
    with pytest.raises(ValidationFailed, match="limit_usd"):
        Budget(limit)


@pytest.mark.parametrize("tokens", [1.5, True, "100", 0, -3, None])
def test_max_output_tokens_must_be_a_positive_int(tokens: object) -> None:
    with pytest.raises(ValidationFailed, match="max_output_tokens"):
        Budget(Decimal(1), max_output_tokens=tokens)  # type: ignore[arg-type]


@pytest.mark.parametrize("per_token", [2.5, True, "3", 0])
def test_bytes_per_token_must_be_a_positive_int(per_token: object) -> None:
    with pytest.raises(ValidationFailed, match="bytes_per_token"):
        PricingTable({"m": PRICE}, bytes_per_token=per_token)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "prices",
    [
        {"m": {"input_per_mtok": "1", "cached_input_per_mtok": "0", "output_per_mtok": "1"}},
        {"m": Decimal("1.10")},
        {"": PRICE},
        {3: PRICE},
        [("m", PRICE)],
        None,
    ],
)
def test_a_pricing_table_holds_model_names_and_model_prices(prices: object) -> None:
    # These used to be accepted and fail later, inside an attempt, as AttributeError.
    with pytest.raises(ValidationFailed, match="prices"):
        PricingTable(prices)  # type: ignore[arg-type]


@pytest.mark.parametrize("amount", [Decimal(-1), Decimal("NaN"), Decimal("Infinity"), 0.5])
def test_amounts_given_to_the_budget_are_finite_and_not_negative(amount: object) -> None:
    budget = Budget(Decimal(1))
    with pytest.raises(ValidationFailed, match="estimate"):
        budget.precheck(amount)  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed, match="estimate"):
        budget.precharge(amount)  # type: ignore[arg-type]
    held = budget.precharge(Decimal("0.5"))
    with pytest.raises(ValidationFailed, match="actual"):
        budget.reconcile(held, amount)  # type: ignore[arg-type]
    assert budget.reserved_usd == Decimal("0.5")  # the refused settlement left it held
    assert budget.reconcile(held, Decimal("0.25")) == Decimal("0.75")
    assert budget.reserved_usd == 0


def test_a_zero_estimate_fits_an_overrun_budget_at_precharge_as_at_precheck() -> None:
    budget = Budget(Decimal("0.10"))
    budget.reconcile(budget.precharge(Decimal("0.10")), Decimal("0.30"))
    assert budget.available_usd == Decimal("-0.20")
    assert budget.precheck(Decimal(0))
    free = budget.precharge(Decimal(0))  # a free model: it used to raise BudgetExceeded here
    assert budget.reconcile(free, Decimal(0)) == Decimal("-0.20")


def test_money_is_exact_whatever_the_callers_decimal_context() -> None:
    # decimal contexts are per thread and the caller's: a Budget shared by threads must not
    # round with whichever precision the calling thread happens to have.
    usage = TokenUsage(input_tokens=1_234_567, cached_input_tokens=7_777, output_tokens=7_654_321)
    table = PricingTable({"m": PRICE})
    exact_cost, exact_estimate = PRICE.cost(usage), table.estimate("m", "x" * 3001, max_tokens=7)
    budget = Budget(Decimal("100"))
    remaining = Decimal(100) - exact_cost  # computed here, in the default context
    with localcontext() as ctx:
        ctx.prec = 4
        ctx.traps[Inexact] = True
        assert PRICE.cost(usage) == exact_cost
        assert table.estimate("m", "x" * 3001, max_tokens=7) == exact_estimate
        held = budget.precharge(Decimal("0.000123456789"))
        assert budget.available_usd == Decimal("99.999876543211")
        assert budget.reconcile(held, exact_cost) == remaining
    assert budget.spent_usd == exact_cost


def test_the_refusal_writes_amounts_in_plain_notation() -> None:
    """One token at $0.10 per 1M is 1E-7 as str() writes it; the message said so."""
    budget = Budget(Decimal("0.00000005"))
    budget.precharge(Decimal("0.00000005"))
    with pytest.raises(BudgetExceeded) as refused:
        budget.precharge(Decimal("0.0000001"))
    assert str(refused.value) == "estimate 0.0000001 USD exceeds the 0.00000000 USD available"
