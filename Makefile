# jetspark developer tasks.
#
#   make demo    the Spark pipeline demo (jetspark demo)
#   make demo-cluster   the same pipeline on a local 3-node NATS cluster, a node killed midway
#   make test    make lint, then make typecheck, then the test suite (pytest over tests/)
#   make lint    ruff format --check and ruff check over the repository (pyproject.toml [tool.ruff])
#   make typecheck   mypy over the package (pyproject.toml [tool.mypy]; strict on the public API modules)
#   make docs    the documentation site into site/ (mkdocs.yml, docs/), strict
#   make bench   the benchmark scripts in benchmarks/ (see benchmarks/README.md)
#   make notebooks   run the notebooks in notebooks/ and store them with their outputs
#
# Each bootstraps the virtualenv itself: it is created if missing and
# `pip install -e '.[dev]'` (the test, lint and docs extras; make demo: only
# `pip install -e '.[spark]'`, jetspark and the Spark connector) runs again only
# when pyproject.toml is newer than the stamp $(VENV)/.installed (.installed-runtime).
# Those that run Spark (demo, demo-cluster, test, bench, notebooks) check for
# Java 17+ first; lint, typecheck and docs need no Java.
#
# Variables:
#   PYTHON=python3       interpreter that creates the venv (3.10+)
#   VENV=.venv           where the venv lives
#   TESTS=tests          what pytest runs over
#   PYTEST_ARGS=...      extra pytest arguments, e.g. PYTEST_ARGS='-x -m "not slow"'
#   PYTEST_WORKERS=3     pytest processes for make test (pytest-xdist; 0: all in one process).
#                        Three on two cores: much of the suite waits (servers, elections, JVMs
#                        starting), and a third process fills those waits (811 -> 763 s here).
#                        A module's tests run in one process, in order (--dist loadfile); each
#                        process starts the session fixtures it needs (Spark, servers, cluster).
#                        The longest files are handed out first (tests/heavy_first.py).
#   DEMO_ARGS=...        arguments for the demo, e.g. DEMO_ARGS='--seconds 10 --rate 5000 --store DIR'
#   BENCH_ARGS=...       arguments for each benchmark script, e.g. BENCH_ARGS=--quick

PYTHON ?= python3
VENV ?= .venv
TESTS ?= tests
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 3
DEMO_ARGS ?=
BENCH_ARGS ?=
# PySpark launches $JAVA_HOME/bin/java when JAVA_HOME is set and `java` from
# PATH otherwise, so check that same binary.
JAVA ?= $(if $(JAVA_HOME),$(JAVA_HOME)/bin/java,java)

VENV_PY := $(VENV)/bin/python
VENV_CFG := $(VENV)/pyvenv.cfg
STAMP := $(VENV)/.installed
# make demo needs only the runtime dependencies (no test tools, no nats-server).
RUNTIME_STAMP := $(VENV)/.installed-runtime

# Prerequisites run in order: the Java check comes before anything else.
.NOTPARALLEL:
.DEFAULT_GOAL := help
.PHONY: help demo demo-cluster test lint typecheck docs bench notebooks venv clean check-java

help:
	@echo "make demo    run the Spark pipeline demo (DEMO_ARGS='--seconds N --rate R --store DIR')"
	@echo "make demo-cluster  the demo on a local 3-node NATS cluster, one node killed and restarted midway"
	@echo "make test    run make lint and make typecheck, then the test suite (PYTEST_ARGS='...', TESTS=tests/...)"
	@echo "make lint    check formatting and lint with ruff (fix: .venv/bin/ruff format . && .venv/bin/ruff check --fix .)"
	@echo "make typecheck   check the package's types with mypy (pyproject.toml [tool.mypy])"
	@echo "make docs    build the documentation site into site/ (strict: warnings are errors)"
	@echo "make bench   run the scripts in benchmarks/ (BENCH_ARGS=--quick for a short run)"
	@echo "make notebooks   run notebooks/*.ipynb and store them with their outputs (scripts/run_notebooks.py)"
	@echo "make venv    create $(VENV) and install jetspark with its dev extras"
	@echo "make clean   remove caches and build output (keeps $(VENV))"

demo: check-java $(RUNTIME_STAMP)
	$(VENV)/bin/jetspark demo $(DEMO_ARGS)

demo-cluster: check-java $(STAMP)
	$(VENV_PY) scripts/demo_cluster.py $(DEMO_ARGS)

# pytest exits 5 when it collected no tests; that is a failure here, and says so.
test: check-java $(STAMP) lint typecheck
	$(VENV_PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -p tests.heavy_first $(PYTEST_ARGS) $(TESTS) || { status=$$?; \
	  [ $$status -ne 5 ] || echo "make test: pytest collected no tests from '$(TESTS)' (exit 5); an empty run is a failure." >&2; \
	  exit $$status; }

lint: $(STAMP)
	$(VENV)/bin/ruff format --check --quiet . || { echo "make lint: files need formatting; run $(VENV)/bin/ruff format ." >&2; exit 1; }
	$(VENV)/bin/ruff check --quiet .

# The files, settings and cache directory (.mypy_cache) are in pyproject.toml [tool.mypy].
typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: check-java $(STAMP)
	@found=; \
	for script in benchmarks/*.py; do \
	  [ -f "$$script" ] || continue; \
	  case "$${script##*/}" in _*) continue ;; esac; \
	  found=1; \
	  echo "== $$script"; \
	  $(VENV_PY) "$$script" $(BENCH_ARGS) || exit $$?; \
	done; \
	[ -n "$$found" ] || { echo "make bench: no benchmark scripts in benchmarks/" >&2; exit 1; }

# The documentation site (mkdocs.yml, docs/) into site/, strict: a warning is an error.
# NO_MKDOCS_2_WARNING: Material prints a banner about its successor on every build otherwise.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# nbclient, ipykernel and matplotlib come with the dev extras (tests/test_notebooks.py runs them too).
notebooks: check-java $(STAMP)
	$(VENV_PY) scripts/run_notebooks.py

venv: $(STAMP)

# Reinstall when pyproject.toml changes or the venv is (re)created.
$(STAMP): pyproject.toml $(VENV_CFG)
	$(VENV_PY) -m pip install --disable-pip-version-check -e '.[dev]'
	@touch $@ $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml $(VENV_CFG)
	$(VENV_PY) -m pip install --disable-pip-version-check -e '.[spark]'
	@touch $@

$(VENV_CFG):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || { \
	  echo "jetspark needs Python 3.10+ to create $(VENV); '$(PYTHON)' is: $$($(PYTHON) --version 2>/dev/null || echo 'not found')." >&2; \
	  echo "Point PYTHON at a newer interpreter, e.g. make PYTHON=python3.11 $(MAKECMDGOALS)" >&2; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV) || { rm -f $@; \
	  echo "Could not create $(VENV). On Debian/Ubuntu: sudo apt-get install python3-venv" >&2; \
	  exit 1; }
	@# Python 3.10's early bundled pips cannot do editable installs from pyproject.toml alone.
	$(VENV_PY) -m pip install --disable-pip-version-check --quiet --upgrade pip || { rm -f $@; exit 1; }

check-java:
	@java='$(JAVA)'; \
	version=; \
	if out=$$("$$java" -version 2>&1); then \
	  version=$$(printf '%s\n' "$$out" | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1); \
	fi; \
	major=$${version%%[.+_-]*}; \
	if [ "$$major" = 1 ]; then major=$$(echo "$$version" | cut -d. -f2); fi; \
	case "$$major" in ''|*[!0-9]*) major=0 ;; esac; \
	if [ "$$major" -lt 17 ]; then \
	  if [ -n "$$version" ]; then found="Java $$version ($$java)"; \
	  elif command -v "$$java" >/dev/null 2>&1; then found="'$$java -version' did not report a version"; \
	  else found="no '$$java' command"; fi; \
	  echo "Java 17 or newer is required: Spark (PySpark 4) runs on the JVM. Found: $$found." >&2; \
	  echo "Install it, for example:" >&2; \
	  echo "  Debian/Ubuntu:  sudo apt-get install openjdk-17-jre-headless" >&2; \
	  echo "  macOS:          brew install openjdk@17 && export JAVA_HOME=\"\$$(brew --prefix openjdk@17)\"" >&2; \
	  echo "then put its java on PATH or set JAVA_HOME, and run make again." >&2; \
	  exit 1; \
	fi

clean:
	rm -rf build dist site *.egg-info .pytest_cache .mypy_cache .hypothesis spark-warehouse metastore_db derby.log
	find . -path ./.git -prune -o -path './$(VENV)' -prune -o -type d -name __pycache__ -exec rm -rf {} +
