# `make demo` and `make test` each create .venv when missing and install what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-dev

.PHONY: demo test unit integration bench clean venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/multiworker run examples/mnist/job.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests

unit: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests/integration

bench: $(STAMP)
	$(BIN)/python bench/mnist_vs_baseline.py --rounds 2

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
