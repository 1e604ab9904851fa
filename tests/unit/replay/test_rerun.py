"""rerun_run re-executes a recorded run in a scratch ledger and names the first divergence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.unit.replay import replay_pipelines as rp

from tracebound.errors import ConfigError
from tracebound.ids import RunId, StepId
from tracebound.pipeline.config import load_pipeline
from tracebound.pipeline.runner import Runner, approve
from tracebound.pipeline.runtime import Pipeline
from tracebound.replay import RerunReport, StepKey, first_divergence, rerun_run


@pytest.fixture(autouse=True)
def _vanilla() -> Iterator[None]:
    rp.TOGGLE["flavour"] = "vanilla"
    yield
    rp.TOGGLE["flavour"] = "vanilla"


def _rerun(runner: Runner, run_id: str, **kw: object) -> RerunReport:
    return rerun_run(
        runner.ledger,
        runner.blobs,
        run_id,
        policy=runner.policy,
        redactor=runner.redactor,
        codeowners=runner.codeowners,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("pipeline", [rp.deterministic, rp.repaired], ids=lambda p: p.name)
def test_a_deterministic_pipeline_replays_identically(tmp_path: Path, pipeline: Pipeline) -> None:
    runner = rp.make_runner(tmp_path)
    result = runner.run(pipeline, {"ticket": "T-1", "note": "keep it small"})
    report = _rerun(runner, result.run_id)  # imported from the recorded pipeline_ref
    assert report.identical, report.divergence
    assert report.rerun == report.recorded
    assert [k.step_id for k in report.rerun] == [o.step_id for o in result.steps]
    assert report.rerun_status == report.recorded_status == "completed"


def test_a_module_level_toggle_is_the_first_divergence(tmp_path: Path) -> None:
    runner = rp.make_runner(tmp_path)
    result = runner.run(rp.deterministic, {"ticket": "T-2"})
    rp.TOGGLE["flavour"] = "chocolate"
    report = _rerun(runner, result.run_id)
    divergence = report.divergence
    assert divergence is not None
    recorded_execute = result.steps[1]
    assert (divergence.index, divergence.step_id, divergence.field) == (
        1,
        "execute",
        "artifact_hash",
    )
    assert divergence.recorded == recorded_execute.artifact_hash
    assert divergence.rerun == report.rerun[1].artifact_hash != divergence.recorded
    assert "execute" in divergence.describe()
    # The Critic's artifact is unchanged: only the first divergence is reported, and it
    # is the executor's.
    assert report.rerun[2] == report.recorded[2]


def test_a_gated_run_reruns_through_the_recorded_decision(tmp_path: Path) -> None:
    runner = rp.make_runner(tmp_path)
    first = runner.run(rp.gated, {"ticket": "T-3"})
    waiting = _rerun(runner, first.run_id)  # nobody decided yet: the rerun waits there too
    assert waiting.identical and waiting.rerun_status == "gated"

    approve(runner.ledger, RunId(first.run_id), StepId("execute"), "alice",
            codeowners=runner.codeowners)  # fmt: skip
    runner.resume(rp.gated, first.run_id)
    report = _rerun(runner, first.run_id)
    assert report.identical, report.divergence
    assert [(k.step_id, k.status) for k in report.rerun] == [
        ("plan", "success"),
        ("execute", "gated"),
        ("execute", "success"),
        ("review", "success"),
    ]


def test_a_rejected_run_reruns_to_the_same_end(tmp_path: Path) -> None:
    runner = rp.make_runner(tmp_path)
    first = runner.run(rp.gated, {})
    approve(runner.ledger, RunId(first.run_id), StepId("execute"), "bob",
            codeowners=runner.codeowners, decision="rejected")  # fmt: skip
    runner.resume(rp.gated, first.run_id)
    report = _rerun(runner, first.run_id)
    assert report.identical and report.rerun_status == "rejected"


def test_a_pipeline_passed_by_object_or_reference(tmp_path: Path) -> None:
    runner = rp.make_runner(tmp_path)
    result = runner.run(rp.deterministic, {})
    assert _rerun(runner, result.run_id, pipeline=rp.deterministic).identical
    assert _rerun(runner, result.run_id, pipeline=rp.REF_PREFIX + "deterministic").identical
    with pytest.raises(ConfigError, match="not 'gated'"):
        _rerun(runner, result.run_id, pipeline=rp.gated)


def test_a_run_without_a_reference_needs_one(tmp_path: Path) -> None:
    runner = rp.make_runner(tmp_path)
    anonymous = Pipeline("deterministic")
    for spec in rp.deterministic.steps:
        anonymous.step(spec.role, name=spec.name)(spec.fn)
    result = runner.run(anonymous, {})
    with pytest.raises(ConfigError, match="no pipeline_ref"):
        _rerun(runner, result.run_id)
    assert _rerun(runner, result.run_id, pipeline=anonymous).identical


def test_first_divergence_compares_in_order() -> None:
    a = StepKey("plan", "success", "sha256:a")
    b = StepKey("execute", "success", "sha256:b")
    assert first_divergence([a, b], [a, b], "completed", "completed") is None
    short = first_divergence([a, b], [a], "completed", "failed")
    assert short is not None and (short.index, short.field, short.recorded, short.rerun) == (
        1,
        "step_id",
        "execute",
        None,
    )
    status = first_divergence([a, b], [a, StepKey("execute", "error", "sha256:b")], "c", "c")
    assert status is not None and (status.field, status.rerun) == ("status", "error")
    end = first_divergence([a], [a], "completed", "gated")
    assert end is not None and (end.step_id, end.field) == (None, "run_status")
    assert "the run" in end.describe()


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("no-colon", "module:attribute"),
        ("tracebound_no_such_module:x", "cannot import"),
        (rp.REF_PREFIX + "nope", "no attribute"),
        (rp.REF_PREFIX + "TOGGLE", "not a tracebound Pipeline"),
    ],
)
def test_bad_pipeline_references_are_config_errors(ref: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_pipeline(ref)


def test_a_factory_reference_is_called() -> None:
    assert load_pipeline(rp.REF_PREFIX + "factory") is rp.deterministic


def test_a_pipeline_module_that_raises_on_import_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only ImportError was translated: a module whose own code raised (a half-edited
    file, a missing environment variable) escaped `tracebound resume` and `replay --rerun`
    as a traceback, not one JSON document with `--json`."""
    (tmp_path / "tb_half_written_pipeline.py").write_text('raise RuntimeError("unfinished")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="RuntimeError: unfinished") as info:
        load_pipeline("tb_half_written_pipeline:pipeline")
    assert "tb_half_written_pipeline" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_factory_that_raises_is_a_config_error() -> None:
    """A callable that is not a factory (here one that needs arguments) was called and
    its TypeError escaped as a traceback."""
    with pytest.raises(ConfigError, match=r"calling .*make_runner.* raised TypeError") as info:
        load_pipeline(rp.REF_PREFIX + "make_runner")
    assert isinstance(info.value.__cause__, TypeError)
