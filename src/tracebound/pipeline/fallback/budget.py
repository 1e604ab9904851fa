"""Money for model calls: a pricing table, a budget, and the precheck/precharge/reconcile
cycle the attempt events record.

Every amount is a :class:`~decimal.Decimal` of US dollars (hashed data holds no floats,
docs/adr/0003). Prices are per million tokens, per model, with separate rates for plain
input, cached input, output and reasoning output, because providers bill them differently
and a cost projection must not pretend otherwise.

The cycle, per attempt that calls a model:

1. *precheck*: would the estimate fit in what is left? (``BudgetPrechecked``)
2. *precharge*: reserve the estimate, so concurrent attempts sharing the budget cannot
   together overspend it (``BudgetPrecharged``).
3. *reconcile*: replace the reservation by the real cost from the provider's usage
   (``BudgetReconciled``). An overrun is recorded, not hidden: ``remaining`` may go negative,
   and the tier then refuses the plan with ``refusal_reason="budget"``.

Money arithmetic runs in its own decimal context (:data:`MONEY_CONTEXT`, 200 significant
digits, no rounding in practice; defined beside ``Money`` and shared with the projections),
never the caller's: decimal contexts are per thread, and a budget shared by threads must
not round with whichever precision (or traps) the calling thread happens to have.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, localcontext
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict

from tracebound.errors import BudgetExceeded, ConfigError, ValidationFailed
from tracebound.events.anchor import MONEY_CONTEXT, Money
from tracebound.pipeline.fallback.leaf import TokenUsage

__all__ = ["MONEY_CONTEXT", "Budget", "ModelPrice", "PricingTable", "Reservation"]

_PER = Decimal(1_000_000)


def _positive_int(name: str, value: object) -> int:
    if type(value) is not int or value < 1:  # bool, float and str are refused too
        raise ValidationFailed(name, f"must be an int of at least 1, got {value!r}")
    return value


def _amount(name: str, value: object) -> Decimal:
    """A finite, non-negative Decimal (or int) amount of USD."""
    if isinstance(value, bool) or not isinstance(value, Decimal | int):  # a float is refused
        raise ValidationFailed(name, f"give a Decimal (money holds no floats), not {value!r}")
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0:
        raise ValidationFailed(name, f"must be a finite amount of at least 0, got {amount:f}")
    return amount


class ModelPrice(BaseModel):
    """One model's prices in USD per 1M tokens.

    ``reasoning_per_mtok`` defaults to the output price (OpenAI and Anthropic both bill
    reasoning as output); ``cache_write_per_mtok`` defaults to the input price and
    ``cache_write_long_per_mtok`` (writes for the longer retention: Anthropic's 1-hour
    cache) to the cache-write price. Anthropic bills cache writes at a premium, 1.25x the
    input price for 5 minutes and 2x for 1 hour: give both when that matters.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok: Money
    cached_input_per_mtok: Money
    output_per_mtok: Money
    reasoning_per_mtok: Money | None = None
    cache_write_per_mtok: Money | None = None
    cache_write_long_per_mtok: Money | None = None

    @property
    def reasoning_rate(self) -> Decimal:
        return self.output_per_mtok if self.reasoning_per_mtok is None else self.reasoning_per_mtok

    @property
    def cache_write_rate(self) -> Decimal:
        if self.cache_write_per_mtok is None:
            return self.input_per_mtok
        return self.cache_write_per_mtok

    @property
    def cache_write_long_rate(self) -> Decimal:
        if self.cache_write_long_per_mtok is None:
            return self.cache_write_rate
        return self.cache_write_long_per_mtok

    def cost(self, usage: TokenUsage) -> Decimal:
        """The exact cost of ``usage`` (cached ⊆ input, reasoning ⊆ output, long cache
        writes ⊆ cache writes)."""
        plain_in = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_input_tokens
        short_writes = usage.cache_write_input_tokens - usage.cache_write_long_input_tokens
        plain_out = usage.output_tokens - usage.reasoning_tokens
        with localcontext(MONEY_CONTEXT):
            micro = (
                plain_in * self.input_per_mtok
                + usage.cached_input_tokens * self.cached_input_per_mtok
                + short_writes * self.cache_write_rate
                + usage.cache_write_long_input_tokens * self.cache_write_long_rate
                + plain_out * self.output_per_mtok
                + usage.reasoning_tokens * self.reasoning_rate
            )
            return micro / _PER


class PricingTable:
    """Prices per model name, and the token estimate used before a call.

    Args:
        prices: model name → :class:`ModelPrice`.
        bytes_per_token: how many prompt bytes to assume per token when estimating. The
            default (3) over-estimates English and code for current tokenizers on purpose:
            the estimate is a reservation, and reserving too little lets an attempt overrun.

    Raises:
        ValidationFailed: a name that is not a non-empty ``str``, a price that is not a
            :class:`ModelPrice`, or a ``bytes_per_token`` that is not an int of at least 1.
    """

    def __init__(self, prices: Mapping[str, ModelPrice], *, bytes_per_token: int = 3) -> None:
        self.bytes_per_token = _positive_int("bytes_per_token", bytes_per_token)
        if not isinstance(prices, Mapping):
            raise ValidationFailed(
                "prices", f"a mapping of model names, not {type(prices).__name__}"
            )
        for name, price in prices.items():
            if not isinstance(name, str) or not name:
                raise ValidationFailed("prices", f"a model name is a non-empty str, not {name!r}")
            if not isinstance(price, ModelPrice):
                raise ValidationFailed(
                    "prices", f"the price of {name!r} is a {type(price).__name__}, not a ModelPrice"
                )
        self._prices = MappingProxyType(dict(prices))

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self._prices)

    def price(self, model: str) -> ModelPrice:
        """The model's prices.

        Raises:
            ConfigError: the model is not in the table (an unpriced call is never made).
        """
        try:
            return self._prices[model]
        except KeyError:
            raise ConfigError(f"no price for model {model!r}; add it to the PricingTable") from None

    def estimate_input_tokens(self, prompt: str) -> int:
        return math.ceil(len(prompt.encode("utf-8")) / self.bytes_per_token)

    def estimate(self, model: str, prompt: str, *, max_tokens: int) -> Decimal:
        """An upper-bound-minded estimate: no cache discount, every input token at the
        dearest of the input and cache-write rates (a prompt may be written to the cache in
        full, at a premium, for the longer retention too), every output token at the dearer
        of the output and reasoning rates."""
        price = self.price(model)
        in_rate = max(price.input_per_mtok, price.cache_write_rate, price.cache_write_long_rate)
        out_rate = max(price.output_per_mtok, price.reasoning_rate)
        tokens_in = self.estimate_input_tokens(prompt)
        with localcontext(MONEY_CONTEXT):
            return (tokens_in * in_rate + max_tokens * out_rate) / _PER

    def cost(self, model: str, usage: TokenUsage) -> Decimal:
        return self.price(model).cost(usage)


@dataclass(frozen=True, slots=True)
class Reservation:
    """A precharge held against the budget until it is reconciled."""

    number: int
    amount: Decimal


class Budget:
    """A spending limit shared by the attempts of one workflow (or more).

    Thread-safe: parallel attempts may share one budget, which is why estimates are
    reserved before a call rather than merely checked.

    Args:
        limit_usd: the most that may be spent in total.
        max_output_tokens: the ``max_tokens`` each model call is made with; also the output
            side of every estimate, so it bounds what one call can cost.

    Raises:
        ValidationFailed: the limit is not a finite, non-negative ``Decimal`` or int (a
            float, NaN or infinity), or ``max_output_tokens`` is not an int of at least 1.
    """

    def __init__(
        self,
        limit_usd: Decimal | int,
        *,
        max_output_tokens: int = 2048,
    ) -> None:
        self.limit_usd = _amount("limit_usd", limit_usd)
        self.max_output_tokens = _positive_int("max_output_tokens", max_output_tokens)
        self._lock = threading.Lock()
        self._spent = Decimal(0)
        self._reserved: dict[int, Decimal] = {}
        self._next = 0

    @property
    def spent_usd(self) -> Decimal:
        with self._lock:
            return self._spent

    @property
    def reserved_usd(self) -> Decimal:
        """What precharges hold right now, not yet reconciled (0 when no call is in flight)."""
        with self._lock, localcontext(MONEY_CONTEXT):
            return sum(self._reserved.values(), Decimal(0))

    @property
    def available_usd(self) -> Decimal:
        """Limit minus what was spent and what is reserved; negative after an overrun."""
        with self._lock, localcontext(MONEY_CONTEXT):
            return self._available()

    def _available(self) -> Decimal:
        return self.limit_usd - self._spent - sum(self._reserved.values(), Decimal(0))

    def precheck(self, estimate: Decimal) -> bool:
        """Whether ``estimate`` fits now. A zero estimate always fits: free work (a recipe)
        is never refused for money.

        Raises:
            ValidationFailed: ``estimate`` is not a finite, non-negative amount.
        """
        amount = _amount("estimate", estimate)
        with self._lock, localcontext(MONEY_CONTEXT):
            return amount == 0 or amount <= self._available()

    def precharge(self, estimate: Decimal) -> Reservation:
        """Reserve ``estimate``; a zero estimate always fits, as at :meth:`precheck`.

        Raises:
            BudgetExceeded: it no longer fits (another attempt reserved first).
            ValidationFailed: ``estimate`` is not a finite, non-negative amount.
        """
        amount = _amount("estimate", estimate)
        with self._lock, localcontext(MONEY_CONTEXT):
            if amount > 0 and amount > self._available():
                raise BudgetExceeded(
                    f"estimate {amount:f} USD exceeds the {self._available():f} USD available"
                )
            self._next += 1
            self._reserved[self._next] = amount
            return Reservation(self._next, amount)

    def reconcile(self, reservation: Reservation, actual: Decimal) -> Decimal:
        """Settle a reservation at the real cost; returns what remains (may be negative).

        Raises:
            ValidationFailed: the reservation was already settled, or ``actual`` is not a
                finite, non-negative amount (the reservation is then still held).
        """
        amount = _amount("actual", actual)
        with self._lock, localcontext(MONEY_CONTEXT):
            if self._reserved.pop(reservation.number, None) is None:
                raise ValidationFailed("reservation", "already reconciled")
            self._spent += amount
            return self._available()
