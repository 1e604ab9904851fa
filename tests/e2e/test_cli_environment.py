"""The `tracebound` command in an environment that is not the developer's.

A store path with ``~`` written where no shell expands it (an env file, a quoted argument).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_cli import CLI


@pytest.mark.parametrize("store", ["sqlite:///~/a.db", "jsonl:///~/b", "~/c"])
def test_a_tilde_in_a_store_path_is_the_home_folder(tmp_path: Path, store: str) -> None:
    # Was a folder named "~" in the working directory (a different ledger per folder the
    # command ran in), while --key and --witness took "~" as the home folder.
    c = CLI(tmp_path)
    created = c.json("init", "--store", store)
    home = Path(c.env["HOME"])
    assert created["created"] is True
    assert not (c.cwd / "~").exists()
    assert any(home.iterdir()), list(home.iterdir())
    assert c.json("log", "--store", store)["events"] == []
