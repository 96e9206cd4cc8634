# GPU Hub: the two commands are `make run` (set up and start the embedded hub)
# and `make test` (set up and run the tests).
# The venv is also the users' environment: notebook servers, jobs and model
# replicas run as each user's own account (docs/service.md), so it is made
# from an interpreter every account can run. Debian's /usr/bin/python3 where
# there is one (a pyenv Python under a 0700 /root could not start as them).
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROXY := node_modules/.bin/configurable-http-proxy
ARGS ?=

.PHONY: setup run demo test bench bench-api client clean

# A venv made by another interpreter (pyenv's, before) is made afresh.
PY_STAMP := $(VENV)/.made-by$(subst /,-,$(PYTHON))
$(PY_STAMP):
	$(PYTHON) -m venv --clear $(VENV)
	touch $@

$(STAMP): $(PY_STAMP) pyproject.toml
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# configurable-http-proxy (JupyterHub's proxy) from the npm registry, into
# the project, not globally.
$(PROXY): package.json package-lock.json
	command -v npm >/dev/null || (apt-get update && apt-get install -y nodejs npm)
	npm install --no-audit --no-fund
	touch $(PROXY)

# The JupyterLab extension (extensions/gpuhub-lab, docs/lab-extension.md): a
# Python package with the server extension and the prebuilt front end, which
# its build makes with jlpm from the npm registry.
LAB_EXT := extensions/gpuhub-lab
LAB_STAMP := $(VENV)/.lab-installed
LAB_SOURCES := $(shell find $(LAB_EXT)/src $(LAB_EXT)/gpuhub_lab $(LAB_EXT)/schema \
	$(LAB_EXT)/style $(LAB_EXT)/jupyter-config -type f -not -path '*/labextension/*' \
	-not -name '*.pyc' 2>/dev/null) $(LAB_EXT)/package.json $(LAB_EXT)/pyproject.toml \
	$(LAB_EXT)/yarn.lock
$(LAB_STAMP): $(STAMP) $(LAB_SOURCES)
	$(BIN)/pip install --quiet ./$(LAB_EXT)
	touch $@

setup: $(STAMP) $(PROXY) $(LAB_STAMP)

# Starts JupyterHub + proxy + the scheduler service on this host (SQLite,
# local processes, NVML GPUs or four declared fake ones). Prints the URL and
# the first admin's password. `make run ARGS=--demo` adds demo teams/users.
run: $(STAMP) $(PROXY) $(LAB_STAMP)
	$(BIN)/gpuhub up $(ARGS)

# Replays a 15,000-job Philly-like trace on 2,000 GPUs under the five
# policies and writes the usage chart to out/usage.png.
demo: $(STAMP)
	mkdir -p out
	$(BIN)/gpuhub trace out/philly-15k.csv --jobs 15000 --load 1.3
	$(BIN)/gpuhub simulate out/philly-15k.csv --cluster examples/philly-cluster.yaml --plot out/usage.png

# The browser tests drive Debian's Chromium (no browser download).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update && apt-get install -y chromium

# The docs' command blocks (tests/test_doc_commands.py) pick ids out of JSON with jq.
JQ := /usr/bin/jq
$(JQ):
	apt-get update && apt-get install -y jq

# The Slurm tests start Debian's slurm-wlm (slurmctld + slurmd) with munge
# on this host (tests/slurm_harness.py); the multi-node ones put each slurmd
# in a network namespace (ip from iproute2, nsenter/unshare from util-linux).
SLURMCTLD := /usr/sbin/slurmctld
$(SLURMCTLD):
	apt-get update && apt-get install -y slurm-wlm munge iproute2 util-linux

# Two pytest workers (pytest-xdist), each taking whole test files
# (--dist loadfile), so a module's hub, Slurm cluster or browser is still
# started once and shared by its tests. Most of an end-to-end test is waiting
# for processes it started, so two workers on two cores halve the run.
# `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP) $(PROXY) $(CHROMIUM) $(JQ) $(SLURMCTLD) $(LAB_STAMP)
	cd $(LAB_EXT) && ../../$(BIN)/jlpm test
	# --durations: the slowest tests at the end of the run (where to look when it grows)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

bench: $(STAMP)
	$(BIN)/gpuhub bench

# Submit/list throughput and p99 through the proxy against a temporary hub,
# next to JupyterHub's own GET /hub/api/user.
bench-api: $(STAMP) $(PROXY)
	$(BIN)/gpuhub bench api --start-hub

# The service's Python client (gpuspawner/client/: schemas, answers, operations,
# aio) and the Lab's TypeScript types, both from the service's OpenAPI document;
# tests/test_api_client.py and tests/test_api_types.py fail when they are stale.
client: $(STAMP)
	$(BIN)/python scripts/gen_client.py
	cd $(LAB_EXT) && ../../$(BIN)/jlpm gen:types

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis node_modules
	rm -rf $(LAB_EXT)/node_modules $(LAB_EXT)/lib $(LAB_EXT)/gpuhub_lab/labextension
