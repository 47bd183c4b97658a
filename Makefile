# leakshield: two entry points for a fresh machine (see README).
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install install-test demo test lint

# torch first, pinned to the local CPU wheel: a looser pin pulls several GB of CUDA packages
install:
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .

install-test:
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'

demo: install
	$(PYTHON) -m leakshield demo --out runs/demo

test: install-test
	$(PYTHON) -m ruff check src tests benchmarks
	$(PYTHON) -c "from importlinter.cli import lint_imports_command; lint_imports_command()"
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check src tests benchmarks
	$(PYTHON) -m ruff format --check src tests benchmarks
