"""Exports: evidence files a third party checks offline, and OpenTelemetry metrics.

Submodules are imported explicitly (``from tracebound.export.evidence import ...``), so that
importing evidence support never requires the optional ``otel`` extra.
"""
