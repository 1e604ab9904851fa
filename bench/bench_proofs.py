"""Proofs and checkpoints on a big ledger: stored Merkle nodes against reading the log.

Usage::

    .venv/bin/python -m bench.bench_proofs [--events 1000000] [--new 1000] [--rounds 3]
                                           [--dir DIR] [--ledger KEEP] [--json PATH]

Setup (not timed): the SQLite ledger of ``bench.bench_verify`` (N ~1 KB events in
1000-event transactions, a signed checkpoint, a file witness); ``--ledger KEEP`` keeps it
in ``KEEP/<events>`` and reuses it. Each round then times, in this process, both ways in
the same minutes:

* **inclusion proof** (``Ledger.prove``) of a random position: from the stored nodes, and
  from the leaves only (``merkle_tree(use_stored=False)``, what every proof did before).
* **consistency proof** from the previous checkpoint's size to the current one (what a
  checkpoint hands the witness), both ways.
* **checkpoint** after appending ``--new`` events (durable, one transaction): incremental
  (the default: only the new events are read) and ``full=True`` (the whole log verified,
  as every checkpoint did before, and the stored nodes rebuilt). Incremental twice: the
  new events in one new stream, and each continuing another existing stream (every
  stream's signed head is then proven under the signed root, one inclusion proof each).
* **storing the nodes** of the whole log from scratch (``drop`` + ``store_nodes``): the
  one-time cost on a ledger written before this change, paid by its next checkpoint.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import cost_payload, machine, print_table, show_machine, write_json
from bench.bench_verify import STREAMS, _ledger, build
from tracebound.events.envelope import Event
from tracebound.ids import StreamId
from tracebound.integrity.merkle import consistency_proof, inclusion_proof, verify_consistency
from tracebound.ledger import Ledger, verify_bundle
from tracebound.store.port import AppendRequest, MerkleNodeStore
from tracebound.system import RandomIds, SystemClock


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _prove_from_leaves(ledger: Ledger, position: int) -> None:
    """``Ledger.prove``'s proof as it was made: every subtree computed from the leaves."""
    size = ledger.store.size()
    tree = ledger.merkle_tree(use_stored=False)
    inclusion_proof(position - 1, size, tree.subtree_root)


def one_round(ledger: Ledger, rng: random.Random, new: int, n: int) -> dict[str, float]:
    size = ledger.store.size()
    positions = [rng.randint(1, size) for _ in range(5)]
    stored = []
    for p in positions:
        seconds, bundle = _timed(lambda p=p: ledger.prove(p))
        assert ledger.verifier is not None
        verify_bundle(bundle, ledger.verifier)
        stored.append(seconds)
    leaves, _ = _timed(lambda: _prove_from_leaves(ledger, positions[0]))

    old = size - new if size > new else size // 2
    cons_stored, proof = _timed(lambda: ledger.consistency_proof(old, size))
    cons_leaves, slow = _timed(
        lambda: consistency_proof(old, size, ledger.merkle_tree(use_stored=False).subtree_root)
    )
    assert proof == slow
    tree = ledger.merkle_tree()
    verify_consistency(old, size, tree.subtree_root(0, old), tree.subtree_root(0, size), proof)

    payloads = [cost_payload(n + i) for i in range(new)]
    ledger.record("bench-new", payloads)
    incremental, run = _timed(ledger.checkpoint_run)
    assert run.incremental, run.full_reason
    # The same number of new events, each continuing another of the ledger's streams: a
    # checkpoint then proves every stream's signed head (one inclusion proof a stream).
    ids, clock = RandomIds(), SystemClock()
    requests = [
        AppendRequest(
            StreamId(f"run-{i % STREAMS:04d}"),
            [Event.create(cost_payload(n + i), event_id=ids.new_id(), timestamp=clock.now())],
        )
        for i in range(new)
    ]
    ledger.store.append_batch(requests)
    spread, run = _timed(ledger.checkpoint_run)
    assert run.incremental, run.full_reason
    ledger.record("bench-new", [cost_payload(n + new + i) for i in range(new)])
    full, again = _timed(lambda: ledger.checkpoint_run(full=True))
    assert not again.incremental
    return {
        "prove_stored_ms": _ms(statistics.median(stored)),
        "prove_leaves_ms": _ms(leaves),
        "consistency_stored_ms": _ms(cons_stored),
        "consistency_leaves_ms": _ms(cons_leaves),
        "checkpoint_incremental_ms": _ms(incremental),
        "checkpoint_incremental_streams_ms": _ms(spread),
        "checkpoint_full_ms": _ms(full),
    }


def run(events: int, new: int, rounds: int, directory: Path, keep: Path | None) -> dict[str, Any]:
    info = machine(directory)  # before the work: the regime as the bench found it
    show_machine(info)
    root = (keep / str(events)) if keep is not None else directory / "ledger"
    setup = None
    if not (root / "store").exists():
        setup = build(root, events)
    ledger = _ledger(root)
    try:
        store = ledger.store
        assert isinstance(store, MerkleNodeStore)
        store_seconds, _ = _timed(lambda: ledger.checkpoint_run(full=True))
        fill_seconds, added = _timed(
            lambda: ledger.store_nodes(
                store.size(), ledger.merkle_tree().subtree_root(0, store.size()), rebuild=True
            )
        )
        rng = random.Random(7)
        results = [one_round(ledger, rng, new, events + 3 * new * r) for r in range(rounds)]
        size = store.size()
    finally:
        ledger.close()
    medians = {k: statistics.median(r[k] for r in results) for k in results[0]}
    return {
        "machine": info,
        "events": events,
        "size_after": size,
        "new_per_checkpoint": new,
        "rounds": results,
        "median": medians,
        "nodes_stored": added,
        "store_nodes_from_scratch_s": round(fill_seconds, 3),
        "first_full_checkpoint_s": round(store_seconds, 3),
        "setup_s": None if setup is None else round(setup, 1),
    }


def report(results: dict[str, Any]) -> None:
    m = results["median"]
    spread_label = f"checkpoint after {results['new_per_checkpoint']} new events"
    rows = [
        ["inclusion proof (prove)", m["prove_stored_ms"], m["prove_leaves_ms"]],
        ["consistency proof", m["consistency_stored_ms"], m["consistency_leaves_ms"]],
        [
            spread_label,
            m["checkpoint_incremental_ms"],
            m["checkpoint_full_ms"],
        ],
        [
            f"{spread_label}, continuing {min(results['new_per_checkpoint'], STREAMS)} streams",
            m["checkpoint_incremental_streams_ms"],
            m["checkpoint_full_ms"],
        ],
    ]
    for row in rows:
        row.append(f"{row[2] / max(row[1], 0.001):.0f}x")
    print_table(
        f"Proofs and checkpoints, {results['events']:,}-event SQLite ledger (medians, ms)",
        ["operation", "stored nodes / incremental", "leaves / full", "ratio"],
        rows,
    )
    print(
        f"nodes stored: {results['nodes_stored']:,} "
        f"(from scratch in {results['store_nodes_from_scratch_s']} s)"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=1000, help="events appended per checkpoint")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument("--ledger", type=Path, default=None, help="keep/reuse ledgers here")
    parser.add_argument("--json", default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = run(args.events, args.new, args.rounds, Path(tmp), args.ledger)
    report(results)
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
