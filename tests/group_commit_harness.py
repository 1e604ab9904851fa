"""SIGKILL a process that appends through group commit, then check every ack survived.

The child (a real interpreter, ``python -m tests.group_commit_harness URL SIDE THREADS``)
opens the store by URL, wraps it in a :class:`GroupCommitter` and runs ``THREADS`` threads,
each appending one event at a time to its own stream and to a shared stream (with an
expected version, so conflicts happen inside groups). Right after each append is
acknowledged the thread writes ``{"id": …, "position": …}`` to the side file: one
``write`` on an ``O_APPEND`` descriptor, which a SIGKILL cannot tear or lose (it is in the
page cache when ``write`` returns). The parent kills the child once enough acks are in,
so the kill lands while groups are being committed and acknowledged, then checks the
store exactly as the kill left it. Modelled on ``tests/crash_harness.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, cast
from uuid import UUID


def _event_id(thread: int, n: int) -> UUID:
    return UUID(int=(thread + 1) << 64 | n)


def child_main(url: str, side: str, threads: int) -> None:
    """Append until killed (runs in the child process)."""
    import threading

    from tracebound.errors import ConcurrencyConflict
    from tracebound.events.catalog import CostIncurred, CostSource
    from tracebound.events.envelope import Event
    from tracebound.store.group_commit import GroupCommitBackend, GroupCommitter
    from tracebound.store.url import open_store

    # The harness is run with SQLite, JSONL or PostgreSQL URLs: all group-commit backends.
    committer: GroupCommitter[Any] = GroupCommitter(cast(GroupCommitBackend[Any], open_store(url)))
    fd = os.open(side, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    t0 = datetime(2026, 6, 1, tzinfo=UTC)

    def work(thread: int) -> None:
        n = 0
        while True:
            n += 1
            shared = n % 3 == 0
            event = Event.create(
                CostIncurred(
                    tier="direct", amount_usd=Decimal(n) / 10_000, source=CostSource(f"t{thread}")
                ),
                event_id=_event_id(thread, n),
                timestamp=t0 + timedelta(microseconds=n),
                workflow_id="wf",
            )
            if shared:
                head = committer.stream_head("shared")
                expected = 0 if head is None else head.version
                try:
                    (rec,) = committer.append("shared", [event], expected_version=expected)
                except ConcurrencyConflict:
                    continue
            else:
                (rec,) = committer.append(f"own-{thread}", [event])
            line = json.dumps({"id": str(rec.event_id), "position": rec.position})
            os.write(fd, line.encode() + b"\n")

    for i in range(threads):
        threading.Thread(target=work, args=(i,), daemon=True).start()
    while True:
        time.sleep(3600)


@dataclass
class KillResult:
    acked: dict[str, int] = field(default_factory=dict)  # event id -> acknowledged position
    stderr: str = ""


def run_and_kill(url: str, side: Path, *, threads: int = 8, acks: int = 300) -> KillResult:
    """Start the child, wait for ``acks`` acknowledgements, SIGKILL it, read the acks."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.group_commit_harness", url, str(side), str(threads)],
        cwd=root,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if side.exists() and side.read_bytes().count(b"\n") >= acks:
                break
            time.sleep(0.01)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)  # mid-stream: groups are committing right now
    finally:
        proc.wait(timeout=60)
        stderr = proc.stderr.read() if proc.stderr is not None else ""
        if proc.stderr is not None:
            proc.stderr.close()
    result = KillResult(stderr=stderr)
    data = side.read_bytes() if side.exists() else b""
    for line in data.split(b"\n")[:-1]:  # a write is whole or absent; never torn by SIGKILL
        d = json.loads(line)
        result.acked[d["id"]] = d["position"]
    return result


if __name__ == "__main__":
    child_main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
