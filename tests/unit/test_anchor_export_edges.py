"""`tracebound export anchors` when it cannot do its job: no checkpoint and no key is a
configuration problem (exit 2, not "damaged"), and a failed export leaves no file behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from tests.unit.retry.retry_kit import open_kit
from typer.testing import CliRunner


def _store(tmp_path: Path, attempts: int = 2) -> Path:
    kit = open_kit(tmp_path)
    for i in range(attempts):
        kit.planning_attempt(i)
    kit.ledger.store.set_meta("origin", kit.ledger.origin)  # as `tracebound init` would
    kit.ledger.close()
    return tmp_path / "store"


def _export(tmp_path: Path, store: Path, *args: str) -> tuple[int, str]:
    from tracebound.cli.app import app

    env = {"HOME": str(tmp_path / "home")}  # no signing key, no verifier key
    result = CliRunner().invoke(app, ["export", "anchors", "--store", str(store), *args], env=env)
    return result.exit_code, result.output


def test_no_checkpoint_and_no_key_is_a_config_error(tmp_path: Path) -> None:
    store = _store(tmp_path)
    code, output = _export(tmp_path, store, "--json")
    assert code == 2, output
    error = json.loads(output)["error"]
    assert error["kind"] == "ConfigError" and "--no-proofs" in error["message"]
    code, output = _export(tmp_path, store, "--no-proofs")
    assert code == 0 and len(output.splitlines()) == 2


def test_parquet_without_pyarrow_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    out = tmp_path / "out" / "anchors.parquet"
    out.parent.mkdir()
    args = ("--no-proofs", "--format", "parquet", "--out", str(out), "--json")
    code, output = _export(tmp_path, store, *args)
    assert code == 2, output
    assert "tracebound[parquet]" in json.loads(output)["error"]["message"]
    assert list(out.parent.iterdir()) == []  # neither the file nor its temporary twin


def test_an_out_path_in_a_missing_folder_names_that_path(tmp_path: Path) -> None:
    store = _store(tmp_path)
    out = tmp_path / "nowhere" / "anchors.jsonl"
    code, output = _export(tmp_path, store, "--no-proofs", "--out", str(out), "--json")
    assert code == 2, output
    message = json.loads(output)["error"]["message"]
    assert str(out) in message and ".tmp" not in message


def test_an_unknown_format_names_the_choices_in_plain_words(tmp_path: Path) -> None:
    store = _store(tmp_path)
    code, output = _export(tmp_path, store, "--no-proofs", "--format", "csv", "--json")
    assert code == 2, output
    error = json.loads(output)["error"]
    assert error["kind"] == "UsageError"
    assert error["message"] == (
        "Invalid value for '--format': 'csv' is not one of 'jsonl', 'parquet'"
    )
    code, output = _export(tmp_path, store, "--no-proofs", "--format", "jsonl")
    assert code == 0 and len(output.splitlines()) == 2


def test_json_without_out_prints_one_document_holding_the_rows(tmp_path: Path) -> None:
    store = _store(tmp_path)
    code, output = _export(tmp_path, store, "--no-proofs", "--json")
    assert code == 0, output
    # Before: the JSON lines themselves, two documents that `json.loads` refuses.
    doc = json.loads(output)
    assert (doc["ok"], doc["rows"], doc["format"], doc["out"]) == (True, 2, "jsonl", None)
    _, lines = _export(tmp_path, store, "--no-proofs")
    assert doc["dataset"] == [json.loads(line) for line in lines.splitlines()]


def test_an_out_path_that_is_a_folder_names_that_path_not_a_temporary_file(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    out = tmp_path / "exports"
    out.mkdir()
    code, output = _export(tmp_path, store, "--no-proofs", "--out", str(out), "--json")
    assert code == 2, output
    error = json.loads(output)["error"]
    # Before: "Is a directory: .../.exports.tmp", a file the user never named.
    assert error["kind"] == "ConfigError"
    assert str(out) in error["message"] and ".tmp" not in error["message"]
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == [
        "exports",
        "store",
    ]


def test_an_out_path_that_is_a_pipe_is_written_into_not_replaced(tmp_path: Path) -> None:
    # `--out /dev/stdout` or a named pipe: the rows go into it. Before, the export wrote a
    # temporary file beside it and renamed it over the pipe (as root, over /dev/stdout).
    import os
    import stat

    store = _store(tmp_path)
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the export's open finds a reader
    try:
        code, output = _export(tmp_path, store, "--no-proofs", "--out", str(fifo), "--json")
        assert code == 0, output
        assert stat.S_ISFIFO(fifo.stat().st_mode)
        received = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert len(received.splitlines()) == 2 and json.loads(output)["rows"] == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_the_out_file_is_on_disk_before_it_replaces_the_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power cut after the rename must not leave an empty dataset where the last one was:
    the new file's bytes are fsynced before it takes the name, and the folder after."""
    import os

    store = _store(tmp_path)
    out = tmp_path / "anchors.jsonl"
    out.write_text("the previous export\n")
    synced: set[int] = set()
    renamed: list[bool] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.add(os.fstat(fd).st_ino)
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == out:
            renamed.append(Path(src).stat().st_ino in synced)
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    code, output = _export(tmp_path, store, "--no-proofs", "--out", str(out), "--json")
    assert code == 0, output
    # Before: written to a temporary file and renamed, never fsynced.
    assert renamed == [True]
    assert tmp_path.stat().st_ino in synced  # the new name is durable too
    assert len(out.read_text().splitlines()) == 2


def test_a_checkpoint_without_its_verifier_key_is_named_as_such(tmp_path: Path) -> None:
    # The store's checkpoint covers every anchor; only the key to read it is missing. Before:
    # "no signed checkpoint covers position N", which sent the user to sign one more.
    kit = open_kit(tmp_path)
    for i in range(2):
        kit.planning_attempt(i)
    kit.ledger.checkpoint()
    kit.ledger.store.set_meta("origin", kit.ledger.origin)
    kit.ledger.close()
    code, output = _export(tmp_path, tmp_path / "store", "--json")
    assert code == 2, output
    error = json.loads(output)["error"]
    assert error["kind"] == "ConfigError"
    assert "no signed checkpoint covers" not in error["message"]
    assert "--verifier-key" in error["message"] and "--no-proofs" in error["message"]
