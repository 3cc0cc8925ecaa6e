# aiokprod: every target creates the virtualenv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit test-versions lint docs kafka bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev,spark]'
	touch $(STAMP)

## demo: start a local Apache Kafka, run the quickstart against it, stop Kafka
demo: $(STAMP)
	$(PY) -m aiokprod.testing exec --topic quickstart:6 -- $(PY) examples/quickstart.py

## test: every test, unit and integration (starts local Kafka brokers itself)
test: $(STAMP)
	$(PY) -m pytest

## test-versions: the broker version matrix on every supported Apache Kafka release (3.6 to the
##                newest 4.x; 1 and 3 nodes; ~10 min). `make test` runs only its smoke subset.
test-versions: $(STAMP)
	$(PY) -m pytest tests/integration/test_broker_versions.py --kafka-versions=all

## test-unit: only the tests that need no broker
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

## lint: ruff and mypy --strict
lint: $(STAMP)
	$(VENV)/bin/ruff check aiokprod tests examples
	$(VENV)/bin/ruff format --check aiokprod
	$(VENV)/bin/mypy --strict aiokprod

## docs: build the documentation (mkdocs, strict: a broken link or page fails)
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

## kafka: run a local single-node Apache Kafka until Ctrl-C
kafka: $(STAMP)
	$(PY) -m aiokprod.testing run

## bench: aiokprod against its peers on a local Kafka, 3 interleaved repetitions (10-15 min);
##        results in benchmarks/results/, docs/benchmarks.{md,png}.
##        BENCH_ARGS="--quick" for a smoke run; also --clients/--workloads (see --help)
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
