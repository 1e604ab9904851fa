"""Building a :class:`~tracebound.pipeline.runner.Runner` from files, for the CLI and scripts.

A run that paused at a gate is resumed by another process, often days later and from a
shell, so everything a Runner needs must be found again from the working directory and a
few options, and anything missing must be a clear error, never a silently weaker runner:

============== ================================================ ===================
what           default                                          option
============== ================================================ ===================
store          ``./.tracebound``                                ``--store``
policy         ``./tracebound-policy.toml`` (required)          ``--policy``
CODEOWNERS     ``./CODEOWNERS``, then ``./.github/CODEOWNERS``  ``--codeowners``
blobs          the SQLite ledger's own file (table ``blobs``)   ``--blobs DIR``
redaction key  ``~/.config/tracebound/keys/redaction.key``      ``--redaction-key``
signing key    ``~/.config/tracebound/keys/tracebound.key``     ``--key``
witness        ``~/.local/state/tracebound/witness/<origin>``   ``--witness``
============== ================================================ ===================

Blobs (artifacts, inputs, validation output) live in the ledger's own database file when
the ledger is SQLite, so each step pays one fsync instead of three (ADR 0009). With
``--blobs DIR``, or a JSONL or PostgreSQL ledger, they are files under ``DIR`` (default
``<store dir>/blobs``; a PostgreSQL ledger has no store dir, so there it must be given).

The policy fails closed (a missing or empty file raises
:class:`~tracebound.errors.PolicyUnusable`). The redaction key is an HMAC key: it is created
on first use, 32 random bytes in a 0600 file, and like the signing key it must live outside
the store, because whoever holds store and key together can test guesses against every
redaction digest.
"""

from __future__ import annotations

import importlib
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias
from urllib.parse import urlsplit

from tracebound.errors import ConfigError, PolicyUnusable, SigningKeyError
from tracebound.integrity.keys import NoteSigner, NoteVerifier
from tracebound.ledger import Ledger
from tracebound.pipeline.codeowners import CodeOwners
from tracebound.pipeline.policy import Policy
from tracebound.pipeline.redaction import RedactionStats, Redactor
from tracebound.pipeline.runner import Runner
from tracebound.pipeline.runtime import Pipeline, split_ref
from tracebound.store.blobs import BlobStore, FileBlobStore
from tracebound.store.files import make_private_dir, write_file_atomic
from tracebound.store.keyfile import (
    default_key_dir,
    default_key_path,
    load_signer,
    load_verifier,
    missing_signer_error,
)
from tracebound.store.sqlite import SQLiteStore
from tracebound.store.sqlite_blobs import SQLiteBlobStore
from tracebound.store.url import open_store, printable_url, store_path
from tracebound.store.witness import choose_witness
from tracebound.system import RandomIds, SystemClock

__all__ = [
    "DEFAULT_CODEOWNERS",
    "DEFAULT_POLICY",
    "REDACTION_KEY_BYTES",
    "RunnerConfig",
    "load_pipeline",
    "load_redaction_key",
]

DEFAULT_POLICY: Final = Path("tracebound-policy.toml")
DEFAULT_CODEOWNERS: Final = (Path("CODEOWNERS"), Path(".github") / "CODEOWNERS")
REDACTION_KEY_BYTES: Final = 32
_SIGNING_KEY_NAME: Final = "tracebound"


def _inside(path: Path, directory: Path | None) -> bool:
    if directory is None:
        return False
    here, there = path.expanduser().resolve(), directory.expanduser().resolve()
    return here == there or here.is_relative_to(there)


def load_redaction_key(
    path: Path,
    *,
    store_dir: Path | None = None,
    create: bool = True,
    random_bytes: Callable[[int], bytes] = secrets.token_bytes,
) -> bytes:
    """Read the 32-byte redaction HMAC key, creating it (0600) on first use.

    Raises:
        SigningKeyError: the key sits inside the store, is readable by group or others,
            is not exactly 32 bytes, or cannot be read or written.
    """
    path = path.expanduser()
    if path.is_dir():  # else "accessible by group; chmod 600" would advise chmod-ing a folder
        raise SigningKeyError(
            f"redaction key {path} is a folder; give the key file's own path "
            f"(e.g. {path / 'redaction.key'})"
        )
    if _inside(path, store_dir):
        raise SigningKeyError(
            f"refusing to keep the redaction key {path} inside the store {store_dir}: whoever "
            "holds both can test guesses against every redaction digest"
        )
    if not path.exists():
        if not create:
            raise SigningKeyError(f"no redaction key at {path}")
        try:
            make_private_dir(path.parent)
            write_file_atomic(path, random_bytes(REDACTION_KEY_BYTES), mode=0o600, overwrite=False)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError as exc:
            raise SigningKeyError(f"could not create the redaction key {path}: {exc}") from exc
    try:
        st = path.stat()
        if st.st_mode & 0o077:
            raise SigningKeyError(
                f"redaction key {path} is accessible by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); fix it with: chmod 600 {path}"
            )
        key = path.read_bytes()
    except OSError as exc:
        raise SigningKeyError(f"cannot read the redaction key {path}: {exc}") from exc
    if len(key) != REDACTION_KEY_BYTES:
        raise SigningKeyError(
            f"redaction key {path} holds {len(key)} bytes, not {REDACTION_KEY_BYTES}"
        )
    return key


def load_pipeline(ref: str) -> Pipeline:
    """Import a pipeline from ``"package.module:attribute"`` (dotted attributes allowed).

    The attribute is a :class:`Pipeline`, or a callable without arguments that returns one
    (a factory, for pipelines built from configuration).

    Raises:
        ConfigError: the reference is malformed, cannot be imported (the module raised
            while it was imported, too), or is not a pipeline (a factory that raised, too).
    """
    module_name, attr = split_ref(ref)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for pipeline {ref!r}: {exc}") from exc
    except Exception as exc:
        # The module's own code raised while it was imported: user code, named as such
        # (with --json a traceback would not be the one JSON document the CLI promises).
        raise ConfigError(
            f"importing {module_name!r} for pipeline {ref!r} raised {_described(exc)}"
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{module_name!r} has no attribute {attr!r} (pipeline {ref!r})")
        obj = getattr(obj, part)
    if not isinstance(obj, Pipeline) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigError(
                f"calling {ref!r} (a factory takes no arguments and returns a Pipeline) "
                f"raised {_described(exc)}"
            ) from exc
    if not isinstance(obj, Pipeline):
        raise ConfigError(f"{ref!r} is a {type(obj).__name__}, not a tracebound Pipeline")
    return obj


def _described(exc: Exception) -> str:
    """``Type: message`` of an error user code raised, even when its ``__str__`` raises."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the error's type
        message = "<the exception's message could not be read>"
    return f"{type(exc).__name__}: {message}"


StrPath: TypeAlias = str | os.PathLike[str]
"""A path as a ``str`` or a ``Path`` (any ``os.PathLike``): whichever the caller has."""

_PATH_FIELDS: Final = (
    "policy", "codeowners", "blobs", "redaction_key", "key", "witness", "workspace", "base"
)  # fmt: skip


@dataclass(frozen=True)
class RunnerConfig:
    """Where a Runner's parts live; ``None`` means the documented default.

    Relative defaults resolve against ``base`` (the working directory when omitted), so a
    config built in one directory means the same files wherever it is used later. Paths
    may be given as ``str`` or ``Path``; they are kept as ``Path`` (``store`` and
    ``verifier_key``, which may be a URL or key text, as ``str``).

    Raises:
        ConfigError: a field that is neither text nor a path.
    """

    store: StrPath | None = None
    policy: StrPath | None = None
    codeowners: StrPath | None = None
    blobs: StrPath | None = None
    redaction_key: StrPath | None = None
    key: StrPath | None = None
    verifier_key: StrPath | None = None
    witness: StrPath | None = None
    workspace: StrPath | None = None
    base: StrPath | None = None
    stats: RedactionStats = field(default_factory=RedactionStats, compare=False)

    def __post_init__(self) -> None:
        # One spelling whatever the caller had: the methods below rely on it, and two
        # configs of the same files compare equal.
        for name in ("store", "verifier_key", *_PATH_FIELDS):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, str | os.PathLike):
                raise ConfigError(f"{name} is a path (str or Path), not {type(value).__name__}")
            text = os.fspath(value)
            if not isinstance(text, str):
                raise ConfigError(f"{name} is a path as text, not {type(text).__name__}")
            object.__setattr__(self, name, Path(text) if name in _PATH_FIELDS else text)

    def _base(self) -> Path:
        return Path(self.base) if self.base is not None else Path.cwd()

    def _rel(self, path: StrPath) -> Path:
        path = Path(path).expanduser()
        return path if path.is_absolute() else self._base() / path

    # -- where things are ----------------------------------------------------------------

    @property
    def store_url(self) -> str:
        """The store as a URL or an absolute directory (``./.tracebound`` by default)."""
        store = os.fspath(self.store) if self.store is not None else ".tracebound"
        if "://" in store:
            return store
        return str(self._rel(store))

    def store_dir(self) -> Path | None:
        """The directory of a local store; None for a database server."""
        try:
            path = store_path(self.store_url)
        except ConfigError:
            return None  # postgresql:// has no directory
        return self._rel(path if path.suffix == "" else path.parent)

    def blobs_dir(self) -> Path:
        if self.blobs is not None:
            return self._rel(self.blobs)
        directory = self.store_dir()
        if directory is None:
            raise ConfigError(
                f"the store {printable_url(self.store_url)} has no directory to keep blobs beside; "
                "pass --blobs DIR"
            )
        return directory / "blobs"

    def policy_path(self) -> Path:
        return self._rel(self.policy if self.policy is not None else DEFAULT_POLICY)

    def codeowners_path(self) -> Path | None:
        """The CODEOWNERS file in use: the one given (which must exist), or the first default."""
        if self.codeowners is not None:
            return self._rel(self.codeowners)
        for candidate in DEFAULT_CODEOWNERS:
            if self._rel(candidate).is_file():
                return self._rel(candidate)
        return None

    def redaction_key_path(self) -> Path:
        if self.redaction_key is not None:
            return Path(self.redaction_key).expanduser()
        return default_key_dir() / "redaction.key"

    # -- loading -------------------------------------------------------------------------

    def load_policy(self) -> Policy:
        """The gate's policy; missing, empty or malformed raises PolicyUnusable (fail closed)."""
        path = self.policy_path()
        if not path.exists():
            raise PolicyUnusable(
                f"no policy at {path}: a runner without a policy would gate nothing. Write "
                "one (see docs/pipeline.md) or pass --policy FILE"
            )
        return Policy.load(path)

    def load_codeowners(self, *, required: bool = False) -> CodeOwners | None:
        """Who may approve gates; None when there is no file (then nobody can approve).

        Raises:
            PolicyUnusable: the file given is missing or malformed, or ``required`` and
                none was found.
        """
        path = self.codeowners_path()
        if path is None:
            if required:
                tried = " or ".join(str(self._rel(p)) for p in DEFAULT_CODEOWNERS)
                raise PolicyUnusable(
                    f"no CODEOWNERS at {tried}: nobody may lift a gate without one; "
                    "pass --codeowners FILE"
                )
            return None
        return CodeOwners.load(path)

    def redactor(self) -> Redactor:
        """A redactor with this installation's key (created on first use)."""
        key = load_redaction_key(self.redaction_key_path(), store_dir=self.store_dir())
        return Redactor(key, stats=self.stats)

    def blobs_in_ledger(self) -> bool:
        """Whether blobs go into the ledger's own file: a SQLite store and no ``--blobs``."""
        if self.blobs is not None:
            return False
        url = self.store_url
        return "://" not in url or urlsplit(url).scheme == "sqlite"

    def blob_store(self, ledger: Ledger | None = None) -> BlobStore:
        """The blob store to use with ``ledger`` (default: with the configured store).

        A SQLite ledger without ``--blobs`` keeps its blobs in its own file (ADR 0009): a
        blob is made durable by the append that names it, one fsync for both. That holds
        only for appends to that very file, so with a ledger given, its store decides. Blob
        files an older version left in ``<store dir>/blobs`` are still read (and erased).

        Raises:
            StoreNotFound: the SQLite ledger does not exist (run ``tracebound init``).
            ConfigError: a PostgreSQL ledger, and no ``--blobs``.
        """
        backend = ledger.store if ledger is not None else None
        if backend is not None:
            in_ledger = self.blobs is None and isinstance(backend, SQLiteStore)
        else:
            in_ledger = self.blobs_in_ledger()
        if not in_ledger:
            return FileBlobStore(self.blobs_dir())
        if isinstance(backend, SQLiteStore):
            ledger_file = backend.path
        else:
            ledger_file = SQLiteBlobStore.database_file(self._rel(store_path(self.store_url)))
        legacy = ledger_file.parent / "blobs"  # where blobs_dir() put them for this ledger
        fallback = FileBlobStore(legacy) if legacy.is_dir() else None
        return SQLiteBlobStore(ledger_file, fallback=fallback)

    def _signer(self) -> NoteSigner | None:
        path = Path(self.key).expanduser() if self.key is not None else None
        path = path or default_key_path(_SIGNING_KEY_NAME)
        if not path.exists():
            if self.key is not None:
                raise SigningKeyError(f"no signing key at {path}")
            return None
        return load_signer(path, store_dir=self.store_dir())

    def _verifier(self, signer: NoteSigner | None) -> NoteVerifier | None:
        if self.verifier_key is not None:
            return load_verifier(os.fspath(self.verifier_key))
        if signer is not None:
            return signer.verifier
        pub = Path(self.key or default_key_path(_SIGNING_KEY_NAME)).expanduser().with_suffix(".pub")
        return load_verifier(pub) if pub.exists() else None

    def open_ledger(self, *, need_signer: bool = False) -> Ledger:
        """The ledger with whatever signing key and witness are configured.

        Raises:
            StoreNotFound: there is no store (run ``tracebound init``).
            SigningKeyError: ``need_signer`` and there is no signing key.
            LedgerDamaged: FORK, the store names another origin than the one it is bound to
                (or the explicit witness file follows): ``store.witness.choose_witness``.
        """
        signer = self._signer()
        if need_signer and signer is None:
            raise missing_signer_error(default_key_path(_SIGNING_KEY_NAME))
        verifier = self._verifier(signer)
        backend = open_store(self.store_url)
        ledger = Ledger(
            backend, clock=SystemClock(), ids=RandomIds(), signer=signer, verifier=verifier
        )
        try:
            explicit = Path(self.witness).expanduser() if self.witness else None
            ledger.witness, mismatch = choose_witness(
                backend, ledger.origin, self.store_dir(), explicit=explicit, binding=need_signer
            )
        except BaseException:
            backend.close()
            raise
        if mismatch is not None:  # the store is not the log its witness follows
            backend.close()
            raise mismatch.damage()
        return ledger

    def build_runner(self, ledger: Ledger, **extra: Any) -> Runner:
        """A Runner over ``ledger`` with this config's blobs, policy, redactor and owners.

        ``extra`` goes to :class:`Runner` as is (``validations``, ``evidence``, ``on_event``).
        """
        workspace = self._rel(self.workspace) if self.workspace is not None else self._base()
        return Runner(
            ledger,
            blobs=self.blob_store(ledger),
            policy=self.load_policy(),
            redactor=self.redactor(),
            codeowners=self.load_codeowners(),
            workspace=workspace,
            **extra,
        )
