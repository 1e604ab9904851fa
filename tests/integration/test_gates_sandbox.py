"""The gate sandbox's limits, for real: no network, a timeout, memory and file-size caps.

The network test listens on 127.0.0.1 in this process and has a gate try to connect.
Inside the sandbox's empty network namespace that must fail; the same gate without
isolation must succeed, which shows that the test itself can tell the two apart.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.retry.retry_kit import Kit, make_project, open_kit, plan
from tracebound.pipeline.retry.gates import CommandGate
from tracebound.pipeline.retry.sandbox import (
    NetworkIsolation,
    SandboxLimits,
    probe_network_isolation,
)

NO_ISOLATION = NetworkIsolation(available=False, method="none", prefix=(), detail="disabled")


def _py(name: str, code: str, timeout_s: float | None = None) -> CommandGate:
    return CommandGate(name, (sys.executable, "-c", code), timeout_s=timeout_s)


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    made = open_kit(tmp_path)
    yield made
    made.ledger.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts connections until the test ends."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_a_gate_cannot_reach_a_local_server(kit: Kit, project: Path, listener: int) -> None:
    dial = _py("dial", f"import socket; socket.create_connection(('127.0.0.1', {listener}), 5)")
    kit.begin(0)
    open_runner = kit.runner([dial], isolation=NO_ISOLATION)
    reachable = open_runner.verify(plan(0), target=project)
    assert reachable.passed, reachable.failing_signals  # the server is there to be reached
    assert reachable.confidence == "medium"  # and a pass without isolation says so

    isolation = probe_network_isolation()
    kit.begin(1)
    outcome = kit.runner([dial]).verify(plan(1), target=project)
    if isolation.available:
        assert not outcome.passed
        (sig,) = outcome.failing_signals
        assert (sig.gate, sig.kind, sig.message) == ("dial", "test_failure", "exit 1")
        assert outcome.confidence == "high"
    else:  # no namespaces on this machine: the gate ran, and the outcome records the gap
        assert outcome.confidence == "medium"
        assert "unshare" in isolation.detail


def test_a_gate_that_hangs_is_killed_with_its_children(
    kit: Kit, project: Path, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    kit.begin(0)
    outcome = kit.runner([_py("hang", code, timeout_s=2)]).verify(plan(0), target=project)
    (sig,) = outcome.failing_signals
    assert (sig.kind, sig.subject) == ("timeout", "hang")
    assert outcome.confidence == "low"
    child = int(pid_file.read_text())
    for _ in range(100):  # the kill is asynchronous; wait for the child to be gone
        status = Path(f"/proc/{child}/stat")
        if not status.exists() or status.read_text().split(") ")[1][0] in "ZX":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the gate's child {child} outlived the timeout")


def test_memory_and_file_size_limits(kit: Kit, project: Path) -> None:
    hog = _py("hog", "x = bytearray(1024 * 1024 * 1024)")
    spew = _py("spew", "import sys; sys.stdout.write('y' * (4 * 1024 * 1024)); sys.stdout.flush()")
    limits = SandboxLimits(timeout_s=60, memory_bytes=256 * 1024**2, file_bytes=1024**2)
    kit.begin(0)
    outcome = kit.runner([hog, spew], limits=limits).verify(plan(0), target=project)
    kinds = {(s.gate, s.kind) for s in outcome.failing_signals}
    assert ("hog", "resource_limit") in kinds
    assert ("spew", "resource_limit") in kinds
    hog_limit = next(s for s in outcome.failing_signals if s.gate == "hog")
    assert "memory" in hog_limit.message
    assert outcome.confidence == "low"
