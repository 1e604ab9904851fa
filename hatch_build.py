"""Hatchling build hook: compile the optional C extensions of tracebound.

* ``tracebound._canonical``: the RFC 8785 encoder (ADR 0002).
* ``tracebound._verifykernel``: verify's per-record loop, with a hand-written BLAKE3 and
  SHA-256 (ADR 0007). Built with ``-O3``; its SIMD paths carry per-function target
  attributes and are chosen at run time, so the library runs on CPUs without AVX2 too.

Why a hook and not a separate build backend: the project is pure Python plus small,
dependency-free C files, and the package must still install and work where no compiler exists.
So the hook tries to compile each extension, and on any failure it warns and goes on; a
missing extension means the pure-Python path is used for that job.

* wheel builds: each shared library is built in a temporary directory and force-included as
  ``tracebound/<name><EXT_SUFFIX>``; the wheel is then tagged for this interpreter/platform.
* editable installs: the shared libraries are written next to the sources, into
  ``src/tracebound/``, which is where an editable install imports the package from. Re-run the
  editable install after changing a C file.

Compilation goes through setuptools' ``build_ext`` so compiler discovery and flags (including
MSVC on Windows) follow the interpreter's own configuration. Set ``TRACEBOUND_NO_EXTENSIONS=1``
to skip the attempt.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_SRC = Path("src") / "tracebound"


def _optimise() -> list[str]:
    return ["/O2"] if os.name == "nt" else ["-O3"]


# (module, sources, extra compile args, libraries)
_EXTENSIONS: tuple[tuple[str, list[Path], list[str], list[str]], ...] = (
    ("tracebound._canonical", [_SRC / "_canonical.c"], [], []),
    (
        "tracebound._verifykernel",
        [_SRC / "_verifykernel.c", _SRC / "_blake3.c"],
        _optimise(),
        # dlopen/dlsym: the kernel uses the SQLite library Python's _sqlite3 loaded.
        ["dl"] if os.name == "posix" and sys.platform != "darwin" else [],
    ),
)


class CanonicalExtensionHook(BuildHookInterface[BuilderConfig]):
    """Compile the C extensions, or fall back to pure Python for any that fail."""

    PLUGIN_NAME = "custom"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._work: list[Path] = []

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the extension before the wheel (standard or editable) is assembled."""
        if self.target_name != "wheel":
            return  # the sdist ships the C source; it is compiled when a wheel is built from it
        if os.environ.get("TRACEBOUND_NO_EXTENSIONS") == "1":
            self.app.display_info("tracebound: TRACEBOUND_NO_EXTENSIONS=1, building pure Python")
            return
        root = Path(self.root)
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        built_any = False
        for module, sources, extra_args, libraries in _EXTENSIONS:
            name = module.rsplit(".", 1)[1]
            work = Path(tempfile.mkdtemp(prefix="tracebound-ext-"))
            try:
                built = _compile(module, [root / s for s in sources], work, extra_args, libraries)
            except Exception as exc:  # noqa: BLE001 - any compiler failure means "build pure"
                shutil.rmtree(work, ignore_errors=True)
                message = (
                    f"tracebound: could not compile {module} ({exc!r}); "
                    "building without it, the pure-Python path will be used"
                )
                warnings.warn(message, stacklevel=1)
                self.app.display_warning(message)
                continue
            built_any = True
            if version == "editable":
                target = root / _SRC / f"{name}{suffix}"
                # Copy then rename: a new inode, so a process that has the old library mapped
                # keeps running instead of seeing its code change underneath it.
                staging = target.with_name(target.name + ".tmp")
                shutil.copyfile(built, staging)
                staging.replace(target)
                shutil.rmtree(work, ignore_errors=True)
                self.app.display_info(f"tracebound: built {target.relative_to(root)}")
            else:
                # Removed in finalize(), after the wheel has copied it.
                self._work.append(work)
                build_data["force_include"][str(built)] = f"tracebound/{name}{suffix}"
                self.app.display_info(f"tracebound: built {module} into the wheel")
        if built_any:
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary build directory once the wheel holds the library."""
        for work in self._work:
            shutil.rmtree(work, ignore_errors=True)
        self._work.clear()


def _compile(
    module: str, sources: list[Path], work: Path, extra_args: list[str], libraries: list[str]
) -> Path:
    """Compile one extension module from its C files and return the library's path."""
    # Imported here (and by name, so type checking does not depend on setuptools' own type
    # information, which older versions lack): only needed when a wheel is actually built.
    setuptools = importlib.import_module("setuptools")
    build_ext = importlib.import_module("setuptools.command.build_ext").build_ext

    extension = setuptools.Extension(
        module,
        sources=[str(s) for s in sources],
        depends=[str(s.with_suffix(".h")) for s in sources if s.with_suffix(".h").exists()],
        extra_compile_args=extra_args,
        libraries=libraries,
    )
    distribution = setuptools.Distribution(
        {"name": f"tracebound-{module.rsplit('.', 1)[1]}", "ext_modules": [extension]}
    )
    command = build_ext(distribution)
    command.build_lib = str(work / "lib")
    command.build_temp = str(work / "temp")
    command.inplace = False
    command.ensure_finalized()
    command.run()
    built = Path(command.get_ext_fullpath(module))
    if not built.is_file():
        raise FileNotFoundError(built)
    return built
