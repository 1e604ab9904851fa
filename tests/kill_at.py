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

``signal_at(cli, signal.SIGINT, target, ...)`` sends another signal there instead: the
Ctrl-C or the supervisor's SIGTERM a command has its own way to end on (that code runs: the
process goes on past the kill). With ``group``, to the child's whole process group, as a
terminal sends Ctrl-C (worker processes the command started get it too); the child then runs
in its own session, so the signal does not reach the test.

This file is also the child's script: ``python kill_at.py [-SIGNAL] [-group] TARGET ARGS...``.
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
    return signal_at(cli, signal.SIGKILL, target, *args)


def signal_at(
    cli: Any,
    sig: signal.Signals,
    target: str,
    *args: str,
    group: bool = False,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``tracebound ARGS`` as :func:`kill_at` does, sent ``sig`` at ``target``."""
    flags = [f"-{sig.name}"] + (["-group"] if group else [])
    return subprocess.run(
        [sys.executable, str(_HERE), *flags, target, *args],
        cwd=cli.cwd,
        env=cli.env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        start_new_session=group,
    )


def _wrap(target: str, sig: signal.Signals, group: bool) -> None:
    module_name, dotted, count, *when = target.split(":")
    after = when == ["after"]
    owner: Any = importlib.import_module(module_name)
    *path, name = dotted.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls = 0

    def hit() -> None:
        if group:
            os.killpg(0, sig)
        else:
            os.kill(os.getpid(), sig)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == int(count) and not after:
            hit()
        result = original(*args, **kwargs)
        if calls == int(count) and after:
            hit()
        return result

    setattr(owner, name, wrapper)
    if path:
        return
    for module in list(sys.modules.values()):  # `from x import name` copies
        if getattr(module, name, None) is original:
            setattr(module, name, wrapper)


def child_main(argv: list[str]) -> None:
    import tracebound.cli.app as app  # the CLI, and what it imports

    sig, group = signal.SIGKILL, False
    while argv[0].startswith("-"):
        flag = argv.pop(0)[1:]
        if flag == "group":
            group = True
        else:
            sig = signal.Signals[flag]
    target, args = argv[0], argv[1:]
    _wrap(target, sig, group)
    sys.argv = ["tracebound", *args]
    app.main()


if __name__ == "__main__":
    sys.path.insert(0, str(_ROOT))
    child_main(sys.argv[1:])
