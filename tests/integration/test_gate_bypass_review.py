"""Trying to get a gated step applied without the approval the policy requires.

A security review of the gate, the approval and the resume, as a pipeline user (or a
colluding process on the same machine) without the approver's identity would try it: real
SQLite ledger files, real blob stores, real `tracebound` processes where the CLI matters.

What the product promises (docs/pipeline.md, section 4; README "approve"): the approver
owns every path the gate names (CODEOWNERS, last match wins), in one normalised spelling;
a path outside the root is always gated; an approval covers one artifact, once; every blob
read is checked against its digest; nothing unredacted is written. What it does not promise
is that ``--as NAME`` is authenticated: the name is a claim, recorded. The tests at the end
pin that limit (and a few others) as they stand, so a change to them is a visible decision.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.integration.pipeline_kit import POLICY, SECRET, Kit, diff, tpc
from tests.integration.test_cli_runs import Shell
from tracebound import FixedClock, Ledger, SequentialIds, SQLiteStore
from tracebound.errors import ConfigError, IntegrityError
from tracebound.events.catalog import (
    ApprovalRecorded,
    GateRequested,
    RunResumed,
    StepRecorded,
)
from tracebound.events.envelope import Payload
from tracebound.ids import RunId, StepId
from tracebound.pipeline.codeowners import CodeOwners, NotAnOwner
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.runner import Runner, approve, run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.store.blobs import BlobStore, FileBlobStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

# .github is @secops's; requirements.txt @alice's; everything else the platform team's.
OWNERS = "*  @team-platform\n.github/  @secops\nrequirements.txt  @alice\n"
SENSITIVE = [".github/**", "requirements*.txt"]
GITHUB_POLICY: dict[str, Any] = {**POLICY, "gate": {"sensitive_paths": SENSITIVE}}


@pytest.fixture
def kit(tmp_path: Path) -> Kit:
    (tmp_path / "ws").mkdir()
    return Kit(tmp_path)


def runner_on(
    kit: Kit,
    namespace: int = 1,
    *,
    policy: dict[str, Any] = GITHUB_POLICY,
    codeowners: str = OWNERS,
    blobs: BlobStore | None = None,
) -> Runner:
    """A Runner with its own Ledger (its own connection) on the kit's ledger file, working
    in ``kit.root / "ws"``: what one process would build."""
    ledger = Ledger(
        SQLiteStore(kit.store_dir), clock=FixedClock(), ids=SequentialIds(namespace=namespace)
    )
    return Runner(
        ledger,
        blobs=blobs or FileBlobStore(kit.root / "blobs"),
        policy=Policy.from_dict(policy),
        redactor=Redactor(b"test-redaction-key-0123"),
        codeowners=CodeOwners.parse(codeowners),
        workspace=kit.root / "ws",
    )


def touching(
    *paths: str, applied: list[Any] | None = None, actions: list[str] | None = None
) -> Pipeline:
    """plan -> execute, whose artifact diffs ``paths``; its apply hook notes the artifact."""
    pipe = Pipeline("touching")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    hook = None if applied is None else (lambda ctx, artifact: applied.append(artifact))
    pipe.executor(name="execute", apply=hook)(
        lambda ctx: tpc("Executor", diffs=[diff(p) for p in paths], actions=actions or ["edit"])
    )
    return pipe


def stream(runner: Runner, run_id: str) -> list[Payload]:
    return [e.payload for e in runner.ledger.store.read_stream(run_stream(run_id))]


def gates(runner: Runner, run_id: str) -> list[GateRequested]:
    return [p for p in stream(runner, run_id) if isinstance(p, GateRequested)]


def decide(runner: Runner, run_id: str, step: str, name: str, decision: str = "approved") -> None:
    approve(runner.ledger, RunId(run_id), StepId(step), name, codeowners=runner.codeowners,
            decision="approved" if decision == "approved" else "rejected")  # fmt: skip


# -- 1. approving as the owner of the gated paths ------------------------------------------


def test_the_owner_of_the_gated_paths_approves_a_diff_that_also_touches_ungated_ones(
    kit: Kit,
) -> None:
    """The step touches requirements.txt (sensitive, @alice's) *and* src/app.py (not
    sensitive, the platform team's). The policy decides what needs a human, CODEOWNERS who:
    the gate names the paths that made the step risky, and their owner approves it. The
    rest of the diff needs no owner, as it would need none alone (a step touching only
    src/app.py is not gated); the approver sees it in the artifact. docs/pipeline.md,
    section 4, says so (it once said "every path the step touches")."""
    applied: list[Any] = []
    runner = runner_on(kit)
    pipe = touching("requirements.txt", "src/app.py", applied=applied)
    alone = touching("src/app.py")
    with runner.ledger:
        assert runner.run(alone, {}).status == "completed"  # not risky on its own
        run = runner.run(pipe, {})
        assert run.status == "gated"
        (gate,) = gates(runner, run.run_id)
        assert gate.paths == ("requirements.txt",)
        assert gate.owners == ("@alice",)
        with pytest.raises(NotAnOwner, match=r"requirements\.txt"):
            decide(runner, run.run_id, "execute", "@team-platform")
        decide(runner, run.run_id, "execute", "@alice")
        assert runner.resume(pipe, run.run_id).status == "completed"
    assert len(applied) == 1


def test_an_owner_of_every_touched_path_still_approves(kit: Kit) -> None:
    applied: list[Any] = []
    owners = OWNERS + "src/  @alice\n"
    runner = runner_on(kit, codeowners=owners)
    pipe = touching("requirements.txt", "src/app.py", applied=applied)
    with runner.ledger:
        run = runner.run(pipe, {})
        (gate,) = gates(runner, run.run_id)
        assert gate.owners == ("@alice",)
        decide(runner, run.run_id, "execute", "@alice")
        assert runner.resume(pipe, run.run_id).status == "completed"
    assert len(applied) == 1


SPELLINGS = [
    pytest.param("./.github/workflows/ci.yml", id="dot-slash"),
    pytest.param("src/../.github/workflows/ci.yml", id="dot-dot-inside"),
    pytest.param(".github//workflows/./ci.yml", id="double-slash"),
    pytest.param("/.github/workflows/ci.yml", id="leading-slash"),
    pytest.param(".github\\workflows\\ci.yml", id="backslash"),
]


@pytest.mark.parametrize("path", SPELLINGS)
def test_another_spelling_of_a_sensitive_path_is_gated_and_is_its_owners_call(
    kit: Kit, path: str
) -> None:
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(touching(path), {})
        assert run.status == "gated"
        (gate,) = gates(runner, run.run_id)
        assert gate.paths == (".github/workflows/ci.yml",)
        with pytest.raises(NotAnOwner):
            decide(runner, run.run_id, "execute", "@team-platform")
        decide(runner, run.run_id, "execute", "@secops")


def test_a_path_that_climbs_out_of_the_root_is_gated_whatever_the_rules_say(kit: Kit) -> None:
    runner = runner_on(kit, policy={**POLICY, "gate": {"sensitive_paths": ["nothing-here"]}})
    with runner.ledger:
        run = runner.run(touching("src/../../outside/x.txt"), {})
        assert run.status == "gated"
        (gate,) = gates(runner, run.run_id)
        assert gate.paths == ("../outside/x.txt",)
        assert any(r.startswith("path_outside_root") for r in gate.reasons)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(".github/workflows/Xy7Qz9Lm3Np5Rt8Vw2Bc4Df6Gh.yml", id="file-name"),
        pytest.param(".github/workflows/gen/Xy7Qz9Lm3Np5Rt8Vw2Bc4Df6Gh/ci.yml", id="folder"),
    ],
)
def test_a_path_the_redactor_swallowed_is_gated_and_is_a_default_owners_call(
    kit: Kit, path: str
) -> None:
    """The artifact is redacted before the policy reads its paths. A random-looking name in
    a path reads as a base64 secret, and the marker swallowed the path around it
    (`.github/workflows/Xy7Q...` became `.[REDACTED:high-entropy-base64:...].yml`): a change
    under .github/** was not gated, and its apply hook ran with the write scope."""
    applied: list[Any] = []
    runner = runner_on(kit)
    pipe = touching(path, applied=applied)
    with runner.ledger:
        run = runner.run(pipe, {})
        assert (run.status, applied) == ("gated", [])
        (gate,) = gates(runner, run.run_id)
        assert gate.repository_wide  # nobody can tell whose file it is
        assert any(r.startswith("redacted_path") for r in gate.reasons)
        with pytest.raises(NotAnOwner):
            decide(runner, run.run_id, "execute", "@secops")
        decide(runner, run.run_id, "execute", "@team-platform")
        assert runner.resume(pipe, run.run_id).status == "completed"
    assert len(applied) == 1


@pytest.mark.parametrize(
    ("action", "rule"),
    [
        pytest.param("Write: .github/workflows/ci.yml", "sensitive_paths", id="Write"),
        pytest.param("WRITE:.github/workflows/ci.yml", "sensitive_paths", id="WRITE"),
        pytest.param("Exec: make deploy", "untrusted_code_execution", id="Exec"),
    ],
)
def test_an_action_written_in_capitals_is_read_as_the_same_action(
    kit: Kit, action: str, rule: str
) -> None:
    """Only `write:` and `exec:` in lower case were read as actions: an artifact (often a
    model's words) that said `Write: .github/workflows/ci.yml` or `Exec: make deploy` was
    not gated, and its apply hook ran with the write scope."""
    applied: list[Any] = []
    policy = {**POLICY, "gate": {"sensitive_paths": SENSITIVE, "untrusted_code_execution": True}}
    runner = runner_on(kit, policy=policy)
    with runner.ledger:
        run = runner.run(touching(applied=applied, actions=[action]), {})
        assert (run.status, applied) == ("gated", [])
        (gate,) = gates(runner, run.run_id)
        assert any(r.startswith(rule) for r in gate.reasons), gate.reasons


def test_a_case_variant_of_a_sensitive_folder_needs_its_owner_too(kit: Kit) -> None:
    """`.GITHUB/workflows/ci.yml` *is* `.github/workflows/ci.yml` on macOS and Windows, and
    the policy gates it for that reason; CODEOWNERS matched it case-sensitively, so only
    the catch-all line (@team-platform) owned it and the platform team lifted a gate on
    @secops's workflows. The approver must now own it under both spellings."""
    applied: list[Any] = []
    runner = runner_on(kit)
    pipe = touching(".GITHUB/workflows/ci.yml", applied=applied)
    with runner.ledger:
        run = runner.run(pipe, {})
        assert run.status == "gated"
        (gate,) = gates(runner, run.run_id)
        assert gate.owners == ()
        with pytest.raises(NotAnOwner, match=r"\.GITHUB/workflows/ci\.yml"):
            decide(runner, run.run_id, "execute", "@team-platform")
        with pytest.raises(NotAnOwner):
            decide(runner, run.run_id, "execute", "@secops")
    # someone on both lines may
    both = runner_on(kit, 2, codeowners="*  @team-platform @secops\n.github/  @secops\n")
    with both.ledger:
        decide(both, run.run_id, "execute", "@secops")
        assert both.resume(pipe, run.run_id).status == "completed"
    assert len(applied) == 1


def test_a_decomposed_unicode_spelling_needs_the_owner_of_the_composed_one(kit: Kit) -> None:
    """`café/` (NFC) in CODEOWNERS and `cafe\u0301/` (NFD) in the diff name one folder on
    macOS; the owner of the composed spelling must approve the decomposed one too."""
    owners = "*  @team-platform\ncaf\u00e9/  @chef\n"
    policy = {**POLICY, "gate": {"sensitive_paths": ["caf*/**"]}}
    runner = runner_on(kit, policy=policy, codeowners=owners)
    with runner.ledger:
        run = runner.run(touching("cafe\u0301/menu.txt"), {})
        assert run.status == "gated"
        with pytest.raises(NotAnOwner):
            decide(runner, run.run_id, "execute", "@team-platform")


def test_a_lookalike_of_a_sensitive_path_is_another_file_and_is_not_gated(kit: Kit) -> None:
    """A Cyrillic `\u0435` in `requir\u0435ments.txt` names another file on every file system: it is
    not the sensitive one, so not gating it is right (a human reviewing the diff would have
    to notice the lookalike; the policy compares names, not glyphs)."""
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(touching("requir\u0435ments.txt"), {})
        assert run.status == "completed"


@pytest.mark.parametrize(
    ("owners", "refused", "allowed"),
    [
        # last match wins: a later, broader rule takes requirements.txt away from @alice
        pytest.param(OWNERS + "*.txt  @bob\n", "@alice", "@bob", id="later-rule-wins"),
        # CODEOWNERS has no negation: `!requirements.txt` is a literal (unmatched) pattern
        pytest.param(
            OWNERS + "!requirements.txt  @mallory\n", "@mallory", "@alice", id="no-negation"
        ),
    ],
)
def test_codeowners_later_rules_and_negation_decide_as_github_does(
    kit: Kit, owners: str, refused: str, allowed: str
) -> None:
    runner = runner_on(kit, codeowners=owners)
    with runner.ledger:
        run = runner.run(touching("requirements.txt"), {})
        with pytest.raises(NotAnOwner):
            decide(runner, run.run_id, "execute", refused)
        decide(runner, run.run_id, "execute", allowed)


# -- 2. symlinks in the workspace ---------------------------------------------------------


def test_a_path_through_a_symlink_into_a_sensitive_folder_is_gated_as_that_folder(
    kit: Kit,
) -> None:
    """`docs/ci` is a symlink to `.github/workflows` in the workspace: the diff names
    `docs/ci/deploy.yml`, the apply hook writes `.github/workflows/deploy.yml`. Before the
    fix the step was not gated at all (the policy saw only the spelling)."""
    ws = kit.root / "ws"
    (ws / ".github" / "workflows").mkdir(parents=True)
    (ws / "docs").mkdir()
    (ws / "docs" / "ci").symlink_to(Path("..") / ".github" / "workflows")
    applied: list[Any] = []
    runner = runner_on(kit)
    pipe = touching("docs/ci/deploy.yml", applied=applied)
    with runner.ledger:
        run = runner.run(pipe, {})
        assert run.status == "gated"
        (gate,) = gates(runner, run.run_id)
        assert gate.paths == (".github/workflows/deploy.yml",)  # the name it really has
        with pytest.raises(NotAnOwner):
            decide(runner, run.run_id, "execute", "@team-platform")
    assert applied == []


def test_a_path_through_a_symlink_out_of_the_workspace_is_gated_as_outside(kit: Kit) -> None:
    outside = kit.root / "elsewhere"
    outside.mkdir()
    (kit.root / "ws" / "vendor").symlink_to(outside)
    runner = runner_on(kit, policy={**POLICY, "gate": {"sensitive_paths": ["nothing-here"]}})
    with runner.ledger:
        run = runner.run(touching("vendor/lib.py"), {})
        assert run.status == "gated"
        (gate,) = gates(runner, run.run_id)
        assert any(r.startswith("path_outside_root") for r in gate.reasons)


# -- 3. swapping the gated artifact's blob between approval and resume ------------------------


def _gated_digest(runner: Runner, run_id: str) -> str:
    (gated,) = [
        p for p in stream(runner, run_id) if isinstance(p, StepRecorded) and p.status == "gated"
    ]
    return gated.artifact_hash


def _evil_bytes() -> bytes:
    evil = tpc("Executor", diffs=[diff("requirements.txt"), diff(".github/workflows/x.yml")])
    return json.dumps(evil).encode()


@pytest.mark.parametrize("where", ["files", "in-ledger"])
def test_a_gated_artifact_swapped_after_approval_is_not_applied(kit: Kit, where: str) -> None:
    """Same digest key, different bytes: resume reads the blob back and checks its SHA-256
    before anything is claimed or applied."""
    applied: list[Any] = []
    pipe = touching("requirements.txt", applied=applied)
    runner = runner_on(kit)
    if where == "in-ledger":
        runner = runner_on(kit, blobs=SQLiteBlobStore(kit.store_dir))
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
        digest = _gated_digest(runner, run.run_id)
    if where == "files":
        h = digest.removeprefix("sha256:")
        blob = kit.root / "blobs" / "sha256" / h[:2] / h[2:]
        blob.chmod(0o644)
        blob.write_bytes(_evil_bytes())
    else:
        with sqlite3.connect(kit.store_dir / "ledger.db") as db:
            n = db.execute("UPDATE blobs SET data = ? WHERE digest = ?", (_evil_bytes(), digest))
            assert n.rowcount == 1
    again = runner_on(kit, 2)
    if where == "in-ledger":
        again = runner_on(kit, 2, blobs=SQLiteBlobStore(kit.store_dir))
    with again.ledger, pytest.raises(IntegrityError, match="altered"):
        again.resume(pipe, run.run_id)
    assert applied == []
    with runner_on(kit, 3).ledger as ledger:
        assert not any(isinstance(e.payload, RunResumed) for e in ledger.store.read_log())


def test_a_new_blob_written_beside_the_approved_one_changes_nothing(kit: Kit) -> None:
    applied: list[Any] = []
    pipe = touching("requirements.txt", applied=applied)
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
        approved = _gated_digest(runner, run.run_id)
        runner.blobs.put(_evil_bytes())
        assert runner.resume(pipe, run.run_id).status == "completed"
        (step,) = [p for p in stream(runner, run.run_id) if isinstance(p, StepRecorded)
                   and p.status == "success" and p.step_id == "execute"]  # fmt: skip
    (artifact,) = applied
    assert artifact.diffs == (diff("requirements.txt"),)
    assert step.artifact_hash == approved  # the record names the approved bytes, still


# -- 4. one approval, one gate --------------------------------------------------------------


def test_decisions_are_once_per_gate_and_never_after_the_run_finished(kit: Kit) -> None:
    applied: list[Any] = []
    pipe = touching("requirements.txt", applied=applied)
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {})
        with pytest.raises(ConfigError, match="not waiting"):
            decide(runner, run.run_id, "plan", "@team-platform")  # never gated
        with pytest.raises(ConfigError, match="not waiting"):
            decide(runner, run.run_id, "execute~r1", "@alice")  # no such gate
        decide(runner, run.run_id, "execute", "@alice")
        for name, how in (("@alice", "approved"), ("@ALICE", "approved"),
                          ("@alice", "rejected")):  # fmt: skip
            with pytest.raises(ConfigError, match="already approved"):
                decide(runner, run.run_id, "execute", name, how)
        assert runner.resume(pipe, run.run_id).status == "completed"
        with pytest.raises(ConfigError, match="already approved"):
            decide(runner, run.run_id, "execute", "@alice")
        with pytest.raises(ConfigError, match="not waiting at a gate"):
            runner.resume(pipe, run.run_id)
        approvals = [p for p in stream(runner, run.run_id) if isinstance(p, ApprovalRecorded)]
    assert len(approvals) == 1 and len(applied) == 1


def test_an_approval_of_the_first_gate_does_not_lift_a_repair_gate(kit: Kit) -> None:
    """execute is approved and applied; the Critic then blames it, the repair re-runs it as
    execute~r1, gated afresh. The spent approval of `execute` does not carry over, and
    approving `execute` again is refused."""
    applied: list[Any] = []
    pipe = touching("requirements.txt", applied=applied)
    calls = {"n": 0}

    @pipe.critic(name="review", after="execute")
    def review(ctx: StepContext) -> dict[str, object]:
        calls["n"] += 1
        if calls["n"] == 1:
            ctx.report("the pin is wrong", origin="execute")
        return tpc("Critic")

    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
        again = runner.resume(pipe, run.run_id)
        assert (again.status, again.gated_step) == ("gated", "execute~r1")
        with pytest.raises(ConfigError, match="already approved"):
            decide(runner, run.run_id, "execute", "@alice")
    second = runner_on(kit, 2)
    with second.ledger:
        assert second.resume(pipe, run.run_id).status == "gated"  # undecided: still waits
    assert len(applied) == 1


def test_two_decisions_racing_on_one_gate_record_one(kit: Kit) -> None:
    """Two processes decide the same gate at once: @alice approves while, between her read
    of the run and her append, a second process records @alice's rejection. Each saw no
    decision; exactly one may be recorded, and the loser is told it was already decided
    (it re-reads the run once its append at the version it read conflicts)."""
    pipe = touching("requirements.txt")
    runner = runner_on(kit)
    other = runner_on(kit, 2)
    with runner.ledger, other.ledger:
        run = runner.run(pipe, {})
        store = runner.ledger.store
        read_stream = store.read_stream
        raced = {"done": False}

        def racing_read(*args: Any, **kwargs: Any) -> Any:
            events = list(read_stream(*args, **kwargs))
            if not raced["done"]:  # the other process decides right after this one read
                raced["done"] = True
                decide(other, run.run_id, "execute", "@alice", "rejected")
            return iter(events)

        store.read_stream = racing_read  # type: ignore[method-assign]
        with pytest.raises(ConfigError, match="already rejected"):
            decide(runner, run.run_id, "execute", "@alice")
        store.read_stream = read_stream  # type: ignore[method-assign]
        decisions = [p for p in stream(runner, run.run_id) if isinstance(p, ApprovalRecorded)]
    assert [d.decision for d in decisions] == ["rejected"]


# -- 5. what resume is resumed with --------------------------------------------------------


def test_a_pipeline_without_the_gated_step_cannot_resume_it_and_claims_nothing(kit: Kit) -> None:
    pipe = touching("requirements.txt")
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
        renamed = Pipeline("touching")
        renamed.planner(name="plan")(lambda ctx: tpc("Planner"))
        renamed.executor(name="execute_v2")(lambda ctx: tpc("Executor"))
        with pytest.raises(ConfigError):
            runner.resume(renamed, run.run_id)
        with pytest.raises(ConfigError, match="of pipeline 'touching'"):
            runner.resume(Pipeline("other"), run.run_id)
        assert not any(isinstance(p, RunResumed) for p in stream(runner, run.run_id))


def test_resume_runs_whatever_apply_hook_the_pipeline_it_is_given_has(kit: Kit) -> None:
    """LIMIT, not promised otherwise: resume checks the pipeline's *name* only. A pipeline
    of the same name whose `execute` has another apply hook (`--pipeline other:pipe` on the
    CLI) applies the approved artifact with that hook. The artifact is the approved one;
    the code that applies it is whatever the resumer imports. Whoever can run `resume` can
    run Python, so this is not a boundary tracebound can hold; the docs should say so."""
    pipe = touching("requirements.txt")
    runner = runner_on(kit)
    other_hook: list[Any] = []
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
        impostor = touching("requirements.txt", applied=other_hook)
        assert runner.resume(impostor, run.run_id).status == "completed"
    (artifact,) = other_hook
    assert artifact.diffs == (diff("requirements.txt"),)  # the approved artifact, still


def test_later_steps_are_gated_by_the_policy_in_force_at_resume(kit: Kit) -> None:
    """LIMIT, not promised otherwise: the gate's decision is a recorded fact (ADR 0012), but
    the steps *after* it are judged by the policy the resuming process loads. Dropping the
    `.github/**` rule between the gate and the resume lets a later write to .github through
    ungated. The run records no digest of its policy (RunStarted has `pipeline_ref` only)."""
    pipe = touching("requirements.txt")
    later: list[Any] = []
    pipe.executor(name="publish", after="execute", apply=lambda ctx, a: later.append(a))(
        lambda ctx: tpc("Executor", diffs=[diff(".github/workflows/release.yml")])
    )
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
    relaxed = runner_on(kit, 2, policy={**POLICY, "gate": {"sensitive_paths": ["req*.txt"]}})
    with relaxed.ledger:
        assert relaxed.resume(pipe, run.run_id).status == "completed"
    assert len(later) == 1  # .github written with no gate and no @secops


def test_an_apply_hook_may_touch_paths_its_artifact_did_not_declare(kit: Kit) -> None:
    """LIMIT, not promised otherwise: the policy judges what the artifact declares (diffs,
    `write:` and `exec:` actions); an apply hook is user code and is not confined to it."""
    written: list[Path] = []

    def sneaky(ctx: StepContext, artifact: object) -> None:
        assert ctx.workspace is not None
        target = ctx.workspace / ".github" / "workflows" / "evil.yml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("on: push\n")
        written.append(target)

    pipe = Pipeline("sneaky")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute", apply=sneaky)(
        lambda ctx: tpc("Executor", diffs=[diff("src/app.py")])
    )
    runner = runner_on(kit)
    with runner.ledger:
        assert runner.run(pipe, {}).status == "completed"  # never gated
    assert written and written[0].exists()


# -- 6. secrets through the decision and take-over names ----------------------------------


def test_a_take_over_name_is_redacted_before_it_is_recorded(kit: Kit) -> None:
    """`resume --take-over --as NAME` records NAME in `run_resumed.taken_over_by`. Nothing
    checks NAME against CODEOWNERS (a take-over lifts no gate), and before the fix nothing
    redacted it either: a token pasted as the name went to the ledger as it was."""
    pipe = touching("requirements.txt")
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {})
        decide(runner, run.run_id, "execute", "@alice")
        claim = RunResumed(run_id=RunId(run.run_id), step_id=StepId("execute"),
                           decision="approved")  # fmt: skip
        runner.ledger.record(run_stream(run.run_id), [claim], workflow_id=run.run_id)
        # the claimant "died" right after its claim; take it over with a secret for a name
        done = runner.resume(pipe, run.run_id, take_over_by=f"@oncall {SECRET}")
        assert done.status == "completed"
        names = [p.taken_over_by for p in stream(runner, run.run_id)
                 if isinstance(p, RunResumed)]  # fmt: skip
    assert names[0] is None and names[1] is not None
    assert SECRET not in names[1] and names[1].startswith("@oncall ")
    assert SECRET.encode() not in (kit.store_dir / "ledger.db").read_bytes()


def test_an_approver_name_must_be_an_owner_so_a_secret_cannot_be_one(kit: Kit) -> None:
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(touching("requirements.txt"), {})
        for how in ("approved", "rejected"):
            with pytest.raises(NotAnOwner):
                decide(runner, run.run_id, "execute", SECRET, how)
    assert SECRET.encode() not in (kit.store_dir / "ledger.db").read_bytes()


def test_a_rejected_artifacts_secret_never_reaches_the_ledger_or_its_blobs(kit: Kit) -> None:
    pipe = Pipeline("leaky")
    pipe.planner(name="plan")(lambda ctx: tpc("Planner"))
    pipe.executor(name="execute")(
        lambda ctx: tpc(
            "Executor",
            diffs=[diff("requirements.txt") + f"+token={SECRET}\n"],
            outputs={"summary": f"used {SECRET}", "artifacts": []},
        )
    )
    runner = runner_on(kit)
    with runner.ledger:
        run = runner.run(pipe, {"token": SECRET})
        decide(runner, run.run_id, "execute", "@alice", "rejected")
        assert runner.resume(pipe, run.run_id).status == "rejected"
    everything = b"".join(p.read_bytes() for p in kit.root.rglob("*") if p.is_file())
    assert SECRET.encode() not in everything


# -- 7. the CLI: who `--as` is, and which CODEOWNERS file is read ---------------------------


@pytest.fixture
def sh(tmp_path: Path) -> Shell:
    shell = Shell(tmp_path)
    shell.tb("init", "--origin", "test.example/bypass")
    shell.tb("keys", "init")
    (shell.cwd / "tracebound-policy.toml").write_text(
        'version = 1\n[gate]\nsensitive_paths = ["requirements*.txt"]\n[scopes]\n'
        'allowed = ["read", "write"]\nExecutor = ["read"]\n'
        'after_approval = { Executor = ["read", "write"] }\n'
    )
    (shell.cwd / "CODEOWNERS").write_text("*  @platform\nrequirements.txt  @alice\n")
    return shell


def _start(sh: Shell) -> str:
    proc = sh.run(str(HERE / "cli_runs_pipelines.py"), "gated", "")
    run_id: str = json.loads(proc.stdout.strip().splitlines()[-1])["run_id"]
    return run_id


def test_cli_the_approver_name_is_a_claim_anyone_at_the_terminal_can_make(sh: Shell) -> None:
    """LIMIT, not promised otherwise: `--as` is not authenticated. Any user who can write
    the ledger can type an owner's name, and pointing `--codeowners` at a file of their own
    makes anyone an owner. What the ledger keeps is the claim, chained and signed, for an
    audit to hold someone to; docs/pipeline.md says so now."""
    run = _start(sh)
    sh.tb("approve", run, "execute", "--as", "@mallory", code=2)
    mine = sh.cwd / "mine"
    mine.write_text("*  @mallory\n")
    sh.tb("approve", run, "execute", "--as", "@mallory", "--codeowners", str(mine))
    resumed = json.loads(sh.tb("resume", run, "--json").stdout)
    assert resumed["status"] == "completed"


def test_cli_a_take_over_name_holding_a_secret_is_redacted(sh: Shell) -> None:
    run = _start(sh)
    sh.tb("approve", run, "execute", "--as", "@alice")
    backend = SQLiteStore(sh.cwd / ".tracebound")
    with Ledger(backend, clock=FixedClock(), ids=SequentialIds(namespace=9)) as ledger:
        claim = RunResumed(run_id=RunId(run), step_id=StepId("execute"), decision="approved")
        ledger.record(run_stream(run), [claim], workflow_id=run)
    sh.tb("resume", run, "--take-over", "--as", f"@oncall {SECRET}")
    store = sh.cwd / ".tracebound"
    assert all(SECRET.encode() not in p.read_bytes() for p in store.rglob("*") if p.is_file())
