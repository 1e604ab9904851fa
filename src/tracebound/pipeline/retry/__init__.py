"""The retry loop and its audit: shared models here, the two sides in their own modules.

* Planning side ("Phase 4"): ``tracebound.pipeline.fallback`` (FallbackTier, FenceWrapper).
* Verifying side ("Phase 5"): GateRunner, RetryLedger, anchors, and the loop itself.
"""
