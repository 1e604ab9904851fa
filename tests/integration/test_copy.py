"""`tracebound copy`: a ledger moved between backends keeps every byte and every signature.

Real stores on every side (SQLite files, JSONL directories, a PostgreSQL server started by
the fixtures). A copy must end with ``read_raw`` equal on both sides, the same signed notes
and origin, and a destination that verifies against the source's checkpoints. Interrupted
copies resume; a damaged source and a destination holding another log are refused.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from tests.integration.conftest import cost
from tests.pg import PgServer
from tracebound.errors import ConcurrencyError, DamageKind, LedgerDamaged
from tracebound.events.catalog import MergeOutcome
from tracebound.events.envelope import Event
from tracebound.events.record import RawRecord
from tracebound.ids import StreamId
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.copy import CopyDiverged, copy_ledger
from tracebound.store.port import AppendRequest, ImportStore, LedgerStore
from tracebound.store.url import open_store

ORIGIN = "tracebound.test/copy"
SIGNER = NoteSigner("tb-copy", bytes(range(32)))
OTHER = NoteSigner("tb-other", bytes(range(1, 33)))
T0 = datetime(2026, 6, 1, tzinfo=UTC)


def _event(n: int, salt: int = 0) -> Event:
    payload = (
        cost(n % 10_000)
        if n % 7
        else MergeOutcome(pr_url=f"https://example.test/pr/{n}", decision="merged", reviewer=None)
    )
    return Event.create(
        payload,
        event_id=UUID(int=(salt << 64) | n),
        timestamp=T0 + timedelta(microseconds=n),
        workflow_id=None if n % 5 == 0 else f"wf-{n % 3}",
    )


def build(url: str, n: int, *, checkpoints: tuple[int, ...] = (), salt: int = 0) -> None:
    """A signed ledger of ``n`` events over five streams, checkpointed at the given sizes."""
    store = open_store(url, create=True)
    store.set_meta("origin", ORIGIN)
    with Ledger(
        store, clock=FixedClock(), ids=SequentialIds(), signer=SIGNER, origin=ORIGIN
    ) as led:
        done = 0
        for stop in sorted({*checkpoints, n}):
            while done < stop:
                size = min(stop - done, 500)
                requests = [
                    AppendRequest(StreamId(f"s{(done + i) % 5}"), [_event(done + i + 1, salt)])
                    for i in range(size)
                ]
                store.append_batch(requests)
                done += size
            if stop in checkpoints:
                led.checkpoint()


def raw(store: LedgerStore) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store.read_raw()]


def verified(store: LedgerStore) -> Any:
    led = Ledger(store, clock=FixedClock(), ids=SequentialIds(), verifier=SIGNER.verifier)
    return led.verify(workers=1, require_signed=False)


@pytest.fixture
def urls(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[str, str], str]:
    """``urls(kind, name)``: a fresh store URL of that backend (PostgreSQL on demand)."""

    def make(kind: str, name: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{(tmp_path / name).resolve()}"
        if kind == "jsonl":
            return f"jsonl:///{(tmp_path / name).resolve()}"
        server: PgServer = request.getfixturevalue("postgres_server")
        dsn: str = request.getfixturevalue("postgres_dsn")
        return server.url(dsn.rsplit("dbname=", 1)[1], schema=name)

    return make


@pytest.fixture
def opened() -> Iterator[Callable[[str], LedgerStore]]:
    stores: list[LedgerStore] = []

    def open_(url: str) -> LedgerStore:
        store = open_store(url, create=True)
        stores.append(store)
        return store

    yield open_
    for s in stores:
        s.close()


PAIRS = [
    pytest.param("sqlite", "postgresql", marks=pytest.mark.postgres, id="sqlite-to-postgresql"),
    pytest.param("postgresql", "jsonl", marks=pytest.mark.postgres, id="postgresql-to-jsonl"),
    pytest.param("jsonl", "sqlite", id="jsonl-to-sqlite"),
]


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_round_trip_is_byte_identical_and_verifies(
    src_kind: str,
    dst_kind: str,
    urls: Callable[[str, str], str],
    opened: Callable[[str], LedgerStore],
) -> None:
    src_url, dst_url = urls(src_kind, "src"), urls(dst_kind, "dst")
    build(src_url, 5000, checkpoints=(700, 2048, 4500, 5000))
    src, dst = opened(src_url), opened(dst_url)
    seen: list[tuple[int, int]] = []
    report = copy_ledger(
        src, dst, verifier=SIGNER.verifier, chunk=2048, progress=lambda d, t: seen.append((d, t))
    )
    assert (report.size, report.imported, report.resumed_from) == (5000, 5000, 0)
    assert report.signatures == "ok" and report.checkpoints == [700, 2048, 4500, 5000]
    assert seen == [(2048, 5000), (4096, 5000), (5000, 5000)]
    assert raw(dst) == raw(src)
    assert dst.checkpoints() == src.checkpoints()
    assert dst.get_meta("origin") == ORIGIN
    report_dst = verified(dst)
    assert report_dst.ok, report_dst.as_dict()
    assert report_dst.root == verified(src).root == report.root
    assert report_dst.checkpoint_size == 5000
    # Copying again onto the complete copy re-checks it and writes nothing more.
    again = copy_ledger(src, dst, verifier=SIGNER.verifier)
    assert (again.resumed_from, again.imported, again.checkpoints_copied) == (5000, 0, 0)
    # The copy is a ledger like any other: it takes appends after the copied head.
    (more,) = dst.append("s0", [_event(9999)])
    head = src.stream_head("s0")
    assert head is not None and (more.position, more.prev_hash) == (5001, head.head)


@pytest.mark.parametrize(
    "dst_kind", ["sqlite", "jsonl", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_interrupted_copy_resumes_where_the_destination_ends(
    dst_kind: str,
    urls: Callable[[str, str], str],
    opened: Callable[[str], LedgerStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src_url, dst_url = urls("sqlite", "src"), urls(dst_kind, "dst")
    build(src_url, 9000, checkpoints=(3000, 9000))
    src, dst = opened(src_url), opened(dst_url)
    real = type(dst).import_raw  # type: ignore[attr-defined]
    calls = 0

    def dying(self: ImportStore, records: list[RawRecord]) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise ConnectionError("the copy was interrupted")
        real(self, records)

    monkeypatch.setattr(type(dst), "import_raw", dying)
    with pytest.raises(ConnectionError):
        copy_ledger(src, dst, verifier=SIGNER.verifier, chunk=2048)
    assert dst.size() == 4096  # two whole chunks, nothing of the third
    # A checkpoint follows the records it covers: the partial copy is a signed prefix.
    assert dst.checkpoints() == [c for c in src.checkpoints() if c[0] <= 4096] != []
    partial = verified(dst)
    assert partial.ok and partial.checkpoint_size == 3000, partial.as_dict()
    monkeypatch.setattr(type(dst), "import_raw", real)

    report = copy_ledger(src, dst, verifier=SIGNER.verifier, chunk=2048)
    assert (report.resumed_from, report.imported, report.size) == (4096, 9000 - 4096, 9000)
    assert raw(dst) == raw(src)
    assert dst.checkpoints() == src.checkpoints()
    assert verified(dst).ok


def test_sigkill_mid_copy_then_the_same_command_resumes(
    tmp_path: Path, urls: Callable[[str, str], str]
) -> None:
    src_url, dst_url = urls("sqlite", "src"), urls("sqlite", "dst")
    store = open_store(src_url, create=True)
    store.set_meta("origin", ORIGIN)
    for b in range(40):  # 40,000 events: twenty destination transactions of 2,048
        store.append_batch(
            [AppendRequest(StreamId(f"s{b % 4}"), [_event(b * 1000 + i + 1) for i in range(1000)])]
        )
    with Ledger(
        store, clock=FixedClock(), ids=SequentialIds(), signer=SIGNER, origin=ORIGIN
    ) as led:
        led.checkpoint()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")
    args = [
        sys.executable, "-m", "tracebound", "copy", src_url, dst_url, "--batch", "2048",
        "--verifier-key", SIGNER.verifier.format(), "--json",
    ]  # fmt: skip
    child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = tmp_path / "dst" / "ledger.db"
    deadline = time.monotonic() + 120
    held = 0
    while held < 2048 and time.monotonic() < deadline and child.poll() is None:
        if db.exists():
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
                    held = c.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0]
            except sqlite3.OperationalError:
                held = 0  # the schema is being created
        time.sleep(0.002)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL, "the copy finished before it could be killed"
    with closing(open_store(dst_url)) as dst:
        cut = dst.size()
    assert 0 < cut < 40_000 and cut % 2048 == 0  # whole transactions only

    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert (out["ok"], out["resumed_from"], out["size"]) == (True, cut, 40_000)
    assert out["imported"] == 40_000 - cut
    with closing(open_store(src_url)) as src, closing(open_store(dst_url)) as dst:
        assert raw(dst) == raw(src)
        assert dst.checkpoints() == src.checkpoints()


def _tamper_sqlite(url: str, position: int) -> None:
    db = Path(url.removeprefix("sqlite:///")) / "ledger.db"
    with sqlite3.connect(db) as c:
        (body,) = c.execute("SELECT body FROM events WHERE position = ?", (position,)).fetchone()
        changed = body.replace(b'"tier":"direct"', b'"tier":"amortized"')
        assert changed != body
        c.execute("UPDATE events SET body = ? WHERE position = ?", (changed, position))


def test_tampered_source_stops_at_the_first_bad_position(
    urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url, dst_url = urls("sqlite", "src"), urls("jsonl", "dst")
    build(src_url, 5000, checkpoints=(5000,))
    _tamper_sqlite(src_url, 3001)
    src, dst = opened(src_url), opened(dst_url)
    with pytest.raises(LedgerDamaged) as info:
        copy_ledger(src, dst, verifier=SIGNER.verifier, chunk=2048)
    assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 3001)
    assert dst.size() == 3000  # the verified records before it, nothing at or past it
    assert raw(dst) == raw(src)[:3000]
    assert dst.checkpoints() == []
    assert verified(dst).damage is None


def test_tampered_source_through_the_cli(tmp_path: Path, urls: Callable[[str, str], str]) -> None:
    src_url, dst_url = urls("sqlite", "src"), urls("sqlite", "dst")
    build(src_url, 300, checkpoints=(300,))
    _tamper_sqlite(src_url, 101)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")
    proc = subprocess.run(
        [sys.executable, "-m", "tracebound", "copy", src_url, dst_url, "--json",
         "--verifier-key", SIGNER.verifier.format()],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert (error["kind"], error["position"], error["written"]) == ("LedgerDamaged", 101, 100)
    # the damage object every other command prints (README: exit codes), not only its kind
    assert error["damage"] == {
        "kind": "tamper",
        "position": 101,
        "detail": "the record's bytes do not hash to its stored hash",
    }


def test_a_rewritten_chain_fails_the_signed_root_before_anything_past_it(
    urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    """A source rebuilt consistently (chain fine) but with other events: only the key sees it."""
    src_url, forged_url = urls("sqlite", "src"), urls("sqlite", "forged")
    build(src_url, 4000, checkpoints=(1000, 4000))
    build(forged_url, 4000, salt=1)  # same shape, other event ids: every hash differs
    src, forged = opened(src_url), opened(forged_url)
    for size, note in src.checkpoints():  # the honest log's signed notes, beside forged events
        forged.save_checkpoint(size, note)
    dst = opened(urls("sqlite", "dst"))
    with pytest.raises(LedgerDamaged) as info:
        copy_ledger(forged, dst, verifier=SIGNER.verifier, chunk=2048)
    assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 1)
    assert dst.size() == 0


def test_forged_checkpoint_signature_is_refused_before_any_write(
    urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url = urls("sqlite", "src")
    build(src_url, 100, checkpoints=(100,))
    src = opened(src_url)
    dst = opened(urls("sqlite", "dst"))
    with pytest.raises(LedgerDamaged) as info:
        copy_ledger(src, dst, verifier=OTHER.verifier)
    assert info.value.kind is DamageKind.FORGED_SIGNATURE
    assert dst.size() == 0
    # Without a key the roots are still compared; the report says signatures went unchecked.
    report = copy_ledger(src, dst)
    assert report.signatures.startswith("not checked") and not report.complete
    assert raw(dst) == raw(src)


def test_destination_with_another_log_is_refused_untouched(
    urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url, dst_url = urls("sqlite", "src"), urls("sqlite", "dst")
    build(src_url, 500)
    build(dst_url, 200, salt=2)  # same origin, other events
    src, dst = opened(src_url), opened(dst_url)
    before = raw(dst)
    with pytest.raises(CopyDiverged) as info:
        copy_ledger(src, dst, verifier=SIGNER.verifier)
    assert info.value.position == 1
    assert raw(dst) == before


def test_partial_copy_changed_afterwards_is_refused_at_that_position(
    urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url, dst_url = urls("sqlite", "src"), urls("sqlite", "dst")
    build(src_url, 3000)
    src, dst = opened(src_url), opened(dst_url)
    dst.import_raw(list(src.read_raw(stop=2100)))  # type: ignore[attr-defined]
    _tamper_sqlite(dst_url, 1500)
    before = raw(dst)
    with pytest.raises(CopyDiverged) as info:
        copy_ledger(src, dst, chunk=2048)
    assert info.value.position == 1500
    assert raw(dst) == before


def test_other_divergences_are_refused(
    urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url = urls("sqlite", "src")
    build(src_url, 300, checkpoints=(300,))
    src = opened(src_url)
    longer = opened(urls("sqlite", "longer"))
    longer.import_raw(list(src.read_raw()))  # type: ignore[attr-defined]
    longer.append("s9", [_event(10_001)])
    with pytest.raises(CopyDiverged, match="holds 301 events, the source only 300"):
        copy_ledger(src, longer)
    renamed = opened(urls("sqlite", "renamed"))
    renamed.set_meta("origin", "another/log")
    with pytest.raises(CopyDiverged, match="origin"):
        copy_ledger(src, renamed)
    extra = opened(urls("sqlite", "extra"))
    extra.save_checkpoint(5, "not the source's\n")
    with pytest.raises(CopyDiverged, match="checkpoint for size 5"):
        copy_ledger(src, extra)
    assert extra.size() == 0


# -- the backends' import_raw, directly -------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["sqlite", "jsonl", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_import_raw_checks_that_records_continue_the_log(
    kind: str, urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url = urls("sqlite", "src")
    build(src_url, 40)
    src = opened(src_url)
    records = list(src.read_raw())
    dst = opened(urls(kind, "dst"))
    assert isinstance(dst, ImportStore)
    dst.import_raw(records[:10])
    with pytest.raises(ConcurrencyError):  # not at size + 1
        dst.import_raw(records[11:20])
    with pytest.raises(LedgerDamaged) as info:  # a stream's link skips a version
        dst.import_raw([records[10], records[12]])
    assert info.value.position == 12
    bad = records[10]._replace(body=records[10].body.replace(b"wf-", b"WF-"))
    with pytest.raises(LedgerDamaged) as info:
        dst.import_raw([bad])
    assert (info.value.kind, info.value.position) == (DamageKind.TAMPER, 11)
    assert dst.size() == 10  # every refused import wrote nothing
    dst.import_raw(records[10:])
    assert raw(dst) == raw(src)
    (after,) = dst.append("s1", [_event(777)])  # appends continue from the imported heads
    assert after.position == 41
    assert verified(dst).damage is None


def test_torn_source_tail_copies_the_intact_part_and_names_the_tear(
    tmp_path: Path, urls: Callable[[str, str], str], opened: Callable[[str], LedgerStore]
) -> None:
    src_url = urls("jsonl", "src")
    build(src_url, 50)
    log = tmp_path / "src" / "log.jsonl"
    with log.open("ab") as f:
        f.write(b'{"batch":[51,52],"hash":"ab')  # what a crash mid-append leaves
    src, dst = opened(src_url), opened(urls("sqlite", "dst"))
    with pytest.raises(LedgerDamaged) as info:
        copy_ledger(src, dst)
    assert (info.value.kind, info.value.position) == (DamageKind.TORN_TAIL, 51)
    assert dst.size() == 50
    assert raw(dst) == [tuple(r) for r in src.read_raw(stop=50)]
