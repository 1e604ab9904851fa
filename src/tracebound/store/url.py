"""Choose a backend from a URL: ``sqlite:///path``, ``postgresql://…``, ``jsonl:///path``.

A bare path (``./.tracebound``) means SQLite, the embedded default, so the common case needs
no URL at all. ``postgresql://user@host:5432/db?schema=name`` (or ``postgres://``) opens the
PostgreSQL backend; ``schema`` defaults to ``tracebound`` and every other query parameter
goes to libpq. The PostgreSQL module (and so psycopg, an optional dependency) is imported
only when such a URL is opened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import SplitResult, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from tracebound.errors import ConfigError, StoreNotFound
from tracebound.store.jsonl import JsonlStore
from tracebound.store.port import LedgerStore
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.witness import missing_store

__all__ = [
    "DEFAULT_STORE_DIR",
    "POSTGRES_SCHEMES",
    "is_postgres_url",
    "open_store",
    "printable_url",
    "store_path",
]

DEFAULT_STORE_DIR: Final = Path(".tracebound")
POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres"})


def _split(url: str) -> SplitResult:
    """``urlsplit``, with its ValueError (a bracket left open) as a ConfigError.

    The message does not quote the URL: it may hold a password. (The port is not checked
    here: ``postgresql://h1:5432,h2:5433/db`` is libpq's multi-host form.)
    """
    scheme = url.split(":", 1)[0].encode("utf-8", "backslashreplace").decode("ascii", "replace")
    if not url.isascii() and _not_utf8(url):
        # A byte argv or the environment held that is not UTF-8 (Python's surrogate for
        # it): percent-encoding, quoting and libpq all need text.
        raise ConfigError(
            f"invalid {scheme} URL: it is not UTF-8 text (give a SQLite or JSONL store's "
            "folder as a plain path instead)"
        )
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"invalid {scheme} URL: {exc}") from None


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def printable_url(url: str) -> str:
    """``url`` as it may be shown to people: a password in it (``user:password@`` or
    ``?password=``) is left out, so a message naming the store never prints it."""
    if "://" not in url:
        return url  # a path
    parts = _split(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if parts.password is None and all(key != "password" for key, _ in pairs):
        return url  # rebuilt, sqlite:///x would lose its empty host's slashes
    userinfo, _, hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo.split(':', 1)[0]}@{hosts}" if userinfo else hosts
    query = urlencode([(k, v) for k, v in pairs if k != "password"], safe="/")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def store_path(url: str | Path | None) -> Path:
    """The filesystem location a SQLite or JSONL URL or path names (for key/witness placement)."""
    if url is None:
        return DEFAULT_STORE_DIR
    text = str(url)
    if "://" not in text:
        return _home_expanded(_no_nul(text))
    parts = _split(text)
    if parts.scheme not in {"sqlite", "jsonl"}:
        raise ConfigError(f"{parts.scheme!r} URLs do not name a local path")
    # sqlite:///rel/path -> "rel/path"; sqlite:////abs/path -> "/abs/path" (SQLAlchemy's form)
    try:  # strict: "%ff" would otherwise become U+FFFD, a folder other than the one meant
        path = unquote(parts.path, errors="strict")
    except UnicodeDecodeError:
        raise ConfigError(
            f"a {parts.scheme} URL's path holds percent-encoded bytes that are not UTF-8"
        ) from None
    if parts.netloc:
        raise ConfigError(
            f"a {parts.scheme} URL has no host: use {parts.scheme}:///{parts.netloc}{path}"
        )
    local = path[1:] if path.startswith("/") else path
    if not local:  # the working folder itself: a JSONL ledger's files would land among yours
        raise ConfigError(
            f"a {parts.scheme} URL needs a path: {parts.scheme}:///ledger (relative) or "
            f"{parts.scheme}:////abs/ledger"
        )
    return _home_expanded(_no_nul(local))


def _home_expanded(path: str) -> Path:
    """``path`` with a leading ``~`` as the home folder, as ``--key`` and ``--witness`` take
    it: where no shell expands it (an env file, a quoted argument, a URL) a folder named
    ``~`` appeared in the working directory, a different ledger in every folder."""
    try:
        return Path(path).expanduser()
    except RuntimeError as exc:  # HOME unset and no password entry, or no such ~user
        raise ConfigError(f"cannot expand {path!r}: {exc}") from None


def _no_nul(path: str) -> str:
    if "\x00" in path:  # %00 in a URL: no file name holds it, and os raises ValueError
        raise ConfigError("a store path cannot hold a NUL byte (%00)")
    return path


def is_postgres_url(url: str | Path | None) -> bool:
    """Whether ``url`` names a PostgreSQL ledger (``postgresql://`` or ``postgres://``).

    Raises:
        ConfigError: a URL ``urlsplit`` cannot read.
    """
    return url is not None and "://" in str(url) and _split(str(url)).scheme in POSTGRES_SCHEMES


def open_store(url: str | Path | None = None, *, create: bool = False) -> LedgerStore:
    """Open the store a URL names; ``None`` is ``./.tracebound``.

    Raises:
        ConfigError: the URL's scheme is not supported, or psycopg is not installed.
        StoreNotFound: there is no store there and ``create`` is false.
    """
    if url is not None and "://" in str(url):
        scheme = _split(str(url)).scheme
        if scheme in POSTGRES_SCHEMES:
            return _open_postgres(str(url), create=create)
        if scheme not in {"jsonl", "sqlite"}:
            raise ConfigError(
                f"unsupported store URL scheme {scheme!r}; use sqlite:///path, "
                "jsonl:///path or postgresql://user@host:port/db?schema=name"
            )
        if scheme == "jsonl":
            try:
                return JsonlStore(store_path(url), create=create)
            except StoreNotFound as missing:
                raise missing_store(missing) from None
    try:
        return SQLiteStore(store_path(url), create=create)
    except StoreNotFound as missing:
        raise missing_store(missing) from None


def _open_postgres(url: str, *, create: bool) -> LedgerStore:
    try:
        from tracebound.store.postgres import PostgresStore, parse_url  # noqa: PLC0415
    except ImportError as exc:  # psycopg is the optional `postgres` extra
        raise ConfigError(
            f"postgresql:// needs psycopg: pip install 'tracebound[postgres]' ({exc})"
        ) from exc
    dsn, schema = parse_url(url)
    return PostgresStore(dsn, schema=schema, create=create)
