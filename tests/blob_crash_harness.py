"""Kill a process running traced steps with SIGKILL, then check every recorded step's artifact.

The child (a real interpreter started with ``subprocess``) runs pipelines in a loop on a
durable SQLite ledger (``synchronous=FULL``) with its blob store: the ledger's own file
(``sqlite``, ADR 0009) or blob files (``file``). Each step returns an artifact no other step
returns, so every put really writes. After each ``step_recorded`` is durable (the Runner's
``on_event`` hook) the child notes the artifact's digest in a side file ("ack").

The parent kills the child at a random moment, once it has acknowledged at least a few
steps, and then checks the store exactly as the kill left it:

* every acknowledged step is in the ledger;
* every step the ledger holds (acknowledged or not: its append may have committed just
  before the kill) names an artifact that is readable and matches its digest, and so does
  every run's inputs blob;
* the ledger's chain still verifies.

This file is also the child's script: ``python blob_crash_harness.py child DIR SIDE SEED KIND``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOB_KINDS = ("sqlite", "file")
_ROOT = Path(__file__).resolve().parents[1]
_STEPS = 4


def _stores(directory: Path, kind: str) -> tuple[Any, Any]:
    from tracebound.store.blobs import FileBlobStore
    from tracebound.store.sqlite import SQLiteStore
    from tracebound.store.sqlite_blobs import SQLiteBlobStore

    store = SQLiteStore(directory / "store", synchronous="FULL")
    blobs = SQLiteBlobStore(store) if kind == "sqlite" else FileBlobStore(directory / "blobs")
    return store, blobs


# -- the child ------------------------------------------------------------------------------


def child_main(directory: Path, side: Path, seed: int, kind: str) -> None:
    """Run traced steps until killed. Runs in the child; never returns on its own."""
    from tests.integration.pipeline_kit import POLICY, tpc
    from tracebound import Ledger, RandomIds, SystemClock
    from tracebound.events.catalog import StepRecorded
    from tracebound.events.envelope import RecordedEvent
    from tracebound.pipeline.policy import Policy
    from tracebound.pipeline.redaction import Redactor
    from tracebound.pipeline.runner import Runner
    from tracebound.pipeline.runtime import Pipeline, StepContext

    store, blobs = _stores(directory, kind)
    ledger = Ledger(store, clock=SystemClock(), ids=RandomIds(), origin="test.example/crash")
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def ack(event: RecordedEvent) -> None:
        if isinstance(event.payload, StepRecorded):
            os.write(fd, f"{event.payload.artifact_hash}\n".encode())

    pipe = Pipeline("crash", pipeline_type="test")
    for i in range(_STEPS):

        def step(ctx: StepContext, i: int = i) -> dict[str, Any]:
            # Unique per seed, run and step, and sometimes large: every put writes.
            note = f"seed {seed} run {ctx.inputs['run']} step {i} " * (1 + (i * 997) % 300)
            return tpc("Planner", goal=note[:4000], outputs={"summary": note, "artifacts": []})

        pipe.planner(name=f"s{i}")(step)
    runner = Runner(
        ledger,
        blobs=blobs,
        policy=Policy.from_dict(POLICY),
        redactor=Redactor(b"crash-harness-redaction-key-0123"),
        on_event=ack,
    )
    run = 0
    while True:
        run += 1
        runner.run(pipe, {"run": run})


# -- the parent -----------------------------------------------------------------------------


@dataclass
class Trial:
    kind: str
    seed: int
    acked: list[str] = field(default_factory=list)
    recorded: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _count(side: Path) -> int:
    try:
        return side.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_trial(kind: str, directory: Path, *, seed: int, timeout: float = 60.0) -> Trial:
    """Start a child, kill it with SIGKILL at a random moment, check what survived."""
    rng = random.Random(seed)
    side = directory / "acked.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), str(_ROOT / "src")])}
    child = subprocess.Popen(
        [sys.executable, __file__, "child", str(directory), str(side), str(seed), kind],
        cwd=_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # Let it acknowledge a few steps (a kill during start-up tests nothing), then kill
        # it anywhere: inside a put, between a put and its append, inside an append.
        wanted = 1 + rng.randrange(3 * _STEPS)
        deadline = time.monotonic() + timeout
        while _count(side) < wanted:
            if child.poll() is not None:
                raise AssertionError(f"the child died on its own: {child.stderr!r}")
            if time.monotonic() > deadline:
                raise AssertionError("the child acknowledged nothing in time")
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.03))
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        _, err = child.communicate()
    if child.returncode != -signal.SIGKILL:
        raise AssertionError(f"the child exited with {child.returncode}: {err.decode()[-2000:]}")
    trial = Trial(kind, seed, acked=side.read_text().split())
    check(trial, directory)
    return trial


def check(trial: Trial, directory: Path) -> None:
    """Everything the module docstring promises, on the store as the kill left it."""
    from tracebound import Ledger, RandomIds, SystemClock
    from tracebound.errors import TraceboundError
    from tracebound.events.catalog import RunStarted, StepRecorded

    store, blobs = _stores(directory, trial.kind)
    ledger = Ledger(store, clock=SystemClock(), ids=RandomIds(), origin="test.example/crash")
    try:
        recorded: list[str] = []
        for event in store.read_log():
            p = event.payload
            if isinstance(p, StepRecorded | RunStarted):
                digest = p.artifact_hash if isinstance(p, StepRecorded) else p.inputs_digest
                recorded.append(digest)
                try:
                    blobs.get(digest)  # checks the bytes against the digest
                except TraceboundError as exc:
                    trial.problems.append(f"position {event.position}: {exc}")
        trial.recorded = len(recorded)
        missing = set(trial.acked) - set(recorded)
        if missing:
            trial.problems.append(f"acknowledged steps not in the ledger: {sorted(missing)}")
        report = ledger.verify(require_signed=False, workers=1)
        if report.damage is not None:
            trial.problems.append(f"verify: {report.damage}")
    finally:
        ledger.close()
        if hasattr(blobs, "close"):
            blobs.close()


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    _, _, where, side_file, seed_text, blob_kind = sys.argv
    child_main(Path(where), Path(side_file), int(seed_text), blob_kind)
