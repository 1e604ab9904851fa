"""Pipelines for replay and export tests, importable by reference (``REF_PREFIX + name``).

``TOGGLE`` is module-level state one step reads: flipping it between a recorded run and its
rerun is how the tests make today's behaviour differ from the record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.pipeline_kit import CODEOWNERS, POLICY, SECRET, Kit, diff, tpc

from tracebound.pipeline.codeowners import CodeOwners
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.store.blobs import FileBlobStore

REF_PREFIX = "tests.unit.replay.replay_pipelines:"
TOGGLE = {"flavour": "vanilla"}
REDACTION_KEY = b"test-redaction-key-0123"


def make_runner(root: Path, **extra: Any) -> Runner:
    """A Runner over the integration kit's ledger (signing key, witness), with ``extra``."""
    return Runner(
        Kit(root).ledger(),
        blobs=FileBlobStore(root / "blobs"),
        policy=Policy.from_dict(POLICY),
        redactor=Redactor(REDACTION_KEY),
        codeowners=CodeOwners.parse(CODEOWNERS),
        workspace=root,
        **extra,
    )


def _build(
    name: str, *, gated: bool = False, fail_first: bool = False, harmful: bool = False
) -> Pipeline:
    pipe = Pipeline(name, pipeline_type="remediation", critical=harmful, ref=REF_PREFIX + name)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        summary = f"plan for {ctx.inputs.get('note', '')}"
        return tpc("Planner", goal=f"fix {ctx.inputs.get('ticket', '?')}",
                   outputs={"summary": summary, "artifacts": []})  # fmt: skip

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        if fail_first and ctx.attempt == 0:
            raise RuntimeError("injected executor error")
        path = "requirements.txt" if gated else "src/app.py"
        # A harmful executor leaks a token of its own making: the runner must redact it.
        leak = f" with {SECRET}" if harmful else ""
        return tpc(
            "Executor",
            diffs=[diff(path)],
            outputs={"summary": f"patched ({TOGGLE['flavour']}){leak}", "artifacts": []},
        )

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]:
        if harmful:
            ctx.report("the patch broke an API and nobody can tell why", unresolved=True)
        return tpc("Critic", outputs={"summary": f"reviewed {ctx.parent_name}", "artifacts": []})

    return pipe


deterministic = _build("deterministic")
gated = _build("gated", gated=True)
repaired = _build("repaired", fail_first=True)
harmful = _build("harmful", harmful=True)


def factory() -> Pipeline:
    """A pipeline factory, as `module:attr` may name one."""
    return deterministic
