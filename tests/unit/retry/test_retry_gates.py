"""GateRunner with real gate processes on a tiny generated project (pytest, ruff, secrets)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.unit.retry.retry_kit import FIX, HEADER, SECRET, WF, Kit, Plan, digest, plan

from tracebound.errors import (
    AuditChainCorrupted,
    ConfigError,
    LedgerAttemptOutOfOrder,
    ValidationFailed,
)
from tracebound.pipeline.retry.gates import (
    CommandGate,
    pytest_gate,
    ruff_gate,
    secret_scan_gate,
)
from tracebound.pipeline.retry.ledger import RetryLedger
from tracebound.pipeline.retry.models import FailingSignal, TrustOutcome
from tracebound.pipeline.retry.sandbox import _TAIL_BYTES, NetworkIsolation

GATES = (pytest_gate(), ruff_gate(), secret_scan_gate())


def _py(code: str, name: str = "probe") -> CommandGate:
    return CommandGate(name, (sys.executable, "-c", code))


def test_a_fix_passes_every_gate_and_is_recorded(kit: Kit, project: Path, isolated: bool) -> None:
    runner = kit.runner(GATES)
    closed = kit.attempt(runner, plan(0), project)
    outcome = closed.trust
    assert outcome is not None and outcome.passed, outcome
    assert outcome.score == 10_000
    assert outcome.confidence == ("high" if isolated else "medium")
    assert outcome.sandbox_run_id.startswith("sbx-")
    # The target itself is untouched: the patch went into the sandbox's copy.
    assert (project / "calc.py").read_text().endswith("a - b\n")
    events = kit.gate_events()
    assert [(t, p["gate"]) for t, p, _ in events] == [
        ("trust_gate_passed", "patch"),
        ("trust_gate_passed", "tests"),
        ("trust_gate_passed", "lint"),
        ("trust_gate_passed", "secrets"),
    ]
    assert {c for _, _, c in events} == {str(plan(0).attempt_id)}
    tests_signals = events[1][1]["signals"]
    assert tests_signals["tests_passed"] == 2 and tests_signals["exit_code"] == 0
    assert tests_signals["network_isolated"] is isolated
    (attempt,) = RetryLedger(kit.run_dir()).attempts
    assert attempt.trust is not None and attempt.trust.passed
    assert attempt.trust.network_isolated is isolated
    assert attempt.patch_blake3 == digest(FIX)
    with pytest.raises(LedgerAttemptOutOfOrder):
        runner.record_attempt(closed)  # once per attempt


def test_a_failing_test_becomes_a_structured_signal(kit: Kit, project: Path) -> None:
    kit.begin(0)
    noop = HEADER + "@@ -1,2 +1,3 @@\n def add(a, b):\n+    # TODO\n     return a - b\n"
    outcome = kit.runner([pytest_gate()]).verify(plan(0, noop), target=project)
    assert not outcome.passed
    (sig,) = outcome.failing_signals
    assert (sig.gate, sig.kind) == ("tests", "test_failure")
    assert sig.subject == "tests/test_calc.py::test_add"
    assert sig.message.startswith("AssertionError: two plus three")
    assert sig.location == "tests/test_calc.py:4"
    assert outcome.score == (10_000 + 5_000) // 2  # patch gate full, tests half
    failed = [p for t, p, _ in kit.gate_events() if t == "trust_gate_failed"]
    assert failed == [
        {
            "kind": "trust_gate_failed",
            "gate": "tests",
            "failing_signals": ["test_failure:tests/test_calc.py::test_add"],
            "score": 5_000,
            "retry_count": 0,
        }
    ]


def test_lint_and_secret_findings(kit: Kit, project: Path) -> None:
    kit.begin(0)
    leaky = (
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,4 @@\n+import os\n def add(a, b):\n"
        f"+    token = '{SECRET}'\n-    return a - b\n+    return a + b\n"
    )
    runner = kit.runner(GATES)
    report = runner.run(plan(0, leaky), target=project)
    runner.record_attempt(kit.close(plan(0, leaky), report.outcome)[0])
    kinds = {(s.gate, s.kind, s.subject) for s in report.outcome.failing_signals}
    assert ("lint", "lint_error", "F401") in kinds
    assert ("lint", "lint_error", "F841") in kinds
    assert ("secrets", "secret_found", "github-token") in kinds
    secret_signal = next(s for s in report.outcome.failing_signals if s.kind == "secret_found")
    assert secret_signal.location == "calc.py:3"
    # The secret travels nowhere: not in the outcome, the events, the evidence, the log.
    assert SECRET not in report.outcome.model_dump_json()
    assert SECRET not in json.dumps(kit.gate_events())
    for pointer in report.evidence_paths:
        assert SECRET.encode() not in kit.evidence.get(pointer)
    assert SECRET.encode() not in (kit.run_dir() / "attempts.jsonl").read_bytes()


def test_a_secret_already_in_the_file_is_not_this_attempts_fault(kit: Kit, tmp_path: Path) -> None:
    from tests.unit.retry.retry_kit import make_project

    old = f"KEY = '{SECRET}'\n\n\ndef add(a, b):\n    return a - b\n"
    project = make_project(tmp_path / "p2", calc=old)
    kit.begin(0)
    fix = HEADER + "@@ -4,2 +4,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    outcome = kit.runner([secret_scan_gate()]).verify(plan(0, fix), target=project)
    assert outcome.passed


def test_raw_tool_output_is_evidence_only_and_redacted(kit: Kit, tmp_path: Path) -> None:
    from tests.unit.retry.retry_kit import make_project

    tests = f"def test_leak():\n    print('{SECRET}')\n    assert False, 'boom'\n"
    project = make_project(tmp_path / "p3", tests=tests)
    kit.begin(0)
    report = kit.runner([pytest_gate()]).run(plan(0), target=project)
    (sig,) = report.outcome.failing_signals
    assert sig.message == "AssertionError: boom"
    log = kit.evidence.get(report.results[1].evidence or "").decode()
    assert "[REDACTED:github-token:" in log
    assert SECRET not in log
    assert "test_leak" in log  # the human-readable log is really the tool's output


def test_a_log_cut_to_its_tail_keeps_no_piece_of_a_cut_secret(kit: Kit, project: Path) -> None:
    """The evidence log keeps the last _TAIL_BYTES of each stream, redacted after the cut:
    a cut through `password=...` kept the password's tail, which no detector recognises
    without the `password=` that named it, and stored it in the blob store."""
    password = "correct-horse-battery-staple-9QxL"
    tail = password[3:]
    code = (
        "import sys\n"
        f"sys.stdout.write('password={password}\\n')\n"
        f"sys.stdout.write('.' * {_TAIL_BYTES - len(tail) - 1})\n"
    )
    kit.begin(0)
    report = kit.runner([_py(code)]).run(plan(0), target=project)
    log = kit.evidence.get(report.results[1].evidence or "")
    assert b"." * 1000 in log  # the tail of stdout is there
    assert tail.encode() not in log and password[-8:].encode() not in log


def test_a_patch_that_does_not_apply_runs_no_gate(kit: Kit, project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "gate-ran"
    kit.begin(0)
    bad = HEADER + "@@ -1,2 +1,2 @@\n def add(x, y):\n-    return x - y\n+    return x + y\n"
    gate = _py(f"open({str(marker)!r}, 'w').close()")
    outcome = kit.runner([gate]).verify(plan(0, bad), target=project)
    (sig,) = outcome.failing_signals
    assert (sig.gate, sig.kind, sig.subject, sig.location) == (
        "patch",
        "patch_rejected",
        "calc.py",
        "hunk 1",
    )
    assert "does not match" in sig.message
    assert not marker.exists()
    assert [t for t, _, _ in kit.gate_events()] == ["trust_gate_failed"]


def test_a_patch_that_does_not_match_its_digest_is_rejected(kit: Kit, project: Path) -> None:
    kit.begin(0)
    forged = Plan(**{**plan(0).__dict__, "patch_blake3": "0" * 64})
    outcome = kit.runner([pytest_gate()]).verify(forged, target=project)
    assert outcome.failing_signals[0].kind == "patch_rejected"
    assert "patch_blake3" in outcome.failing_signals[0].message


def test_a_corrupted_retry_ledger_starts_no_gate(kit: Kit, project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "gate-ran"
    runner = kit.runner([_py(f"open({str(marker)!r}, 'w').close()")])
    kit.attempt(runner, plan(0), project)
    assert marker.exists()  # the gate does run on a healthy ledger
    marker.unlink()
    kit.begin(1)
    path = kit.run_dir() / "attempts.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"score":10000', b'"score":9000'))
    with pytest.raises(AuditChainCorrupted, match="line 1"):
        runner.verify(plan(1), target=project)
    assert not marker.exists()
    # Attempt 0's patch and probe gates only; nothing at all for attempt 1.
    assert [p["gate"] for _, p, _ in kit.gate_events()] == ["patch", "probe"]


def test_a_rewritten_chain_head_starts_no_gate(kit: Kit, project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "gate-ran"
    runner = kit.runner([_py(f"open({str(marker)!r}, 'w').close()")])
    kit.planning_attempt(0)  # a planning attempt closed without gates (a refusal, say)
    (kit.run_dir() / "chain_head.bin").write_bytes(b"\x07" * 32)
    kit.begin(1)
    with pytest.raises(AuditChainCorrupted, match="ledger stream"):
        runner.verify(plan(1), target=project)
    assert not marker.exists()


def test_gates_see_a_bare_environment_and_a_clean_copy(
    kit: Kit, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-gates")
    (project / ".git").mkdir()
    (project / ".venv").mkdir()
    (project / "__pycache__").mkdir()
    report_file = tmp_path / "seen.json"
    code = (
        "import json, os; json.dump({'env': sorted(os.environ), 'home': os.environ['HOME'], "
        f"'cwd': os.getcwd(), 'files': sorted(os.listdir('.'))}}, open({str(report_file)!r}, 'w'))"
    )
    kit.begin(0)
    kit.runner([_py(code)]).verify(plan(0), target=project)
    seen = json.loads(report_file.read_text())
    assert seen["env"] == ["HOME", "LANG", "PATH"]
    assert seen["files"] == ["calc.py", "conftest.py", "tests"]
    assert Path(seen["home"]).parent == Path(seen["cwd"]).parent  # both inside the sandbox
    assert not Path(seen["cwd"]).exists()  # and the sandbox is gone afterwards


def test_without_isolation_the_outcome_says_so(kit: Kit, project: Path) -> None:
    none = NetworkIsolation(available=False, method="none", prefix=(), detail="test")
    runner = kit.runner([pytest_gate()], isolation=none)
    outcome = kit.attempt(runner, plan(0), project).trust
    assert outcome is not None and outcome.passed and outcome.confidence == "medium"
    (attempt,) = RetryLedger(kit.run_dir()).attempts
    assert attempt.trust is not None and attempt.trust.network_isolated is False
    with pytest.raises(ConfigError, match="network isolation is required"):
        kit.runner([pytest_gate()], isolation=none, require_isolation=True)


def test_anchor_hook_request_retry_and_refuse(kit: Kit, project: Path) -> None:
    runner = kit.runner([pytest_gate()])
    hook = runner.anchor_hook(project)
    kit.begin(0)  # the planning side calls the hook before it closes the attempt
    first = plan(
        0, "--- a/calc.py\n+++ b/calc.py\n@@ -2 +2 @@\n-    return a - b\n+    return b - a\n"
    )
    outcome: TrustOutcome = hook(first)
    assert not outcome.passed
    with pytest.raises(ConfigError, match="anchor"):
        runner.record_attempt(first)  # too early: the attempt has no anchor yet
    closed, _ = kit.close(first, outcome)
    runner.record_attempt(closed)
    runner.request_retry(closed, outcome, "blob://sha256:" + "d" * 64)
    kit.begin(1)
    refused = plan(1, None, tag="Refused")
    with pytest.raises(ValidationFailed, match="refused plan"):
        runner.verify(refused, target=project)
    refused, _ = kit.close(refused, None)
    runner.record_attempt(refused)
    runner.refuse(refused, cause="not_retryable", reason="the planner refused")
    types = [(t, p.get("cause"), p.get("failing_signals")) for t, p, _ in kit.gate_events()]
    assert types[-2:] == [
        ("retry_requested", None, ["test_failure:tests/test_calc.py::test_add"]),
        ("attempt_refused", "not_retryable", None),
    ]
    attempts = RetryLedger(kit.run_dir()).attempts
    assert [(a.attempt_index, a.plan_tag, a.trust is None) for a in attempts] == [
        (0, "AppliedFromLlm", False),
        (1, "Refused", True),
    ]
    with pytest.raises(ValidationFailed, match="not retried"):
        runner.request_retry(
            first,
            outcome.model_copy(update={"passed": True, "failing_signals": ()}),
            "sha256:" + "d" * 64,
        )


def test_runner_configuration_errors(kit: Kit, project: Path) -> None:
    with pytest.raises(ConfigError, match="at least one gate"):
        kit.runner([])
    with pytest.raises(ConfigError, match="unique"):
        kit.runner([pytest_gate(), pytest_gate()])
    with pytest.raises(ConfigError, match="invalid gate name"):
        CommandGate("patch", ("true",))
    with pytest.raises(ValidationFailed, match="workflow_id"):
        kit.runner([pytest_gate()]).verify(plan(0), target=project, workflow_id="other")
    with pytest.raises(ConfigError, match="not a directory"):
        kit.runner([pytest_gate()]).verify(plan(0), target=project / "calc.py")
    assert plan(0).workflow_id == WF


def test_what_the_caller_hands_the_runner_is_redacted_before_it_is_recorded(
    kit: Kit, project: Path
) -> None:
    """``refuse``'s reason is free text, and a verdict may come from a hook other than this
    runner's (``FallbackTier`` takes any ``AnchorHook``): both went to the ledger and the
    attempts log as given, while the runner's own signals were redacted."""
    runner = kit.runner([pytest_gate()])
    kit.begin(0)
    leaked = FailingSignal(
        gate="ci", kind="test_failure", subject=f"tests/test_api.py::test_login[{SECRET}]"
    )
    outcome = TrustOutcome(
        passed=False, confidence="high", score=0, failing_signals=(leaked,), sandbox_run_id="ci-1"
    )
    closed, _ = kit.close(plan(0), outcome)
    runner.record_attempt(closed)
    runner.request_retry(closed, outcome, "sha256:" + "d" * 64)
    runner.refuse(closed, cause="retry_limit", reason=f"the model kept printing {SECRET}")
    (attempt,) = RetryLedger(kit.run_dir()).attempts
    assert attempt.trust is not None and "[REDACTED:" in attempt.trust.failing_signals[0]
    persisted = b"".join(p.read_bytes() for p in kit.root.rglob("*") if p.is_file())
    assert b"[REDACTED:" in persisted and SECRET.encode() not in persisted
