"""Run code in a child interpreter whose writes fail past a file size: a full disk, unprivileged.

The child ignores SIGXFSZ, so a write past ``RLIMIT_FSIZE`` fails with ``EFBIG`` ("File too
large") instead of killing the process, as a write to a full disk fails with ``ENOSPC``. The
code sets the limit itself (``limit_files(nbytes)``) once its setup is written, and reports
what happened with ``report(**values)`` (one JSON line on stdout, read back by the parent).

The limit is on offsets, not on growth: a write anywhere past ``nbytes`` fails, in any file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]

_PRELUDE = """
import json, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

def limit_files(nbytes):
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, resource.RLIM_INFINITY))

def report(**values):
    print(json.dumps(values), flush=True)
"""


def run_limited(code: str) -> dict[str, Any]:
    """Run ``code`` (after the prelude above) in a child; what it passed to ``report``."""
    done = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines, f"the child reported nothing:\n{done.stderr}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result
