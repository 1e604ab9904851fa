"""docs/retry.md's "Verifying side" is tested: its Python example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "retry.md"


def _verifying_side() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## Verifying side")
    end = text.find("\n## ", start + 1)
    return text[start : None if end == -1 else end]


def test_the_verifying_side_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _verifying_side(), flags=re.S)
    assert blocks, "the Verifying side section has no runnable example"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path)
    for code in blocks:
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "test_failure" in proc.stdout
        assert "trust_gate_failed" in proc.stdout and "retry_requested" in proc.stdout


def test_the_documented_names_exist() -> None:
    from tracebound.pipeline.retry import anchors, gates, ledger, sandbox

    section = _verifying_side()
    for module, names in (
        (gates, ["GateRunner", "pytest_gate", "ruff_gate", "secret_scan_gate", "CommandGate"]),
        (ledger, ["RetryLedger", "verify_attempts"]),
        (anchors, ["AnchorWriter", "read_dataset", "DATASET_ROW_ADAPTER"]),
        (sandbox, ["probe_network_isolation"]),
    ):
        for name in names:
            assert f"`{name}" in section, name
            assert hasattr(module, name), name


def test_the_documented_dataset_columns_are_the_ones_written(tmp_path: Path) -> None:
    """A trainer reads the column table, not the code: every column it names, with its JSON
    lines and Parquet types, is what `write_dataset` writes, in that order."""
    from tracebound.pipeline.retry.anchors import _PARQUET_COLUMNS, AnchorDatasetRow

    section = _verifying_side()
    start = section.index("| column | JSON lines | Parquet |")
    table = section[start:].split("\n\n", 1)[0].splitlines()[2:]
    documented = [tuple(c.strip(" `") for c in line.strip("|").split("|")) for line in table]
    assert [d[0] for d in documented] == list(AnchorDatasetRow.model_fields)
    assert [(d[0], d[2]) for d in documented] == list(_PARQUET_COLUMNS)
    assert "ledger_position" in section and "in ledger order" in section
