"""An attempt interrupted (Ctrl-C, SystemExit) or judged by a broken hook still closes with
exactly one anchor, and a gate interrupted mid-run leaves no process behind."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.fence.fallback_kit import InterruptedLeaf, llm_patch, make_kit

from tracebound.errors import ValidationFailed
from tracebound.integrations.llm import ScriptedLeaf
from tracebound.pipeline.fallback import PlanOutcome, RecipeBook
from tracebound.pipeline.retry.sandbox import NetworkIsolation, Sandbox, SandboxLimits


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_an_interrupted_model_call_closes_the_attempt_then_reraises(
    tmp_path: Path, exc: BaseException
) -> None:
    kit = make_kit(tmp_path, leaf=InterruptedLeaf(exc), retrieval=False, recipes=RecipeBook([]))
    try:
        available = kit.budget.available_usd
        with pytest.raises(type(exc)):
            kit.tier.run(kit.ctx(), workflow_id="wf")
        kinds = kit.kinds("wf")
        assert kinds[-1] == "attempt_anchor_recorded" and kinds.count(kinds[-1]) == 1
        assert "budget_reconciled" in kinds
        assert kit.budget.available_usd == available  # the reservation was released
        anchor = kit.events("wf")[-1].payload.anchor
        assert (anchor.validator_outcome, anchor.refusal_reason) == ("Refused", "leaf_error")
        assert anchor.extras["phase4.leaf_error"] == type(exc).__name__
        assert kit.tier.chain_head_path("wf").read_bytes() == kit.events("wf")[-1].hash
    finally:
        kit.close()


def _interrupt(plan: PlanOutcome) -> Any:
    raise KeyboardInterrupt


def _junk(plan: PlanOutcome) -> Any:
    return {"passed": True}  # not a TrustOutcome


@pytest.mark.parametrize(
    ("verify", "raised"), [(_interrupt, KeyboardInterrupt), (_junk, ValidationFailed)]
)
def test_a_verify_hook_that_is_interrupted_or_returns_junk_still_gets_one_anchor(
    tmp_path: Path, verify: Callable[[PlanOutcome], Any], raised: type[BaseException]
) -> None:
    leaf = ScriptedLeaf([(None, llm_patch("2.20.0"))])
    kit = make_kit(tmp_path, leaf=leaf, retrieval=False, recipes=RecipeBook([]))
    try:
        with pytest.raises(raised):
            kit.tier.run(kit.ctx(), workflow_id="wf", verify=verify)
        kinds = kit.kinds("wf")
        assert kinds[-2:] == ["plan_outcome_emitted", "attempt_anchor_recorded"]
        assert kinds.count("attempt_anchor_recorded") == 1
        anchor = kit.events("wf")[-1].payload.anchor
        assert anchor.trust_outcome_passed is None
        assert anchor.extras["phase4.verify_error"] == raised.__name__
    finally:
        kit.close()


def test_a_gate_interrupted_mid_run_leaves_no_process_behind(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    pidfile = tmp_path / "gate.pid"
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    none = NetworkIsolation(available=False, method="none", prefix=(), detail="test")
    box = Sandbox(target, isolation=none, limits=SandboxLimits(timeout_s=60))

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt), box:
        box.run([sys.executable, "-c", code, str(pidfile)], name="sleeper")
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running
        os.kill(pid, 0)
