# GPU Hub: the two commands are `make demo` (set up and start) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# Replays a 15,000-job Philly-like trace on 2,000 GPUs under the four
# policies and writes the usage chart to out/usage.png.
demo: $(STAMP)
	mkdir -p out
	$(BIN)/gpuhub trace out/philly-15k.csv --jobs 15000 --load 1.3
	$(BIN)/gpuhub simulate out/philly-15k.csv --cluster examples/philly-cluster.yaml --plot out/usage.png

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/gpuhub bench

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
