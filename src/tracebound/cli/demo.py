"""`tracebound demo`: a small pipeline run, recorded, signed, verified, then tampered.

It shows the promise in one minute: a run is written to the ledger, a checkpoint is signed
and handed to the witness, `verify` agrees with everything, and a copy of the store with one
changed dollar amount is caught at the exact position.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tracebound.cli._tables import fit
from tracebound.errors import ConfigError
from tracebound.events.catalog import (
    CostIncurred,
    LeafInvoked,
    LeafReturned,
    MergeOutcome,
    PluginResolved,
    RetryRequested,
    StepRecorded,
    TrustGateFailed,
    TrustGatePassed,
)
from tracebound.events.envelope import Payload
from tracebound.ledger import Ledger
from tracebound.store.keyfile import generate_keypair, load_signer
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import FileWitness
from tracebound.system import RandomIds, SystemClock

__all__ = ["run_demo"]

ORIGIN = "tracebound.demo/pipeline"
WORKFLOW = "wf-demo-0001"
DEMO_COST = "0.0231"  # the first recorded cost; the tampered copy raises it tenfold


def _script(ledger: Ledger) -> list[tuple[str, Payload]]:
    """The run: plan, a failing attempt, a retry that passes, review, merge.

    Payloads are built from plain JSON-like data with ``model_validate``, as they would
    arrive from an agent framework; validation turns the strings into typed ids.
    """
    now = ledger.clock.now()
    attempt_1, attempt_2 = str(ledger.ids.new_id()), str(ledger.ids.new_id())
    digest = "sha256:" + "ab" * 32

    def step(step_id: str, role: str, status: str, parent: str | None, ms: int) -> Payload:
        return StepRecorded.model_validate(
            {
                "run_id": "run-demo-0001",
                "step_id": step_id,
                "parent_step_id": parent,
                "role": role,
                "timestamp_start": now,
                "timestamp_end": now + timedelta(milliseconds=ms),
                "duration_ms": ms,
                "artifact_hash": digest,
                "status": status,
                "error_origin": step_id if status == "error" else None,
                "cost_est": {"prompt_tokens": 1200, "compute_usd_est": "0.02"},
                "latency_ms": ms,
                "validations": {"ran": ["schema-validation"]},
                "storage": "db",
            }
        )

    def leaf(
        attempt: str, index: int, tokens: tuple[int, int, int, int], digest_byte: str
    ) -> Payload:
        return LeafReturned.model_validate(
            {
                "attempt_id": attempt,
                "attempt_index": index,
                "model": "gpt-demo",
                "response_digest_blake3": digest_byte * 32,
                "tokens_in": tokens[0],
                "tokens_out": tokens[1],
                "cached_input_tokens": tokens[2],
                "reasoning_tokens": tokens[3],
            }
        )

    def cost(amount: str, tokens: tuple[int, int, int, int]) -> Payload:
        return CostIncurred.model_validate(
            {
                "tier": "direct",
                "amount_usd": amount,
                "source": "llm",
                "model": "gpt-demo",
                "role": "Executor",
                "tokens_in": tokens[0],
                "tokens_out": tokens[1],
                "cached_input_tokens": tokens[2],
                "reasoning_tokens": tokens[3],
            }
        )

    first, second = (1800, 420, 1024, 128), (2300, 510, 1536, 256)
    return [
        ("run-demo/planner", step("plan-1", "Planner", "success", None, 640)),
        (
            "run-demo/planner",
            PluginResolved.model_validate(
                {
                    "plugin_id": "python-deps",
                    "extends_chain": ["generic"],
                    "matched_scope": "pyproject",
                    "fallback_used": False,
                }
            ),
        ),
        (
            "run-demo/attempts",
            LeafInvoked.model_validate(
                {
                    "attempt_id": attempt_1,
                    "attempt_index": 0,
                    "model": "gpt-demo",
                    "prompt_digest_blake3": "1f" * 32,
                }
            ),
        ),
        ("run-demo/attempts", leaf(attempt_1, 0, first, "2e")),
        ("run-demo/costs", cost(DEMO_COST, first)),
        ("run-demo/executor", step("exec-1", "Executor", "error", "plan-1", 2100)),
        (
            "run-demo/gates",
            TrustGateFailed.model_validate(
                {
                    "gate": "tests",
                    "failing_signals": ["test_upgrade_keeps_api"],
                    "score": 4200,
                    "retry_count": 0,
                }
            ),
        ),
        (
            "run-demo/attempts",
            RetryRequested.model_validate(
                {
                    "attempt_id": attempt_1,
                    "attempt_index": 0,
                    "gate": "tests",
                    "sandbox_run_id": "sbx-1",
                    "failing_signals": ["test_upgrade_keeps_api"],
                    "summary_pointer": digest,
                }
            ),
        ),
        ("run-demo/attempts", leaf(attempt_2, 1, second, "3d")),
        ("run-demo/costs", cost("0.0274", second)),
        ("run-demo/executor", step("exec-2", "Executor", "success", "plan-1", 1900)),
        (
            "run-demo/gates",
            TrustGatePassed.model_validate(
                {"gate": "tests", "signals": {"tests": "pass"}, "score": 9600}
            ),
        ),
        ("run-demo/critic", step("critic-1", "Critic", "success", "exec-2", 450)),
        (
            "run-demo/merge",
            MergeOutcome.model_validate(
                {
                    "pr_url": "https://git.example/demo/pull/1",
                    "decision": "merged",
                    "reviewer": "alice",
                }
            ),
        ),
    ]


def _tamper(store_dir: Path) -> int:
    """Raise the first recorded cost tenfold, as someone editing the file would."""
    conn = sqlite3.connect(store_dir / "ledger.db")
    with conn:
        (position,) = conn.execute(
            "SELECT MIN(position) FROM events WHERE event_type = 'cost_incurred'"
        ).fetchone()
        conn.execute(
            "UPDATE events SET body = CAST(replace(CAST(body AS TEXT), "
            '\'"amount_usd":"0.0231"\', \'"amount_usd":"0.2310"\') AS BLOB) '
            "WHERE position = ?",
            (position,),
        )
    conn.close()
    return int(position)


def _check_demo_store(path: Path) -> None:
    """Refuse to go on if ``path`` exists and is not a store an earlier demo wrote.

    The demo replaces ``store/`` and ``store-tampered/`` in its folder; `--dir .` in a
    project with a ``store/`` package must not delete it.
    """
    if not path.exists() and not path.is_symlink():
        return
    ours = path.is_dir() and not path.is_symlink()
    if ours:
        names = {p.name for p in path.iterdir()}
        ours = "ledger.db" in names and all(n.startswith("ledger.db") for n in names)
    if ours:
        try:
            uri = f"{(path / 'ledger.db').resolve().as_uri()}?mode=ro"
            with closing(sqlite3.connect(uri, uri=True)) as db:
                row = db.execute("SELECT value FROM meta WHERE key = 'origin'").fetchone()
        except sqlite3.Error:
            row = None
        ours = row is not None and row[0] == ORIGIN
    if not ours:
        raise ConfigError(
            f"{path} exists and is not a store an earlier `tracebound demo` wrote; the demo "
            "replaces it, so give --dir an empty or new folder"
        )


def run_demo(workdir: Path | None, *, console: Console | None) -> dict[str, Any]:
    """Run the demo in ``workdir`` (a fresh temporary directory by default)."""
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="tracebound-demo-"))
    store_dir, key_path = root / "store", root / "keys" / "demo.key"
    witness_path = root / "witness" / "demo.note"
    tampered_dir = root / "store-tampered"
    for old in (store_dir, tampered_dir):  # a previous demo's, replaced; nothing else
        _check_demo_store(old)
    if store_dir.exists():
        shutil.rmtree(store_dir)
    if not key_path.exists():
        # force: a .pub a deleted demo.key left behind verifies nothing the demo keeps (its
        # store and witness are replaced just above and below), so it is not an orphan.
        generate_keypair("tracebound-demo", path=key_path, store_dir=store_dir, force=True)
    signer = load_signer(key_path, store_dir=store_dir)
    witness_path.unlink(missing_ok=True)

    def open_ledger(path: Path) -> Ledger:
        return Ledger(
            SQLiteStore(path),
            clock=SystemClock(),
            ids=RandomIds(),
            signer=signer,
            witness=FileWitness(witness_path, origin=ORIGIN),
            origin=ORIGIN,
        )

    with open_ledger(store_dir) as ledger:
        written = [
            ledger.record(stream, [payload], workflow_id=WORKFLOW)[0]
            for stream, payload in _script(ledger)
        ]
        checkpoint = ledger.checkpoint()
        report = ledger.verify()

    if tampered_dir.exists():
        shutil.rmtree(tampered_dir)
    shutil.copytree(store_dir, tampered_dir)
    changed = _tamper(tampered_dir)
    with open_ledger(tampered_dir) as ledger:
        tampered = ledger.verify()

    caught = tampered.damage is not None and tampered.damage.position == changed
    result = {
        "ok": report.ok and caught,
        "workdir": str(root),
        "events": len(written),
        "checkpoint": {"size": checkpoint.size, "root": checkpoint.root.hex()},
        "verify": report.as_dict(),
        "tampered": {"changed_position": changed, **tampered.as_dict()},
    }
    if console is not None:
        _show(console, written, result, tampered.damage is not None and caught)
    return result


def _show(console: Console, written: list[Any], result: dict[str, Any], caught: bool) -> None:
    table = Table(title=f"pipeline run {WORKFLOW}: {len(written)} events")
    for col in ("pos", "stream", "event", "hash"):
        table.add_column(col)
    for e in written:
        table.add_row(str(e.position), e.stream_id, e.event_type, e.hash.hex()[:16])
    fit(table, give={"stream": "ellipsis", "hash": "crop"}, console=console)
    console.print(table)
    cp = result["checkpoint"]
    console.print(
        f"Signed checkpoint over {cp['size']} events, root {cp['root'][:16]}…, "
        "handed to the witness."
    )
    status = "[bold green]OK[/]" if result["verify"]["ok"] else "[bold red]FAILED[/]"
    console.print(f"verify (original): {status}")
    damage = result["tampered"]["damage"] or {}
    console.print(
        f"verify (copy with one cost raised tenfold at position "
        f"{result['tampered']['changed_position']}): "
        + (
            f"[bold red]DAMAGED[/] {damage.get('kind')} at position {damage.get('position')}"
            if caught
            else "[bold red]NOT DETECTED[/]"
        )
    )
    console.print(f"Files are in [bold]{escape(result['workdir'])}[/] (store/, keys/, witness/).")
