"""The contracts every agent step meets: the TPC artifact, its handoff envelope, the ARL entry.

Models and hand-written JSON Schemas describe the same contract; ``validate_tpc``,
``validate_envelope`` and ``validate_arl`` run both and raise
:class:`~tracebound.errors.ValidationFailed` naming the field and the reason.

The schemas' source of truth is ``schemas/agent/*.schema.json`` at the repository root (the
path the design record names). ``contract/schemas/`` holds byte-identical copies shipped as
package data; ``tests/unit/contract/test_contract_sync.py`` fails when they drift, and the fix
is ``cp schemas/agent/*.schema.json src/tracebound/contract/schemas/``. See docs/contracts.md.
"""

from __future__ import annotations

from tracebound.contract.arl import (
    Approval,
    ApprovalDecision,
    ARLEntry,
    StepStatus,
    Storage,
    Validations,
)
from tracebound.contract.tpc import (
    CostEstimate,
    HandoffEnvelope,
    LatencyEstimate,
    Outputs,
    Role,
    TPCArtifact,
)
from tracebound.contract.validate import (
    ARL_SCHEMA_ID,
    TPC_SCHEMA_ID,
    load_schema,
    validate_arl,
    validate_envelope,
    validate_tpc,
)

__all__ = [
    "ARL_SCHEMA_ID",
    "TPC_SCHEMA_ID",
    "ARLEntry",
    "Approval",
    "ApprovalDecision",
    "CostEstimate",
    "HandoffEnvelope",
    "LatencyEstimate",
    "Outputs",
    "Role",
    "StepStatus",
    "Storage",
    "TPCArtifact",
    "Validations",
    "load_schema",
    "validate_arl",
    "validate_envelope",
    "validate_tpc",
]
