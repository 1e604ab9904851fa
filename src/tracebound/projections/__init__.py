"""Projections: every concern as a view of the one typed log (ADR-0034).

``fold`` gives one workflow's state; the projections materialise the cost ledger, ROI, the
audit trail, plugin telemetry, trust-gate observability and the learning graph into a
views database, kept current by :class:`ProjectionRunner`. See docs/projections.md.
"""

from tracebound.projections.base import Column, EventRecord, Projection, Row, Rows, Table
from tracebound.projections.cost import CostLedgerProjection
from tracebound.projections.fold import (
    BuiltinKind,
    WorkflowState,
    WorkflowStateProjection,
    apply,
    fold,
    fold_all,
)
from tracebound.projections.gates import TrustGateProjection
from tracebound.projections.learning import LearningProjection
from tracebound.projections.plugins import PluginTelemetry
from tracebound.projections.records import RecordDecoder, read_records, records_of
from tracebound.projections.roi import RoiProjection, roi_summary
from tracebound.projections.runner import (
    ProjectionRunner,
    ProjectionStatus,
    RunReport,
    default_projections,
)
from tracebound.projections.sqlite_views import VIEWS_FILENAME, SQLiteViews
from tracebound.projections.trail import AuditTrailProjection, merge_trail

__all__ = [
    "VIEWS_FILENAME",
    "AuditTrailProjection",
    "BuiltinKind",
    "Column",
    "CostLedgerProjection",
    "EventRecord",
    "LearningProjection",
    "PluginTelemetry",
    "Projection",
    "ProjectionRunner",
    "ProjectionStatus",
    "RecordDecoder",
    "RoiProjection",
    "Row",
    "Rows",
    "RunReport",
    "SQLiteViews",
    "Table",
    "TrustGateProjection",
    "WorkflowState",
    "WorkflowStateProjection",
    "apply",
    "default_projections",
    "fold",
    "fold_all",
    "merge_trail",
    "read_records",
    "records_of",
    "roi_summary",
]
