# Two entry points a new user needs: `make demo` and `make test`. Both create .venv and
# install what they need; nothing else has to be set up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,postgres]'
	touch $(STAMP)

# The reference remediation pipeline, then the ledger's own tamper demo.
demo: $(STAMP)
	$(BIN)/python examples/remediation/remediate.py --approve-as security-lead
	$(BIN)/tracebound demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q -n 2

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .tracebound
