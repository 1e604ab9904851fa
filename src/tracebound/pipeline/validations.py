"""The Executor's required validations: registered checks and real test commands.

An envelope's ``required_validations`` names what must pass before a step's output is
accepted. Each name resolves, in this order, to:

* a validator registered under that name (:meth:`ValidationRegistry.register`); built in are
  ``schema-validation`` (the artifact against the TPC schema) and ``secret-scan`` /
  ``security-scan`` (the artifact's outputs and diffs through the redactor's detectors);
* a test command registered under that name (:meth:`ValidationRegistry.register_command`),
  run as a real subprocess in the workspace with a timeout and a minimal environment.

A name that resolves to nothing fails: a required validation nobody can run is not passed
(fail closed). Command output never enters the ledger or a prompt raw: it is redacted, put
in the blob store, and only its digest is recorded.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tracebound.contract import TPCArtifact, validate_tpc
from tracebound.errors import ConfigError, ValidationFailed
from tracebound.pipeline.redaction import Redaction, Redactor

__all__ = [
    "CommandCheck",
    "ValidationInput",
    "ValidationOutcome",
    "ValidationRegistry",
    "Validator",
]

_SAFE_ENV_KEYS: Final = ("PATH", "LANG", "LC_ALL", "PYTHONHASHSEED", "SYSTEMROOT", "TMPDIR")
MAX_OUTPUT: Final = 64 * 1024  # bytes of command output kept (redacted) per validation


@dataclass(frozen=True)
class ValidationInput:
    """What a validator sees: the step's artifact and where the step worked.

    The runner redacts an artifact before anything sees it, so ``artifact`` holds markers
    where the step wrote secrets; ``redactions`` says what was taken out (and where), so a
    secret scan can still fail a step whose output carried one.
    """

    artifact: TPCArtifact
    workspace: Path | None
    redactor: Redactor
    redactions: tuple[Redaction, ...] = ()


@dataclass(frozen=True)
class ValidationOutcome:
    name: str
    check: str  # "validator" | "command"
    passed: bool
    duration_ms: int
    exit_code: int | None = None
    detail: str | None = None
    output: bytes = b""  # redacted; stored as a blob, never inlined in an event
    command: str | None = None


Validator = Callable[[ValidationInput], tuple[bool, str | None]]


@dataclass(frozen=True)
class CommandCheck:
    """A test command: argv run in the workspace (or ``cwd``) with a timeout in seconds."""

    argv: tuple[str, ...]
    timeout: float = 120.0
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)


def _schema(inp: ValidationInput) -> tuple[bool, str | None]:
    try:
        validate_tpc(inp.artifact.model_dump(mode="json"))
    except ValidationFailed as exc:
        return False, str(exc)
    return True, None


_SCANNED_PATHS: Final = re.compile(r"^\$\.(?:outputs|diffs)(?:$|[.\[])")


def _secrets(inp: ValidationInput) -> tuple[bool, str | None]:
    text = "\n".join((inp.artifact.outputs.summary, *inp.artifact.diffs))
    detectors = {r.detector for r in inp.redactor.redact_text(text).redactions}
    # What the runner already redacted out of the outputs and diffs counts too: otherwise
    # this check would only ever see markers, and could never fail.
    detectors |= {r.detector for r in inp.redactions if _SCANNED_PATHS.match(r.path or "")}
    if detectors:
        return False, "secrets in output: " + ", ".join(sorted(detectors))
    return True, None


class ValidationRegistry:
    """Names to validators and test commands."""

    def __init__(self) -> None:
        self._validators: dict[str, Validator] = {
            "schema-validation": _schema,
            "secret-scan": _secrets,
            "security-scan": _secrets,
        }
        self._commands: dict[str, CommandCheck] = {}

    def register(self, name: str, validator: Validator) -> None:
        self._validators[name] = validator

    def register_command(
        self,
        name: str,
        argv: Sequence[str] | str,
        *,
        timeout: float = 120.0,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        args = tuple(shlex.split(argv) if isinstance(argv, str) else argv)
        if not args:
            raise ConfigError(f"validation {name!r}: empty command")
        self._commands[name] = CommandCheck(args, timeout, cwd, dict(env or {}))

    def names(self) -> list[str]:
        return sorted({*self._validators, *self._commands})

    def run(self, name: str, inp: ValidationInput) -> ValidationOutcome:
        """Run one required validation; never raises for a failing check.

        A validator that raises, or returns something other than ``(bool, str | None)``,
        has failed (fail closed); its exception message is not kept, as it may quote the
        data it choked on.
        """
        start = time.monotonic()
        if name in self._commands:
            return _run_command(name, self._commands[name], inp, start)
        validator = self._validators.get(name)
        if validator is None:
            return ValidationOutcome(
                name,
                "validator",
                passed=False,
                duration_ms=0,
                detail=f"no validator or command is registered as {name!r} (fail closed)",
            )
        try:
            # Typed as object: a validator is user code and may return anything.
            returned: object = validator(inp)
        except Exception as exc:  # noqa: BLE001 - a validator is user code; its crash is a failure
            return ValidationOutcome(
                name,
                "validator",
                passed=False,
                duration_ms=_ms(start),
                detail=f"the validator raised {type(exc).__name__} (fail closed)",
            )
        passed, detail = (
            returned if isinstance(returned, tuple) and len(returned) == 2 else (None, None)
        )
        if not isinstance(passed, bool) or not (detail is None or isinstance(detail, str)):
            return ValidationOutcome(
                name,
                "validator",
                passed=False,
                duration_ms=_ms(start),
                detail="the validator did not return (bool, str | None) (fail closed)",
            )
        return ValidationOutcome(
            name, "validator", passed=passed, duration_ms=_ms(start), detail=detail
        )


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _run_command(
    name: str, check: CommandCheck, inp: ValidationInput, start: float
) -> ValidationOutcome:
    cwd = check.cwd or inp.workspace
    env = {k: os.environ[k] for k in _SAFE_ENV_KEYS if k in os.environ} | dict(check.env)
    command = shlex.join(check.argv)
    try:
        proc = subprocess.run(  # noqa: S603 - argv, no shell; the command is the pipeline's own
            check.argv,
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=check.timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"") + (exc.stderr or b"")
        return ValidationOutcome(
            name,
            "command",
            passed=False,
            duration_ms=_ms(start),
            detail=f"timed out after {check.timeout:g}s",
            output=_clean(output, inp),
            command=command,
        )
    except OSError as exc:
        return ValidationOutcome(
            name,
            "command",
            passed=False,
            duration_ms=_ms(start),
            detail=f"could not run: {exc}",
            command=command,
        )
    detail = None if proc.returncode == 0 else f"exit code {proc.returncode}"
    return ValidationOutcome(
        name,
        "command",
        passed=proc.returncode == 0,
        duration_ms=_ms(start),
        exit_code=proc.returncode,
        detail=detail,
        output=_clean(proc.stdout + proc.stderr, inp),
        command=command,
    )


def _clean(output: bytes, inp: ValidationInput) -> bytes:
    kept = output[-MAX_OUTPUT:]
    if len(output) > MAX_OUTPUT:
        # Whole lines only: the cut may go through a secret, and its tail alone is not
        # recognisable as one (the `password=` or `ghp_` that named it was cut off), so the
        # redactor would keep it. A last line longer than MAX_OUTPUT is dropped with it.
        kept = kept.partition(b"\n")[2]
    text = kept.decode("utf-8", "replace")
    return inp.redactor.redact_text(text).value.encode()
