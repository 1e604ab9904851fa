"""docs/projections.md names commands that exist.

Its blocks run (the Python ones in order, in one namespace) in tests/e2e/test_docs_examples.py.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "projections.md"


def test_documented_commands_exist() -> None:
    from typer.main import get_command

    from tracebound.cli.app import app

    group = get_command(app)
    documented = re.findall(r"^tracebound (project|report) (\w+)", DOC.read_text(), flags=re.M)
    assert documented
    for top, sub in documented:
        assert sub in group.commands[top].commands  # type: ignore[attr-defined]
