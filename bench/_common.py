"""Shared bench helpers: the ~1 KB event, machine facts, tables and JSON output."""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
from collections.abc import Sequence
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from typing import Any

from bench._regime import regime
from tracebound.events.catalog import CostIncurred, CostSource
from tracebound.ids import StepId

# A few hundred bytes of strings, so that the canonical record (envelope + ledger fields +
# payload) is about 1 KB: the size of a realistic LLM-pipeline cost event with a long
# step id and source description. (cost_incurred v2's two cache-write keys, null here, took
# 69 bytes; the model name gave them back, so records stay ~1,050 B as the peer's ~1,070.)
_SOURCE = "llm:openai/chat.completions;" + "region=eu-west-1;deployment=prod-remediation;" * 4
_MODEL = "gpt-4o-2024-08-06+" + "fine-tuned:org-remediation:pipeline-v7:" + "ft:abc"
_STEP = "run-7f3a9c2e/plan/attempt-2/" + "step-implementer-patch-src-payments-ledger-py-" * 3


def cost_payload(i: int) -> CostIncurred:
    """The benchmark event's payload (i varies the amounts, so records differ)."""
    return CostIncurred(
        tier="direct",
        amount_usd=Decimal(f"0.{i % 1000000:06d}"),
        source=CostSource(_SOURCE),
        tokens_in=12873 + i % 997,
        tokens_out=1894,
        cached_input_tokens=4096,
        reasoning_tokens=512,
        model=_MODEL,
        role="Executor",
        step_id=StepId(_STEP + str(i)),
    )


# tracebound's record also carries its envelope and ledger fields (event id, type, stream,
# version, position, previous hash in hex, schema version); eventsourcing keeps most of those
# in columns of its own. This string brings the peer's stored JSON to the same ~1 KB
# (352: 280 before the model name above gave cost_incurred v2's keys their 72 bytes back).
_PEER_CONTEXT = "x" * 352


def peer_fields(i: int) -> dict[str, Any]:
    """The same information as plain attributes, for the eventsourcing aggregate event."""
    return {
        "context": _PEER_CONTEXT,
        "tier": "direct",
        "amount_usd": f"0.{i % 1000000:06d}",
        "source": _SOURCE,
        "tokens_in": 12873 + i % 997,
        "tokens_out": 1894,
        "cached_input_tokens": 4096,
        "reasoning_tokens": 512,
        "model": _MODEL,
        "role": "Executor",
        "step_id": _STEP + str(i),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(directory: Path | None = None) -> dict[str, Any]:
    """What the numbers were measured on: the hardware and software, then the regime.

    The regime (``bench._regime``: wake-up cost, fsync latency and its CPU, two-process
    scaling, load) is probed here, so call this before a bench's own work starts;
    ``directory`` is where the bench writes, so that fsync is timed on that disk.
    """
    try:
        es_version = metadata.version("eventsourcing")
    except metadata.PackageNotFoundError:
        es_version = "not installed"
    try:
        from tracebound import canonical  # noqa: PLC0415 - only for the report

        accel = str(getattr(canonical, "_IMPLEMENTATION", "python"))
    except ImportError:
        accel = "unknown"
    try:
        from tracebound.integrity import _kernel  # noqa: PLC0415 - only for the report

        k = _kernel.KERNEL
        levels = ["portable", "sse4.1", "avx2", "avx2+avx512vl rotates"]
        kernel = (
            "not built or switched off"
            if k is None
            else f"blake3 {levels[k.blake3_levels()[0]]}, sha-ni {k.sha_levels()[0]}"
        )
    except ImportError:
        kernel = "unknown"
    return {
        "nproc": os.cpu_count(),
        "verify_kernel": kernel,
        "cpu": _cpu_model(),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "eventsourcing": es_version,
        "canonical": accel,
        "platform": platform.platform(),
        **regime(directory),
    }


def show_machine(info: dict[str, Any]) -> None:
    """Print :func:`machine`'s facts and regime, so a run without ``--json`` keeps them."""
    print_table("Machine", ["what", "value"], [[k, v] for k, v in info.items()])


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain-text table (rich is optional for a bench; plain text pastes into Markdown)."""
    cells = [[str(c) for c in columns]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    print(f"\n{title}")
    print("  ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return "" if v is None else str(v)


def write_json(path: str | None, results: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        print(f"\nwrote {path}")
