"""The secret-scan gate's process: ``python -I -m tracebound.pipeline.retry._secret_scan CHANGES``.

It runs in the sandbox like any other gate (same limits, no network), over the files the
patch changed, with the redactor's detectors. It reports a finding only on a line the patch
*added*, so a secret that was already in the file does not fail every later attempt (that
one is for a repository scan, not for this gate). PII detectors (``email``, ``phone``) are
left out by default: an address in a test fixture is not a leaked credential.

Output (stdout, JSON): ``{"files_scanned": n, "findings": [{"path", "line", "detector",
"reason"}]}``; exit 1 when anything was found. The secret itself is never printed: the
gate's whole point is that it does not travel further.
"""

from __future__ import annotations

import bisect
import json
import sys
from pathlib import Path, PurePosixPath
from typing import Final

from tracebound.pipeline.redaction import Redactor

DEFAULT_IGNORED_DETECTORS: Final = frozenset({"email", "phone"})
# The HMAC key only shapes digests, which this process never prints; detection needs no secret.
_SCAN_KEY: Final = b"tracebound/secret-scan-gate/v1"


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def scan(root: Path, changes: dict[str, object], ignored: frozenset[str]) -> dict[str, object]:
    """Scan the changed files under ``root``; findings on added lines only."""
    redactor = Redactor(_SCAN_KEY)
    findings: list[dict[str, object]] = []
    scanned = 0
    files = changes.get("files", [])
    assert isinstance(files, list)
    for entry in files:
        rel = str(entry["path"])
        added = set(entry.get("added_lines", []))
        path = root / PurePosixPath(rel)
        if entry.get("deleted") or not added or path.is_symlink() or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        scanned += 1
        starts = _line_starts(text)
        for r in redactor.redact_text(text).redactions:
            if r.detector in ignored:
                continue
            line = bisect.bisect_right(starts, r.start)
            if line in added:
                findings.append(
                    {
                        "path": rel,
                        "line": line,
                        "detector": r.detector,
                        "reason": r.redaction_reason,
                    }
                )
    return {"files_scanned": scanned, "findings": findings}


def main(argv: list[str]) -> int:
    """Entry point; ``argv[0]`` is the changes file the gate runner wrote."""
    changes = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    ignored = DEFAULT_IGNORED_DETECTORS
    if len(argv) > 1:
        ignored = frozenset(filter(None, argv[1].split(",")))
    report = scan(Path.cwd(), changes, ignored)
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
