"""Builders shared by the planning-side tests (tests/unit/fallback, tests/fence, tests/schema).

Everything here is real: a SQLite ledger in a temporary directory, a real repository
directory, the real tier. The only stand-ins are model providers, replaced either by the
recorded-response HTTP server on loopback or by ``ScriptedLeaf`` (an in-process double).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tracebound.integrations.llm import ScriptedLeaf
from tracebound.ledger import Ledger
from tracebound.pipeline.fallback import (
    Advisory,
    ApplyContext,
    Budget,
    FallbackTier,
    FenceWrapper,
    LLMLeaf,
    ModelPrice,
    PricingTable,
    RecipeBook,
    SolvedExampleStore,
)
from tracebound.pipeline.fallback.leaf import LeafResponse
from tracebound.pipeline.redaction import RedactionResult, Redactor
from tracebound.pipeline.retry.gates import CommandGate, GateRunner
from tracebound.pipeline.retry.loop import RetryLoop
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.blobs import FileBlobStore
from tracebound.store.sqlite import SQLiteStore

TESTS = Path(__file__).resolve().parents[1]
ADVISORY_FILE = TESTS / "unit" / "fallback" / "data" / "GHSA-x84v-xcm2-53pg.json"
LLM_FIXTURES = TESTS / "fixtures" / "llm"
INJECTION_CORPUS = TESTS / "fixtures" / "injection" / "corpus.txt"
REQUIREMENTS = "flask==2.0.1\nrequests==2.19.1\nurllib3==1.23\n"
T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)

PRICES = {
    model: ModelPrice(
        input_per_mtok=Decimal("1.10"),
        cached_input_per_mtok=Decimal("0.275"),
        output_per_mtok=Decimal("4.40"),
    )
    for model in ("o4-mini", "claude-sonnet-4", "scripted-model")
}


def llm_patch(version: str, *, fenced: bool = True) -> str:
    diff = (
        "--- a/requirements.txt\n+++ b/requirements.txt\n@@ -1,3 +1,3 @@\n flask==2.0.1\n"
        f"-requests==2.19.1\n+requests=={version}\n urllib3==1.23\n"
    )
    return f"```diff\n{diff}```\n" if fenced else diff


class InterruptedLeaf(ScriptedLeaf):
    """Ctrl-C (or SystemExit, or any ``exc``) lands while the model call is in flight."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__([])
        self.exc = exc

    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        raise self.exc


class PromptRedactorFails(Redactor):
    """A real redactor that raises ``exc`` on the ``prompt``-th model prompt (from 1): the
    tier fails before the attempt's first event, so that attempt is never anchored."""

    def __init__(self, exc: BaseException, *, prompt: int = 1) -> None:
        super().__init__(b"tracebound-test-redaction-key-01")
        self.exc = exc
        self.prompt = prompt
        self.prompts = 0

    def redact_text(self, text: str) -> RedactionResult[str]:
        if text.startswith("You are"):
            self.prompts += 1
            if self.prompts == self.prompt:
                raise self.exc
        return super().redact_text(text)


def advisory() -> Advisory:
    return Advisory.from_osv_json(ADVISORY_FILE.read_bytes())


def make_repo(root: Path, requirements: str = REQUIREMENTS) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "requirements.txt").write_text(requirements)
    return repo


def context(repo: Path, **kw: Any) -> ApplyContext:
    fields: dict[str, Any] = {
        "advisory": advisory(),
        "repo_path": repo,
        "package": "requests",
        "current_version": "2.19.1",
    }
    fields.update(kw)
    return ApplyContext(**fields)


@dataclass
class Kit:
    """A tier over a fresh ledger, with every collaborator reachable for assertions."""

    root: Path
    ledger: Ledger
    tier: FallbackTier
    budget: Budget
    fence: FenceWrapper
    store: SolvedExampleStore | None
    repo: Path
    closers: list[Callable[[], None]] = field(default_factory=list)

    def ctx(self, **kw: Any) -> ApplyContext:
        return context(self.repo, **kw)

    def kinds(self, workflow_id: str) -> list[str]:
        return [e.event_type for e in self.ledger.store.read_stream(f"attempts/{workflow_id}")]

    def events(self, workflow_id: str) -> list[Any]:
        return list(self.ledger.store.read_stream(f"attempts/{workflow_id}"))

    def retry_loop(
        self, gate: CommandGate, *, key: bytes, max_retries: int = 1, retrieval: bool = False
    ) -> RetryLoop:
        """A retry loop over this tier and one real gate subprocess, its blobs and gate
        evidence under ``<root>/.tracebound/blobs``."""
        blobs = self.root / ".tracebound" / "blobs"
        blobs.parent.mkdir(exist_ok=True)
        gates = GateRunner(
            [gate],
            ledger=self.ledger,
            redactor=Redactor(key),
            evidence=FileBlobStore(blobs),
            runs_root=self.tier.workdir,
        )
        return RetryLoop(
            self.tier,
            gates,
            ledger=self.ledger,
            fence=self.fence,
            blobs=FileBlobStore(blobs),
            retrieval=self.store if retrieval else None,
            max_retries=max_retries,
        )

    def close(self) -> None:
        for close in self.closers:
            close()
        self.ledger.close()


def make_kit(
    root: Path,
    *,
    leaf: LLMLeaf | None = None,
    recipes: RecipeBook | None = None,
    retrieval: bool = True,
    limit: Decimal = Decimal("5.00"),
    max_output_tokens: int = 2048,
    prices: dict[str, ModelPrice] | None = None,
    namespace: int = 0,
) -> Kit:
    ledger = Ledger(
        SQLiteStore(root / "ledger"),
        clock=FixedClock(start=T0),
        ids=SequentialIds(namespace=namespace),
    )
    fence = FenceWrapper(ledger.ids)
    budget = Budget(limit, max_output_tokens=max_output_tokens)
    store = SolvedExampleStore(root / "examples.db") if retrieval else None
    tier = FallbackTier(
        ledger=ledger,
        recipes=recipes if recipes is not None else RecipeBook(),
        retrieval=store,
        leaf=leaf,
        budget=budget,
        pricing=PricingTable(prices if prices is not None else PRICES),
        fence=fence,
        redactor=Redactor(b"tracebound-test-redaction-key-01"),
        workdir=root / ".tracebound" / "remediation",
    )
    kit = Kit(root, ledger, tier, budget, fence, store, make_repo(root))
    if store is not None:
        kit.closers.append(store.close)
    return kit


# --- no network, enforced ----------------------------------------------------------------


def _is_local(address: Any) -> bool:
    if isinstance(address, str | bytes):
        return True  # AF_UNIX path
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost would need DNS: not loopback


def guard_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuse any socket connection that is not loopback; returns the attempted addresses.

    Patched at ``socket.socket.connect``/``connect_ex`` and ``socket.create_connection``,
    the calls every Python HTTP stack ends in.
    """
    seen: list[Any] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_create = socket.create_connection

    def check(address: Any) -> None:
        seen.append(address)
        if not _is_local(address):
            raise ConnectionRefusedError(f"tests may not connect to {address!r}: loopback only")

    def connect(self: socket.socket, address: Any) -> None:
        check(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        check(address)
        return real_create(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return seen


def corpus() -> list[str]:
    """The injection corpus: one attack per line; ``\\n`` in a line is a newline."""
    # split("\n"), not splitlines(): U+2028 inside an attack is part of the attack.
    lines = INJECTION_CORPUS.read_text(encoding="utf-8").split("\n")
    return [raw.replace("\\n", "\n") for raw in lines if raw.strip() and not raw.startswith("#")]


__all__ = [
    "ADVISORY_FILE",
    "INJECTION_CORPUS",
    "LLM_FIXTURES",
    "PRICES",
    "REQUIREMENTS",
    "T0",
    "InterruptedLeaf",
    "Kit",
    "PromptRedactorFails",
    "advisory",
    "context",
    "corpus",
    "guard_network",
    "llm_patch",
    "make_kit",
    "make_repo",
]
