"""docs/retry.md's "Planning side" is tested: its example runs as written, offline, and the
names it documents exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "retry.md"

# Prepended to the example: the same loopback-only rule the tests enforce in-process.
GUARD = """
import ipaddress, socket
_connect, _create = socket.socket.connect, socket.create_connection
def _check(address):
    if isinstance(address, tuple) and not ipaddress.ip_address(address[0]).is_loopback:
        raise ConnectionRefusedError(f"docs example may not connect to {address!r}")
def _guarded_connect(self, address):
    _check(address)
    return _connect(self, address)
def _guarded_create(address, *a, **k):
    _check(address)
    return _create(address, *a, **k)
socket.socket.connect = _guarded_connect
socket.create_connection = _guarded_create
"""


def _planning_side() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## Planning side")
    end = text.find("\n## ", start + 1)
    return text[start : None if end == -1 else end]


def test_the_planning_side_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", _planning_side(), flags=re.S)
    assert blocks, "the Planning side section has no runnable example"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env = {k: v for k, v in env.items() if "proxy" not in k.lower()}
    env["HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path)
    tiers_run = 0
    for code in blocks:
        proc = subprocess.run(
            [sys.executable, "-c", GUARD + code], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        if "FallbackTier(" not in code:
            continue  # a pricing example: its own asserts are its check
        tiers_run += 1
        first, kinds = proc.stdout.strip().split("\n")
        assert first.startswith("AppliedFromLlm ") and "override:" in first
        assert "'attempt_anchor_recorded']" in kinds and "'leaf_returned'" in kinds
    assert tiers_run == 1, "the Planning side section lost its FallbackTier example"


def test_the_documented_names_exist() -> None:
    import tracebound.integrations.llm as llm
    import tracebound.pipeline.fallback as fallback

    section = _planning_side()
    for module, names in (
        (
            fallback,
            [
                "FallbackTier",
                "ApplyContext",
                "PlanOutcome",
                "Advisory",
                "RecipeBook",
                "PinBumpRecipe",
                "SolvedExampleStore",
                "LLMLeaf",
                "LeafResponse",
                "Budget",
                "PricingTable",
                "ModelPrice",
                "FenceWrapper",
                "SanitizedText",
                "build_attempt_summary",
                "AttemptEventLog",
                "PRIOR_ATTEMPTS_HEADER",
                "EMPTY_DIGEST",
                "LeafCallFailed",
            ],
        ),
        (
            llm,
            [
                "OpenAICompatibleLeaf",
                "AnthropicLeaf",
                "ScriptedLeaf",
                "ReplayServer",
                "load_exchanges",
            ],
        ),
    ):
        for name in names:
            assert f"`{name}" in section, name
            assert hasattr(module, name), name
    for reason in fallback.RefusalReason.__args__:  # type: ignore[attr-defined]
        assert f"`{reason}`" in section, reason
