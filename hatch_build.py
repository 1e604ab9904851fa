"""Hatchling build hook: compile the optional C accelerator ``tracebound._canonical``.

Why a hook and not a separate build backend: the project is pure Python plus one small,
dependency-free C file, and the package must still install and work where no compiler exists.
So the hook tries to compile, and on any failure it warns and lets the build finish as a pure
wheel; ``tracebound.canonical`` then uses its pure-Python reference implementation.

* wheel builds: the shared library is built in a temporary directory and force-included as
  ``tracebound/_canonical<EXT_SUFFIX>``; the wheel is then tagged for this interpreter/platform.
* editable installs: the shared library is written next to the sources, into
  ``src/tracebound/``, which is where an editable install imports the package from. Re-run the
  editable install after changing ``_canonical.c``.

Compilation goes through setuptools' ``build_ext`` so compiler discovery and flags (including
MSVC on Windows) follow the interpreter's own configuration. Set ``TRACEBOUND_NO_EXTENSIONS=1``
to skip the attempt.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface

_SOURCE = Path("src") / "tracebound" / "_canonical.c"
_MODULE = "tracebound._canonical"


class CanonicalExtensionHook(BuildHookInterface[BuilderConfig]):
    """Compile ``src/tracebound/_canonical.c``, or fall back to a pure-Python build."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Build the extension before the wheel (standard or editable) is assembled."""
        if self.target_name != "wheel":
            return  # the sdist ships the C source; it is compiled when a wheel is built from it
        if os.environ.get("TRACEBOUND_NO_EXTENSIONS") == "1":
            self.app.display_info("tracebound: TRACEBOUND_NO_EXTENSIONS=1, building pure Python")
            return
        root = Path(self.root)
        work = Path(tempfile.mkdtemp(prefix="tracebound-ext-"))
        try:
            built = _compile(root / _SOURCE, work)
        except Exception as exc:  # noqa: BLE001 - any compiler failure means "build pure"
            shutil.rmtree(work, ignore_errors=True)
            message = (
                f"tracebound: could not compile the C accelerator ({exc!r}); "
                "building without it, the pure-Python encoder will be used"
            )
            warnings.warn(message, stacklevel=1)
            self.app.display_warning(message)
            return
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        if version == "editable":
            target = root / "src" / "tracebound" / f"_canonical{suffix}"
            # Copy then rename: a new inode, so a process that has the old library mapped
            # keeps running instead of seeing its code change underneath it.
            staging = target.with_name(target.name + ".tmp")
            shutil.copyfile(built, staging)
            staging.replace(target)
            shutil.rmtree(work, ignore_errors=True)
            self.app.display_info(f"tracebound: built {target.relative_to(root)}")
        else:
            # Removed in finalize(), after the wheel has copied it.
            self._work = work
            build_data["force_include"][str(built)] = f"tracebound/_canonical{suffix}"
            self.app.display_info("tracebound: built the C accelerator into the wheel")
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """Remove the temporary build directory once the wheel holds the library."""
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _compile(source: Path, work: Path) -> Path:
    """Compile one C file into a CPython extension module and return the library's path."""
    # Imported here (and by name, so type checking does not depend on setuptools' own type
    # information, which older versions lack): only needed when a wheel is actually built.
    setuptools = importlib.import_module("setuptools")
    build_ext = importlib.import_module("setuptools.command.build_ext").build_ext

    extension = setuptools.Extension(_MODULE, sources=[str(source)])
    distribution = setuptools.Distribution(
        {"name": "tracebound-canonical", "ext_modules": [extension]}
    )
    command = build_ext(distribution)
    command.build_lib = str(work / "lib")
    command.build_temp = str(work / "temp")
    command.inplace = False
    command.ensure_finalized()
    command.run()
    built = Path(command.get_ext_fullpath(_MODULE))
    if not built.is_file():
        raise FileNotFoundError(built)
    return built
