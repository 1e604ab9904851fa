"""Shared pieces for pipeline tests: a real ledger, blobs, policy and a TPC builder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.pipeline.codeowners import CodeOwners
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner
from tracebound.pipeline.validations import ValidationRegistry
from tracebound.store.blobs import FileBlobStore
from tracebound.store.port import LedgerStore
from tracebound.store.witness import FileWitness

POLICY: dict[str, Any] = {
    "version": 1,
    "gate": {"sensitive_paths": ["requirements*.txt", ".github/**"]},
    "scopes": {
        "allowed": ["read", "write"],
        "Executor": ["read"],
        "after_approval": {"Executor": ["read", "write"]},
    },
}
CODEOWNERS = "*            @team-platform\nrequirements.txt  @alice @bob\n"
SECRET = "ghp_" + "Z" * 36  # a GitHub-token-shaped fake


def tpc(role: str, **overrides: Any) -> dict[str, Any]:
    artifact: dict[str, Any] = {
        "role": role,
        "goal": "upgrade urllib3 past the advisory",
        "input_refs": [],
        "assumptions": [],
        "constraints": [],
        "actions": ["analyse the advisory"],
        "outputs": {"summary": f"{role} done", "artifacts": []},
        "diffs": [],
        "tests_run": [],
        "confidence": 8000,
        "risks": [],
        "cost_est": {"prompt_tokens": 1200, "compute_usd_est": "0.02"},
        "latency_est": {"p50_ms": 800, "p95_ms": 1500},
        "required_validations": [],
        "handoff_envelope": {
            "assumptions": ["the repository builds"],
            "constraints": ["paths:src/**,requirements.txt", "no-exec"],
            "required_validations": ["schema-validation"],
            "minimal_diff": "bump one pin",
        },
    }
    artifact.update(overrides)
    return artifact


def diff(path: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n-old\n+new\n"


@dataclass
class Kit:
    root: Path

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    def ledger(self, store: LedgerStore | None = None) -> Ledger:
        """The kit's ledger: a SQLite file under the root, or ``store`` (PostgreSQL)."""
        return Ledger(
            SQLiteStore(self.store_dir) if store is None else store,
            clock=FixedClock(),
            ids=SequentialIds(namespace=3),
            signer=NoteSigner("kit", bytes(32)),
            witness=FileWitness(self.root / "witness" / "kit.note", origin="test.example/kit"),
            origin="test.example/kit",
        )

    def runner(
        self, ledger: Ledger | None = None, validations: ValidationRegistry | None = None
    ) -> Runner:
        return Runner(
            ledger or self.ledger(),
            blobs=FileBlobStore(self.root / "blobs"),
            policy=Policy.from_dict(POLICY),
            redactor=Redactor(b"test-redaction-key-0123"),
            validations=validations,
            codeowners=CodeOwners.parse(CODEOWNERS),
            workspace=self.root,
        )
