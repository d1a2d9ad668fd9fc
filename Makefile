# The two commands of the README:
#   make up     bring up the dev cluster with the system installed
#   make test   lint, types, and every test tier (unit, service, fuzz, e2e)
# and, for the edit-test loop, `make check`: lint, types, unit and service tiers (no cluster needed).
SHELL := bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# pytest exits 5 when no test ran: that is a failure here, never a pass.
define pytest_must_run
	$(BIN)/pytest $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no test in $(1)" >&2; exit 1; fi; exit $$rc
endef

# The unit and service tiers are spread over every core (pytest-xdist); XDIST= runs them in one process.
XDIST ?= -n auto

# Hypothesis profile of the unit and service tiers: empty (every example) for `make test` and CI; `make check`
# sets the "check" profile (tests/conftest.py), a quarter of the property tests' examples. The fuzz tier is
# never scaled.
EXAMPLES ?=

.PHONY: install deps up down status lint types unit service fuzz e2e check test binaries bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

deps:
	bash hack/system-deps.sh

# The dev cluster's Kubernetes binaries, helm (for the chart in manifests/helm/) and the job operators
# (training operator, KubeRay, Argo's workflow-controller: docs/job-kinds.md), each cached by version.
binaries:
	bash webhook/devcluster/build-binaries.sh
	bash webhook/devcluster/build-binaries.sh helm
	bash webhook/devcluster/build-binaries.sh operators
	bash webhook/devcluster/build-binaries.sh spark

up: install
	$(BIN)/kq dev up --seed

down: install
	$(BIN)/kq dev down

status: install
	$(BIN)/kq dev status

lint: install
	$(BIN)/ruff check webhook tests bench

types: install
	$(BIN)/mypy

unit: install
	$(call pytest_must_run,tests/unit -q -p no:cacheprovider $(XDIST) $(EXAMPLES) --cov=webhook.core --cov-report=term --cov-fail-under=95)

service: install
	$(call pytest_must_run,tests/service -q -p no:cacheprovider $(XDIST) $(EXAMPLES))

# Hypothesis over the admission handlers: at least 10,000 generated AdmissionReviews (about 40 s).
fuzz: install
	$(call pytest_must_run,tests/fuzz -q -p no:cacheprovider)

# The end-to-end tier runs its modules on two pytest-xdist workers, each with a dev cluster of its own (ports
# from KQ_E2E_PORT_BASE, 26400 by default, and 200 above it: tests/e2e/conftest.py), a module whole on one
# worker. Its tests mostly wait on the clusters' clocks, so two share 2 cores well. E2E_XDIST= runs one.
E2E_XDIST ?= -n 2 --dist loadfile

e2e: install deps binaries
	$(call pytest_must_run,tests/e2e -q -p no:cacheprovider $(E2E_XDIST) --durations=15)

check: EXAMPLES = --hypothesis-profile=check
check: lint types unit service

test: lint types unit service fuzz e2e

bench: install
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .coverage
