"""Replay: rebuild a recorded run from the ledger and its blobs, or re-run it and compare.

:func:`replay_run` reads a run back from ``run_id`` and artifact hashes and checks every
link and digest on the way; :func:`rerun_run` executes the pipeline again into a scratch
ledger and names the first step where today's behaviour differs from the record.
"""

from __future__ import annotations

from tracebound.replay.rebuild import (
    AbandonedBy,
    ChecksumFailure,
    ReplayedBlame,
    ReplayedStep,
    ReplayReport,
    read_run_records,
    replay_run,
)
from tracebound.replay.rerun import Divergence, RerunReport, StepKey, first_divergence, rerun_run

__all__ = [
    "AbandonedBy",
    "ChecksumFailure",
    "Divergence",
    "ReplayReport",
    "ReplayedBlame",
    "ReplayedStep",
    "RerunReport",
    "StepKey",
    "first_divergence",
    "read_run_records",
    "replay_run",
    "rerun_run",
]
