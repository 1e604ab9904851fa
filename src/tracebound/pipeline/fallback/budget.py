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
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict

from tracebound.errors import BudgetExceeded, ConfigError, ValidationFailed
from tracebound.events.anchor import Money
from tracebound.pipeline.fallback.leaf import TokenUsage

__all__ = ["Budget", "ModelPrice", "PricingTable", "Reservation"]

_PER = Decimal(1_000_000)


class ModelPrice(BaseModel):
    """One model's prices in USD per 1M tokens.

    ``reasoning_per_mtok`` defaults to the output price (OpenAI and Anthropic both bill
    reasoning as output); ``cache_write_per_mtok`` defaults to the input price (Anthropic
    bills cache writes at a premium: give it when that matters).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok: Money
    cached_input_per_mtok: Money
    output_per_mtok: Money
    reasoning_per_mtok: Money | None = None
    cache_write_per_mtok: Money | None = None

    def cost(self, usage: TokenUsage) -> Decimal:
        """The exact cost of ``usage`` (cached ⊆ input, reasoning ⊆ output)."""
        plain_in = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_input_tokens
        plain_out = usage.output_tokens - usage.reasoning_tokens
        reasoning = (
            self.reasoning_per_mtok if self.reasoning_per_mtok is not None else self.output_per_mtok
        )
        write = (
            self.cache_write_per_mtok
            if self.cache_write_per_mtok is not None
            else self.input_per_mtok
        )
        micro = (
            plain_in * self.input_per_mtok
            + usage.cached_input_tokens * self.cached_input_per_mtok
            + usage.cache_write_input_tokens * write
            + plain_out * self.output_per_mtok
            + usage.reasoning_tokens * reasoning
        )
        return micro / _PER


class PricingTable:
    """Prices per model name, and the token estimate used before a call.

    Args:
        prices: model name → :class:`ModelPrice`.
        bytes_per_token: how many prompt bytes to assume per token when estimating. The
            default (3) over-estimates English and code for current tokenizers on purpose:
            the estimate is a reservation, and reserving too little lets an attempt overrun.
    """

    def __init__(self, prices: Mapping[str, ModelPrice], *, bytes_per_token: int = 3) -> None:
        if bytes_per_token < 1:
            raise ValidationFailed("bytes_per_token", "must be at least 1")
        self._prices = MappingProxyType(dict(prices))
        self.bytes_per_token = bytes_per_token

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
        """An upper-bound-minded estimate: no cache discount, every output token at the
        dearer of the output and reasoning rates."""
        price = self.price(model)
        out_rate = max(price.output_per_mtok, price.reasoning_per_mtok or Decimal(0))
        tokens_in = self.estimate_input_tokens(prompt)
        return (tokens_in * price.input_per_mtok + max_tokens * out_rate) / _PER

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
    """

    def __init__(
        self,
        limit_usd: Decimal | int,
        *,
        max_output_tokens: int = 2048,
    ) -> None:
        if type(limit_usd) not in {Decimal, int}:  # a float or bool is refused at run time
            raise ValidationFailed("limit_usd", "give a Decimal (money holds no floats)")
        if limit_usd < 0:
            raise ValidationFailed("limit_usd", "a budget cannot be negative")
        if max_output_tokens < 1:
            raise ValidationFailed("max_output_tokens", "must be at least 1")
        self.limit_usd = Decimal(limit_usd)
        self.max_output_tokens = max_output_tokens
        self._lock = threading.Lock()
        self._spent = Decimal(0)
        self._reserved: dict[int, Decimal] = {}
        self._next = 0

    @property
    def spent_usd(self) -> Decimal:
        with self._lock:
            return self._spent

    @property
    def available_usd(self) -> Decimal:
        """Limit minus what was spent and what is reserved; negative after an overrun."""
        with self._lock:
            return self._available()

    def _available(self) -> Decimal:
        return self.limit_usd - self._spent - sum(self._reserved.values(), Decimal(0))

    def precheck(self, estimate: Decimal) -> bool:
        """Whether ``estimate`` fits now. A zero estimate always fits: free work (a recipe)
        is never refused for money."""
        with self._lock:
            return estimate == 0 or estimate <= self._available()

    def precharge(self, estimate: Decimal) -> Reservation:
        """Reserve ``estimate``.

        Raises:
            BudgetExceeded: it no longer fits (another attempt reserved first).
        """
        with self._lock:
            if estimate > self._available():
                raise BudgetExceeded(
                    f"estimate {estimate} USD exceeds the {self._available()} USD available"
                )
            self._next += 1
            self._reserved[self._next] = estimate
            return Reservation(self._next, estimate)

    def reconcile(self, reservation: Reservation, actual: Decimal) -> Decimal:
        """Settle a reservation at the real cost; returns what remains (may be negative).

        Raises:
            ValidationFailed: the reservation was already settled.
        """
        with self._lock:
            if self._reserved.pop(reservation.number, None) is None:
                raise ValidationFailed("reservation", "already reconciled")
            self._spent += actual
            return self._available()
