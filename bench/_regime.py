"""The machine's regime at the start of a bench: what moves every number here by 2-3x.

This VM's results have swung by 2-3x between sessions on the same code (BENCHMARKS.md,
"Machine regimes"). Three properties of the moment explain most of it, and none of them
shows in ``nproc`` or the CPU model, so each bench records them next to its results:

* **wake-up round trip**: two threads handing a lock back and forth. Waking a thread whose
  vCPU is idle costs a trip through the hypervisor; measured at 11-48 us here, depending
  on whether the other vCPU was busy. Group commit with one-event appenders pays one wake
  per acknowledged append, so its rate follows this number.
* **fdatasync**: a 4 KB overwrite of an already written block, then ``fdatasync``: the
  floor of a durable single append, wall time and the CPU the kernel burns on it (on some
  days ~50 us of CPU per call). The peers' 1-event-per-save rates follow it, so the
  ratios of issues 2 and 3 move in opposite directions with it.
* **two-process scaling**: two CPU-bound processes against one. 1.95x on a quiet host,
  ~1.2x when neighbours share the cores; a parallel rebuild's gain is capped by it.

``python -m bench._regime [--dir DIR]`` prints them on their own (about two seconds).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_WAKE_ROUNDS = 2_000
_FSYNC_ROUNDS = 200
_BLOCK = b"\x5a" * 4096
_SPIN = 3_000_000


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wake_round_trip_us(rounds: int = _WAKE_ROUNDS) -> float:
    """Median microseconds for one thread to wake another and be woken back."""
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()
    times: list[float] = []

    def echo() -> None:
        for _ in range(rounds):
            ping.acquire()
            pong.release()

    other = threading.Thread(target=echo, daemon=True)
    other.start()
    for _ in range(rounds):
        start = time.perf_counter()
        ping.release()
        pong.acquire()
        times.append(time.perf_counter() - start)
    other.join()
    return statistics.median(times) * 1e6


def fdatasync_us(directory: Path, rounds: int = _FSYNC_ROUNDS) -> tuple[float, float, float]:
    """(median wall, p99 wall, mean CPU) microseconds of a 4 KB overwrite + ``fdatasync``.

    The blocks are written and synced once first, so the timed syncs flush data only, as
    SQLite's WAL does once its file has reached its working size.
    """
    fd, name = tempfile.mkstemp(prefix="regime-", dir=directory)
    try:
        blocks = 64
        for i in range(blocks):
            os.pwrite(fd, _BLOCK, i * len(_BLOCK))
        os.fsync(fd)
        times: list[float] = []
        cpu_before = _cpu()
        for i in range(rounds):
            start = time.perf_counter()
            os.pwrite(fd, _BLOCK, (i % blocks) * len(_BLOCK))
            os.fdatasync(fd)
            times.append(time.perf_counter() - start)
        cpu = (_cpu() - cpu_before) / rounds
    finally:
        os.close(fd)
        Path(name).unlink()
    times.sort()
    return (
        statistics.median(times) * 1e6,
        times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6,
        cpu * 1e6,
    )


def _spin(n: int) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - start


def two_process_scaling(n: int = _SPIN) -> float:
    """How much more two CPU-bound processes get done than one (2.0 = two whole cores)."""
    one = _spin(n)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        pool.map(_spin, [n // 10, n // 10])  # start both interpreters before timing
        start = time.perf_counter()
        pool.map(_spin, [n, n])
        both = time.perf_counter() - start
    return 2 * one / both


def _cpu_pressure() -> str:
    """``/proc/pressure/cpu``'s ``some avg10`` (share of time a task waited for a CPU)."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"
    fields = dict(part.split("=", 1) for part in first.split()[1:])
    return f"{fields.get('avg10', '?')}%"


def regime(directory: Path | None = None) -> dict[str, Any]:
    """The probes above, as the machine table's extra rows (``directory``: where fsync is timed).

    Taken before a bench starts its own work, so the machine is as the bench found it.
    """
    where = directory if directory is not None else Path(tempfile.gettempdir())
    where.mkdir(parents=True, exist_ok=True)
    wall, p99, cpu = fdatasync_us(where)
    return {
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "cpu_pressure_avg10": _cpu_pressure(),
        "wake_round_trip_us": round(wake_round_trip_us(), 1),
        "fdatasync_us_p50": round(wall, 1),
        "fdatasync_us_p99": round(p99, 1),
        "fdatasync_cpu_us": round(cpu, 1),
        "fsync_dir": str(where),
        "two_process_scaling": round(two_process_scaling(), 2),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._regime", description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="where fsync is timed")
    args = parser.parse_args(argv)
    for key, value in regime(args.dir).items():
        print(f"{key:22} {value}")


if __name__ == "__main__":
    main()
