"""`python -m tracebound` runs the CLI."""

from tracebound.cli.app import main

main()
