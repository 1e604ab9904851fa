"""Tool output to structured failing signals: the only form in which gate output travels on.

Raw stdout and stderr are for humans (redacted, stored as evidence). What the retry loop,
the ledger and, through ``AttemptSummary``, the next prompt see is what a parser made of
them: a test id and the first line of its failure, a lint rule and where it fired, a
detector name and a line number. A parser never copies free text it cannot bound: every
field is cut to the :class:`~tracebound.pipeline.retry.models.FailingSignal` limits, and
the runner redacts each field again before it is used.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tracebound.pipeline.retry.models import FailingSignal, SignalKind
from tracebound.pipeline.retry.sandbox import ProcessResult

__all__ = [
    "GateOutput",
    "GateParse",
    "Metric",
    "Parser",
    "parse_exit_code",
    "parse_pytest_junit",
    "parse_ruff_json",
    "parse_secret_scan",
]

Metric = bool | int | str
_MAX_XML: Final = 32 * 1024 * 1024
_MAX_SUBJECT: Final = 512
_MAX_MESSAGE: Final = 1024
_DTD: Final = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class GateOutput:
    """What a parser gets: how the process ended and the files it was told to write."""

    gate: str
    result: ProcessResult
    workdir: Path
    files: Mapping[str, Path]  # placeholder name -> path, e.g. "junitxml"


@dataclass(frozen=True, slots=True)
class GateParse:
    """A parser's verdict: failing signals, plus passing metrics for ``TrustGatePassed``.

    ``score`` (basis points) overrides the runner's default of 10 000 for a pass and 0 for
    a failure, where the tool says more (the share of tests that passed).
    """

    signals: tuple[FailingSignal, ...] = ()
    metrics: Mapping[str, Metric] = field(default_factory=dict)
    score: int | None = None


Parser = Callable[[GateOutput], GateParse]


_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _cut(text: str, limit: int) -> str:
    text = _SURROGATE.sub("\ufffd", text)  # JSON can carry one; it cannot be encoded
    text = " ".join(text.split())  # one line: no layout games in a summary
    if len(text) <= limit:
        return text
    kept = text[: limit - 1]
    if text[limit - 1] != " " and " " in kept:
        # Where a word ends: signals are redacted after this cut, and a cut through a
        # credential (`https://user:passw` without its `@host`) is no longer recognisable.
        kept = kept.rpartition(" ")[0]
    return kept + "…"


def signal(
    gate: str, kind: SignalKind, subject: str, message: str = "", location: str | None = None
) -> FailingSignal:
    """A :class:`FailingSignal` with every field cut to its limit (never a validation error)."""
    return FailingSignal(
        gate=_cut(gate, _MAX_SUBJECT) or "gate",
        kind=kind,
        subject=_cut(subject, _MAX_SUBJECT) or "?",
        message=_cut(message, _MAX_MESSAGE),
        location=None if location is None else _cut(location, _MAX_SUBJECT),
    )


def parse_exit_code(out: GateOutput) -> GateParse:
    """For tools without structured output: exit 0 passes, anything else fails.

    A non-zero exit is the tool's own verdict (``test_failure``, subject the gate); a
    process killed by a signal never reached one (``crash``).
    """
    result = out.result
    if result.exit_code == 0:
        return GateParse()
    if result.signal_name is not None:
        return GateParse(
            signals=(signal(out.gate, "crash", out.gate, f"killed by {result.signal_name}"),)
        )
    return GateParse(
        signals=(signal(out.gate, "test_failure", out.gate, f"exit {result.exit_code}"),)
    )


# --- pytest (JUnit XML) --------------------------------------------------------------------


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _test_id(case: ET.Element) -> tuple[str, str | None]:
    name = case.get("name", "?")
    classname = case.get("classname", "")
    file = case.get("file")
    line = case.get("line")
    if file:
        # classname is "pkg.mod.Class" for methods; keep the class part after the module.
        module = file.removesuffix(".py").replace("/", ".")
        cls = classname.removeprefix(module).lstrip(".")
        subject = f"{file}::{cls}::{name}" if cls else f"{file}::{name}"
        location = f"{file}:{int(line) + 1}" if line and line.isascii() and line.isdigit() else file
        return subject, location
    return (f"{classname}::{name}" if classname else name), None


def parse_pytest_junit(out: GateOutput) -> GateParse:
    """Read pytest's ``--junitxml`` report: one signal per failed or erroring test.

    The subject is the pytest node id (``tests/test_api.py::test_get``, with
    ``-o junit_family=xunit1`` so that the file is known), the message the first line of
    the failure message. Exit 5 (no tests collected) fails too: a test gate that ran no
    test vouches for nothing.
    """
    gate = out.gate
    code = out.result.exit_code
    if code == 5:
        return GateParse(
            signals=(signal(gate, "test_error", "pytest", "no tests were collected"),),
        )
    path = out.files.get("junitxml")
    if path is None or not path.is_file():
        return GateParse()  # the runner turns a non-zero exit without signals into "crash"
    data = path.read_bytes()
    if len(data) > _MAX_XML or _DTD.search(data):
        return GateParse(
            signals=(
                signal(gate, "crash", "junitxml", "the JUnit report is oversized or has a DTD"),
            )
        )
    try:
        root = ET.fromstring(data)  # noqa: S314 - no DTD/entities (checked above), size capped
    except ET.ParseError as exc:
        return GateParse(signals=(signal(gate, "crash", "junitxml", f"unreadable: {exc}"),))
    signals: list[FailingSignal] = []
    total = failed = skipped = 0
    for case in root.iter("testcase"):
        total += 1
        subject, location = _test_id(case)
        for tag, kind in (("failure", "test_failure"), ("error", "test_error")):
            node = case.find(tag)
            if node is not None:
                message = node.get("message") or _first_line(node.text)
                signals.append(signal(gate, kind, subject, _first_line(message), location))  # type: ignore[arg-type]
                failed += 1
                break
        else:
            skipped += case.find("skipped") is not None
    ran = total - skipped
    passed = ran - failed
    metrics: dict[str, Metric] = {
        "tests_total": total,
        "tests_passed": passed,
        "tests_failed": failed,
        "tests_skipped": skipped,
    }
    score = 10_000 if ran == 0 else passed * 10_000 // ran
    return GateParse(signals=tuple(signals), metrics=metrics, score=score)


# --- ruff (JSON) ---------------------------------------------------------------------------


def _tool_json(text: str) -> object:
    """A tool's JSON output, read leniently (not as a proof is: ``loads_strict``): an escaped
    lone surrogate in a message is kept, and ``_cut`` replaces it later.

    Raises:
        ValueError: not JSON, or JSON Python cannot hold (a number past 4,300 digits, or
            nesting past the stack, which ``json`` raises as RecursionError).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_ruff_json(out: GateOutput) -> GateParse:
    """Read ``ruff check --output-format=json``: one signal per violation.

    Subject is the rule code (``F401``), location ``path:row:column`` relative to the
    project, message ruff's one-line message.
    """
    gate = out.gate
    text = out.result.stdout.decode("utf-8", "replace").strip()
    if not text:
        return GateParse()
    try:
        items = _tool_json(text)
    except ValueError:
        return GateParse(signals=(signal(gate, "crash", "ruff", "output is not ruff's JSON"),))
    if not isinstance(items, list):
        return GateParse(signals=(signal(gate, "crash", "ruff", "output is not a list"),))
    signals: list[FailingSignal] = []
    prefix = str(out.workdir.resolve()) + "/"
    for item in items:
        if not isinstance(item, dict):
            continue
        code = str(item.get("code") or "syntax-error")
        filename = str(item.get("filename") or "?").removeprefix(prefix)
        loc = item.get("location") or {}
        row = loc.get("row", "?") if isinstance(loc, dict) else "?"
        col = loc.get("column", "?") if isinstance(loc, dict) else "?"
        message = str(item.get("message") or "")
        signals.append(signal(gate, "lint_error", code, message, f"{filename}:{row}:{col}"))
    return GateParse(signals=tuple(signals), metrics={"violations": len(signals)})


# --- the secret scan (tracebound.pipeline.retry._secret_scan) ------------------------------


def parse_secret_scan(out: GateOutput) -> GateParse:
    """Read the secret scan's JSON: one signal per secret the patch added.

    The scan reports the detector and the line, never the secret itself.
    """
    gate = out.gate
    try:
        data = _tool_json(out.result.stdout.decode("utf-8", "replace") or "null")
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        # Fail closed, whatever the exit code: a secrets gate passed on a report nobody
        # could read (a replaced or broken scanner that exits 0).
        unread = signal(gate, "crash", "secret-scan", "output is not the secret scan's report")
        return GateParse(signals=(unread,))
    signals = tuple(
        signal(
            gate,
            "secret_found",
            str(f.get("detector", "secret")),
            str(f.get("reason", "")),
            f"{f.get('path', '?')}:{f.get('line', '?')}",
        )
        for f in data["findings"]
        if isinstance(f, dict)
    )
    scanned = data.get("files_scanned") or 0
    # Only a count is a metric: int() of a text or list raises, of 1.5 gives another number;
    # past 2**53 the metric could not be written as canonical JSON.
    metrics: dict[str, Metric] = {}
    if type(scanned) is int and 0 <= scanned < 2**53:
        metrics["files_scanned"] = scanned
    return GateParse(signals=signals, metrics=metrics)
