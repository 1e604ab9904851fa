"""Benchmarks for tracebound, with peers measured side by side in the same run.

Run them all with ``python -m bench`` (quick sizes) or ``python -m bench --full``; see
``BENCHMARKS.md`` for the commands, the machine and the results.
"""
