"""tracebound: a tamper-evident flight recorder and runtime for multi-agent LLM pipelines."""

__version__ = "0.1.0"
