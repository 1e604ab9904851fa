"""The retry loop end to end (real tier, real GateRunner, real sandboxed gate): what it leaves
behind, and what it refuses before it spends money or runs model-written code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.fence.fallback_kit import Kit, llm_patch, make_kit
from tests.unit.retry.retry_kit import open_kit, plan

from tracebound.errors import LedgerAttemptOutOfOrder, ValidationFailed
from tracebound.integrations.llm import ScriptedLeaf
from tracebound.pipeline.fallback import RecipeBook
from tracebound.pipeline.fallback.leaf import LeafResponse
from tracebound.pipeline.retry.gates import CommandGate
from tracebound.pipeline.retry.ledger import verify_attempts
from tracebound.pipeline.retry.loop import DEFAULT_MAX_RETRIES, RetryLoop


class NewVersionEachCall(ScriptedLeaf):
    def complete(self, prompt: str, *, model: str, max_tokens: int) -> LeafResponse:
        self._script = ((None, llm_patch(f"2.2{len(self.prompts)}.0")),)
        return super().complete(prompt, model=model, max_tokens=max_tokens)


def _failing_gate(runs: Path) -> CommandGate:
    """A gate that always fails, and leaves one file per process it started in ``runs``."""
    code = f"import os, sys; open(os.path.join({str(runs)!r}, str(os.getpid())), 'w'); sys.exit(1)"
    return CommandGate("fail", (sys.executable, "-c", code))


def _loop(tmp_path: Path) -> tuple[Kit, RetryLoop, NewVersionEachCall, Path]:
    leaf = NewVersionEachCall([])
    kit = make_kit(tmp_path, leaf=leaf, retrieval=False, recipes=RecipeBook([]))
    runs = tmp_path / "gate-runs"
    runs.mkdir()
    loop = kit.retry_loop(_failing_gate(runs), key=b"loop-edges-redaction-key")
    return kit, loop, leaf, runs


def test_a_second_run_on_a_used_workflow_is_refused_before_any_cost(tmp_path: Path) -> None:
    kit, loop, leaf, runs = _loop(tmp_path)
    try:
        first = loop.run(kit.ctx(), workflow_id="wf", target=kit.repo)
        assert first.status == "refused" and len(first.attempts) == 2
        calls, gate_runs, kinds = len(leaf.prompts), len(list(runs.iterdir())), kit.kinds("wf")
        spent = kit.budget.spent_usd

        with pytest.raises(ValidationFailed, match="already has attempts"):
            loop.run(kit.ctx(), workflow_id="wf", target=kit.repo)
        assert len(leaf.prompts) == calls  # no model call paid for
        assert len(list(runs.iterdir())) == gate_runs  # no gate process started
        assert kit.kinds("wf") == kinds and kit.budget.spent_usd == spent
        state = verify_attempts(kit.tier.workdir / "wf")
        assert state.ok and [a.attempt_index for a in state.attempts] == [0, 1]
    finally:
        kit.close()


def test_the_gate_runner_refuses_an_out_of_order_attempt_before_any_process(
    tmp_path: Path,
) -> None:
    kit = open_kit(tmp_path)
    runs = tmp_path / "gate-runs"
    runs.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    (target / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    try:
        runner = kit.runner([_failing_gate(runs)])
        kit.attempt(runner, plan(0), target)  # index 0 is in the attempts log now
        assert len(list(runs.iterdir())) == 1
        kit.begin(2)
        with pytest.raises(LedgerAttemptOutOfOrder, match="1 is next"):
            runner.verify(plan(2), target=target)
        kit.begin(0)  # an index already recorded, planned again
        with pytest.raises(LedgerAttemptOutOfOrder, match="1 is next"):
            runner.verify(plan(0), target=target)
        assert len(list(runs.iterdir())) == 1  # neither started a gate
    finally:
        kit.ledger.close()


def test_a_solved_example_keeps_the_advisory_text_redacted(tmp_path: Path) -> None:
    """The solved-example store keeps the advisory's text (searched on the next run): a
    secret or an e-mail address in an advisory's details went into examples.db as given,
    while the prompt that showed the same text was redacted."""
    token = "ghp_" + "R8mQ2vX9kL4nT7pW1sY6zA3bC5dE0fG2hJ4k"
    kit = make_kit(
        tmp_path, leaf=ScriptedLeaf([(None, llm_patch("2.20.0"))]), recipes=RecipeBook([])
    )
    assert kit.store is not None
    loop = kit.retry_loop(
        CommandGate("pass", (sys.executable, "-c", "pass")),
        key=b"loop-edges-redaction-key",
        max_retries=DEFAULT_MAX_RETRIES,
        retrieval=True,
    )
    details = f"Reported by alice@example.com; the leaked CI token was {token}."
    ctx = kit.ctx()
    ctx = ctx.model_copy(update={"advisory": ctx.advisory.model_copy(update={"details": details})})
    try:
        assert loop.run(ctx, workflow_id="wf", target=kit.repo).status == "passed"
        (example,) = kit.store.search(ctx).examples
        assert "[REDACTED:github-token" in example.advisory_text
    finally:
        kit.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("examples.db*"))
    assert stored and token.encode() not in stored and b"alice@example.com" not in stored
