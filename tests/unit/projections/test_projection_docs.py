"""docs/projections.md is tested: its Python blocks run, in order, as one program."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "projections.md"


def test_python_blocks_run_in_order(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) >= 4, "the page lost its examples"
    proc = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_documented_commands_exist() -> None:
    from typer.main import get_command

    from tracebound.cli.app import app

    group = get_command(app)
    documented = re.findall(r"^tracebound (project|report) (\w+)", DOC.read_text(), flags=re.M)
    assert documented
    for top, sub in documented:
        assert sub in group.commands[top].commands  # type: ignore[attr-defined]
