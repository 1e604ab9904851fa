"""Anchor files (ADR-04-0017 layout), schema co-existence, and the provable dataset export."""

from __future__ import annotations

import io
import json
import stat
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import Field, TypeAdapter
from tests.unit.retry.retry_kit import WF, Kit, anchor
from typer.testing import CliRunner

from tracebound.canonical import canonical_bytes
from tracebound.errors import ConfigError, IntegrityError, ValidationFailed
from tracebound.events.anchor import AttemptAnchor, AttemptAnchorBase
from tracebound.ledger import InclusionBundle, verify_bundle
from tracebound.pipeline.retry.anchors import (
    DATASET_ROW_ADAPTER,
    AnchorWriter,
    anchor_dataset,
    read_anchor_file,
    read_dataset,
    write_dataset,
)


def test_layout_modes_and_utc_date(tmp_path: Path) -> None:
    writer = AnchorWriter(tmp_path)
    # 00:30 at +02:00 is still the previous day in UTC: the file goes by UTC.
    late = datetime(2026, 5, 19, 0, 30, tzinfo=timezone(timedelta(hours=2)))
    assert writer.write(anchor(0, when=late))
    path = tmp_path / "fallback" / "anchors" / "2026-05-18" / f"{WF}.jsonl"
    assert writer.path_for(anchor(0, when=late)) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (path.parent, path.parent.parent, path.parent.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert (
        path.read_bytes() == canonical_bytes(anchor(0, when=late).model_dump(mode="json")) + b"\n"
    )


def test_append_only_idempotent_and_conflicts_refused(tmp_path: Path) -> None:
    writer = AnchorWriter(tmp_path)
    assert writer.write(anchor(0))
    assert writer.write(anchor(1))
    assert not writer.write(anchor(0))  # the same anchor again: a no-op
    changed = anchor(0).attach_trust_outcome(True, "high")
    with pytest.raises(ValidationFailed, match="different anchor"):
        writer.write(changed)
    assert list(writer.read()) == [anchor(0), anchor(1)]
    assert list(writer.read(workflow_id="other")) == []


def test_a_bad_line_is_named(tmp_path: Path) -> None:
    writer = AnchorWriter(tmp_path)
    writer.write(anchor(0))
    path = writer.path_for(anchor(0))
    path.write_bytes(path.read_bytes() + b'{"schema_version": 1}\n')
    with pytest.raises(ValidationFailed, match=r"\.jsonl:2"):
        list(writer.read())


class _AttemptAnchorV2(AttemptAnchorBase):
    """Test-only: what a version 2 with one new required field would look like."""

    schema_version: Literal[2] = 2
    critic_verdict: str


_AnyAnchor = Annotated[AttemptAnchor | _AttemptAnchorV2, Field(discriminator="schema_version")]


def test_versions_one_and_two_coexist_through_one_adapter(tmp_path: Path) -> None:
    adapter: TypeAdapter[AttemptAnchor | _AttemptAnchorV2] = TypeAdapter(_AnyAnchor)
    writer = AnchorWriter(tmp_path, adapter=adapter)
    v1 = anchor(0)
    v2 = _AttemptAnchorV2(**{**dict(anchor(1)), "schema_version": 2, "critic_verdict": "ok"})
    writer.write(v1)
    writer.write(v2)
    back = list(writer.read())
    assert back == [v1, v2]
    assert [type(a) for a in back] == [AttemptAnchor, _AttemptAnchorV2]
    # The default (version 1) adapter refuses the version 2 line instead of guessing.
    with pytest.raises(ValidationFailed, match=":2"):
        read_anchor_file(writer.path_for(v1))


def _filled(kit: Kit, n: int = 3) -> None:
    for i in range(n):
        kit.planning_attempt(i)


def test_dataset_rows_link_to_the_ledger_and_prove_inclusion(kit: Kit) -> None:
    _filled(kit)
    assert kit.ledger.store.latest_checkpoint() is None
    rows = anchor_dataset(kit.ledger)  # signs a checkpoint first: there is a signer
    assert kit.ledger.store.latest_checkpoint() is not None
    assert [r.attempt_index for r in rows] == [0, 1, 2]
    for row in rows:
        (event,) = kit.ledger.store.read_log(start=row.ledger_position, stop=row.ledger_position)
        assert event.event_type == "attempt_anchor_recorded"
        assert event.payload.anchor == row.anchor  # type: ignore[attr-defined]
        assert row.ledger_stream_id == f"attempts/{WF}"
        assert row.inclusion_proof is not None
        bundle = InclusionBundle.from_dict(row.inclusion_proof)
        verify_bundle(bundle, kit.ledger.signer.verifier)  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_then_read_back_is_equal(kit: Kit, tmp_path: Path, fmt: str) -> None:
    _filled(kit)
    rows = anchor_dataset(kit.ledger)
    out = tmp_path / f"anchors.{fmt}"
    with out.open("wb") as fh:
        write_dataset(rows, fmt, fh)  # type: ignore[arg-type]
    assert read_dataset(out, fmt) == rows  # type: ignore[arg-type]


def test_rows_are_checked_on_load(kit: Kit) -> None:
    _filled(kit, 1)
    (row,) = anchor_dataset(kit.ledger)
    data = row.model_dump(mode="json")
    with pytest.raises(ValueError, match="key columns"):
        DATASET_ROW_ADAPTER.validate_python({**data, "attempt_index": 5})
    with pytest.raises(ValueError, match="another ledger event"):
        DATASET_ROW_ADAPTER.validate_python({**data, "ledger_position": 99})


def test_a_row_whose_anchor_is_not_the_proven_record_is_refused_on_load(kit: Kit) -> None:
    _filled(kit, 1)
    (row,) = anchor_dataset(kit.ledger)
    data = row.model_dump(mode="json")
    assert data["anchor"]["cost_usd"] == "0.0123"
    # An edited training example: its proof still verifies (the proof covers the record,
    # not the row's copy of the anchor), and before, the row loaded as if proven.
    flipped = {**data, "anchor": {**data["anchor"], "cost_usd": "0.0001"}}
    assert flipped["inclusion_proof"] == data["inclusion_proof"]
    with pytest.raises(ValueError, match="the anchor is not the one the proven record holds"):
        DATASET_ROW_ADAPTER.validate_python(flipped)
    with pytest.raises(ValueError, match="the inclusion proof is for another ledger event"):
        DATASET_ROW_ADAPTER.validate_python({**data, "ledger_stream_id": "attempts/other"})
    unproven = {**flipped, "inclusion_proof": None}  # --no-proofs: nothing to check against
    assert DATASET_ROW_ADAPTER.validate_python(unproven).anchor.cost_usd == Decimal("0.0001")


def test_without_a_signer_proofs_need_a_checkpoint(kit: Kit) -> None:
    _filled(kit, 1)
    kit.ledger.signer = None
    with pytest.raises(ConfigError, match="no-proofs"):  # nothing to prove against: not damage
        anchor_dataset(kit.ledger)
    (row,) = anchor_dataset(kit.ledger, prove=False)
    assert row.inclusion_proof is None


def test_projection_must_agree_with_the_ledger(kit: Kit) -> None:
    _filled(kit, 2)
    writer = AnchorWriter(kit.root / "store")
    assert writer.sync(kit.ledger) == 2
    assert writer.sync(kit.ledger) == 0
    assert len(anchor_dataset(kit.ledger, projection=writer)) == 2
    writer.write(anchor(7))  # an anchor the ledger never recorded
    with pytest.raises(IntegrityError, match="not what the ledger recorded"):
        anchor_dataset(kit.ledger, projection=writer)


def test_parquet_without_pyarrow_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigError, match=r"tracebound\[parquet\]"):
        write_dataset([], "parquet", io.BytesIO())


def test_export_cli(kit: Kit, tmp_path: Path) -> None:
    from tracebound.cli.app import app

    _filled(kit, 2)
    kit.ledger.store.set_meta("origin", kit.ledger.origin)  # as `tracebound init` would
    kit.ledger.checkpoint()
    kit.ledger.close()
    store = str(kit.root / "store")
    pub = tmp_path / "verifier.pub"
    pub.write_text(kit.ledger.signer.verifier.format() + "\n")  # type: ignore[union-attr]
    env = {"HOME": str(tmp_path / "home")}
    runner = CliRunner()
    base = ["export", "anchors", "--store", store, "--verifier-key", str(pub)]
    result = runner.invoke(app, base, env=env)
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert [x["attempt_index"] for x in lines] == [0, 1]
    out = tmp_path / "a.parquet"
    result = runner.invoke(
        app, [*base, "--format", "parquet", "--out", str(out), "--json"], env=env
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 2
    assert [r.attempt_index for r in read_dataset(out, "parquet")] == [0, 1]
    result = runner.invoke(app, [*base, "--format", "parquet"], env=env)
    assert result.exit_code == 2 and "--out" in result.output
