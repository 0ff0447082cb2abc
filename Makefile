# labserver — `make run` starts a server on its embedded defaults; `make test` runs every check.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed
WEB_STAMP := web/node_modules/.installed

.PHONY: run setup web test lint typecheck unit e2e test-postgres test-kubernetes messages dist clean screenshots

run: setup web ## set everything up and start the server (SQLite + local backend)
	$(BIN)/labserver serve

setup: $(STAMP)

$(STAMP): pyproject.toml labs/labkit/pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q 'torch==2.13.0'
	$(PIP) install -q -e labs/labkit
	$(PIP) install -q -e '.[dev]'
	touch $@

web: $(WEB_STAMP)

$(WEB_STAMP): web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund
	touch $@

lint: setup
	$(BIN)/ruff check labserver labs tests bench
	$(BIN)/ruff format --check labserver labs tests bench

typecheck: setup
	$(BIN)/mypy labserver labs/labkit/labkit

# SQLite here (the PostgreSQL pass below runs the database-facing tests again), on both cores: much
# of this part waits (timeouts, restarts, engines), and each test has its own data folder and names
unit: setup web
	env -u LABSERVER_TEST_DATABASE_URL $(BIN)/pytest -q -p no:cacheprovider -n 2 --durations=10 --ignore=tests/e2e --ignore=tests/labs --ignore=tests/bench \
	    --ignore=tests/backends/docker/test_labs_on_docker.py

# every lab's lint and self-test with its mutants, the labs' own tests, every lab on Docker, and
# bench/checks.py on one lab, on both cores
labs: setup web
	env -u LABSERVER_TEST_DATABASE_URL $(BIN)/pytest -q -p no:cacheprovider -n 2 --durations=12 \
	    tests/labs tests/bench tests/backends/docker/test_labs_on_docker.py

# browser tests run in their own pytest process (Playwright's sync API and async tests clash)
e2e: setup web
	$(BIN)/pytest -q -p no:cacheprovider tests/e2e

# the database-facing tests again on PostgreSQL when LABSERVER_TEST_DATABASE_URL is set (.ci/run sets it),
# on both cores (each test has a database of its own)
test-postgres: setup web
	@if [ -n "$$LABSERVER_TEST_DATABASE_URL" ]; then \
	  $(BIN)/pytest -q -p no:cacheprovider -n 2 tests/routes tests/test_db.py tests/checks/test_checks.py tests/services; \
	else echo "test-postgres: LABSERVER_TEST_DATABASE_URL not set (.ci/run sets it)"; fi

# the backend contract suite on a real Kubernetes cluster (docs/kubernetes.md); NOT part of `make test`:
# no cluster can run on the CI machines
test-kubernetes: setup
	@if [ -z "$$LABSERVER_TEST_KUBECONFIG" ]; then \
	  echo "test-kubernetes needs a cluster: set LABSERVER_TEST_KUBECONFIG to a kubeconfig (kind or k3s with"; \
	  echo "the lab image pre-loaded; docs/kubernetes.md says how)"; exit 2; fi
	$(BIN)/pytest -q -p no:cacheprovider tests/backends/test_contract.py -k kubernetes tests/backends/kubernetes

screenshots: setup web ## retake the documentation screenshots (docs/img/) with the browser tests
	LABSERVER_SCREENSHOTS=$(CURDIR)/docs/img $(BIN)/pytest -q -p no:cacheprovider tests/e2e

# every part runs even when an earlier one fails; the time of each and the total are printed last
TEST_PARTS := lint typecheck unit labs e2e test-postgres
test: setup web ## ruff, mypy, pytest (unit, integration, browser, PostgreSQL), with the time each took
	@start=$$(date +%s); failed=""; report=""; \
	for part in $(TEST_PARTS); do \
	  t0=$$(date +%s); $(MAKE) --no-print-directory $$part || failed="$$failed $$part"; \
	  report="$$report$$(printf '  %-14s %5d s' $$part $$(( $$(date +%s) - t0 )))\n"; \
	done; \
	total=$$(( $$(date +%s) - start )); \
	printf '\nmake test, time per part:\n%b  %-14s %5d s (%d min %02d s)\n' "$$report" total $$total $$((total / 60)) $$((total % 60)); \
	if [ -n "$$failed" ]; then echo "make test FAILED in:$$failed"; exit 1; fi

messages: setup ## extract attendee UI strings (babel.cfg) and update the Chinese catalog
	mkdir -p build
	$(BIN)/pybabel extract -F babel.cfg -k "gettext:2,2t" -k "gettext:1,1t" -k _ -k N_ -k JoinError \
	    --no-location --sort-output --omit-header -o build/messages.pot .
	$(BIN)/pybabel update -i build/messages.pot -d labserver/locale -D messages -l zh --no-fuzzy-matching

dist: setup web ## a wheel carrying the web assets and the labs
	$(BIN)/python -m labserver.selfpaced.packaging build

clean:
	rm -rf $(VENV) web/node_modules build dist *.egg-info labserver/bundled
