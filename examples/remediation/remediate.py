"""The reference remediation pipeline: fix a vulnerable dependency, with everything on record.

Run it with ``make demo`` (or ``python examples/remediation/remediate.py --approve-as
security-lead``). In one run, on the embedded SQLite default and entirely offline:

1. a Planner reads the OSV advisory (``advisory.json``) and hands the Executor an envelope:
   which paths it may touch, what must pass;
2. the Executor runs the retry loop. Attempt 1's recipe (bump to the first fixed version)
   fails the real test gate in a sandbox, because tinytemplate 2.0.0 renamed its API. The
   retry's prompt carries only the fenced, sanitised summary of that failure; the model
   (recorded responses served on loopback, the one fake allowed) answers with a different
   patch that also adapts the call site, and it passes;
3. the patch touches ``requirements.txt``, which the policy marks sensitive: the run pauses
   at the gate until a CODEOWNER (``@security-lead``) approves, then the patch is applied;
4. a Critic re-runs the project's tests on the patched workspace;
5. the ledger is checkpointed and verified, the run's evidence file and the attempt anchors
   are written, and a summary is printed.

Without ``--approve-as`` the run stops at step 3 with nothing patched, and prints the two
commands that finish it: ``tracebound approve`` (as the CODEOWNER) and this script again
with ``--dir WORKSPACE --resume RUN``, which applies the approved patch and runs the Critic.
A new run needs a new or empty ``--dir``: a workspace that holds a run is never overwritten.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tracebound import Ledger, RandomIds, SQLiteStore, SystemClock
from tracebound.contract import TPCArtifact
from tracebound.errors import (
    ConfigError,
    ContractError,
    PolicyUnusable,
    StoreNotFound,
    TraceboundError,
)
from tracebound.events.catalog import GateRequested
from tracebound.export.evidence import EvidenceWriter
from tracebound.ids import RunId, StepId
from tracebound.integrations.llm import OpenAICompatibleLeaf, ReplayServer, load_exchanges
from tracebound.pipeline.codeowners import CodeOwners, NotAnOwner
from tracebound.pipeline.config import load_redaction_key
from tracebound.pipeline.fallback import (
    Advisory,
    ApplyContext,
    Budget,
    FallbackTier,
    FenceWrapper,
    ModelPrice,
    PricingTable,
    RecipeBook,
    SolvedExampleStore,
)
from tracebound.pipeline.fallback.patch import apply_patch
from tracebound.pipeline.metrics import compute_metrics
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import Redactor
from tracebound.pipeline.retry.anchors import AnchorWriter
from tracebound.pipeline.retry.gates import CommandGate, GateRunner, pytest_gate, secret_scan_gate
from tracebound.pipeline.retry.loop import LoopResult, RetryLoop
from tracebound.pipeline.runner import Runner, RunResult, approve, run_stream
from tracebound.pipeline.runtime import Pipeline, StepContext
from tracebound.store.blobs import BlobStore, sha256_digest
from tracebound.store.keyfile import generate_keypair, load_signer
from tracebound.store.sqlite_blobs import SQLiteBlobStore
from tracebound.store.witness import FileWitness

HERE = Path(__file__).resolve().parent
WHEELHOUSE = HERE / "wheelhouse"
ORIGIN = "tracebound.demo/remediation"
MODEL = "o4-mini"
PRICING = PricingTable(
    {
        MODEL: ModelPrice(
            input_per_mtok=Decimal("1.10"),
            cached_input_per_mtok=Decimal("0.275"),
            output_per_mtok=Decimal("4.40"),
        )
    }
)


def deps_gate() -> CommandGate:
    """Install the pinned dependencies offline into the sandbox's ./vendor."""
    return CommandGate(
        "deps",
        (
            sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
            "--disable-pip-version-check", "--no-warn-script-location",
            "--find-links", str(WHEELHOUSE), "--target", "vendor", "-r", "requirements.txt",
        ),
    )  # fmt: skip


def install_and_test(project: Path) -> subprocess.CompletedProcess[str]:
    """The Critic's check on the real workspace: the same two commands as the gates."""
    shutil.rmtree(project / "vendor", ignore_errors=True)
    deps = deps_gate().argv
    subprocess.run(deps, cwd=project, check=True, capture_output=True, timeout=120)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def tpc(role: str, goal: str, **fields: Any) -> dict[str, Any]:
    """A TPC artifact with sensible empty defaults; the runner validates every field."""
    artifact: dict[str, Any] = {
        "role": role,
        "goal": goal,
        "input_refs": [],
        "assumptions": [],
        "constraints": [],
        "actions": [],
        "outputs": {"summary": goal, "artifacts": []},
        "diffs": [],
        "tests_run": [],
        "confidence": 9000,
        "risks": [],
        "cost_est": {"prompt_tokens": 0, "compute_usd_est": "0"},
        "latency_est": {"p50_ms": 1000, "p95_ms": 60000},
        "required_validations": [],
    }
    artifact.update(fields)
    return artifact


@dataclass
class Remediation:
    """Everything one demo run wires together."""

    workspace: Path
    project: Path
    ledger: Ledger
    blobs: BlobStore
    runner: Runner
    loop: RetryLoop
    advisory: Advisory
    outcome: LoopResult | None = None
    # What the gated apply hook really wrote, so the summary never calls a file patched
    # while the run still waits for its approval.
    applied: list[str] = field(default_factory=list)

    def pipeline(self) -> Pipeline:
        pipe = Pipeline(
            "remediate-dependency",
            pipeline_type="remediation",
            critical=True,
            # No ref: this pipeline is built around one workspace, its retry loop and the
            # recorded model server, so nothing could import it by name. It is resumed with
            # `remediate.py --resume RUN`; `tracebound replay RUN` checks what it recorded.
            ref=None,
            max_repairs=0,
        )
        advisory, project = self.advisory, self.project

        @pipe.planner()
        def plan(ctx: StepContext) -> dict[str, Any]:
            affected = advisory.affected[0]
            return tpc(
                "Planner",
                f"remediate {advisory.id} in {affected.package.name}",
                input_refs=[f"input://advisory/{advisory.id}"],
                assumptions=["the project's tests describe its intended behaviour"],
                actions=["read the advisory", "choose the fixed version", "hand over"],
                outputs={"summary": advisory.summary or advisory.id, "artifacts": []},
                risks=["the fixed release may change the package's API"],
                handoff_envelope={
                    "assumptions": ["only the vulnerable dependency and its call sites change"],
                    "constraints": ["paths:requirements.txt,app/**", "no-exec",
                                    "max-diff-lines:20"],
                    "required_validations": ["schema-validation", "secret-scan"],
                    "minimal_diff": f"bump {affected.package.name} past the advisory",
                },
            )  # fmt: skip

        @pipe.executor(apply=self._apply)
        def execute(ctx: StepContext) -> dict[str, Any]:
            result = self.loop.run(self._context(), workflow_id=ctx.run_id, target=project)
            self.outcome = result
            final = result.final
            if result.status != "passed" or final.patch is None:
                raise RuntimeError(f"no passing patch: {result.reason}")
            tokens = sum(a.anchor.tokens_in for a in result.attempts)
            cost = sum((a.anchor.cost_usd for a in result.attempts), Decimal(0))
            return tpc(
                "Executor",
                "apply a patch that passes the gates",
                actions=["run the retry loop", "propose the passing patch"],
                outputs={"summary": f"{final.tag} after {len(result.attempts)} attempt(s)",
                         "artifacts": [sha256_digest(final.patch.encode())]},
                diffs=[final.patch],
                tests_run=["deps", "tests", "secrets"],
                cost_est={"prompt_tokens": tokens, "compute_usd_est": str(cost)},
                handoff_envelope={
                    "assumptions": ["the patch passed every gate in the sandbox"],
                    "constraints": ["tests-must-pass"],
                    "required_validations": ["schema-validation"],
                    "minimal_diff": final.patch,
                },
            )  # fmt: skip

        @pipe.critic()
        def critique(ctx: StepContext) -> dict[str, Any]:
            check = install_and_test(project)
            if check.returncode != 0:
                ctx.report("the project's tests fail on the patched workspace", harmful=True)
            return tpc(
                "Critic",
                "check the applied change against the envelope",
                actions=["compare the patch with the envelope's constraints",
                         "re-run the tests on the workspace"],
                tests_run=["pytest"],
                outputs={"summary": "tests pass on the workspace" if check.returncode == 0
                         else "tests fail on the workspace", "artifacts": []},
                handoff_envelope={
                    "assumptions": ["the workspace is what will be reviewed"],
                    "constraints": ["no-write-to-prod"],
                    "required_validations": ["schema-validation"],
                    "minimal_diff": "none: review only",
                },
            )  # fmt: skip

        return pipe

    def _context(self) -> ApplyContext:
        return ApplyContext(
            advisory=self.advisory,
            repo_path=self.project,
            package="tinytemplate",
            current_version="1.4.0",
        )

    def _apply(self, ctx: StepContext, artifact: TPCArtifact) -> None:
        """The gated side effect: write the approved patch into the workspace."""
        if "write" not in ctx.scopes:
            raise PermissionError("the Executor may only write once its gate is lifted")
        for rel, content in apply_patch(self.project, artifact.diffs[0]).items():
            target = self.project / rel
            if content is None:
                target.unlink()
            else:
                target.write_text(content, encoding="utf-8")
            self.applied.append(rel)


def build(workspace: Path, server_url: str, *, fresh: bool = True) -> Remediation:
    """Wire a workspace: project copy, store, keys and witness outside the store.

    ``fresh`` copies the bundled project in (the workspace must not hold one yet); without
    it the workspace of an earlier run is reopened, to resume that run.
    """
    project = workspace / "project"
    if fresh:
        shutil.copytree(HERE / "project", project, ignore=shutil.ignore_patterns("vendor"))
    store = workspace / ".tracebound"
    keys = workspace / "keys"
    key_path = keys / "remediation.key"
    if not key_path.exists():
        generate_keypair("tracebound-demo", path=key_path, store_dir=store)
    signer = load_signer(key_path, store_dir=store)
    backend = SQLiteStore(store)
    ledger = Ledger(
        backend,
        clock=SystemClock(),
        ids=RandomIds(),
        signer=signer,
        witness=FileWitness(workspace / "witness" / "remediation.note", origin=ORIGIN),
        origin=ORIGIN,
    )
    # Artifacts, summaries and gate logs in the ledger's own file, as `tracebound` keeps them
    # by default: each is made durable by the append that names it (ADR 0009).
    blobs = SQLiteBlobStore(backend)
    redactor = Redactor(load_redaction_key(keys / "redaction.key", store_dir=store))
    fence = FenceWrapper(ledger.ids)
    retrieval = SolvedExampleStore(store / "solved-examples.db")
    leaf = OpenAICompatibleLeaf(f"{server_url}/v1", "sk-demo-replay", model=MODEL, max_retries=0)
    tier = FallbackTier(
        ledger=ledger,
        recipes=RecipeBook(),
        retrieval=retrieval,
        leaf=leaf,
        budget=Budget(Decimal("0.50"), max_output_tokens=2048),
        pricing=PRICING,
        fence=fence,
        redactor=redactor,
        workdir=store / "remediation",
    )
    gates = GateRunner(
        [deps_gate(), pytest_gate(), secret_scan_gate()],
        ledger=ledger,
        redactor=redactor,
        evidence=blobs,
        runs_root=store / "remediation",
    )
    loop = RetryLoop(
        tier,
        gates,
        ledger=ledger,
        fence=fence,
        blobs=blobs,
        anchors=AnchorWriter(store),
        retrieval=retrieval,
    )
    runner = Runner(
        ledger,
        blobs=blobs,
        policy=Policy.load(project / "tracebound-policy.toml"),
        redactor=redactor,
        codeowners=CodeOwners.load(project / "CODEOWNERS"),
        workspace=project,
        evidence=EvidenceWriter(workspace / "artifacts" / "agent-runs"),
    )
    advisory = Advisory.from_osv_json((HERE / "advisory.json").read_bytes())
    return Remediation(workspace, project, ledger, blobs, runner, loop, advisory)


def run(
    workspace: Path,
    *,
    approve_as: str | None,
    console: Console | None,
    resume: str | None = None,
) -> dict[str, Any]:
    """Run the whole demo, or resume the gated run ``resume``; returns a JSON-able summary."""
    with ReplayServer(load_exchanges(HERE / "llm" / "exchanges.json")) as server:
        demo = build(workspace, server.url, fresh=resume is None)
        pipeline = demo.pipeline()
        if resume is None:
            result = demo.runner.run(
                pipeline, {"advisory": demo.advisory.id, "package": "tinytemplate"}
            )
        else:
            result = demo.runner.resume(pipeline, resume)
        refused: NotAnOwner | None = None
        if result.status == "gated" and approve_as is not None:
            assert result.gated_step is not None
            try:
                approve(demo.ledger, RunId(result.run_id), StepId(result.gated_step),
                        approve_as, codeowners=demo.runner.codeowners)  # fmt: skip
            except NotAnOwner as exc:  # the run waits at its gate: say so, and for whom
                refused = exc
            else:
                result = demo.runner.resume(pipeline, result.run_id)
    with demo.ledger:
        demo.ledger.checkpoint()
        report = demo.ledger.verify()
        metrics = compute_metrics(demo.ledger.store.read_log())
        waiting = _waiting(demo, result) if result.status == "gated" else None
    summary = _summary(demo, result, report.as_dict(), metrics.as_dict(), waiting)
    if refused is not None:
        summary["ok"] = False
        summary["error"] = {"kind": type(refused).__name__, "message": str(refused)}
    if console is not None:
        _show(console, summary)
    return summary


def _tracebound() -> list[str]:
    """How to call this installation's CLI: the `tracebound` script when the one on PATH is
    this Python's (an active venv), else this Python with ``-m``, which works either way."""
    found = shutil.which("tracebound")
    if found is not None and Path(found).parent == Path(sys.executable).parent:
        return ["tracebound"]
    return [sys.executable, "-m", "tracebound"]


def _gate_request(ledger: Ledger, run_id: str, step: str) -> GateRequested | None:
    found = None
    for event in ledger.store.read_stream(run_stream(run_id)):
        if isinstance(event.payload, GateRequested) and event.payload.step_id == step:
            found = event.payload
    return found


def _waiting(demo: Remediation, result: RunResult) -> dict[str, Any]:
    """What a gated run waits for, and the commands (absolute paths) that finish it."""
    step = result.gated_step
    assert step is not None
    gate = _gate_request(demo.ledger, result.run_id, step)
    owners = list(gate.owners) if gate else []
    try:  # the files the approved patch will change: a dry run, nothing is written
        diff = result.artifact(step.split("~", 1)[0]).diffs[0]
        files = list(apply_patch(demo.project, diff))
    except (KeyError, IndexError, ContractError):
        files = list(gate.paths) if gate else []
    approver = owners[0].removeprefix("@") if owners else "NAME"
    approve_cmd = [*_tracebound(), "approve", result.run_id, step, "--as", approver,
                   "--store", str(demo.workspace / ".tracebound"),
                   "--codeowners", str(demo.project / "CODEOWNERS")]  # fmt: skip
    resume_cmd = [sys.executable, str(Path(__file__).absolute()),
                  "--dir", str(demo.workspace), "--resume", result.run_id]  # fmt: skip
    return {
        "step": step,
        "owners": owners,
        "gated_paths": list(gate.paths) if gate else [],
        "files": files,
        "approve": shlex.join(approve_cmd),
        "resume": shlex.join(resume_cmd),
    }


def _summary(
    demo: Remediation,
    result: RunResult,
    verify: dict[str, Any],
    metrics: dict[str, Any],
    waiting: dict[str, Any] | None,
) -> dict[str, Any]:
    status, run_id = result.status, result.run_id
    attempts = demo.outcome.attempts if demo.outcome else []
    anchors = sorted((demo.workspace / ".tracebound" / "fallback" / "anchors").rglob("*.jsonl"))
    evidence = demo.workspace / "artifacts" / "agent-runs" / f"{run_id}.json"
    return {
        "ok": status == "completed" and verify["ok"],
        "run_id": run_id,
        "status": status,
        "workspace": str(demo.workspace),
        "attempts": [
            {
                "index": a.attempt_index,
                "tag": a.tag,
                "patch_blake3": a.patch_blake3,
                "passed": None if a.trust is None else a.trust.passed,
                "failing": [] if a.trust is None else
                [f"{s.kind}: {s.subject}" for s in a.trust.failing_signals],
                "cost_usd": str(a.anchor.cost_usd),
                "tokens_in": a.anchor.tokens_in,
                "tokens_out": a.anchor.tokens_out,
                "fenced_summary_in_prompt": bool(a.prompt and "## Prior attempts" in a.prompt),
            }
            for a in attempts
        ],
        "verify": verify,
        "metrics": metrics["overall"],
        "waiting_for_approval": waiting,
        "paths": {
            "ledger": str(demo.workspace / ".tracebound" / "ledger.db"),
            "evidence": str(evidence) if evidence.exists() else None,
            "anchors": [str(p) for p in anchors],
            "patched": [str(demo.project / rel) for rel in dict.fromkeys(demo.applied)],
        },
    }  # fmt: skip


def _shown(argv: Sequence[str]) -> str:
    """A command as the user can paste it here: paths under this directory made relative."""
    cwd = Path.cwd()
    out = []
    for i, arg in enumerate(argv):
        path = Path(arg)
        if not (path.is_absolute() and path.is_relative_to(cwd)):
            out.append(arg)
            continue
        rel = str(path.relative_to(cwd))
        out.append(f"./{rel}" if i == 0 and "/" not in rel else rel)  # not looked up on PATH
    return shlex.join(out)


def _show(console: Console, s: dict[str, Any]) -> None:
    if s["attempts"]:
        console.print(_attempts_table(s))
    else:  # this call only resumed the run; its attempts were shown when it paused
        console.print(f"remediation run {s['run_id']}: {s['status']}", soft_wrap=True)
    m = s["metrics"]
    console.print(f"cost: {m['cost_usd']} USD; blame: {m['failures']} step failure(s), "
                  f"{m['unresolved_origin']} unresolved, harm rate {m['harm_rate']}")  # fmt: skip
    verdict = "[bold green]OK[/]" if s["verify"]["ok"] else "[bold red]FAILED[/]"
    console.print(f"ledger verify: {verdict} ({s['verify']['size']} events, signed and witnessed)")
    for name, value in s["paths"].items():
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                console.print(f"  {name}: {item}", soft_wrap=True, markup=False)
    waiting = s["waiting_for_approval"]
    if waiting is None:
        if not s["paths"]["patched"]:
            console.print(f"nothing patched (run {s['status']})")
        return
    console.print(f"[bold yellow]waiting for approval:[/] {escape(', '.join(waiting['files']))} "
                  "(not patched yet)", soft_wrap=True)  # fmt: skip
    owners = " or ".join(waiting["owners"]) or "nobody (no CODEOWNER)"
    gated = ", ".join(waiting["gated_paths"]) or "the change"
    console.print(f"  step {waiting['step']} is gated on {gated}; {owners} may approve it",
                  soft_wrap=True)  # fmt: skip
    # Whole lines, never wrapped by the console: they are meant to be pasted into a shell.
    console.print("To approve it and finish the run, from this directory:")
    for key in ("approve", "resume"):
        command = _shown(shlex.split(waiting[key]))
        console.print(f"  {command}", soft_wrap=True, markup=False, highlight=False)
    console.print("(or start a new run with --approve-as to approve it within the run)")


def _attempts_table(s: dict[str, Any]) -> Table:
    fenced = any(a["fenced_summary_in_prompt"] for a in s["attempts"])
    caption = "* its prompt had the fenced summary of the earlier failure(s)" if fenced else None
    table = Table(title=f"remediation run {s['run_id']}: {s['status']}", caption=caption,
                  caption_justify="left")  # fmt: skip
    # The failing gate is the point of the table: it gets the room, wrapped onto more lines
    # at 80 columns; the patch hash is cropped; #, planner and USD stay whole.
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("planner", no_wrap=True)
    table.add_column("patch", overflow="crop", no_wrap=True, min_width=6)
    table.add_column("gates", overflow="fold", ratio=1)
    table.add_column("USD", justify="right", no_wrap=True)
    for a in s["attempts"]:
        mark = " *" if a["fenced_summary_in_prompt"] else ""
        gates = "passed" if a["passed"] else (a["failing"][0] if a["failing"] else "refused")
        more = len(a["failing"]) - 1
        gates += f" (+{more} more)" if more > 0 else ""
        table.add_row(str(a["index"] + 1), a["tag"] + mark, (a["patch_blake3"] or "-")[:12],
                      gates, a["cost_usd"])  # fmt: skip
    return table


def _fail(error: TraceboundError, *, as_json: bool) -> int:
    """A usage or configuration error, reported as `tracebound` reports it; exit code 2."""
    message, kind = str(error), type(error).__name__
    if as_json:
        failure = {"ok": False, "error": {"kind": kind, "message": message}}
        sys.stdout.write(json.dumps(failure, indent=2) + "\n")
    else:
        sys.stderr.write(f"error: {message}\n")
    return 2


def _workspace(directory: Path | None, *, resume: str | None) -> Path:
    """The workspace to use (absolute, so the printed commands work from anywhere).

    Raises:
        ConfigError: it cannot be used, and why.
    """
    if directory is None:
        if resume is not None:
            raise ConfigError("--resume needs --dir, the workspace of the run that waits")
        return Path(tempfile.mkdtemp(prefix="tracebound-remediation-"))
    workspace = directory.expanduser().resolve()
    if workspace.exists() and not workspace.is_dir():
        raise ConfigError(f"--dir {directory} is not a directory")
    if resume is not None:
        if not (workspace / "project").is_dir() or not (workspace / ".tracebound").is_dir():
            raise ConfigError(f"--dir {directory} holds no remediation run to resume")
        return workspace
    # A new run never writes over an earlier one: its ledger, keys and patched project are
    # the evidence. An existing empty directory (mktemp -d) is fine.
    if workspace.exists() and any(workspace.iterdir()):
        raise ConfigError(
            f"--dir {directory} is not empty; a new run needs a new or empty directory "
            "(to finish a run that waits there for approval, add --resume RUN)"
        )
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--dir", type=Path, help="workspace: new or empty for a new run (default: a new temp dir)"
    )
    parser.add_argument("--approve-as", help="approve the gated step as this CODEOWNER")
    parser.add_argument(
        "--resume",
        metavar="RUN",
        help="finish the gated run RUN in --dir once it was approved (or rejected)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    try:
        workspace = _workspace(args.dir, resume=args.resume)
        summary = run(workspace, approve_as=args.approve_as, resume=args.resume,
                      console=None if args.json else Console())  # fmt: skip
    except (ConfigError, PolicyUnusable, StoreNotFound) as exc:  # e.g. no such run to resume
        return _fail(exc, as_json=args.json)
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if "error" in summary:  # --approve-as named someone who may not approve: usage
        if not args.json:
            sys.stderr.write(f"error: {summary['error']['message']}\n")
        return 2
    return 0 if summary["ok"] or summary["status"] == "gated" else 1


if __name__ == "__main__":
    sys.exit(main())
