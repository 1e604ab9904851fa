"""Review findings in the runner: what reaches the ledger, and runs that must always end.

Real parts, as in test_pipeline_acceptance.py: a SQLite ledger file, a blob directory and
the Runner. Every test here failed before its fix.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from rich.console import Console

from tests.integration.pipeline_kit import CODEOWNERS, POLICY, SECRET, Kit, diff, tpc
from tracebound.errors import ConfigError, ValidationFailed
from tracebound.events.catalog import (
    BlameAssigned,
    GateRequested,
    RunFinished,
    StepRecorded,
    ValidationRecorded,
)
from tracebound.events.envelope import Payload
from tracebound.ids import RunId, StepId
from tracebound.pipeline.codeowners import CodeOwners, NotAnOwner
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.runner import Runner, RunResult, approve, run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.pipeline.validations import ValidationInput, ValidationRegistry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    return Kit(tmp_path)


def leaked_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def events(kit: Kit, run: RunResult) -> list[object]:
    with kit.ledger() as ledger:
        return [e.payload for e in ledger.store.read_stream(run_stream(run.run_id))]


def with_validation(name: str) -> dict[str, object]:
    artifact = tpc("Planner")
    artifact["handoff_envelope"] = {**artifact["handoff_envelope"], "required_validations": [name]}
    return artifact


# -- secrets in free text: exception messages, Critic and Router words, validator details --


def test_a_secret_in_a_step_exception_never_reaches_the_ledger(kit: Kit) -> None:
    pipe = Pipeline("raises")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        raise RuntimeError(f"auth failed with {SECRET}")

    result = kit.runner().run(pipe, {})
    assert result.status == "failed"
    assert SECRET not in (result.reason or "") and "[REDACTED:" in (result.reason or "")
    assert leaked_files(kit.root) == []
    blame = [e for e in events(kit, result) if isinstance(e, BlameAssigned)]
    assert blame and all(SECRET not in b.reason for b in blame)


def test_a_secret_in_an_apply_failure_never_reaches_the_ledger(kit: Kit) -> None:
    pipe = Pipeline("apply-raises")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return tpc("Planner")

    def push(ctx: StepContext, artifact: object) -> None:
        raise RuntimeError(f"push rejected for {SECRET}")

    @pipe.executor(apply=push)
    def execute(ctx: StepContext) -> dict[str, object]:
        return tpc("Executor", diffs=[diff("src/a.py")])

    result = kit.runner().run(pipe, {})
    assert result.status == "failed" and "apply failed" in (result.reason or "")
    assert leaked_files(kit.root) == []


def test_critic_findings_and_router_reasons_are_redacted(kit: Kit) -> None:
    pipe = Pipeline("talkative")
    seen_notes: list[tuple[str, ...]] = []

    @pipe.router()
    def route(ctx: StepContext) -> dict[str, object]:
        ctx.choose("fast", ["fast", "slow"], f"the key {SECRET} is valid")
        return tpc("Router")

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        seen_notes.append(ctx.repair_notes)
        return tpc("Executor", diffs=[diff("src/a.py")])

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]:
        if ctx.attempt == 0:
            ctx.report(f"the executor printed {SECRET}", origin="execute")
        return tpc("Critic")

    result = kit.runner().run(pipe, {})
    assert result.status == "completed"
    assert all(SECRET not in note for notes in seen_notes for note in notes)
    assert leaked_files(kit.root) == []


def test_a_critic_origin_that_names_no_ancestor_is_redacted_in_the_blame(kit: Kit) -> None:
    """An origin that is not the failed step or an ancestor is quoted in the blame's reason
    (which says the origin is unresolved): it is the Critic's words, like its reason, and
    was written to the ledger as the Critic gave it."""
    pipe = Pipeline("named-origin")
    pipe.executor(name="execute")(lambda ctx: tpc("Executor", diffs=[diff("src/a.py")]))

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]:
        ctx.report("bad output", origin=f"whoever pushed {SECRET}")
        return tpc("Critic")

    result = kit.runner().run(pipe, {})
    assert result.status == "failed"
    (blame,) = [e for e in events(kit, result) if isinstance(e, BlameAssigned)]
    assert blame.origin_step_id is None and "[REDACTED:" in blame.reason, blame.reason
    assert leaked_files(kit.root) == []


def test_a_validator_detail_is_redacted(kit: Kit) -> None:
    registry = ValidationRegistry()
    registry.register("custom", lambda inp: (False, f"found {SECRET} in the output"))
    pipe = Pipeline("detail")
    pipe.planner()(lambda ctx: with_validation("custom"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor"))
    result = kit.runner(validations=registry).run(pipe, {})
    assert result.status == "failed"
    checks = [e for e in events(kit, result) if isinstance(e, ValidationRecorded)]
    assert checks and all(SECRET not in (c.detail or "") for c in checks)
    assert leaked_files(kit.root) == []


def test_a_secret_named_extra_field_is_redacted_in_the_abort(kit: Kit) -> None:
    pipe = Pipeline("extra-field")
    pipe.planner(name="plan")(lambda ctx: {**tpc("Planner"), SECRET: "x"})
    with pytest.raises(ValidationFailed) as info:
        kit.runner().run(pipe, {})
    assert SECRET not in str(info.value) and "is not an allowed field" in str(info.value)
    assert leaked_files(kit.root) == []


# -- validations that could not fail, or crashed the run --------------------------------


def test_secret_scan_fails_a_step_whose_output_carried_a_secret(kit: Kit) -> None:
    pipe = Pipeline("scan")
    pipe.planner(name="plan")(lambda ctx: with_validation("secret-scan"))
    leaky = f"--- a/src/a.py\n+++ b/src/a.py\n-x\n+TOKEN = '{SECRET}'\n"
    pipe.executor(name="execute")(lambda ctx: tpc("Executor", diffs=[leaky]))
    result = kit.runner().run(pipe, {})
    assert result.status == "failed"
    assert result.steps[-1].validations_failed == ("secret-scan",)
    assert leaked_files(kit.root) == []


def test_secret_scan_passes_clean_output(kit: Kit) -> None:
    pipe = Pipeline("scan-clean")
    pipe.planner(name="plan")(lambda ctx: with_validation("secret-scan"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor", diffs=[diff("src/a.py")]))
    assert kit.runner().run(pipe, {}).status == "completed"


def broken_validator(inp: ValidationInput) -> tuple[bool, str | None]:
    raise RuntimeError(f"validator crashed on {SECRET}")


@pytest.mark.parametrize(
    "validator",
    [broken_validator, lambda inp: None, lambda inp: ("yes", None), lambda inp: (True, 3)],
)
def test_a_broken_validator_fails_closed_and_the_run_ends(kit: Kit, validator: object) -> None:
    registry = ValidationRegistry()
    registry.register("custom", validator)  # type: ignore[arg-type]
    pipe = Pipeline("broken-validator")
    pipe.planner(name="plan")(lambda ctx: with_validation("custom"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor"))
    result = kit.runner(validations=registry).run(pipe, {})
    assert result.status == "failed"
    assert isinstance(events(kit, result)[-1], RunFinished)
    assert leaked_files(kit.root) == []


@pytest.mark.parametrize(
    "value",
    [b"raw bytes", {"a set"}, object()],
)
def test_an_unredactable_artifact_is_recorded_and_ends_the_run(kit: Kit, value: object) -> None:
    pipe = Pipeline("unredactable")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner", risks=[value]))
    with pytest.raises(ValidationFailed, match="cannot redact"):
        kit.runner().run(pipe, {})
    with kit.ledger() as ledger:
        (started,) = [
            e for e in ledger.store.read_log() if type(e.payload).__name__ == "RunStarted"
        ]
        stream = [e.payload for e in ledger.store.read_stream(f"run/{started.workflow_id}")]
    assert [type(p).__name__ for p in stream[-3:]] == [
        "StepRecorded",
        "BlameAssigned",
        "RunFinished",
    ]
    assert isinstance(stream[-1], RunFinished) and stream[-1].status == "failed"
    assert isinstance(stream[1], StepRecorded) and stream[1].status == "error"


def test_a_step_exception_whose_str_raises_is_still_recorded(kit: Kit) -> None:
    class Nasty(Exception):
        def __str__(self) -> str:
            raise ValueError("no message for you")

    pipe = Pipeline("nasty")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        raise Nasty

    result = kit.runner().run(pipe, {})
    assert result.status == "failed" and (result.reason or "").startswith("Nasty: ")


@pytest.mark.parametrize(
    ("report", "said"),
    [
        ({"reason": "bad", "step": "deploy"}, "names step 'deploy'"),
        ({"reason": 123}, "reason must be text, not int"),
        ({"reason": "bad", "harmful": "yes"}, "harmful must be True or False, not str"),
        ({"reason": "bad", "origin": 7}, "origin must be a step name or None, not int"),
    ],
)
def test_a_critic_report_the_runner_cannot_use_fails_the_critic_and_the_run_ends(
    kit: Kit, report: dict[str, object], said: str
) -> None:
    """`ctx.report()` is read after the Critic returned: a report naming a step the
    pipeline does not have raised ConfigError out of `run()`, and a reason that was not
    text ValidationFailed, after the Executor's record and before the Critic's: the run
    had neither the Critic's StepRecorded nor a RunFinished, and stayed `running` (and a
    `harmful` that was not a bool escaped as pydantic's own ValidationError)."""
    pipe = Pipeline("reporting")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor"))

    @pipe.critic()
    def review(ctx: StepContext) -> dict[str, object]:
        ctx.report(**report)  # type: ignore[arg-type]
        return tpc("Critic")

    result = kit.runner().run(pipe, {})
    assert (result.status, result.failed_step) == ("failed", "review")
    assert said in (result.reason or "")
    stream = events(kit, result)
    assert isinstance(stream[-1], RunFinished) and stream[-1].status == "failed"
    recorded = [(e.step_id, e.status) for e in stream if isinstance(e, StepRecorded)]
    assert recorded[-2:] == [("review", "error"), ("review~r1", "error")]


@pytest.mark.parametrize(
    ("choice", "said"),
    [
        (("fast", ["fast", "slow"], 123), "a reason in words, not int"),
        ((1, [1, 2], "cheaper"), "chosen must be text, not int"),
        (("fast", "fast", "cheaper"), "alternatives must be a list of names, not str"),
        (("fast", ["fast", None], "cheaper"), "alternatives must be names (text), not NoneType"),
    ],
)
def test_a_router_choice_the_runner_cannot_record_fails_the_router_and_the_run_ends(
    kit: Kit, choice: tuple[object, object, object], said: str
) -> None:
    """`ctx.choose()` checked only that the choice was among the alternatives: a reason or
    alternative that was not text raised ValidationFailed out of `run()` when the route was
    recorded, after the step returned and before its record, so the run never ended; a
    string as the alternatives was recorded as its letters."""
    pipe = Pipeline("routing")

    @pipe.router()
    def route(ctx: StepContext) -> dict[str, object]:
        ctx.choose(*choice)  # type: ignore[arg-type]
        return tpc("Router")

    result = kit.runner().run(pipe, {})
    assert (result.status, result.failed_step) == ("failed", "route")
    assert said in (result.reason or "")
    stream = events(kit, result)
    assert isinstance(stream[-1], RunFinished) and stream[-1].status == "failed"


@pytest.mark.parametrize(
    ("args", "kwargs", "said"),
    [
        (("",), {}, "a pipeline's name is non-empty text"),
        ((123,), {}, "a pipeline's name is non-empty text"),
        (("p",), {"pipeline_type": ""}, "pipeline_type is non-empty text"),
        (("p",), {"critical": "yes"}, "critical is True or False"),
        (("p",), {"max_repairs": "1"}, "max_repairs is an int"),
        (("p",), {"ref": "remediate.py"}, "ref is 'module:attribute'"),
    ],
)
def test_a_pipeline_the_ledger_cannot_record_is_refused_when_declared(
    kit: Kit, args: tuple[object, ...], kwargs: dict[str, object], said: str
) -> None:
    """Pipeline() took anything: an empty or non-text name or type, or a critical that was
    not a bool, escaped `run()` as pydantic's own ValidationError (RunStarted), a
    max_repairs that was not an int as a TypeError, and a ref without a colon was recorded
    and refused only by a `resume` days later."""
    with pytest.raises(ConfigError, match=said):
        Pipeline(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("declare", "said"),
    [
        (lambda pipe: pipe.step("Hacker", name="x"), "role 'Hacker' is not one of"),
        (lambda pipe: pipe.executor(name="x", scopes="write"), "scopes are a list of names"),
        (lambda pipe: pipe.executor(name="x", apply="push"), "apply is a function"),
    ],
)
def test_a_step_the_runner_could_not_run_is_refused_when_declared(
    declare: Callable[[Pipeline], Callable[[Any], Any]], said: str
) -> None:
    """A role outside the five was accepted, and its step's record then failed with
    pydantic's own ValidationError; `scopes="write"` became the scopes w, r, i, t, e; an
    apply hook that was not a function failed only once a human had approved the step."""
    pipe = Pipeline("declared")
    with pytest.raises(ConfigError, match=said):
        declare(pipe)(lambda ctx: tpc("Executor"))
    with pytest.raises(ConfigError, match="a step is a function"):
        pipe.executor(name="y")("not a function")  # type: ignore[type-var]


def test_a_step_name_that_is_no_arl_step_id_is_refused_when_declared() -> None:
    """The ARL's step ids have no whitespace: a step named `"my plan"` ran and recorded
    step_recorded entries that fail the ARL contract (validate_arl, arl.schema.json)."""
    pipe = Pipeline("spaced")
    with pytest.raises(ConfigError, match="whitespace"):
        pipe.planner(name="my plan")(lambda ctx: tpc("Planner"))


@pytest.mark.parametrize(
    "run_id",
    ["bad-run", "0B6C2F8E-3F1A-4C2E-9D7B-5A1E2C3D4F5A", "{0b6c2f8e-3f1a-4c2e-9d7b-5a1e2c3d4f5a}"],
)
def test_a_run_id_that_is_no_arl_run_id_is_refused_before_anything_is_written(
    kit: Kit, run_id: str
) -> None:
    """The ARL's run_id is a lower-case UUID: `run(..., run_id="bad-run")` recorded a run
    whose step_recorded entries fail the ARL contract."""
    pipe = Pipeline("named")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    with pytest.raises(ConfigError, match="lower-case UUID"):
        kit.runner().run(pipe, {}, run_id=run_id)
    with kit.ledger() as ledger:
        assert list(ledger.store.read_log()) == []


# -- interrupted runs -----------------------------------------------------------------


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_a_run_interrupted_before_any_gate_ends_failed_and_the_interrupt_goes_on(
    kit: Kit, interrupt: type[BaseException]
) -> None:
    """Ctrl-C in a step left the run without a run_finished: `tracebound runs` showed it
    `running` for good, and nothing could end it (`resume` refuses a run that is not at a
    gate; a take-over needs a claim)."""
    pipe = Pipeline("interrupted")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))

    @pipe.executor()
    def execute(ctx: StepContext) -> dict[str, object]:
        raise interrupt

    runner = kit.runner()
    with runner.ledger, pytest.raises(interrupt):
        runner.run(pipe, {})
    with kit.ledger() as ledger:
        (started,) = [e for e in ledger.store.read_log() if e.event_type == "run_started"]
        stream = [e.payload for e in ledger.store.read_stream(f"run/{started.workflow_id}")]
    end = stream[-1]
    assert isinstance(end, RunFinished) and (end.status, end.failed_step) == ("failed", "execute")
    assert end.reason == f"interrupted ({interrupt.__name__}) during step execute"


def test_a_run_stopped_by_its_on_event_hook_ends_failed_and_the_error_goes_on(kit: Kit) -> None:
    """A Runner's on_event hook (live metrics) that raised stopped the run mid-way, without
    a run_finished: `running` for good."""
    seen: list[str] = []

    def exporter_down(event: Any) -> None:
        seen.append(event.event_type)
        if event.event_type in {"step_recorded", "run_finished"}:
            raise RuntimeError("the metrics exporter is down")

    pipe = Pipeline("observed")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor"))
    runner = kit.runner()
    runner.on_event = exporter_down
    with runner.ledger, pytest.raises(RuntimeError, match="exporter is down") as info:
        runner.run(pipe, {})
    assert info.value.__notes__ == ["the run's end was recorded, then: RuntimeError"]
    with kit.ledger() as ledger:
        payloads = [e.payload for e in ledger.store.read_log()]
    assert [p.step_id for p in payloads if isinstance(p, StepRecorded)] == ["plan"]
    end = payloads[-1]
    assert isinstance(end, RunFinished) and end.status == "failed"
    assert end.reason == "error (RuntimeError) after step plan"
    assert seen[-1] == "run_finished"


def test_a_cancelled_run_ends_failed_and_the_cancellation_goes_on(kit: Kit) -> None:
    """What a real Ctrl-C is inside asyncio.run(): the main task is cancelled, so the step
    being awaited sees CancelledError."""
    pipe = Pipeline("cancelled")

    @pipe.planner()
    async def plan(ctx: StepContext) -> dict[str, object]:
        await asyncio.sleep(3600)
        return tpc("Planner")

    async def cancel_soon() -> None:
        task = asyncio.ensure_future(kit.runner().arun(pipe, {}))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())
    with kit.ledger() as ledger:
        end = list(ledger.store.read_log())[-1].payload
    assert isinstance(end, RunFinished) and end.status == "failed"
    assert end.reason == "interrupted (CancelledError) during step plan"


CTRL_C_SCRIPT = """
import sys, time
from pathlib import Path
from tests.integration.pipeline_kit import Kit, tpc
from tracebound.pipeline.runtime import Pipeline

root = Path(sys.argv[1])
pipe = Pipeline("ctrl-c")

@pipe.planner()
def plan(ctx):
    (root / "planning").touch()
    while not (root / "interrupted").exists():  # a sync step: a model call, say
        time.sleep(0.01)
    time.sleep(0.2)
    return tpc("Planner")

@pipe.executor(apply=lambda ctx, artifact: (root / "applied").touch())
def execute(ctx):
    return tpc("Executor")

runner = Kit(root).runner()
with runner.ledger:
    runner.run(pipe, {})
"""


def test_ctrl_c_in_a_sync_step_stops_the_run_at_the_next_step(kit: Kit) -> None:
    """A real SIGINT: asyncio.run() only cancels the task, and a run of sync steps never
    awaited, so it went on through every later step (the Executor's apply hook included),
    recorded `completed`, and only then raised KeyboardInterrupt."""
    script = kit.root / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(kit.root)],
        env=env,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    deadline = time.monotonic() + 60
    while not (kit.root / "planning").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    (kit.root / "interrupted").touch()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0 and b"KeyboardInterrupt" in stderr
    assert not (kit.root / "applied").exists()
    with kit.ledger() as ledger:
        payloads = [e.payload for e in ledger.store.read_log()]
    assert [p.step_id for p in payloads if isinstance(p, StepRecorded)] == ["plan"]
    end = payloads[-1]
    assert isinstance(end, RunFinished) and end.status == "failed"
    assert end.reason == "interrupted (CancelledError) after step plan"


def test_a_run_interrupted_between_its_gate_and_its_pause_is_left_for_a_take_over(
    kit: Kit,
) -> None:
    """Once a gate is requested the run is the take-over's to finish (docs/pipeline.md,
    section 4): an interrupt there records no end of its own."""

    class Interrupted(Runner):
        def _emit(self, run: Any, payload: Payload, **kw: Any) -> Any:
            recorded = super()._emit(run, payload, **kw)
            if isinstance(payload, GateRequested):
                raise KeyboardInterrupt
            return recorded

    pipe = Pipeline("gated")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(lambda ctx: tpc("Executor", diffs=[diff("requirements.txt")]))
    base = kit.runner()
    runner = Interrupted(
        base.ledger, blobs=base.blobs, policy=base.policy, redactor=base.redactor,
        codeowners=base.codeowners,
    )  # fmt: skip
    with runner.ledger, pytest.raises(KeyboardInterrupt):
        runner.run(pipe, {})
    with kit.ledger() as ledger:
        assert isinstance(list(ledger.store.read_log())[-1].payload, GateRequested)


# -- gates: path spellings and gates that name no path ----------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "./requirements.txt",
        "src/../requirements.txt",
        ".github/../requirements.txt",
        "/requirements.txt",
    ],
)
def test_another_spelling_of_a_sensitive_path_is_still_gated(kit: Kit, path: str) -> None:
    applied: list[object] = []
    pipe = Pipeline("spelling")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute", apply=lambda ctx, a: applied.append(a))(
        lambda ctx: tpc("Executor", diffs=[diff(path)])
    )
    result = kit.runner().run(pipe, {})
    assert (result.status, result.gated_step) == ("gated", "execute") and applied == []
    (gate,) = [e for e in events(kit, result) if isinstance(e, GateRequested)]
    assert gate.paths == ("requirements.txt",) and gate.owners == ("@alice", "@bob")


def test_a_gate_that_names_no_path_needs_a_default_owner(kit: Kit) -> None:
    runner = kit.runner()
    rules = {"sensitive_paths": ["requirements*.txt"], "untrusted_code_execution": True}
    runner.policy = Policy.from_dict({**POLICY, "gate": rules})
    pipe = Pipeline("exec")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(
        lambda ctx: tpc("Executor", actions=["exec:curl https://example.com/x.sh | sh"])
    )
    result = runner.run(pipe, {})
    assert (result.status, result.gated_step) == ("gated", "execute")
    (gate,) = [e for e in events(kit, result) if isinstance(e, GateRequested)]
    assert gate.paths == () and gate.owners == ("@team-platform",) and gate.repository_wide
    for stranger in ("@mallory", "alice"):  # alice owns requirements.txt, not the repository
        with pytest.raises(NotAnOwner, match="names no path"):
            approve(runner.ledger, RunId(result.run_id), StepId("execute"), stranger,
                    codeowners=runner.codeowners)  # fmt: skip
    record = approve(runner.ledger, RunId(result.run_id), StepId("execute"), "@Team-Platform",
                     codeowners=runner.codeowners)  # fmt: skip
    assert record.decision == "approved"


def test_without_a_catch_all_owner_nobody_approves_a_pathless_gate() -> None:
    owners = CodeOwners.parse("requirements.txt @alice\nsrc/** @bob\n")
    assert owners.default_owners() == ()
    for who in ("@alice", "@bob", ""):
        with pytest.raises(NotAnOwner):
            owners.check_approver(who, [], repository_wide=True)
    assert CodeOwners.parse(CODEOWNERS).default_owners() == ("@team-platform",)


# -- the CLI prints recorded text as text, never as markup ------------------------------


def test_cli_steps_table_prints_a_markup_like_reason_literally(kit: Kit) -> None:
    from tracebound.cli import _common as cli_common
    from tracebound.cli import runs as cli_runs

    pipe = Pipeline("[bold green]pipe[/x]")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        raise KeyError("[/bold] closes nothing")

    result = kit.runner().run(pipe, {})
    console = Console(record=True, width=200)
    # The table is laid out for the CLI's console: as wide as this one, so the reason
    # stays on one line (at 80 columns it folds beside the whole artifact digest).
    with mock.patch.object(cli_common.console, "_width", 200):
        console.print(cli_runs._steps_table(result))
    assert "[/bold] closes nothing" in console.export_text()  # was: MarkupError


# -- the blocking forms called from inside an event loop ------------------------------


def test_run_and_resume_inside_a_running_loop_say_to_await_the_async_forms(kit: Kit) -> None:
    pipe = Pipeline("in-a-loop")

    @pipe.planner()
    def plan(ctx: StepContext) -> dict[str, object]:
        return {"plan": "x"}

    runner = kit.runner()

    async def inside() -> None:
        with pytest.raises(ConfigError, match=r"await runner\.arun"):
            runner.run(pipe, {})
        with pytest.raises(ConfigError, match=r"await runner\.aresume"):
            runner.resume(pipe, "00000000-0000-4000-8000-000000000000")

    import warnings

    with warnings.catch_warnings():
        # Was: asyncio's RuntimeError, and a coroutine left never awaited.
        warnings.simplefilter("error", RuntimeWarning)
        asyncio.run(inside())
    assert runner.ledger.store.size() == 0  # nothing was recorded


# -- async: what runs on the event loop's thread (docs/pipeline.md) ------------------------


def test_arun_runs_plain_steps_on_the_loop_and_to_thread_moves_the_run_off_it(kit: Kit) -> None:
    """docs/pipeline.md: arun awaits async steps, but a plain step (and every ledger write)
    runs on the event loop's thread; a server that must not stall runs the blocking form in
    a worker thread, which is not refused as "inside a running event loop"."""
    seen: list[int] = []
    pipe = Pipeline("threads")

    def plan(ctx: StepContext) -> dict[str, object]:
        seen.append(threading.get_ident())
        return tpc("Planner")

    pipe.planner(name="plan")(plan)
    runner = kit.runner()

    async def serve() -> tuple[int, list[str]]:
        loop_thread = threading.get_ident()
        with pytest.raises(ConfigError, match=r"await runner\.arun"):
            runner.run(pipe, {})
        first = await runner.arun(pipe, {})
        second = await asyncio.to_thread(runner.run, pipe, {})
        return loop_thread, [first.status, second.status]

    loop_thread, statuses = asyncio.run(serve())
    assert statuses == ["completed", "completed"]
    assert seen[0] == loop_thread  # arun: on the loop's thread
    assert seen[1] != loop_thread  # to_thread: off it
