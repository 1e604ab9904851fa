"""Integrations with the world outside tracebound (layer 4): model providers, workflow
engines, exporters.

Each integration lives in its own subpackage and imports its third-party SDK only when
used, so ``import tracebound`` never needs an optional extra.
"""
