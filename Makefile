# `make demo` and `make test` work on a fresh clone: they create .venv, install torch
# 2.13.0 first (the CPU build), then the package with every extra, and run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-stamp
OUT ?= demo-out
PYTEST_ARGS ?=

.PHONY: all venv demo test test-all lint bench clean

all: test

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ragprivacy demo --out $(OUT)
	@echo "report: $(OUT)/report.md"

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -q -m "" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PIP) install --quiet -c constraints.txt -e '.[dev,bench]'
	$(PY) benchmarks/bench_samplers.py
	$(PY) benchmarks/bench_embed.py
	$(PY) benchmarks/bench_index.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .ruff_cache .mypy_cache .benchmarks
