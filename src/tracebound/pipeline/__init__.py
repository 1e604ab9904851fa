"""The pipeline runtime: roles, policy gate, redaction, scopes, retry and anchors.

Submodules are imported explicitly (``from tracebound.pipeline.redaction import Redactor``);
this package file stays empty so that importing one part of the runtime does not pull in
the others.
"""
