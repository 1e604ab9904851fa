"""NewType ids and digests, so a bare ``str`` never stands where a ``RunId`` is meant.

NewTypes cost nothing at run time; mypy keeps a ``StepId`` from being passed as a
``RunId``. Digests carry their algorithm in the name (``Sha256Digest`` is the
``sha256:<hex>`` form used for blobs; ``ChainHead`` is a raw 32-byte BLAKE3 value).
"""

from __future__ import annotations

from typing import NewType
from uuid import UUID

__all__ = [
    "AdapterId",
    "AdvisoryId",
    "AttemptId",
    "ChainHead",
    "CorrelationId",
    "EventId",
    "EventType",
    "GateId",
    "PatchDigest",
    "PluginId",
    "Position",
    "PromptDigest",
    "RagRecordId",
    "ResponseDigest",
    "RunId",
    "SandboxRunId",
    "Sha256Digest",
    "StepId",
    "StreamId",
    "StreamVersion",
    "WorkflowId",
]

EventId = NewType("EventId", UUID)
EventType = NewType("EventType", str)
WorkflowId = NewType("WorkflowId", str)
CorrelationId = NewType("CorrelationId", str)
StreamId = NewType("StreamId", str)
StreamVersion = NewType("StreamVersion", int)  # 1-based version of an event in its stream
Position = NewType("Position", int)  # 1-based, gap-free position in the global log

RunId = NewType("RunId", str)
StepId = NewType("StepId", str)
AttemptId = NewType("AttemptId", UUID)
AdvisoryId = NewType("AdvisoryId", str)
GateId = NewType("GateId", str)
PluginId = NewType("PluginId", str)
RagRecordId = NewType("RagRecordId", str)

ChainHead = NewType("ChainHead", bytes)  # 32 raw bytes of BLAKE3
PromptDigest = NewType("PromptDigest", str)  # hex BLAKE3 of the exact prompt bytes
ResponseDigest = NewType("ResponseDigest", str)  # hex BLAKE3 of the exact response bytes
Sha256Digest = NewType("Sha256Digest", str)  # "sha256:<64 hex>"

# Added with the built-in event catalog (ADR-0034's AdapterDegraded, ADR-0002's AttemptSummary).
AdapterId = NewType("AdapterId", str)  # a code-intelligence adapter, e.g. "scip", "tree-sitter"
SandboxRunId = NewType("SandboxRunId", str)  # the sandbox run whose gate verdict a retry follows
PatchDigest = NewType("PatchDigest", str)  # hex BLAKE3 of the exact patch bytes a transform built
