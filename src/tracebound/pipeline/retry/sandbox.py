"""The gate sandbox: a throwaway copy of the target, limits, a bare environment, no network.

A gate runs code the planner just wrote, so it runs it somewhere that code cannot hurt and
cannot reach out from:

* **Files**: a temporary copy of the target (``.git``, ``.venv``, ``__pycache__`` and
  ``.tracebound`` left out); the patch is applied to the copy, never to the target. Symlinks
  are copied as links, not followed, so the copy cannot pull in files from elsewhere.
* **Time**: a wall-clock timeout; on expiry the whole process group is killed.
* **Memory and output**: ``RLIMIT_AS`` (address space), ``RLIMIT_FSIZE`` (no file, stdout
  included, grows past the cap), ``RLIMIT_CORE`` 0 (no core dumps of secrets).
* **Environment**: exactly ``PATH``, ``LANG`` and ``HOME`` (a private temporary directory);
  nothing the parent holds, no tokens, no proxies.
* **Network**: a new, empty network namespace where the OS allows it: ``unshare --net``
  (util-linux) as root, or ``unshare --map-root-user --net`` where unprivileged user
  namespaces are enabled. Inside it not even loopback is up, so a gate can reach neither
  the internet nor a service on the host's 127.0.0.1. Which method works is probed once
  per process (:func:`probe_network_isolation`); when none does, gates still run, and the
  gate runner records the gap by lowering the outcome's confidence (see docs/retry.md).

What is *not* isolated: the file system outside the copy is readable (and writable where
the user may write); the sandbox is a guard against accidents and a model's mistakes,
not a jail for hostile code. Run the gate runner under a container or VM boundary when
the planner's output is untrusted in that stronger sense.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_IGNORED",
    "NetworkIsolation",
    "ProcessResult",
    "Sandbox",
    "SandboxLimits",
    "probe_network_isolation",
]

DEFAULT_IGNORED: Final = (".git", ".venv", "__pycache__", ".tracebound")
_SYSTEM_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
_TAIL_BYTES: Final = 256 * 1024  # of each stream kept for the (redacted) evidence log


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Per-process limits; ``None`` leaves a limit as the parent has it.

    Defaults suit a project's test suite: two minutes, 2 GiB of address space, 256 MiB per
    written file (stdout and stderr go to files, so this caps them too).
    """

    timeout_s: float = 120.0
    memory_bytes: int | None = 2 * 1024**3
    file_bytes: int | None = 256 * 1024**2


@dataclass(frozen=True, slots=True)
class NetworkIsolation:
    """Whether gates run without a network, and how.

    ``prefix`` is prepended to every gate's argv (empty when unavailable).
    """

    available: bool
    method: str  # "unshare --net", "unshare --map-root-user --net" or "none"
    prefix: tuple[str, ...]
    detail: str


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How one gate process ended. Output is raw here; only redacted copies leave."""

    argv: tuple[str, ...]
    exit_code: int | None  # None when it was killed for the timeout
    timed_out: bool
    duration_ms: int
    stdout: bytes  # the last _TAIL_BYTES only
    stderr: bytes

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the process, if one did (``SIGKILL``, ``SIGSEGV`` …)."""
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"


def _works(argv: Sequence[str]) -> tuple[bool, str]:
    try:
        proc = subprocess.run(  # noqa: S603 - fixed argv, probing the isolation wrapper
            [*argv, sys.executable, "-c", "pass"],
            capture_output=True,
            timeout=30,
            check=False,
            stdin=subprocess.DEVNULL,
            env={"PATH": _SYSTEM_PATH, "LANG": "C.UTF-8"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if proc.returncode != 0:
        return False, proc.stderr.decode("utf-8", "replace").strip()[:200]
    return True, ""


@functools.cache
def probe_network_isolation() -> NetworkIsolation:
    """Find out, once per process, how (and whether) a gate can be cut off the network."""
    unshare = shutil.which("unshare", path=_SYSTEM_PATH)
    if unshare is None or not sys.platform.startswith("linux"):
        return NetworkIsolation(
            available=False, method="none", prefix=(), detail="unshare(1) (util-linux) is missing"
        )
    reasons = []
    for flags in (("--net",), ("--map-root-user", "--net")):
        prefix = (unshare, *flags, "--")
        ok, why = _works(prefix)
        if ok:
            method = "unshare " + " ".join(flags)
            return NetworkIsolation(
                available=True, method=method, prefix=prefix, detail=f"{method}: empty netns"
            )
        reasons.append(f"unshare {' '.join(flags)}: {why or 'failed'}")
    return NetworkIsolation(available=False, method="none", prefix=(), detail="; ".join(reasons))


def _limiter(limits: SandboxLimits) -> Callable[[], None]:
    """The child-side hook: set rlimits after fork, before exec (async-signal-safe calls)."""
    memory, files = limits.memory_bytes, limits.file_bytes

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if files is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (files, files))

    return apply


def _tail(path: Path) -> bytes:
    """The last ``_TAIL_BYTES`` of a stream, from the first whole line in them.

    The log is redacted after this cut, and a cut through a secret leaves a tail no
    detector recognises (the ``password=`` or ``ghp_`` that named it is gone).
    """
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - _TAIL_BYTES))
        data = fh.read()
    return data.partition(b"\n")[2] if size > _TAIL_BYTES else data


class Sandbox:
    """One gate run's private directory: ``work/`` (the copy), ``home/``, ``out/``.

    Use as a context manager; the directory is removed on exit, whatever happened.
    """

    def __init__(
        self,
        target: Path,
        *,
        isolation: NetworkIsolation,
        limits: SandboxLimits,
        base_dir: Path | None = None,
        ignore: Sequence[str] = DEFAULT_IGNORED,
        path_dirs: Sequence[str] = (),
    ) -> None:
        self.target = target
        self.isolation = isolation
        self.limits = limits
        self._base_dir = base_dir
        self._ignore = tuple(ignore)
        self._path = os.pathsep.join([*path_dirs, _SYSTEM_PATH])
        self.root = Path()

    @property
    def work(self) -> Path:
        """The copy of the target the patch is applied to and the gates run in."""
        return self.root / "work"

    @property
    def home(self) -> Path:
        """``HOME`` for the gates: private and empty, so no user config leaks in."""
        return self.root / "home"

    @property
    def out(self) -> Path:
        """Where the runner keeps gate output and gate-side files (JUnit XML, changes)."""
        return self.root / "out"

    def __enter__(self) -> Sandbox:
        self.root = Path(tempfile.mkdtemp(prefix="tracebound-sandbox-", dir=self._base_dir))
        try:
            shutil.copytree(
                self.target,
                self.work,
                symlinks=True,
                ignore=shutil.ignore_patterns(*self._ignore),
            )
            self.home.mkdir(mode=0o700)
            self.out.mkdir(mode=0o700)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def environment(self) -> dict[str, str]:
        """The whole environment a gate sees: PATH, LANG and HOME, nothing else."""
        return {"PATH": self._path, "LANG": "C.UTF-8", "HOME": str(self.home)}

    def run(
        self,
        argv: Sequence[str],
        *,
        name: str,
        timeout_s: float | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> ProcessResult:
        """Run ``argv`` in the copy, under the limits and (if available) without a network."""
        timeout = self.limits.timeout_s if timeout_s is None else timeout_s
        full = (*self.isolation.prefix, *argv)
        stdout_path = self.out / f"{name}.stdout"
        stderr_path = self.out / f"{name}.stderr"
        env = self.environment() | dict(extra_env or {})
        start = time.monotonic()
        timed_out = False
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            try:
                proc = subprocess.Popen(  # noqa: S603 - argv, no shell; the gate is configured code
                    full,
                    cwd=self.work,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,  # its own process group: a timeout kills them all
                    preexec_fn=_limiter(self.limits),  # noqa: PLW1509 - only setrlimit calls
                )
            except OSError as exc:
                err.write(f"could not start {argv[0]!r}: {exc}".encode())
                code: int | None = 127
            else:
                try:
                    code = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    timed_out, code = True, None
                finally:
                    # Whatever it left running in its group (a daemon, a stuck child) goes
                    # too, and so does the gate itself when we are interrupted (Ctrl-C):
                    # in its own session it never sees the terminal's SIGINT.
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        return ProcessResult(
            argv=tuple(argv),
            exit_code=code,
            timed_out=timed_out,
            duration_ms=int((time.monotonic() - start) * 1000),
            stdout=_tail(stdout_path),
            stderr=_tail(stderr_path),
        )
