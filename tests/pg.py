"""A real PostgreSQL server for the tests, started from the machine's own binaries.

One server per test session, so under pytest-xdist each worker runs its own (its own
temporary directory, its own free port, its own socket), and one fresh database per test.
The server runs with ``fsync = on`` and ``synchronous_commit = on``: the durability the
tests rely on is the production setting, not a fast fake.

PostgreSQL refuses to run as root. When the tests run as root the server runs as the
``postgres`` user the Debian package creates (or ``tracebound-pg``, created here when that
is missing too). Missing binaries fail the tests that need a server with a clear message;
they are never skipped, because a skipped durability test reads like a passing one.

Hand-written rather than pytest-postgresql: that plugin runs ``pg_ctl`` as the current
user, which the server refuses when it is root, and it is not installed here.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

__all__ = [
    "PgServer",
    "crash_and_restart",
    "find_bindir",
    "login_role",
    "pg_hba",
    "postgres_dsn",
    "postgres_server",
    "server_stopped",
    "wait_for_lock_wait",
]

_DEBIAN_ROOT = Path("/usr/lib/postgresql")  # Debian's versioned server binaries live here
_FALLBACK_USER = "tracebound-pg"
_SUPERUSER = "postgres"  # the role initdb creates; independent of the OS user
_counter = itertools.count(1)


@dataclass(frozen=True)
class PgServer:
    """A running server: where it listens and how to reach it as the superuser."""

    bindir: Path
    root: Path
    port: int
    uid: int | None  # the OS user the server runs as, when we had to switch from root

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq DSN over the server's Unix socket."""
        return f"host={self.socket_dir} port={self.port} user={_SUPERUSER} dbname={dbname}"

    def url(self, dbname: str, *, schema: str | None = None) -> str:
        """A store URL over TCP (``postgresql://user@127.0.0.1:port/db?schema=…``)."""
        query = "" if schema is None else f"?schema={quote(schema, safe='')}"
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{dbname}{query}"


def _version(path: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", path.parent.parent.name)) or (0,)


def find_bindir() -> Path:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` are; fails the test run if nowhere."""
    candidates: list[Path] = []
    if env := os.environ.get("TRACEBOUND_PG_BINDIR"):
        candidates.append(Path(env))
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
            candidates.append(Path(out))
    candidates += [
        p.parent for p in sorted(_DEBIAN_ROOT.glob("*/bin/initdb"), key=_version, reverse=True)
    ]
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).parent)
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    pytest.fail(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; looked in "
        f"{[str(c) for c in candidates] or 'pg_config, /usr/lib/postgresql/*/bin, PATH'}. "
        "Install them (Debian: apt-get install postgresql) or set TRACEBOUND_PG_BINDIR. "
        "PostgreSQL tests are never skipped.",
        pytrace=False,
    )


def _server_uid() -> int | None:
    """The uid to run the server as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", _FALLBACK_USER):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_uid
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _FALLBACK_USER],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return pwd.getpwnam(_FALLBACK_USER).pw_uid


def _run(server_uid: int | None, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # None is subprocess.run's own default for each of these: run as the current user.
    user: int | None = None
    group: int | None = None
    extra_groups: list[int] | None = None
    if server_uid is not None:
        entry = pwd.getpwuid(server_uid)
        user, group, extra_groups = server_uid, entry.pw_gid, []
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        user=user,
        group=group,
        extra_groups=extra_groups,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_PREFIX = "tracebound-pg-"
_OWNER = "owner.pid"  # the test process that started the server in this directory


def _reap_orphans(bindir: Path) -> None:
    """Stop servers this fixture started in test runs that were killed before cleanup.

    Only directories this fixture made are considered, and only when the process that made
    them is gone, so a server of a test run still in progress is never touched.
    """
    for root in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            owner = int((root / _OWNER).read_text(encoding="utf-8"))
            os.kill(owner, 0)
        except ProcessLookupError:
            server = PgServer(bindir=bindir, root=root, port=0, uid=_server_uid())
            _run(
                server.uid,
                [str(bindir / "pg_ctl"), "-D", str(server.datadir), "-m", "immediate", "stop"],
                root,
            )
            shutil.rmtree(root, ignore_errors=True)
        except (OSError, ValueError):
            continue  # being set up right now, or not ours to judge


def _start(bindir: Path) -> PgServer:
    _reap_orphans(bindir)
    uid = _server_uid()
    root = Path(tempfile.mkdtemp(prefix=_PREFIX))
    (root / _OWNER).write_text(str(os.getpid()), encoding="utf-8")
    (root / "sock").mkdir()
    if uid is not None:
        for path in (root, root / "sock"):
            os.chown(path, uid, pwd.getpwuid(uid).pw_gid)
    data = root / "data"
    # --no-sync only skips initdb's final flush of the fresh cluster; the server itself
    # runs with fsync on.
    init = _run(
        uid,
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            _SUPERUSER,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ],
        root,
    )
    if init.returncode != 0:
        pytest.fail(f"initdb failed:\n{init.stdout}\n{init.stderr}", pytrace=False)
    failure = ""
    for _attempt in range(5):  # a free port can be taken by someone else before we bind it
        port = _free_port()
        with (data / "postgresql.auto.conf").open("a", encoding="utf-8") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {port}\n"
                f"unix_socket_directories = '{root / 'sock'}'\n"
                "fsync = on\nsynchronous_commit = on\nfull_page_writes = on\n"
                "max_connections = 200\n"
            )
        log = root / "server.log"
        started = _run(
            uid,
            [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start"],
            root,
        )
        if started.returncode == 0:
            return PgServer(bindir=bindir, root=root, port=port, uid=uid)
        failure = started.stdout + started.stderr
        with contextlib.suppress(OSError):
            failure += log.read_text(encoding="utf-8", errors="replace")[-4000:]
    shutil.rmtree(root, ignore_errors=True)
    pytest.fail(f"the PostgreSQL server did not start:\n{failure}", pytrace=False)


def _stop(server: PgServer) -> None:
    _run(
        server.uid,
        [str(server.bindir / "pg_ctl"), "-D", str(server.datadir), "-m", "fast", "-w", "stop"],
        server.root,
    )
    shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    """A PostgreSQL server of this test session (this xdist worker), stopped at the end."""
    server = _start(find_bindir())
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            fsync = conn.execute("SHOW fsync").fetchone()
            assert fsync == ("on",), fsync
        yield server
    finally:
        _stop(server)


@pytest.fixture
def postgres_dsn(postgres_server: PgServer) -> Iterator[str]:
    """A fresh, empty database for one test, as a DSN over the Unix socket; dropped after."""
    name = f"tb_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield postgres_server.dsn(name)
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def login_role(server: PgServer, dsn: str, name: str, grants: list[str]) -> Iterator[str]:
    """A login role with only ``grants`` (SQL run as the superuser in ``dsn``'s database).

    Yields the role's store URL over TCP without a schema (append ``?schema=…``); the
    session's server trusts every role, so no password. Roles are cluster-wide: the role
    and everything granted to it are dropped afterwards.
    """
    dbname = dsn.rsplit("dbname=", 1)[1]
    role = sql.Identifier(name)
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(role))  # an earlier run's
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
    try:
        with psycopg.connect(dsn, autocommit=True) as admin:
            for grant in grants:
                admin.execute(grant)
        yield f"postgresql://{name}@127.0.0.1:{server.port}/{dbname}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(role))
            admin.execute(sql.SQL("DROP ROLE {}").format(role))


@contextlib.contextmanager
def pg_hba(server: PgServer, rules: str, *, keep: bool = True) -> Iterator[None]:
    """The server's pg_hba.conf with ``rules`` first (``keep=False``: only them, so a
    connection they do not match has no entry), put back on leaving. The superuser keeps
    its way in over the socket, which the fixtures use.

    Returns once the server uses them: a reload is a signal, so new sessions are opened
    until one was forked after the postmaster reread the files.
    """
    hba = server.datadir / "pg_hba.conf"
    before = hba.read_text(encoding="utf-8")

    def load(text: str) -> None:
        hba.write_text(text, encoding="utf-8")
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            (loaded,) = admin.execute("SELECT pg_conf_load_time()").fetchone() or (None,)
            admin.execute("SELECT pg_reload_conf()")
        for _ in range(6000):
            with psycopg.connect(server.dsn(), autocommit=True) as probe:
                (now,) = probe.execute("SELECT pg_conf_load_time()").fetchone() or (None,)
            if now != loaded:
                return
            time.sleep(0.005)
        pytest.fail("the server never reloaded pg_hba.conf")

    load(f"local all {_SUPERUSER} trust\n{rules}" + (before if keep else ""))
    try:
        yield
    finally:
        load(before)


def wait_for_lock_wait(dsn: str, query_fragment: str) -> None:
    """Return once a session whose query contains ``query_fragment`` waits on a lock.

    Tests use this to order an interleaving (a second writer is queued behind the first)
    from what the server reports, not from sleeps: it polls ``pg_stat_activity`` and fails
    the test only if the wait never happens.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(6000):
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE %s",
                (f"%{query_fragment}%",),
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            time.sleep(0.005)
    pytest.fail(f"no session running {query_fragment!r} ever waited on a lock")


def crash_and_restart(server: PgServer) -> None:
    """Kill the server the way a power cut would, then start it again.

    ``pg_ctl stop -m immediate`` kills every server process without a checkpoint or a flush
    of shared buffers; on restart the server recovers from its write-ahead log, so only what
    was fsync'ed there survives.
    """
    pg_ctl = str(server.bindir / "pg_ctl")
    data = str(server.datadir)
    stopped = _run(server.uid, [pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"], server.root)
    assert stopped.returncode == 0, stopped.stderr
    log = str(server.root / "server.log")
    started = _run(
        server.uid, [pg_ctl, "-D", data, "-l", log, "-w", "-t", "60", "start"], server.root
    )
    assert started.returncode == 0, started.stdout + started.stderr


@contextlib.contextmanager
def server_stopped(server: PgServer) -> Iterator[None]:
    """The server stopped as a restart stops it (``pg_ctl stop -m fast``: every session is
    ended, committed work is kept), and started again on leaving, whatever happened."""
    pg_ctl = str(server.bindir / "pg_ctl")
    data = str(server.datadir)
    stopped = _run(server.uid, [pg_ctl, "-D", data, "-m", "fast", "-w", "stop"], server.root)
    assert stopped.returncode == 0, stopped.stderr
    try:
        yield
    finally:
        log = str(server.root / "server.log")
        started = _run(
            server.uid, [pg_ctl, "-D", data, "-l", log, "-w", "-t", "60", "start"], server.root
        )
        assert started.returncode == 0, started.stdout + started.stderr
