"""RunnerConfig takes a path as a ``str`` or a ``Path``, whichever the caller has.

A config is often built from strings (argv, the environment, a settings file) and as often
from ``Path`` objects. ``store=Path(...)`` raised ``TypeError`` ("argument of type
'PosixPath' is not iterable") and ``key="..."``/``policy="..."`` raised ``AttributeError``
(``str`` has no ``expanduser``), from deep inside ``open_ledger`` and ``build_runner``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracebound.errors import ConfigError
from tracebound.pipeline.config import RunnerConfig
from tracebound.store.keyfile import generate_keypair
from tracebound.store.sqlite import SQLiteStore

POLICY = 'version = 1\n[gate]\nsensitive_paths = ["config/**"]\n'


def _files(tmp_path: Path) -> dict[str, Any]:
    store = SQLiteStore(tmp_path / "ledger")
    store.set_meta("origin", "example.test/config")
    store.close()
    (tmp_path / "policy.toml").write_text(POLICY)
    (tmp_path / "OWNERS").write_text("*  @lead\n")
    keys = tmp_path / "keys"
    generate_keypair("config", path=keys / "signing.key", seed=bytes(32))
    return {
        "store": tmp_path / "ledger",
        "policy": tmp_path / "policy.toml",
        "codeowners": tmp_path / "OWNERS",
        "blobs": tmp_path / "blobs",
        "redaction_key": tmp_path / "redaction.key",
        "key": keys / "signing.key",
        "witness": tmp_path / "witness" / "w.note",
        "workspace": tmp_path / "work",
        "base": tmp_path,
    }


@pytest.mark.parametrize("spelling", [str, Path])
def test_every_path_may_be_a_str_or_a_path(tmp_path: Path, spelling: Any) -> None:
    paths = _files(tmp_path)
    config = RunnerConfig(**{name: spelling(path) for name, path in paths.items()})
    assert config.store_url == str(paths["store"])
    assert config.policy_path() == paths["policy"]
    assert config.codeowners_path() == paths["codeowners"]
    assert config.blobs_dir() == paths["blobs"]
    assert config.redaction_key_path() == paths["redaction_key"]
    with config.open_ledger(need_signer=True) as ledger:
        assert ledger.signer is not None
        runner = config.build_runner(ledger)
        assert runner.workspace == paths["workspace"]
    assert config == RunnerConfig(**paths)  # one config, however it was spelt


@pytest.mark.parametrize("name", ["store", "policy", "key", "base", "verifier_key"])
def test_a_value_that_is_no_path_is_a_config_error_naming_the_field(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        RunnerConfig(**{name: 42})  # type: ignore[arg-type]
