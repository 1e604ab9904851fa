"""Choose a backend from a URL: ``sqlite:///path``, later ``postgresql://…`` and ``jsonl:///…``.

A bare path (``./.tracebound``) means SQLite, the embedded default, so the common case needs
no URL at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

from tracebound.errors import ConfigError
from tracebound.store.sqlite import SQLiteStore

__all__ = ["DEFAULT_STORE_DIR", "open_store", "store_path"]

DEFAULT_STORE_DIR: Final = Path(".tracebound")


def store_path(url: str | Path | None) -> Path:
    """The filesystem location a SQLite URL or path names (for key/witness placement)."""
    if url is None:
        return DEFAULT_STORE_DIR
    text = str(url)
    if "://" not in text:
        return Path(text)
    parts = urlsplit(text)
    if parts.scheme != "sqlite":
        raise ConfigError(f"{parts.scheme!r} URLs do not name a local path")
    # sqlite:///rel/path -> "rel/path"; sqlite:////abs/path -> "/abs/path" (SQLAlchemy's form)
    path = unquote(parts.path)
    if parts.netloc:
        raise ConfigError(f"a sqlite URL has no host: use sqlite:///{parts.netloc}{path}")
    return Path(path[1:] if path.startswith("/") else path)


def open_store(url: str | Path | None = None, *, create: bool = False) -> SQLiteStore:
    """Open the store a URL names; ``None`` is ``./.tracebound``.

    Raises:
        ConfigError: the URL's scheme is not supported.
        StoreNotFound: there is no store there and ``create`` is false.
    """
    if url is not None and "://" in str(url):
        scheme = urlsplit(str(url)).scheme
        if scheme != "sqlite":
            raise ConfigError(
                f"unsupported store URL scheme {scheme!r}; use sqlite:///path "
                "(postgresql:// and jsonl:// arrive with their backends)"
            )
    return SQLiteStore(store_path(url), create=create)
