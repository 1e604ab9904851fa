"""The runner over a real SQLite ledger: exactly once, idempotent, batch-independent, honest
about failures, and live in follow mode."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.conformance.test_jsonl_conformance import flock_held_by_another_process

from tracebound.errors import ConcurrencyConflict, ContractError, StorageError, StoreBusy
from tracebound.events import default_registry
from tracebound.events.catalog import (
    AdapterDegraded,
    AttemptCompleted,
    AttemptRefused,
    BlobErased,
    CostIncurred,
    CostSource,
    LeafReturned,
    MergeOutcome,
    PlanOutcomeEmitted,
    PluginResolved,
    RetryRequested,
    SolutionFound,
    TrustGateFailed,
    TrustGatePassed,
)
from tracebound.events.envelope import Event, Payload
from tracebound.ids import Sha256Digest
from tracebound.projections import ProjectionRunner, SQLiteViews, default_projections, fold_all
from tracebound.projections import runner as runner_module
from tracebound.projections.base import Column, EventRecord, Rows, Table
from tracebound.projections.cost import COST_BY_ROLE, COST_LEDGER, CostLedgerProjection
from tracebound.projections.memory import project
from tracebound.projections.records import read_records
from tracebound.projections.reports import all_tables, json_rows, views_snapshot
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import LedgerStore
from tracebound.store.sqlite import SQLiteStore

T0 = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


class RunnerNote(Payload):
    """A user-registered type in the generated streams: projections must ignore it."""

    kind: Literal["runner_note"] = "runner_note"
    text: str


if "runner_note" not in default_registry():
    default_registry().register(RunnerNote)

# --- strategies: valid streams of catalog events ----------------------------------------------

names = st.sampled_from(["a", "b", "c"])
money = st.decimals(min_value=0, max_value=100, places=4, allow_nan=False, allow_infinity=False)
counts = st.integers(0, 5_000)
attempt_fields = st.fixed_dictionaries(
    {"attempt_id": st.integers(1, 4).map(lambda i: UUID(int=i)), "attempt_index": st.integers(0, 3)}
)
digest = st.sampled_from(["ab" * 32, "cd" * 32])


@st.composite
def costs(draw: st.DrawFn) -> CostIncurred:
    tokens_in = draw(st.none() | counts)
    tokens_out = draw(st.none() | counts)
    return CostIncurred(
        tier=draw(st.sampled_from(["direct", "amortized", "overhead"])),
        amount_usd=draw(money),
        source=draw(st.sampled_from([CostSource("openai"), CostSource("sandbox")])),
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cached_input_tokens=None if tokens_in is None else draw(st.integers(0, tokens_in)),
        reasoning_tokens=None if tokens_out is None else draw(st.integers(0, tokens_out)),
        role=draw(st.none() | st.sampled_from(["Planner", "Executor"])),
    )


def _attempt(cls: Any, **fields: Any) -> st.SearchStrategy[Payload]:
    return attempt_fields.flatmap(
        lambda at: st.builds(cls, **{k: st.just(v) for k, v in at.items()}, **fields)
    )


signals = st.lists(st.sampled_from(["tests", "lint", "types"]), min_size=1, max_size=3).map(tuple)
payloads: st.SearchStrategy[Payload] = st.one_of(
    costs(),
    st.builds(
        MergeOutcome,
        pr_url=st.just("https://x/pr"),
        decision=st.sampled_from(["merged", "closed", "modified"]),
        reviewer=st.none(),
    ),
    st.builds(
        PluginResolved,
        plugin_id=st.sampled_from(["p1", "p2"]),
        extends_chain=st.just(()),
        matched_scope=st.just("*"),
        fallback_used=st.booleans(),
    ),
    st.builds(
        TrustGatePassed,
        gate=st.just("g"),
        signals=st.just({"tests": True}),
        score=st.integers(0, 10_000),
    ),
    st.builds(
        TrustGateFailed,
        gate=st.just("g"),
        failing_signals=signals,
        score=st.integers(0, 10_000),
        retry_count=st.integers(0, 3),
    ),
    _attempt(
        RetryRequested,
        gate=st.just("g"),
        sandbox_run_id=st.just("s"),
        failing_signals=signals,
        summary_pointer=st.just("sha256:" + "0" * 64),
    ),
    _attempt(AttemptRefused, cause=st.sampled_from(["retry_limit", "policy"]), reason=st.just("r")),
    _attempt(
        SolutionFound,
        advisory_id=st.sampled_from(["A1", "A2"]),
        patch_digest_blake3=digest,
        outcome=st.just("AppliedFromLlm"),
    ),
    _attempt(
        AttemptCompleted,
        advisory_id=st.sampled_from(["A1", "A2"]),
        outcome=st.just("AppliedFromLlm"),
        trust_outcome_passed=st.none() | st.booleans(),
        cost_usd=money,
        duration_ms=counts,
    ),
    _attempt(
        PlanOutcomeEmitted,
        plan_proposal_kind=st.just("apply_transform"),
        outcome=st.just("AppliedFromRecipe"),
    ),
    _attempt(
        LeafReturned,
        model=st.just("m"),
        response_digest_blake3=digest,
        tokens_in=st.just(9),
        tokens_out=st.just(3),
        cached_input_tokens=st.just(4),
        reasoning_tokens=st.just(1),
    ),
    st.builds(
        AdapterDegraded,
        primitive=st.just("refs"),
        primary_adapter=st.just("scip"),
        primary_confidence=st.integers(0, 10_000),
        fallback_adapter=st.none(),
    ),
    st.builds(BlobErased, digest=st.just("sha256:" + "1" * 64), reason=st.just("gdpr")),
    st.builds(RunnerNote, text=st.text(max_size=5)),
)
streams = st.lists(st.tuples(st.none() | names, payloads), min_size=0, max_size=40)


def _events(stream: list[tuple[str | None, Payload]]) -> list[Event]:
    return [
        Event.create(
            p, event_id=UUID(int=i + 1), timestamp=T0 + timedelta(seconds=i // 3), workflow_id=wf
        )
        for i, (wf, p) in enumerate(stream)
    ]


def _append(store: LedgerStore, events: list[Event]) -> None:
    for e in events:
        store.append(e.workflow_id or "portfolio", [e])


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "ledger")
    yield store
    store.close()


def _views(path: Path) -> SQLiteViews:
    return SQLiteViews(path)


# --- idempotency, under generated streams ------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams, batch=st.integers(1, 7), split=st.integers(0, 40))
def test_runs_are_idempotent_and_batch_independent(
    stream: list[tuple[str | None, Payload]], batch: int, split: int
) -> None:
    events = _events(stream)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        store = SQLiteStore(d / "ledger")
        try:
            # Appended in two goes with a run between: catch-up, then "live".
            _append(store, events[:split])
            one = ProjectionRunner(store, _views(d / "one.db"), batch_size=batch)
            one.run()
            _append(store, events[split:])
            one.run()
            first = views_snapshot(one.views)
            assert one.run().events == 0  # nothing left: running twice changes nothing
            assert views_snapshot(one.views) == first
            # one big batch on fresh views: the same state
            big = ProjectionRunner(store, _views(d / "big.db"), batch_size=10_000)
            big.run()
            assert views_snapshot(big.views) == first
            # rebuild drops and replays: the same state again
            one.rebuild()
            assert views_snapshot(one.views) == first
            # ...and the SQLite views hold what the in-memory projections compute
            memory = project(default_projections(), list(read_records(store)))
            assert {k: json_rows(v) for k, v in memory.items()} == first
            # the materialised fold is the fold
            states = fold_all(read_records(store))
            assert {r["workflow_id"]: r["state"] for r in first["workflow_state"]} == {
                wf: s.to_dict() for wf, s in states.items()
            }
            for v in (one.views, big.views):
                v.close()
        finally:
            store.close()


def test_positions_are_committed_with_rows(ledger: SQLiteStore, tmp_path: Path) -> None:
    _append(
        ledger,
        _events(
            [("a", CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("x")))] * 5
        ),
    )
    runner = ProjectionRunner(ledger, _views(tmp_path / "v.db"), batch_size=2)
    report = runner.run(until_caught_up=False)
    assert (report.events, report.batches) == (2, 1)
    assert {s.name: s.position for s in runner.status()} == {
        p.name: 2 for p in default_projections()
    }
    runner.run()
    assert {s.lag for s in runner.status()} == {0}
    assert views_snapshot(runner.views)["cost_ledger"][0]["amount_usd"] == "5"


def _cached(runner: ProjectionRunner[SQLiteViews]) -> int:
    """Rows and remembered keys the runner's caches hold (what the collector would walk)."""
    assert runner._live is not None
    return sum(
        len(c)
        for lv in runner._live
        for c in (*lv.rows._cache.values(), *lv.rows._written.values())
    )


def test_a_bulk_catch_up_releases_its_caches_and_a_follower_keeps_them(
    ledger: SQLiteStore, tmp_path: Path
) -> None:
    def cost(wf: str) -> tuple[str, Payload]:
        return (wf, CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("x")))

    _append(ledger, _events([cost(f"wf-{i % 3}") for i in range(9)]))
    runner = ProjectionRunner(ledger, _views(tmp_path / "v.db"), batch_size=2)
    assert runner.run().batches == 5
    assert _cached(runner) == 0  # nothing left for the resumed collector to walk
    # A follower's one-batch runs keep their rows cached between polls...
    more = _events([cost("wf-0")] * 2)
    _append(
        ledger, [e.model_copy(update={"event_id": UUID(int=100 + i)}) for i, e in enumerate(more)]
    )
    assert runner.run().batches == 1
    assert _cached(runner) > 0
    # ...and the rows released before were read back from the views, not restarted.
    by_workflow = {r["workflow_id"]: r for r in views_snapshot(runner.views)["cost_ledger"]}
    assert (by_workflow["wf-0"]["events"], by_workflow["wf-0"]["amount_usd"]) == (5, "5")
    assert (by_workflow["wf-1"]["events"], by_workflow["wf-1"]["amount_usd"]) == (3, "3")


def test_a_follower_s_caches_stay_bounded_however_many_workflows_it_sees(
    ledger: SQLiteStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `project run --follow` kept a cached row (and a remembered key) for every workflow
    it ever saw, up to 200,000 per projection: 650 MB after 200k events, still growing."""
    monkeypatch.setattr(runner_module, "ROWS_KEPT_BETWEEN_RUNS", 8)
    runner = ProjectionRunner(ledger, _views(tmp_path / "v.db"))
    sizes = []
    for n in range(60):  # a poll each, one new workflow's event
        cost = CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("x"))
        (event,) = _events([(f"wf-{n}", cost)])
        _append(ledger, [event.model_copy(update={"event_id": UUID(int=1000 + n)})])
        assert runner.run().batches == 1
        sizes.append(_cached(runner))
    # Each projection keeps at most the bound after a run: a size independent of the log's.
    assert max(sizes) <= 8 * len(runner.projections), sizes
    # Rows released were read back from the views: every workflow still counted once.
    rows = views_snapshot(runner.views)["cost_ledger"]
    assert sorted(r["events"] for r in rows) == [1] * 60


def test_rows_are_released_only_once_drained(tmp_path: Path) -> None:
    views = _views(tmp_path / "v.db")
    table = default_projections()[1].tables[0]
    rows = Rows(views, fresh=[table.name])
    rows.put(table, ("k",), {"x": 1})
    with pytest.raises(AssertionError, match="put rows not yet drained"):
        rows.release()
    rows.drain()
    rows.insert(table, {"x": 2})
    with pytest.raises(AssertionError, match="inserted rows not yet drained"):
        rows.release()
    rows.drain()
    rows.release()
    assert rows._cache == {} and rows._written == {}
    views.close()


def test_a_second_runner_on_the_same_views_is_refused(ledger: SQLiteStore, tmp_path: Path) -> None:
    _append(
        ledger,
        _events([("a", BlobErased(digest=Sha256Digest("sha256:" + "1" * 64), reason="r"))] * 3),
    )
    first = ProjectionRunner(ledger, _views(tmp_path / "v.db"), batch_size=1)
    second = ProjectionRunner(ledger, _views(tmp_path / "v.db"), batch_size=1)
    first.run(until_caught_up=False)
    second.run(until_caught_up=False)  # moves the positions under the first runner
    with pytest.raises(ConcurrencyConflict):
        first.run(until_caught_up=False)


# --- failures: stop at the event, never skip it -------------------------------------------------

FLAKY = Table("flaky_rows", (Column("position", "integer"),), key=("position",))


class Flaky:
    """Fails on costs above a threshold, until fixed."""

    name = "flaky"
    version = 1
    tables = (FLAKY,)
    kinds: frozenset[str] | None = frozenset({"cost_incurred"})

    def __init__(self) -> None:
        self.broken = True

    def apply(self, record: EventRecord, rows: Rows) -> None:
        pos = record["position"]
        rows.put(FLAKY, (pos,), {"position": pos})
        if self.broken and Decimal(record["payload"]["amount_usd"]) > 1:
            raise ValueError("cannot price this")


@pytest.mark.parametrize("batch", [20_000, 1])  # one batch; or four, so caches are released
def test_a_failing_projection_stops_before_the_event(
    ledger: SQLiteStore, tmp_path: Path, batch: int
) -> None:
    amounts = ["0.5", "0.5", "5", "0.5"]
    _append(
        ledger,
        _events(
            [
                ("a", CostIncurred(tier="direct", amount_usd=Decimal(a), source=CostSource("x")))
                for a in amounts
            ]
        ),
    )
    flaky = Flaky()
    runner = ProjectionRunner(
        ledger, _views(tmp_path / "v.db"), [flaky, *default_projections()], batch_size=batch
    )
    with pytest.raises(ContractError, match=r"'flaky' stopped at position 3 .*ValueError") as info:
        runner.run()
    assert isinstance(info.value.__cause__, ValueError)
    status = {s.name: s for s in runner.status()}
    assert (status["flaky"].position, status["flaky"].failed_position) == (2, 3)
    assert "cannot price this" in (status["flaky"].error or "")
    assert status["cost_ledger"].position == 4  # the others caught up
    # its rows stop before the failing event too: the half-applied row was thrown away
    assert [r["position"] for r in runner.views.select(FLAKY)] == [1, 2]
    # not skipped: a fresh runner retries it, and fails the same way
    again = ProjectionRunner(ledger, _views(tmp_path / "v.db"), [flaky])
    with pytest.raises(ContractError, match="position 3"):
        again.run()
    flaky.broken = False
    ProjectionRunner(ledger, _views(tmp_path / "v.db"), [flaky]).run()
    fixed = {
        s.name: s for s in ProjectionRunner(ledger, _views(tmp_path / "v.db"), [flaky]).status()
    }
    assert (fixed["flaky"].position, fixed["flaky"].failed_position, fixed["flaky"].error) == (
        4,
        None,
        None,
    )
    assert [r["position"] for r in runner.views.select(FLAKY)] == [1, 2, 3, 4]


def test_view_storage_errors_are_typed(ledger: SQLiteStore, tmp_path: Path) -> None:
    views = _views(tmp_path / "v.db")
    views.close()
    with pytest.raises(StorageError):
        ProjectionRunner(ledger, views).run()


def test_a_busy_store_stops_the_run_without_failing_a_projection(tmp_path: Path) -> None:
    """Another process holding the ledger's lock while a run reads is not a bad record:
    StoreBusy comes out as it is, no projection is marked failed, and the next run goes on
    from the last commit."""
    store = JsonlStore(tmp_path / "ledger", lock_timeout=0.2)
    cost = CostIncurred(tier="direct", amount_usd=Decimal("1"), source=CostSource("x"))
    _append(store, _events([("a", cost), ("a", cost), ("a", cost)]))
    holder = ExitStack()
    commits: list[int] = []

    def lock_after_first_batch(position: int) -> None:
        commits.append(position)
        if len(commits) == 1:  # the holder takes the lock between two batches' reads
            holder.enter_context(flock_held_by_another_process(tmp_path / "ledger" / "lock"))

    views = _views(tmp_path / "v.db")
    runner = ProjectionRunner(store, views, batch_size=1, on_commit=lock_after_first_batch)
    with holder, pytest.raises(StoreBusy) as info:
        runner.run()
    assert type(info.value) is StoreBusy
    assert commits == [1]  # nothing committed after the busy read
    status = runner.status()
    assert {(s.position, s.failed_position, s.error) for s in status} == {(1, None, None)}
    assert runner.run().events == 2  # the lock let go: the next run resumes at position 2
    assert {(s.position, s.failed_position) for s in runner.status()} == {(3, None)}
    views.close()
    store.close()


def test_views_wait_for_a_lock_as_long_as_the_ledger(tmp_path: Path) -> None:
    """A report catching up beside `project run --follow`, or a parallel rebuild's second
    process, waited 5 s for the views file's lock while the ledger waits 60 s (the README's
    busy-store figure): the views now wait as long as a SQLite ledger does, by default."""
    import inspect

    ledger_default = inspect.signature(SQLiteStore).parameters["busy_timeout"].default
    views = SQLiteViews(tmp_path / "v.db")
    (waits_ms,) = views._conn.execute("PRAGMA busy_timeout").fetchone()
    views.close()
    assert (views.busy_timeout, waits_ms) == (ledger_default, ledger_default * 1000)


def test_views_locked_by_another_process_are_store_busy(
    ledger: SQLiteStore, tmp_path: Path
) -> None:
    """Another process holding the views file's write lock past the timeout: StoreBusy
    naming the views file (not a plain StorageError), and nothing is marked failed."""
    cost = CostIncurred(tier="direct", amount_usd=Decimal("1"), source=CostSource("x"))
    _append(ledger, _events([("a", cost)]))
    views = SQLiteViews(tmp_path / "v.db", busy_timeout=0.2)
    runner = ProjectionRunner(ledger, views)
    runner.run()
    _append(ledger, _events([("a", cost)]))
    holder = sqlite3.connect(tmp_path / "v.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # SQLite's one write lock, held
    with pytest.raises(StoreBusy) as info:
        runner.run()
    holder.close()  # rolls back: the lock is let go
    assert (info.value.store, info.value.waited) == (str(tmp_path / "v.db"), 0.2)
    assert runner.run().events == 1
    assert {(s.position, s.failed_position) for s in runner.status()} == {(2, None)}
    views.close()


def test_a_new_projection_version_is_rebuilt(ledger: SQLiteStore, tmp_path: Path) -> None:
    _append(
        ledger,
        _events(
            [("a", CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("x")))] * 3
        ),
    )
    flaky = Flaky()
    flaky.broken = False
    ProjectionRunner(ledger, _views(tmp_path / "v.db"), [flaky]).run()
    flaky.version = 2  # changed logic: its rows must be recomputed from position 0
    runner = ProjectionRunner(ledger, _views(tmp_path / "v.db"), [flaky])
    assert runner.status()[0].position == 0
    assert runner.run().events == 3


# --- follow mode ---------------------------------------------------------------------------------


def test_follow_applies_events_as_they_are_committed(ledger: SQLiteStore, tmp_path: Path) -> None:
    seen: list[int] = []
    runner = ProjectionRunner(ledger, _views(tmp_path / "v.db"), on_commit=seen.append)
    stop = threading.Event()
    thread = threading.Thread(target=runner.follow, args=(stop,), kwargs={"interval": 0.001})
    thread.start()
    try:
        for i in range(5):
            _append(
                ledger,
                _events(
                    [
                        (
                            "a",
                            CostIncurred(
                                tier="direct", amount_usd=Decimal(1), source=CostSource("x")
                            ),
                        )
                    ]
                ),
            )
            deadline = time.monotonic() + 5
            while (not seen or seen[-1] < i + 1) and time.monotonic() < deadline:
                time.sleep(0.001)
            assert seen and seen[-1] == i + 1
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert views_snapshot(runner.views, all_tables())["cost_ledger"][0]["events"] == 5


def test_a_follower_goes_on_when_another_runner_applied_events_first(
    ledger: SQLiteStore, tmp_path: Path
) -> None:
    """`project run --follow` beside a report, whose catch-up applies new events first."""

    def cost() -> list[Event]:
        payload = CostIncurred(tier="direct", amount_usd=Decimal(1), source=CostSource("x"))
        return _events([("a", payload)])

    follower = ProjectionRunner(ledger, _views(tmp_path / "v.db"))
    _append(ledger, cost())
    assert follower.run().events == 1
    _append(ledger, cost())
    report = ProjectionRunner(ledger, _views(tmp_path / "v.db"))
    assert report.run().events == 1  # the report's catch-up, between two polls
    _append(ledger, cost())
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            follower.follow(stop, interval=0.001)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    stop = threading.Event()
    thread = threading.Thread(target=follow)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while follower.status()[0].position < 3 and not errors and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        stop.set()
        thread.join(10)
    # Before: the follower stopped with ConcurrencyConflict (`project run --follow` exit 2).
    assert errors == []
    assert [s.position for s in follower.status()] == [3] * len(default_projections())
    assert views_snapshot(follower.views, all_tables())["cost_ledger"][0]["events"] == 3


def test_a_new_views_file_is_owner_only_like_the_ledger(tmp_path: Path) -> None:
    # Views hold what the ledger holds (costs, approvers, reasons). Before: 0644 less the
    # umask, world-readable wherever --views put it; the ledger file is 0600.
    import os
    import stat

    old = os.umask(0o022)
    try:
        views = SQLiteViews(tmp_path / "shared-folder" / "views.db")
        views.close()
    finally:
        os.umask(old)
    assert (tmp_path / "shared-folder" / "views.db").is_file()
    for name in ("views.db", "views.db-wal", "views.db-shm"):
        path = tmp_path / "shared-folder" / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name


def test_status_only_reads_a_projection_built_by_another_version(
    ledger: SQLiteStore, tmp_path: Path
) -> None:
    # `project status` is documented as read-only. Before, it prepared each projection,
    # which dropped the tables of one whose version had changed (and created missing ones).
    _append(
        ledger,
        _events(
            [("wf", CostIncurred(tier="direct", amount_usd=Decimal("0.5"), source=CostSource("x")))]
        ),
    )
    flaky = Flaky()
    flaky.broken = False
    ProjectionRunner(ledger, _views(tmp_path / "v.db"), [flaky]).run()

    class FlakyV2(Flaky):
        version = 2

    newer = FlakyV2()
    views = _views(tmp_path / "v.db")
    (status,) = ProjectionRunner(ledger, views, [newer]).status()
    assert (status.version, status.position, status.lag) == (1, 0, 1)
    assert "next `project run` rebuilds it" in (status.error or "")
    assert [r["position"] for r in views.select(FLAKY)] == [1]  # still there
    fresh = ProjectionRunner(ledger, _views(tmp_path / "fresh.db"), [newer])
    (never_run,) = fresh.status()
    assert (never_run.version, never_run.position, never_run.error) == (2, 0, None)


def test_a_cost_ledger_built_before_its_cache_write_columns_is_rebuilt_with_them(
    ledger: SQLiteStore, tmp_path: Path
) -> None:
    """Cost ledger v2 breaks cache writes out of `input_uncached` in columns of their own;
    a views file that version 1 built has no such columns, so the next run drops and
    replays it."""
    _append(
        ledger,
        _events(
            [
                (
                    "wf",
                    CostIncurred(
                        tier="direct",
                        amount_usd=Decimal("0.5"),
                        source=CostSource("anthropic"),
                        tokens_in=100,
                        tokens_out=1,
                        cache_write_input_tokens=60,
                        cache_write_long_input_tokens=40,
                    ),
                )
            ]
        ),
    )
    old_table = Table(
        "cost_ledger",
        tuple(c for c in COST_LEDGER.columns if "cache_write" not in c.name),
        key=COST_LEDGER.key,
        narrow=True,
    )

    class CostLedgerV1(CostLedgerProjection):
        version = 1
        tables = (old_table, COST_BY_ROLE)

    ProjectionRunner(ledger, _views(tmp_path / "v.db"), [CostLedgerV1()]).run()
    views = _views(tmp_path / "v.db")
    ProjectionRunner(ledger, views, [CostLedgerProjection()]).run()
    (row,) = views.select(COST_LEDGER)
    assert (row["input_uncached"], row["input_cache_write"], row["input_cache_write_long"]) == (
        100,
        20,
        40,
    )
