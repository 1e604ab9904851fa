"""Pipelines the CLI tests start and resume by reference (``cli_runs_pipelines:<name>``).

The tests put this file's directory on PYTHONPATH, so `tracebound resume` imports the
pipeline exactly as a user's shell would. ``python cli_runs_pipelines.py NAME [SECRET]``
starts a run with the same files the CLI uses (RunnerConfig defaults in the working
directory) and prints ``{"run_id": ..., "status": ...}``.

Pipelines: ``gated`` (an Executor bumps requirements.txt, a sensitive path), ``harmful``
(critical; the Critic reports a harmful output it cannot attribute), ``clean`` (critical,
nothing goes wrong), ``mixed`` (``gated``, plus an ``exec:`` action: a scope the CLI tests'
policy does not allow, a reason that names no path) and ``held`` (``gated`` with an apply
hook that notes each process that runs it in ``$TB_HOLD_DIR`` and holds the first one inside
until ``$TB_HOLD_DIR/release`` exists), ``two_gates`` (``gated``, then a ``deploy`` step that
bumps requirements-lock.txt, gated again, whose apply hook notes itself in ``$TB_HOLD_DIR``),
``blamed`` (``gated``, whose Critic blames the first plan, so a repair re-runs it and the
re-run Executor is gated again).

``python cli_runs_pipelines.py resume-held-at-gate RUN`` resumes RUN as `tracebound resume`
does, and holds right after the next ``gate_requested`` is durable (``at-gate`` in
``$TB_HOLD_DIR`` says so), before the gated step is recorded: a process for a test to kill.
``python cli_runs_pipelines.py run-held-mid-run`` starts a ``clean`` run and holds right after
its first ``step_recorded`` is durable (``mid-run`` in ``$TB_HOLD_DIR``) until
``$TB_HOLD_DIR/release`` exists: a run for a test to kill, or to end under a live writer.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same file, by the name mypy knows it under
    from tests.integration.pipeline_kit import tpc as kit_tpc
else:
    from pipeline_kit import tpc as kit_tpc  # this file's folder is on sys.path (see above)

from tracebound.events.envelope import RecordedEvent
from tracebound.pipeline.config import RunnerConfig
from tracebound.pipeline.runtime import Pipeline, StepContext


def tpc(role: str, **overrides: Any) -> dict[str, Any]:
    """pipeline_kit's artifact, with this module's cost and an envelope without path limits."""
    base = kit_tpc(role)
    envelope = {**base["handoff_envelope"], "constraints": ["no-exec"]}
    return kit_tpc(
        role,
        **{
            "cost_est": {"prompt_tokens": 1000, "compute_usd_est": "0.01"},
            "handoff_envelope": envelope,
            **overrides,
        },
    )


def _hold(ctx: StepContext, artifact: object) -> None:
    """``held``'s apply hook: a file per process that ran it; the first one waits inside."""
    folder = Path(os.environ["TB_HOLD_DIR"])
    (folder / f"applied-{os.getpid()}").touch()
    inside = folder / "inside"
    if inside.exists():
        return
    inside.touch()
    deadline = time.monotonic() + 300  # a test that died must not leave this process behind
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _pipeline(
    name: str,
    *,
    path: str,
    critical: bool,
    harmful: bool,
    actions: tuple[str, ...] = (),
    apply: Any = None,
    referenced: bool = True,
    blame_plan: bool = False,
) -> Pipeline:
    ref = f"cli_runs_pipelines:{name}" if referenced else None
    pipe = Pipeline(name, pipeline_type="remediation", critical=critical, ref=ref)

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner", goal=f"fix {ctx.inputs.get('ticket', '?')}")

    @pipe.executor(apply=apply)
    def execute(ctx: StepContext) -> dict[str, object]:
        token = ctx.inputs.get("token", "")
        diff = f"--- a/{path}\n+++ b/{path}\n-urllib3==1.26.0\n+urllib3==2.2.2\n"
        extra = {"actions": list(actions)} if actions else {}
        outputs = {"summary": f"used {token}", "artifacts": []}
        return tpc("Executor", diffs=[diff], outputs=outputs, **extra)

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]:
        if harmful:
            ctx.report("the patch broke an API nobody can trace", unresolved=True)
        if blame_plan and ctx.attempt == 0:
            ctx.report("the pin the plan chose is still vulnerable", origin="plan")
        return tpc("Critic")

    return pipe


gated = _pipeline("gated", path="requirements.txt", critical=False, harmful=False)
harmful = _pipeline("harmful", path="src/app.py", critical=True, harmful=True)
clean = _pipeline("clean", path="src/app.py", critical=True, harmful=False)
mixed = _pipeline(
    "mixed", path="requirements.txt", critical=False, harmful=False, actions=("exec:make deploy",)
)
held = _pipeline("held", path="requirements.txt", critical=False, harmful=False, apply=_hold)
two_gates = _pipeline("two_gates", path="requirements.txt", critical=False, harmful=False)
# ``gated``, whose Critic blames its first plan: the repair re-runs plan and execute, and the
# re-run execute~r1 waits for an approval of its own.
blamed = _pipeline(
    "blamed", path="requirements.txt", critical=False, harmful=False, blame_plan=True
)


def _deployed(ctx: StepContext, artifact: object) -> None:
    """``deploy``'s apply hook: a file per process that ran it."""
    (Path(os.environ["TB_HOLD_DIR"]) / f"deployed-{os.getpid()}").touch()


@two_gates.executor(apply=_deployed)
def deploy(ctx: StepContext) -> dict[str, object]:
    diff = "--- a/requirements-lock.txt\n+++ b/requirements-lock.txt\n-a==1\n+a==2\n"
    return tpc("Executor", diffs=[diff])


def _hold_at_gate(event: RecordedEvent) -> None:
    """An ``on_event`` hook: once a gate is recorded, wait there (to be killed)."""
    if event.event_type != "gate_requested":
        return
    folder = Path(os.environ["TB_HOLD_DIR"])
    (folder / "at-gate").touch()
    deadline = time.monotonic() + 300  # a test that died must not leave this process behind
    while time.monotonic() < deadline:
        time.sleep(0.01)


def resume_held_at_gate(run_id: str) -> None:
    from tracebound.export.evidence import EvidenceWriter

    config = RunnerConfig()
    with config.open_ledger() as ledger:
        runner = config.build_runner(ledger, evidence=EvidenceWriter(), on_event=_hold_at_gate)
        runner.resume(two_gates, run_id)


def _hold_mid_run(event: RecordedEvent) -> None:
    """An ``on_event`` hook: after the run's first step, wait (to be killed, or released)."""
    folder = Path(os.environ["TB_HOLD_DIR"])
    if event.event_type != "step_recorded" or (folder / "mid-run").exists():
        return
    (folder / "mid-run").touch()
    deadline = time.monotonic() + 300  # a test that died must not leave this process behind
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def run_held_mid_run() -> None:
    from tracebound.export.evidence import EvidenceWriter

    config = RunnerConfig()
    with config.open_ledger() as ledger:
        runner = config.build_runner(ledger, evidence=EvidenceWriter(), on_event=_hold_mid_run)
        runner.run(clean, {"ticket": "SEC-2"})


unreferenced = _pipeline(
    "unreferenced", path="requirements.txt", critical=False, harmful=False, referenced=False
)


def main(argv: list[str]) -> None:
    from tracebound.export.evidence import EvidenceWriter

    if argv[0] == "resume-held-at-gate":
        resume_held_at_gate(argv[1])
        return
    if argv[0] == "run-held-mid-run":
        run_held_mid_run()
        return
    pipe = {
        "gated": gated,
        "harmful": harmful,
        "clean": clean,
        "mixed": mixed,
        "held": held,
        "two_gates": two_gates,
        "blamed": blamed,
        "unreferenced": unreferenced,
    }[argv[0]]
    inputs = {"ticket": "SEC-1", "token": argv[1] if len(argv) > 1 else ""}
    config = RunnerConfig()
    with config.open_ledger() as ledger:
        runner = config.build_runner(ledger, evidence=EvidenceWriter())
        result = runner.run(pipe, inputs)
    sys.stdout.write(json.dumps({"run_id": result.run_id, "status": result.status}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
