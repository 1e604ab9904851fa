"""Planner -> Executor -> Critic with a policy gate, an approval, metrics, replay and evidence.

Everything runs in a temporary directory with no network: the "LLM" steps are plain
functions returning their TPC artifacts, as a test double would.

Run: .venv/bin/python examples/pipeline_basics.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from tracebound import FixedClock, Ledger, NoteSigner, SequentialIds, SQLiteStore
from tracebound.export.evidence import EvidenceWriter, verify_evidence
from tracebound.ids import RunId, StepId
from tracebound.pipeline.codeowners import CodeOwners
from tracebound.pipeline.metrics import compute_metrics
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner, approve
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.replay import replay_run, rerun_run
from tracebound.store.blobs import FileBlobStore
from tracebound.store.witness import FileWitness

POLICY = """
version = 1
[gate]
sensitive_paths = ["requirements*.txt", ".github/**"]
[scopes]
allowed = ["read", "write"]
Executor = ["read"]
after_approval = { Executor = ["read", "write"] }
"""
CODEOWNERS = "*  @platform\nrequirements.txt  @alice\n"


def artifact(role: str, summary: str, **extra: Any) -> dict[str, Any]:
    """A TPC artifact: what every step returns (the runner validates it)."""
    return {
        "role": role,
        "goal": "upgrade urllib3 past GHSA-v845-jxx5-vc9f",
        "input_refs": ["input://advisories/GHSA-v845-jxx5-vc9f"],
        "assumptions": ["the lockfile is the source of truth"],
        "constraints": ["no-exec"],
        "actions": ["read the advisory"],
        "outputs": {"summary": summary, "artifacts": []},
        "diffs": [],
        "tests_run": [],
        "confidence": 8000,  # basis points: hashed data holds no floats
        "risks": [],
        "cost_est": {"prompt_tokens": 900, "compute_usd_est": "0.01"},
        "latency_est": {"p50_ms": 800, "p95_ms": 1500},
        "required_validations": [],
        "handoff_envelope": {
            "assumptions": ["db schema frozen"],
            "constraints": ["paths:requirements.txt", "no-exec"],
            "required_validations": ["schema-validation"],
            "minimal_diff": "one pin in requirements.txt",
        },
        **extra,
    }


pipe = Pipeline("bump-urllib3", pipeline_type="remediation", critical=True)
written: list[tuple[str, ...]] = []


@pipe.planner()
def plan(ctx: StepContext) -> dict[str, Any]:
    return artifact("Planner", f"pin urllib3 to {ctx.inputs['target']}")


def write_patch(ctx: StepContext, done: Any) -> None:
    """Side effects run only after the gate is lifted, with the scopes it granted."""
    written.append(ctx.scopes)


@pipe.executor(apply=write_patch)
def execute(ctx: StepContext) -> dict[str, Any]:
    diff = "--- a/requirements.txt\n+++ b/requirements.txt\n-urllib3==1.26.5\n+urllib3==2.2.2\n"
    return artifact("Executor", "bumped the pin", diffs=[diff], tests_run=["pytest -q"])


@pipe.critic()
def review(ctx: StepContext) -> dict[str, Any]:
    # ctx.findings holds what the runtime's constraint checks already found.
    assert not ctx.findings, ctx.findings
    return artifact("Critic", "the diff stays inside requirements.txt")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="tracebound-pipeline-"))
    (work / "policy.toml").write_text(POLICY)
    signer = NoteSigner("example", bytes(32))  # real use: store.keyfile.load_signer(path)
    ledger = Ledger(
        SQLiteStore(work / "store"),
        clock=FixedClock(),
        ids=SequentialIds(),
        signer=signer,
        witness=FileWitness(work / "witness" / "example.note"),
        origin="example.com/pipeline",
    )
    evidence = EvidenceWriter(work / "artifacts" / "agent-runs")
    runner = Runner(
        ledger,
        blobs=FileBlobStore(work / "blobs"),
        policy=Policy.load(work / "policy.toml"),
        redactor=Redactor(b"example-redaction-key-0123456789"),
        codeowners=CodeOwners.parse(CODEOWNERS),
        evidence=evidence,
    )
    with ledger:
        first = runner.run(pipe, {"target": "2.2.2", "token": "ghp_" + "x1Y2" * 9})
        assert (first.status, first.gated_step, written) == ("gated", "execute", [])
        print(f"run {first.run_id}: gated at {first.gated_step}, nothing written yet")

        approve(ledger, RunId(first.run_id), StepId("execute"), "@alice",
                codeowners=runner.codeowners)  # fmt: skip
        done = runner.resume(pipe, first.run_id)
        assert done.status == "completed"
        assert written == [("read", "write")]
        print(f"approved by @alice, resumed: {done.status}; the patch ran with {written[0]}")

        metrics = compute_metrics(ledger.store.read_log())
        print("harm_rate:", metrics.by_pipeline["bump-urllib3"].harm_rate,
              "unresolved_origin(Executor):", metrics.unresolved_origin("Executor"))  # fmt: skip

        report = replay_run(ledger, runner.blobs, done.run_id)
        assert report.ok
        again = rerun_run(ledger, runner.blobs, done.run_id, pipeline=pipe,
                          policy=runner.policy, redactor=runner.redactor,
                          codeowners=runner.codeowners)  # fmt: skip
        assert again.identical, again.divergence
        print(f"replay: {len(report.steps)} steps, every digest checks out; rerun identical")

    path = evidence.written[-1]
    checked = verify_evidence(path, signer.verifier)
    assert "ghp_" not in path.read_text()  # the token was redacted before any write
    print(f"evidence {path.name}: {checked.events} events, signed tree of {checked.tree_size}")


if __name__ == "__main__":
    main()
