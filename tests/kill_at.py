"""Run a `tracebound` command that kills itself with SIGKILL at a chosen call, exactly there.

The crash harnesses (``crash_harness.py``, ``blob_crash_harness.py``) kill appenders at
random moments; a test of one particular window (between a file's temporary copy and its
rename, between a key and its ``.pub``) needs the kill to land in it every time. So the
command runs in a real interpreter in which one function is wrapped: on its N-th call the
process sends itself SIGKILL, before the call or, with ``after``, once it has returned.
Nothing runs after the kill (no ``finally``, no ``atexit``): what is on disk then is what a
power cut or an OOM kill at that point leaves.

``kill_at(cli, "os:replace:1", "prove", "1", "-o", "p.json")`` runs
``tracebound prove 1 -o p.json`` as ``cli`` (tests/e2e/test_cli.py's ``CLI``) would, and
kills it at its first ``os.replace``. The target is ``module:qualname:N[:after]``; a
function imported by name into other modules (``from os import replace``) is wrapped there
too, a method (``module:Class.method``) on its class.

This file is also the child's script: ``python kill_at.py TARGET ARGS...``.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve()
_ROOT = _HERE.parents[1]


def kill_at(cli: Any, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``tracebound ARGS`` in ``cli``'s folder and environment, killed at ``target``."""
    return subprocess.run(
        [sys.executable, str(_HERE), target, *args],
        cwd=cli.cwd,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _wrap(target: str) -> None:
    module_name, dotted, count, *when = target.split(":")
    after = when == ["after"]
    owner: Any = importlib.import_module(module_name)
    *path, name = dotted.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls = 0

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == int(count) and not after:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if calls == int(count):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, wrapper)
    if path:
        return
    for module in list(sys.modules.values()):  # `from x import name` copies
        if getattr(module, name, None) is original:
            setattr(module, name, wrapper)


def child_main(target: str, args: list[str]) -> None:
    import tracebound.cli.app as app  # the CLI, and what it imports

    _wrap(target)
    sys.argv = ["tracebound", *args]
    app.main()


if __name__ == "__main__":
    sys.path.insert(0, str(_ROOT))
    child_main(sys.argv[1], sys.argv[2:])
