"""One exception root, five branches; backend errors never escape untranslated."""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path

import pytest

from tracebound import errors as E  # noqa: N812 - reads like a namespace in the tree
from tracebound.store.sqlite import SQLiteStore

TREE: dict[type[E.TraceboundError], set[type[E.TraceboundError]]] = {
    E.IntegrityError: {
        E.LedgerDamaged, E.AuditChainCorrupted, E.LedgerAttemptOutOfOrder, E.ProofError,
        E.CheckpointError, E.ViewsOfAnotherLog,
    },
    E.ConcurrencyError: {E.ConcurrencyConflict, E.RunAlreadyResumed, E.RunTakenOver,
                         E.RunEnded, E.StoreBusy},
    E.ContractError: {E.CanonicalizationError, E.EventTypeError, E.UpcastError,
                      E.ValidationFailed},
    E.PolicyError: {E.PolicyUnusable, E.GateRequired, E.BudgetExceeded, E.AttemptRefusedError},
    E.StorageError: {E.ConfigError, E.StoreNotFound, E.StoreClosed, E.SigningKeyError,
                     E.KeyRotationRefused,
                     E.StoreBusy, E.CommitOutcomeUnknown, E.ConnectionLost},
}  # fmt: skip


def test_branches_hang_from_one_root() -> None:
    for branch, leaves in TREE.items():
        assert branch.__bases__ == (E.TraceboundError,)
        for leaf in leaves:
            assert issubclass(leaf, branch), leaf
    assert E.SignatureInvalid.__bases__ == (E.CheckpointError,)
    assert E.UnknownEventType.__bases__ == (E.EventTypeError,)
    # The one class on two branches: what SQLite (StorageError) and PostgreSQL
    # (ConcurrencyError) raised for a busy store before it existed still catches it.
    assert E.StoreBusy.__bases__ == (E.ConcurrencyError, E.StorageError)
    assert E.KeyRotationRefused.__bases__ == (E.SigningKeyError,)


def test_every_exported_error_is_in_the_tree() -> None:
    classes = {getattr(E, n) for n in E.__all__ if isinstance(getattr(E, n), type)}
    classes -= {E.DamageKind}
    for cls in classes:
        assert issubclass(cls, E.TraceboundError), cls
        assert not issubclass(cls, (ValueError, KeyError, OSError)), cls


@pytest.mark.parametrize(
    "exc",
    [
        E.LedgerDamaged(E.DamageKind.GAP, 12, "position 12 is missing"),
        E.ConcurrencyConflict("s", 3, 5),
        E.RunAlreadyResumed("run-1", "execute", "run_resumed at version 7"),
        E.RunTakenOver("run-1", "@oncall", "run_resumed recorded at position 9"),
        E.RunEnded("run-1", "failed", "abandoned by @oncall: host lost"),
        E.ValidationFailed("payload.x", "too short"),
        E.StoreBusy("/srv/ledger/lock", 0.5, "find it with fuser"),
        E.StoreBusy("postgresql://u@h/db?schema=s", None, "see pg_stat_activity"),
    ],
)
def test_structured_errors_survive_pickling(exc: E.TraceboundError) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc)
    assert vars(back) == vars(exc)


def test_sqlite_errors_are_translated(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "ledger.db", busy_timeout=0.05)
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the file
    try:
        with pytest.raises(E.StoreBusy) as info:
            store.append("s", [])
    finally:
        holder.close()
        store.close()
    assert "database is locked" in str(info.value.__cause__)  # sqlite3's or the C writer's
    assert (info.value.store, info.value.waited) == (str(tmp_path / "ledger.db"), 0.05)


def test_a_file_sqlite_cannot_read_is_damage_not_a_storage_failure(tmp_path: Path) -> None:
    bogus = tmp_path / "ledger.db"
    bogus.write_bytes(b"this is not a database" * 100)
    with pytest.raises(E.LedgerDamaged) as info:
        SQLiteStore(bogus)
    assert info.value.kind is E.DamageKind.MALFORMED and str(bogus) in info.value.detail
    assert isinstance(info.value.__cause__, sqlite3.Error)


def test_every_public_exception_in_the_package_has_the_one_root() -> None:
    """Errors defined next to their code (CopyDiverged, EvidenceInvalid, ...) count too, and
    each hangs from one of the five branches, not from the root alone."""
    import importlib
    import pkgutil

    import tracebound

    found = []
    for info in pkgutil.walk_packages(tracebound.__path__, "tracebound."):
        if info.name.rsplit(".", 1)[-1].startswith("_") or info.name == "tracebound.__main__":
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found.append(obj)
                where = f"{obj.__module__}.{name}"
                assert issubclass(obj, E.TraceboundError), where
                assert obj is E.TraceboundError or issubclass(obj, tuple(TREE)), (
                    f"{where}: no branch"
                )
    assert len(found) > len(E.__all__) - 2  # the walk really found the package's errors
