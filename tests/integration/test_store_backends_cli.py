"""Storage backends as a new user meets them: SQLite, PostgreSQL and JSONL through the CLI.

Each test pins a problem found by following README.md, docs/postgresql.md and docs/jsonl.md
as written: a progress bar that crashed every command on a terminal, a URL that ended in a
traceback, a password echoed in an error, `verify` failing on a URL with a password, a
world-readable SQLite file, a second torn tail at the same offset that repair refused, and
`copy` leaving a destination behind for a bad option or saying nothing useful on Ctrl-C or
after `init`.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from rich.console import Console
from typer.testing import CliRunner

import tracebound.ledger
from tests.conformance.test_jsonl_conformance import flock_held_by_another_process
from tests.integration.conftest import cost
from tests.pg import PgServer, pg_hba
from tracebound.cli import _common
from tracebound.cli import copy as copy_cli
from tracebound.cli.app import app
from tracebound.errors import ConfigError, LedgerDamaged, StorageError
from tracebound.integrity.keys import NoteSigner
from tracebound.ledger import Ledger
from tracebound.sources import FixedClock, SequentialIds
from tracebound.store.copy import copy_ledger
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import MerkleNodeStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.url import open_store, printable_url, store_path

ORIGIN = "tracebound.test/review-store"
SIGNER = NoteSigner("tb-review", bytes(range(32)))
EVENT = {
    "stream_id": "run-1",
    "payload": {"kind": "cost_incurred", "tier": "direct", "amount_usd": "0.01", "source": "x"},
}


def cli(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(app, list(args), input=input)


def json_out(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def sign_ledger(url: str, n: int) -> None:
    """``n`` events over three streams, signed at the end."""
    store = open_store(url, create=True)
    store.set_meta("origin", ORIGIN)
    with Ledger(
        store, clock=FixedClock(), ids=SequentialIds(), signer=SIGNER, origin=ORIGIN
    ) as led:
        for i in range(0, n, 500):
            for j in range(i, min(i + 500, n)):
                led.record(f"s{j % 3}", [cost(j)])
        led.checkpoint()


# -- progress bars --------------------------------------------------------------------------


def test_progress_bar_draws_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every long command (verify, copy, append, checkpoint) draws this bar on a terminal.

    Its first frame is drawn before any total is known, and "{task.total:,}" of None raised
    TypeError: every such command ended in a traceback on a real terminal (CliRunner and
    pipes are no terminal, so no test saw it).
    """
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=100)
    monkeypatch.setattr(_common, "err_console", terminal)
    monkeypatch.delenv("CI", raising=False)
    with _common.progress_bar("copying", enabled=True) as update:
        update(4096, 90_000)
        update(90_000, 90_000)
    assert "90,000/90,000 events" in screen.getvalue()


# -- URLs and passwords ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["postgresql://app:s3cret-pw@[::1/ledgers", "sqlite://[oops/x", "jsonl://[oops/x"],
)
def test_an_unparsable_url_is_a_usage_error_not_a_traceback(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert "s3cret-pw" not in str(caught.value)
    result = cli("log", "--store", url, "--json")
    assert result.exit_code == 2, result.output
    error = json_out(result)["error"]
    assert error["kind"] == "ConfigError"
    assert "invalid" in error["message"]
    assert "s3cret-pw" not in result.output


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///x%00db",  # a NUL no file name can hold: os raised ValueError
        "jsonl:///x%00y",
        "postgresql://app:s3cret-pw@h/db?sch\udcffma=s",  # argv's non-UTF-8 byte 0xff
        "sqlite:///\udcff/ledger.db",
        "sqlite:///%ff/ledger.db",  # decoded to U+FFFD: another folder than the one meant
    ],
    ids=["sqlite-nul", "jsonl-nul", "postgres-not-utf8", "sqlite-not-utf8", "sqlite-percent"],
)
def test_a_url_no_file_name_or_libpq_can_hold_is_a_config_error(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        open_store(url)
    for command in ("log", "init"):
        result = cli(command, "--store", url, "--json")
        assert result.exit_code == 2, result.output
        assert json_out(result)["error"]["kind"] == "ConfigError"
        assert "s3cret-pw" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_store_folder_whose_name_is_not_utf8_is_a_store_like_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file name may hold any bytes; Python hands 0xff over as the surrogate U+DCFF. The
    # store's origin binding (keyed by its path) used to crash encoding it.
    monkeypatch.chdir(tmp_path)
    place = os.fsdecode(b"caf\xe9")
    assert cli("init", "--store", place, "--json").exit_code == 0
    result = cli("log", "--store", place, "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("url", ["jsonl://", "jsonl:///", "sqlite://", "sqlite:///"])
def test_a_url_without_a_path_is_refused_not_the_working_folder(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to mean the working folder: a JSONL ledger's log, lock and meta among the
    # user's own files.
    monkeypatch.chdir(tmp_path)
    result = cli("init", "--store", url, "--json")
    assert result.exit_code == 2, result.output
    assert "needs a path" in json_out(result)["error"]["message"]
    assert list(tmp_path.iterdir()) == []


def test_a_password_is_not_echoed_when_libpq_cannot_parse_the_url() -> None:
    """libpq quotes the token it cannot parse; here that token is the password."""
    url = "postgresql://app:s3cret%ZZpw@db.invalid/ledgers"
    result = cli("log", "--store", url, "--json")
    assert result.exit_code == 2, result.output
    error = json_out(result)["error"]
    assert error["kind"] == "ConfigError"
    assert "percent-encoded" in error["message"]
    assert "s3cret" not in result.output
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert caught.value.__cause__ is None  # the original, which quotes it, is not chained
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/l?schema=a", "postgresql://app@db:5432/l?schema=a"),
        ("postgres://app@db/l?password=s3cret&schema=a", "postgres://app@db/l?schema=a"),
        ("postgresql://app:s3cret@/l?host=/run/pg", "postgresql://app@/l?host=/run/pg"),
        ("sqlite:///ledger.db", "sqlite:///ledger.db"),
        ("./.tracebound", "./.tracebound"),
    ],
)
def test_printable_url_leaves_out_the_password(url: str, shown: str) -> None:
    assert printable_url(url) == shown


PW_ROLE = "tb_review_pw"
PW = "s3cret-Pw"


@pytest.fixture
def password_role(postgres_server: PgServer, postgres_dsn: str) -> Iterator[str]:
    """A role that must give its password (the session's server trusts everyone else).

    Yields a store URL with the password in it, over TCP.
    """
    rules = f"local all {PW_ROLE} scram-sha-256\nhost all {PW_ROLE} 127.0.0.1/32 scram-sha-256\n"
    dbname = postgres_dsn.rsplit("dbname=", 1)[1]
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(PW_ROLE))  # an earlier run
        )
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(PW_ROLE), sql.Literal(PW)
            )
        )
        admin.execute(
            sql.SQL("GRANT ALL ON DATABASE {} TO {}").format(
                sql.Identifier(dbname), sql.Identifier(PW_ROLE)
            )
        )
    # pg_hba waits until the server reads the rules: a reload is only a signal, and a
    # connection made before it took effect would not be asked for the password.
    with pg_hba(postgres_server, rules):
        try:
            yield f"postgresql://{PW_ROLE}:{PW}@127.0.0.1:{postgres_server.port}/{dbname}?schema=pw"
        finally:
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # where it owns things
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(PW_ROLE)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(PW_ROLE)))


@pytest.mark.postgres
def test_verify_workers_connect_with_the_password_the_url_gives(
    password_role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tracebound verify --store postgresql://user:password@…` uses CPU-count worker
    processes; they reopened the store from its printable URL, without the password, and
    failed with "fe_sendauth: no password supplied"."""
    url = password_role
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", os.devnull)
    wrong = url.replace(PW, "wrong-pw")
    with pytest.raises(StorageError) as caught:
        open_store(wrong, create=True)
    assert "wrong-pw" not in str(caught.value)
    sign_ledger(url, 5000)
    monkeypatch.setattr(tracebound.ledger, "CHUNK", 2048)  # several chunks, so workers run
    store = open_store(url)
    assert PW not in store.url
    try:
        report = Ledger(
            store, clock=FixedClock(), ids=SequentialIds(), verifier=SIGNER.verifier
        ).verify(workers=2)
    finally:
        store.close()
    assert report.damage is None, report.damage
    assert report.size == 5000
    assert report.checks["merkle"] == "ok"


@pytest.mark.postgres
def test_the_no_blobs_folder_message_leaves_the_password_out(password_role: str) -> None:
    """`replay RUN --store postgresql://user:password@…` without `--blobs` said "the store
    postgresql://user:password@… has no directory to keep blobs beside": the password, on
    the terminal and in whatever log keeps it."""
    sign_ledger(password_role, 3)
    result = cli("replay", "run-1", "--store", password_role, "--json")
    assert result.exit_code == 2, result.output
    message = json_out(result)["error"]["message"]
    assert "--blobs" in message
    assert "schema=pw" in message  # the store is still named, so the user knows which
    assert PW not in result.output


# -- file modes -------------------------------------------------------------------------------


def test_a_new_sqlite_ledger_file_is_owner_only(tmp_path: Path) -> None:
    """`--store sqlite:///shared/ledger.db` in a directory that is not tracebound's own:
    SQLite made the file 0644 (less the umask), world-readable, and -wal/-shm copy it."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    old = os.umask(0o022)
    try:
        store = SQLiteStore(shared / "ledger.db")
        try:
            store.append("run-1", [])  # nothing, but the WAL exists once the db is open
        finally:
            store.close()
    finally:
        os.umask(old)
    for path in shared.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_an_empty_file_is_no_ledger_and_a_read_leaves_it_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verify used to create the ledger's tables in it (and then said "run init").
    monkeypatch.chdir(tmp_path)
    Path("empty.db").touch()
    for command in ("verify", "log", "append"):
        result = cli(command, "--store", "empty.db", "--json", input="")
        assert result.exit_code == 2, result.output
        assert json_out(result)["error"]["kind"] == "StoreNotFound"
    assert Path("empty.db").stat().st_size == 0
    assert json_out(cli("init", "--store", "empty.db", "--json"))["ok"] is True  # init may


@pytest.mark.parametrize(
    ("tables", "said"),
    [
        (["CREATE TABLE users (id, name)"], "tables users"),
        (["CREATE TABLE events (id, what)"], "its events table lacks body"),
        (["CREATE TABLE meta (key, value)"], "tables meta"),
    ],
)
def test_another_applications_database_is_refused_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tables: list[str], said: str
) -> None:
    # Every command added a ledger's tables to it (CREATE TABLE IF NOT EXISTS on open).
    monkeypatch.chdir(tmp_path)
    with sqlite3.connect("app.db") as conn:
        for statement in tables:
            conn.execute(statement)
    before = Path("app.db").read_bytes()
    for command in ("init", "log"):
        result = cli(command, "--store", "app.db", "--json")
        assert result.exit_code == 2, result.output
        error = json_out(result)["error"]
        assert error["kind"] == "ConfigError" and said in error["message"], error
    assert Path("app.db").read_bytes() == before


def test_a_refused_sqlite_open_closes_what_it_opened(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "app.db") as conn:
        conn.execute("CREATE TABLE users (id, name)")
    with pytest.raises(ConfigError) as caught:
        SQLiteStore(tmp_path / "app.db", create=False)
    tb = caught.tb
    while tb.tb_next is not None and "self" not in tb.tb_frame.f_locals:
        tb = tb.tb_next
    store = tb.tb_frame.f_locals["self"]  # the half-made store the traceback still holds
    assert isinstance(store, SQLiteStore) and store.closed
    assert store._connections == []  # close() closes each one as it lets it go


# -- JSONL repair -----------------------------------------------------------------------------


def _tear(log: Path) -> None:
    with log.open("r+b") as f:
        f.truncate(log.stat().st_size - 10)


def test_a_second_torn_tail_at_the_same_offset_is_repaired_too(tmp_path: Path) -> None:
    """Crash, repair, the same append retried, crash again: the tail is torn at the same
    offset. Repair refused ("exists with other bytes; move it away first", exit 2)."""
    url = f"jsonl:///{tmp_path / 'j'}"
    assert cli("init", "--store", url, "--origin", ORIGIN).exit_code == 0
    line = json.dumps(EVENT) + "\n"
    assert cli("append", "--store", url, input=line).exit_code == 0
    log = tmp_path / "j" / "log.jsonl"
    offset = log.stat().st_size
    kept: list[str] = []
    for attempt in range(2):
        extra = {**EVENT, "correlation_id": f"retry-{attempt}"}
        assert cli("append", "--store", url, input=json.dumps(extra) + "\n").exit_code == 0
        _tear(log)
        shown = cli("repair", "--store", url, "--json")
        assert shown.exit_code == 1
        assert json_out(shown)["torn"][0]["offset"] == offset
        assert log.stat().st_size > offset  # only shown, not cut
        done = cli("repair", "--store", url, "--yes", "--json")
        assert done.exit_code == 0, done.output
        kept.append(json_out(done)["repaired"][0]["kept"])
        assert log.stat().st_size == offset
    assert kept == [f"log.jsonl.torn-{offset}", f"log.jsonl.torn-{offset}.2"]
    for name in kept:
        assert stat.S_IMODE((tmp_path / "j" / name).stat().st_mode) == 0o600
    assert (tmp_path / "j" / kept[0]).read_bytes() != (tmp_path / "j" / kept[1]).read_bytes()
    store = JsonlStore(tmp_path / "j", create=False)
    try:
        notes = store.repairs()
        assert [n["kept"] for n in notes] == kept
        assert store.size() == 1
    finally:
        store.close()


# -- copy -------------------------------------------------------------------------------------


def test_copy_with_a_bad_batch_creates_no_destination(tmp_path: Path) -> None:
    src = f"sqlite:///{tmp_path / 'src.db'}"
    sign_ledger(src, 10)
    dst = tmp_path / "dst"
    result = cli("copy", src, f"jsonl:///{dst}", "--batch", "3000", "--json")
    assert result.exit_code == 2, result.output
    assert "multiple of 2048" in json_out(result)["error"]["message"]
    assert not dst.exists()


def test_copy_onto_itself_spelled_another_way_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`copy sqlite:///.tracebound sqlite:///$PWD/.tracebound` compared URLs, not places: it
    "copied" the ledger onto itself and reported success ("resumed after N, 0 written")."""
    monkeypatch.chdir(tmp_path)
    sign_ledger("sqlite:///store", 10)
    for dst in (f"sqlite:///{tmp_path / 'store'}", "sqlite:///store/ledger.db", "store"):
        result = cli("copy", "sqlite:///store", dst, "--json")
        assert result.exit_code == 2, (dst, result.output)
        assert "the same store" in json_out(result)["error"]["message"]


def test_copy_into_a_place_bound_to_another_log_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    """A place bound to another origin (a ledger that was there and is gone): `copy` exited
    0, and the next `verify` of the copy said DAMAGED (rollback/fork, naming both origins)."""
    src = f"sqlite:///{tmp_path / 'src.db'}"
    sign_ledger(src, 10)
    place = tmp_path / "moved.db"
    dst = f"sqlite:///{place}"
    assert cli("init", "--store", dst, "--origin", "other.example/log").exit_code == 0
    place.unlink()  # the other ledger is gone; its place is still bound to it
    result = cli("copy", src, dst, "--verifier-key", SIGNER.verifier.format(), "--json")
    assert result.exit_code == 2, result.output
    message = json_out(result)["error"]["message"]
    assert "'other.example/log'" in message
    assert repr(ORIGIN) in message
    with closing(open_store(dst)) as written:
        assert written.size() == 0  # nothing copied


def test_copy_into_a_destination_made_by_init_says_why_it_is_refused(tmp_path: Path) -> None:
    src = f"sqlite:///{tmp_path / 'src.db'}"
    sign_ledger(src, 10)
    dst = f"jsonl:///{tmp_path / 'dst'}"
    assert cli("init", "--store", dst).exit_code == 0  # a random origin of its own
    result = cli("copy", src, dst, "--verifier-key", SIGNER.verifier.format(), "--json")
    assert result.exit_code == 1, result.output
    error = json_out(result)["error"]
    assert error["kind"] == "CopyDiverged"
    assert "empty ledger" in error["message"]
    assert "tracebound init" in error["message"]


def test_ctrl_c_mid_copy_says_how_far_it_got_and_how_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = f"sqlite:///{tmp_path / 'src.db'}"
    sign_ledger(src, 5000)
    dst = f"sqlite:///{tmp_path / 'dst.db'}"
    real = copy_ledger  # the function copy_cli calls, before it is patched

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        def progress(done: int, total: int) -> None:
            if done >= 2048:
                raise KeyboardInterrupt

        return real(*args, **{**kwargs, "progress": progress})

    monkeypatch.setattr(copy_cli, "copy_ledger", interrupted)
    key = SIGNER.verifier.format()
    result = cli("copy", src, dst, "--verifier-key", key, "--batch", "2048", "--json")
    assert result.exit_code == 130, result.output
    error = json_out(result)["error"]
    assert error["kind"] == "Interrupted"
    assert error["written"] == 2048
    assert "run the same command again" in error["message"]
    monkeypatch.setattr(copy_cli, "copy_ledger", real)
    resumed = cli("copy", src, dst, "--verifier-key", key, "--json")
    assert resumed.exit_code == 0, resumed.output
    assert json_out(resumed)["resumed_from"] == 2048


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_copy_gets_its_stored_merkle_nodes(tmp_path: Path, kind: str) -> None:
    """Without them every `prove` on a copy read the whole log (ADR 0011's milliseconds
    only came back after a first checkpoint on the copy)."""
    src = f"sqlite:///{tmp_path / 'src.db'}"
    sign_ledger(src, 5000)
    dst = f"{kind}:///{tmp_path / 'dst'}"
    key = SIGNER.verifier.format()
    assert cli("copy", src, dst, "--verifier-key", key, "--batch", "2048").exit_code == 0
    source, copy = open_store(src), open_store(dst)
    try:
        assert isinstance(source, MerkleNodeStore)
        assert isinstance(copy, MerkleNodeStore)
        for level in range(1, 13):
            assert copy.merkle_node_count(level) == source.merkle_node_count(level)
            count = copy.merkle_node_count(level)
            assert copy.merkle_nodes(level, 0, count) == source.merkle_nodes(level, 0, count)
        assert copy.merkle_node_count(1) > 0
        ledger = Ledger(copy, clock=FixedClock(), ids=SequentialIds(), verifier=SIGNER.verifier)
        bundle = ledger.prove(4321)
        assert bundle.position == 4321
    finally:
        source.close()
        copy.close()


def test_copy_checked_with_another_key_says_to_pass_the_right_one(tmp_path: Path) -> None:
    src = f"sqlite:///{tmp_path / 'src.db'}"
    sign_ledger(src, 10)
    other = NoteSigner("tb-review", bytes(range(1, 33))).verifier.format()
    result = cli("copy", src, f"jsonl:///{tmp_path / 'dst'}", "--verifier-key", other, "--json")
    assert result.exit_code == 1, result.output
    error = json_out(result)["error"]
    assert error["damage"]["kind"] == "forged-signature"
    assert "if the source was signed with another key, pass that one" in error["message"]


def test_a_jsonl_log_deleted_from_its_folder_is_damage_and_not_recreated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``init`` on a JSONL folder whose log.jsonl was deleted made a new, empty log and said
    "Already initialised" (exit 0): the folder's meta.json still named the origin. A
    folder that holds a ledger's other files but no log is a ledger whose events are gone,
    whether or not its place was bound (here it was not: the folder was copied)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # bindings and witness: not the user's
    for name in [k for k in os.environ if k.startswith("TRACEBOUND_")]:
        monkeypatch.delenv(name)
    place = tmp_path / "ledger"
    url = f"jsonl:///{place}"
    sign_ledger(url, 5)
    (place / "log.jsonl").unlink()
    for command in (["init"], ["verify"], ["log"]):
        result = cli(*command, "--store", url, "--json")
        assert result.exit_code == 1, result.output
        damage = json_out(result)["error"]["damage"]
        assert (damage["kind"], damage["position"]) == ("truncation", 1)
        assert "log.jsonl" in damage["detail"] and "checkpoints.jsonl" in damage["detail"]
    assert not (place / "log.jsonl").exists()  # nothing was made in its place
    with pytest.raises(LedgerDamaged):
        JsonlStore(place, create=True)


def test_tail_follow_json_reports_an_error_as_one_json_line(tmp_path: Path) -> None:
    """``tail --follow --json`` is JSON Lines; an error it ended on (a torn tail, a server
    that went away) was one pretty-printed document over many lines, which a reader of
    lines cannot parse."""
    place = tmp_path / "ledger"
    sign_ledger(f"jsonl:///{place}", 3)
    with (place / "log.jsonl").open("ab") as log:  # docs/jsonl.md's torn write
        log.write(b'{"batch":[4,4],"hash":"')
    result = cli("tail", "--follow", "--json", "--store", f"jsonl:///{place}")
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    error = json.loads(lines[0])["error"]
    assert (error["kind"], error["damage"]["kind"]) == ("LedgerDamaged", "torn-tail")


# -- a store another process holds ----------------------------------------------------------


@contextmanager
def _held(kind: str, url: str, dsn: str) -> Iterator[None]:
    """The store's write lock, held for real by another process (or server session)."""
    if kind == "jsonl":
        with flock_held_by_another_process(store_path(url) / "lock"):
            yield
    elif kind == "sqlite":
        lite = sqlite3.connect(store_path(url) / "ledger.db", isolation_level=None)
        lite.execute("BEGIN IMMEDIATE")
        yield
        lite.close()
    else:
        with psycopg.connect(dsn) as conn:
            conn.execute('SELECT position FROM "busy"."log_head" FOR UPDATE')
            yield
            conn.rollback()


@pytest.mark.parametrize(
    "kind", ["sqlite", "jsonl", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_busy_store_is_the_same_message_and_exit_code_on_every_backend(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """A store whose writer is stopped or hung: each backend said it differently (SQLite
    "sqlite append failed: database is locked", PostgreSQL "lost a race, retry", and a JSONL
    command waited forever, saying nothing). Now each waits its timeout (made short here)
    and says the same: the store is locked, not damaged; exit 2; nothing was written."""
    import tracebound.store.postgres as pg_module
    import tracebound.store.url as url_module

    dsn = ""
    if kind == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        server: PgServer = request.getfixturevalue("postgres_server")
        url = server.url(dsn.rsplit("dbname=", 1)[1], schema="busy")
    else:
        url = f"{kind}:///{tmp_path / 'ledger'}"
    monkeypatch.setattr(url_module, "SQLiteStore", partial(SQLiteStore, busy_timeout=0.2))
    monkeypatch.setattr(url_module, "JsonlStore", partial(JsonlStore, lock_timeout=0.2))
    monkeypatch.setattr(
        pg_module, "PostgresStore", partial(pg_module.PostgresStore, lock_timeout=0.2)
    )
    assert cli("init", "--store", url).exit_code == 0
    assert cli("append", "--store", url, input=json.dumps(EVENT)).exit_code == 0
    with _held(kind, url, dsn):
        result = cli("append", "--store", url, "--json", input=json.dumps(EVENT))
    assert result.exit_code == 2, result.output
    error = json_out(result)["error"]
    assert error["kind"] == "StoreBusy"
    assert "is locked by another process" in error["message"]
    assert "within 0.2 s" in error["message"] and "not damaged" in error["message"]
    store = open_store(url)
    try:
        assert store.size() == 1  # nothing was written
    finally:
        store.close()


def test_reading_a_jsonl_store_a_hung_writer_holds_ends_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`verify` and `log` on a JSONL store whose writer is stopped used to wait forever."""
    import tracebound.store.url as url_module

    monkeypatch.setattr(url_module, "JsonlStore", partial(JsonlStore, lock_timeout=0.2))
    url = f"jsonl:///{tmp_path / 'ledger'}"
    sign_ledger(url, 3)
    with flock_held_by_another_process(tmp_path / "ledger" / "lock"):
        for command in ("verify", "log", "inspect"):
            args = [command, "s0"] if command == "inspect" else [command]
            result = cli(*args, "--store", url, "--json")
            assert result.exit_code == 2, result.output
            assert json_out(result)["error"]["kind"] == "StoreBusy", command
    assert cli("log", "--store", url).exit_code == 0  # let go: it reads again
