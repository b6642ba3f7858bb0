# tidemark — `make help` lists the targets.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tidemark-installed

.DEFAULT_GOAL := help
.PHONY: help setup browser promtool demo test test-faults test-deploy test-unit lint bench soak up down status clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "tidemark needs $(PYTHON) on PATH" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

setup: $(STAMP) browser promtool ## create .venv, install pinned packages, resolve Kafka/ZooKeeper/Spark jars with Maven
	$(PY) -m infra.jars resolve

# The dashboard's browser test drives Debian's chromium through chromium-driver.
browser: ## install Debian's chromium and chromium-driver where missing (apt-get, as root)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else echo "the browser test needs chromium and chromium-driver: install them (apt-get, as root)" >&2; fi

# The alert rules' tests (ops/prometheus) run Debian's promtool.
promtool: ## install Debian's prometheus package (promtool) where missing (apt-get, as root)
	@if command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
		|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; \
	else echo "the alert rules' tests need promtool: install Debian's prometheus package (apt-get, as root)" >&2; fi

demo: setup ## start local services, run the pipeline end to end, print the result
	$(PY) -m tidemark.cli.main demo

test: setup ## the whole suite (unit, integration, spark) against real local services
	$(PY) -m pytest -q

test-faults: setup ## the fault suite: broker/controller/ZooKeeper faults, hostile input, restarts; prints figures
	$(PY) -m pytest -q -m faults

test-deploy: setup ## the deployment tests: Spark standalone, secured Kafka, ZooKeeper ensemble, S3 store (docs/deploying.md)
	$(PY) -m pytest -q -m deploy

test-unit: setup ## the fast tests only
	$(PY) -m pytest -q -m unit

lint: setup ## ruff + mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy tidemark pipelines schemas controller jobs infra

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
