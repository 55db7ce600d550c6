# `make demo` and `make test` each create .venv when missing and install what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-dev

.PHONY: demo test unit integration bench clean venv sysdeps images test-torch test-frameworks

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# System packages some tests use (headless Chromium for the dashboard, iproute2 for the two-host
# Ray cluster). Installed when root and missing; elsewhere those tests skip and say why.
SYSDEPS = chromium chromium-driver iproute2
sysdeps:
	@missing=""; for p in $(SYSDEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	elif [ -n "$$missing" ]; then echo "note: not installed:$$missing (tests that need them skip)"; fi

# The images the container tests run (images/make-images.sh): podman and debootstrap when root and
# missing, a Debian base from the apt mirror, then Python + TensorFlow; kept between runs.
images:
	sh images/make-images.sh

demo: $(STAMP)
	$(BIN)/multiworker run examples/mnist/job.yaml

test: $(STAMP) sysdeps images
	$(BIN)/python -m pytest -q -ra --durations=15 tests

# The PyTorch DDP example (train, kill, resume): PyTorch is an extra outside dev (the CUDA libraries
# it pulls are gigabytes); `make test` checks the PyTorch launch contract without it.
test-torch: $(STAMP)
	$(BIN)/pip install -q -e ".[torch]"
	MULTIWORKER_TEST_TORCH=1 $(BIN)/python -m pytest -q -ra --durations=5 tests/integration/test_examples_frameworks.py -k torch

# Both examples' full trainings to >= 99% through a kill (several minutes each on 2 cores).
test-frameworks: $(STAMP)
	$(BIN)/pip install -q -e ".[torch]"
	MULTIWORKER_TEST_FULL=1 $(BIN)/python -m pytest -q -ra --durations=5 tests/integration/test_examples_frameworks.py

unit: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests/unit

integration: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests/integration

bench: $(STAMP)
	$(BIN)/python bench/mnist_vs_baseline.py --rounds 2

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
