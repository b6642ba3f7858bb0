# tidemark — `make help` lists the targets.
PYTHON ?= python3.11
VENV   ?= .venv

# `make test PYTHON=python3.13` beside a .venv made with another Python would run that
# other one: refuse, naming both (make clean, or a venv of its own with VENV=).
ifeq ($(origin PYTHON),command line)
pyversion = $(shell $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV_VERSION := $(if $(wildcard $(VENV)/bin/python),$(call pyversion,$(VENV)/bin/python))
ifneq ($(VENV_VERSION),)
ifneq ($(VENV_VERSION),$(call pyversion,$(PYTHON)))
$(error $(VENV) is Python $(VENV_VERSION), not $(PYTHON): remove it (make clean) or give a venv of its own, e.g. VENV=.venv-$(call pyversion,$(PYTHON)))
endif
endif
endif
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tidemark-installed
DEMO_STAMP := $(VENV)/.tidemark-demo-installed

.DEFAULT_GOAL := help
.PHONY: help setup setup-demo browser promtool demo test test-faults test-deploy test-unit nemesis lint bench soak up down status clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# What pip, apt-get and Maven print goes to $(SETUP_LOG); the terminal shows one line a
# step, and the log's end when a step fails.
SETUP_LOG := $(VENV)/setup.log
quietly = $(1) >>$(SETUP_LOG) 2>&1 || { echo "failed: $(1)" >&2; echo "--- the end of $(SETUP_LOG):" >&2; tail -n 60 $(SETUP_LOG) >&2; exit 1; }

$(VENV)/pyvenv.cfg:
	@command -v $(PYTHON) >/dev/null || { echo "tidemark needs $(PYTHON) (3.11-3.13) on PATH, or make ... PYTHON=/path/to/python" >&2; exit 1; }
	@echo "setup: creating $(VENV) with $$($(PYTHON) --version) (log: $(SETUP_LOG))"
	@$(PYTHON) -m venv $(VENV)
	@$(call quietly,$(PY) -m pip install --upgrade pip)

# The demo's packages only: the core, Spark, the dashboard, rich and matplotlib.
$(DEMO_STAMP): pyproject.toml constraints.txt | $(VENV)/pyvenv.cfg
	@echo "setup: installing the demo's Python packages (pinned in constraints.txt; first use takes a minute or two)"
	@$(call quietly,$(PY) -m pip install -e '.[demo]' -c constraints.txt)
	@touch $@

# Everything: every extra and the dev tools.
$(STAMP): pyproject.toml constraints.txt | $(VENV)/pyvenv.cfg
	@echo "setup: installing the Python packages, dev tools included (pinned in constraints.txt)"
	@$(call quietly,$(PY) -m pip install -e '.[dev]' -c constraints.txt)
	@touch $@ $(DEMO_STAMP)

# Spark's Python workers import pyspark from its zip, where Python keeps no bytecode:
# tidemark.infra.pyspark_zip adds it once (a worker that compiles pyspark at each start
# misses Spark's ten seconds to connect back on a loaded machine).
setup: $(STAMP) browser promtool ## create .venv with every extra and the dev tools; chromium, promtool; resolve the jars, build the JVM interceptor
	@$(PY) -m tidemark.infra.jars resolve
	@$(PY) -m tidemark.infra.jars interceptor --log $(SETUP_LOG)
	@$(PY) -m tidemark.infra.pyspark_zip

setup-demo: $(DEMO_STAMP) ## what make demo needs: the demo's packages and the Kafka/ZooKeeper/Spark jars
	@$(PY) -m tidemark.infra.jars resolve kafka zookeeper spark
	@$(PY) -m tidemark.infra.pyspark_zip

# The dashboard's browser test drives Debian's chromium through chromium-driver.
browser: | $(VENV)/pyvenv.cfg ## install Debian's chromium and chromium-driver where missing (apt-get, as root)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "setup: installing chromium and chromium-driver (apt-get) for the browser test"; \
		$(call quietly,apt-get update -qq); \
		$(call quietly,env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver); \
	else echo "the browser test needs chromium and chromium-driver: install them (apt-get, as root)" >&2; fi

# The alert rules' tests (ops/prometheus) run Debian's promtool.
promtool: | $(VENV)/pyvenv.cfg ## install Debian's prometheus package (promtool) where missing (apt-get, as root)
	@if command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "setup: installing promtool (apt-get: Debian's prometheus package) for the alert rules' tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >>$(SETUP_LOG) 2>&1 \
		|| { $(call quietly,apt-get update -qq); \
		$(call quietly,env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus); }; \
	else echo "the alert rules' tests need promtool: install Debian's prometheus package (apt-get, as root)" >&2; fi

demo: setup-demo ## start local services, run the pipeline end to end, print the result
	@$(PY) -m tidemark.cli.main demo

# The deployment tests and the nemesis (5 minutes of faults on their system; `make nemesis`
# runs it longer) run in a pytest process of their own, after the rest: a fault-ridden
# deployment leaves nothing (clients, threads, JVM state) behind for the other tests. Run
# beside the rest on two cores, both starved: the nemesis's recoveries missed their bound
# and timing-bound tests failed, so the two processes run one after the other. The
# `alone` tests (they assert a wall-time figure) run in the second, one at a time on a
# quiet machine, after the deployment stopped: among the workers, each held the others
# idle while it waited for their running tests to end. Both always run; the worse exit
# code is the target's (5, no tests, fails too).
# TEST_WORKERS pytest-xdist workers run the rest (0: in the pytest process itself), each
# with services of its own on its own ports; twice the cores, since a service-bound
# test spends much of its time waiting on its services, not computing (with one more
# than the cores, the machine still sat idle an eighth of the time); tests/conftest.py
# says which tests one worker keeps together (everything Spark, a module of
# service-bound tests).
TEST_WORKERS ?= 4
UNIT_WORKERS ?= 2
# The suite's Python processes write bytecode whatever the environment says
# (PYTHONDONTWRITEBYTECODE): without it every pytest process rewrites every test module
# and each of the hundreds of processes the tests start compiles the project again.
test test-unit test-faults test-deploy nemesis: export PYTHONDONTWRITEBYTECODE =
test: setup ## the whole suite (unit, integration, spark, deploy, a short nemesis) against real local services
	@rc=0; \
	$(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder \
		--ignore=tests/deploy \
		-m "not alone" || rc=$$?; \
	$(PY) -m pytest -q --durations=20 -m "deploy or alone" || { drc=$$?; [ $$drc -gt $$rc ] && rc=$$drc; }; \
	exit $$rc

test-faults: setup ## the fault suite: broker/controller/ZooKeeper faults, hostile input, restarts; prints figures
	$(PY) -m pytest -q -m faults

test-deploy: setup ## the deployment tests: Spark standalone, secured Kafka, ZooKeeper ensemble, S3 store (docs/deploying.md)
	$(PY) -m pytest -q -m deploy

# SECONDS of faults (default 1800); SEED replays a schedule (default: a new one, printed).
NEMESIS_SECONDS ?= 1800
nemesis: setup ## the nemesis, longer: make nemesis SECONDS=1800 SEED=<seed> (docs/operations/tests.md)
	TIDEMARK_NEMESIS_SECONDS=$(or $(SECONDS),$(NEMESIS_SECONDS)) TIDEMARK_NEMESIS_SEED=$(SEED) \
		$(PY) -m pytest -q -s -p no:cacheprovider tests/deploy/test_nemesis.py

# `slow` unit tests (building and installing the wheel) run in make test.
test-unit: setup ## the fast tests only: unit, not slow, on UNIT_WORKERS workers
	$(PY) -m pytest -q -m "unit and not slow" -n $(UNIT_WORKERS)

# mypy does not follow setuptools' editable import hook, so it checks a tree of symlinks
# laid out as the installed package (controller/ as tidemark/controller, ...).
TYPECHECK := build/typecheck
lint: setup ## ruff + mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/tidemark
	@for f in tidemark/*; do ln -s "$(CURDIR)/$$f" $(TYPECHECK)/tidemark/; done
	@for p in controller pipelines schemas jobs infra; do ln -s "$(CURDIR)/$$p" $(TYPECHECK)/tidemark/$$p; done
	cd $(TYPECHECK) && $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml -p tidemark

bench: setup ## benchmarks, printed with ratios against baselines run in the same process
	$(PY) -m tests.bench

soak: setup ## soak: 10 000 controller commits x 100 streams with maintenance on (~15-30 min)
	$(PY) -m tests.bench bench_soak

up: setup ## start local services in the background (tidemark up)
	$(PY) -m tidemark.cli.main up

down: ## stop the local services started by `make up`
	$(PY) -m tidemark.cli.main down

status: ## show the local services
	$(PY) -m tidemark.cli.main status

clean: ## remove the virtualenv and caches (not the Maven repository)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
