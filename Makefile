# leakshield: two entry points for a fresh machine (see README).
#
# Everything installs into a project virtual environment: the active one when one is active
# ($VIRTUAL_ENV), else .venv, made here by $(PYTHON). A stock Debian or Ubuntu Python is "externally
# managed" (PEP 668) and refuses `pip install` into itself; a virtual environment is the way it allows.
PYTHON ?= python3
VENV ?= $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV),.venv)
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MKDOCS := NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/site

.PHONY: venv install install-test demo test lint docs determinism

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "make: leakshield needs Python >= 3.11; $(PYTHON) is " + sys.version.split()[0] + " (set PYTHON=...)")'
	@$(PYTHON) -m venv $(VENV) || { [ "$(VENV)" = ".venv" ] && rm -rf .venv; \
	  echo "make: $(PYTHON) cannot make a virtual environment: install python3-venv (apt install python3-venv) or activate one" >&2; exit 1; }

venv: $(PY)
	@echo "leakshield: using $$($(PY) -c 'import sys; print(sys.executable, "(Python", sys.version.split()[0] + ")")')"

# torch first, pinned to the local CPU wheel: a looser pin pulls several GB of CUDA packages
install: venv
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	@echo "leakshield: installed in $(VENV); 'source $(VENV)/bin/activate' puts the leakshield command on the PATH"

install-test: venv
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'

demo: install
	$(PY) -m leakshield demo --out runs/demo

test: install-test
	$(PY) -m ruff check src tests benchmarks scripts
	$(PY) -c "from importlinter.cli import lint_imports_command; lint_imports_command()"
	$(MKDOCS) --quiet
	$(PY) -m pytest -n 2 --dist loadgroup

# the deterministic-numbers tests at two threads (CI runs them after `make test`, whose xdist workers run
# at one); the thread-agreement test sets its own thread counts in its subprocesses, so it already ran
determinism: venv
	LEAKSHIELD_TEST_THREADS=2 $(PY) -m pytest -q tests/test_determinism.py -k "not one_and_two_threads"

docs: install-test
	$(MKDOCS)
	@echo "leakshield: the manual is in build/site/index.html (mkdocs serve: a live preview)"

lint: venv
	$(PY) -m ruff check src tests benchmarks scripts
	$(PY) -m ruff format --check src tests benchmarks scripts
