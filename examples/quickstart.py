"""Record a run, sign it, verify it, and prove one event, in a temporary directory.

Run: .venv/bin/python examples/quickstart.py
"""

from __future__ import annotations

import tempfile
from decimal import Decimal
from pathlib import Path

from tracebound import Ledger, NoteSigner, RandomIds, SQLiteStore, SystemClock, verify_bundle
from tracebound.events.catalog import CostIncurred, CostSource, MergeOutcome
from tracebound.store.witness import FileWitness


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="tracebound-quickstart-"))
    signer = NoteSigner("quickstart", bytes(32))  # real use: store.keyfile.load_signer(path)
    ledger = Ledger(
        SQLiteStore(work / "store"),
        clock=SystemClock(),
        ids=RandomIds(),
        signer=signer,
        witness=FileWitness(work / "witness" / "quickstart.note"),
        origin="example.com/quickstart",
    )
    with ledger:
        ledger.record(
            "run-1",
            [
                CostIncurred(
                    tier="direct", amount_usd=Decimal("0.0213"), source=CostSource("openai")
                )
            ],
            workflow_id="wf-1",
        )
        ledger.record(
            "run-1",
            [MergeOutcome(pr_url="https://git.example/pr/1", decision="merged", reviewer=None)],
            workflow_id="wf-1",
        )
        checkpoint = ledger.checkpoint()
        report = ledger.verify()
        bundle = ledger.prove(2)
    verify_bundle(bundle, signer.verifier)
    print(
        f"ledger in {work}: {report.size} events, verified={report.ok}, "
        f"signed root {checkpoint.root.hex()[:16]}…, proof of position 2 checks out"
    )


if __name__ == "__main__":
    main()
