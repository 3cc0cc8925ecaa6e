# aiokprod: every target creates the virtualenv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit test-pythons lint docs docs-check kafka bench clean

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

## test-pythons: the unit tests on every CPython >= 3.11 pyenv has, each in its own venv
##               (.venv-py3.X); PYTHONS="/path/python ..." or SKIP_PYTHONS="3.11" to choose
test-pythons:
	.ci/test-pythons

## lint: ruff and mypy --strict
lint: $(STAMP)
	$(VENV)/bin/ruff check aiokprod tests examples docs/check_site.py docs/griffe_sphinx_roles.py
	$(VENV)/bin/ruff format --check aiokprod docs/check_site.py docs/griffe_sphinx_roles.py
	$(VENV)/bin/mypy --strict aiokprod

## docs: build the documentation (mkdocs, strict: a broken link or page fails)
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

## docs-check: build the site, then render every page in headless Chromium (the system's
##             /usr/bin/chromium: apt-get install -y chromium; none is downloaded) and fail on
##             console errors, missing assets, requests leaving 127.0.0.1, unhighlighted code
docs-check: docs
	$(PY) docs/check_site.py --self-test
	$(PY) docs/check_site.py site

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
	rm -rf $(VENV) .venv-py3.* .pytest_cache .mypy_cache .ruff_cache
