# aiokprod: every target creates the virtualenv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit lint format docs kafka bench clean simulate

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

## test-unit: only the tests that need no broker
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

## lint: ruff (rules, complexity, format) over all Python code; mypy --strict on the package
##       and the examples; mypy on the tests (bodies checked, annotations optional: pyproject.toml)
LINTED := aiokprod tests examples benchmarks docs/gen_config.py
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy --strict aiokprod examples
	$(VENV)/bin/mypy tests

## format: rewrite all Python code in the project's style (ruff format, then ruff's safe fixes)
format: $(STAMP)
	$(VENV)/bin/ruff format $(LINTED)
	$(VENV)/bin/ruff check --fix $(LINTED)

## docs: build the documentation (mkdocs, strict: a broken link or page fails)
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

## simulate: the deterministic simulation of the producer under faults (docs/simulation.md);
##           SEEDS=N seeds from START=S (default 10000 from 0); replay one: SEED=X
SEEDS ?= 10000
START ?= 0
simulate: $(STAMP)
	$(PY) -m aiokprod.testing.sim $(if $(SEED),--seed $(SEED) --verbose,--seeds $(SEEDS) --start $(START))

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
